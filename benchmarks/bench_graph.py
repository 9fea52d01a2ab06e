"""Graph benchmarks, one JSON line per measurement.

* ``jdr``: JDR wall time vs the number of nodes n (p = 0.4 n, d = 5, K = 10, L_X = L_A = 10,
  top-64) for the dense path (full ``eigh``/SVD) and the top-k path (LOBPCG).
* ``gnn_train``: full-batch training epochs per second of all seeds at once (cSBM n = 1000,
  p = 400, 10 seeds, hidden 64) for GCN/GPRGNN, edge-list/dense message passing, on the raw graph
  and on the JDR-rewired one (top-64 per column: about 13x more edges).

``time_s`` is the best of ``--repeats`` runs after a first call (``cpu_s``: the process CPU time of
that run, which tells a loaded machine from a slow kernel); ``compile_s`` is the compile time
(ahead-of-time for training; first call minus ``time_s`` for JDR, whose public entry point validates
its arguments on the host before calling the jitted solver). No peer is measured: the reference implementation (PyTorch Geometric) is not
installed in this environment.

Usage: ``python -m benchmarks.bench_graph [--quick] [--repeats 3] [--only jdr|gnn_train]``.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

from benchmarks.harness import emit_rate as _emit
from jaxlab.graph.csbm import CSBMParams, sample_csbm
from jaxlab.graph.gnn import gcn_normalize
from jaxlab.graph.graph import DenseGraph, dense_to_edges
from jaxlab.graph.jdr import JDRParams, JDRStatic, jdr
from jaxlab.graph.node_classification import NodeData, TrainerSpec, init_seeds, train_epoch
from jaxlab.graph.splits import split_sizes


def _time(compiled, args, repeats: int) -> tuple[float, float]:
    """Best wall time of ``repeats`` calls, and the process CPU time of that call."""
    best, cpu = float("inf"), float("nan")
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        jax.block_until_ready(compiled(*args))
        wall = time.perf_counter() - t0
        if wall < best:
            best, cpu = wall, time.process_time() - c0
    return best, cpu


def bench_jdr(sizes, repeats: int) -> None:
    params = JDRParams(eta_x=0.2, eta_a=0.5, eta_final=0.5)
    for solver in ("dense", "lobpcg"):
        for n in sizes[solver]:
            p = int(0.4 * n)
            g = sample_csbm(jax.random.PRNGKey(0), CSBMParams(phi=0.375), n=n, p=p)
            static = JDRStatic(iterations=10, l_x=10, l_a=10, top_k=64, solver=solver)

            def run(a, x, prm, static=static):
                return jdr(a, x, prm, static=static)

            t0 = time.perf_counter()
            jax.block_until_ready(run(g.adjacency, g.features, params))
            first = time.perf_counter() - t0
            t, cpu = _time(run, (g.adjacency, g.features, params), repeats)
            compile_s = max(first - t, 0.0)
            _emit(
                f"jdr_{solver}",
                {"n": n, "p": p, "iterations": 10, "l": 10, "top_k": 64},
                compile_s,
                t,
                10 / t,
                "iterations/s",
                cpu_s=round(cpu, 4),
            )


def bench_gnn(n: int, num_seeds: int, repeats: int, steps: int) -> None:
    p = int(0.4 * n)
    g = sample_csbm(jax.random.PRNGKey(0), CSBMParams(phi=0.375), n=n, p=p)
    rewired = jdr(
        g.adjacency,
        g.features,
        JDRParams(eta_x=0.2, eta_a=0.5, eta_final=0.5),
        static=JDRStatic(iterations=3, l_x=4, l_a=4, top_k=64, solver="lobpcg"),
    )
    per_class, num_val = split_sizes(n, 2, "sparse")
    for graph_name, adjacency, features in (
        ("raw", g.adjacency, g.features),
        ("jdr", rewired.adjacency, rewired.features),
    ):
        nnz = int(jnp.count_nonzero(adjacency))
        for layout in ("edges", "dense"):
            graph = dense_to_edges(adjacency, nnz) if layout == "edges" else DenseGraph(adjacency)
            data = NodeData(features=features, labels=g.labels, graph=gcn_normalize(graph))
            for model in ("gcn", "gprgnn"):
                spec = TrainerSpec(
                    model=model, hidden=64, train_per_class=per_class, num_val=num_val
                )
                seeds = init_seeds(jax.random.PRNGKey(1), data, spec, num_seeds)

                def run(data, seeds, spec=spec):
                    def body(s, _):
                        return train_epoch(data, s, spec)[0], None

                    return jax.lax.scan(body, seeds, None, length=steps)[0]

                t0 = time.perf_counter()
                compiled = jax.jit(run).lower(data, seeds).compile()
                compile_s = time.perf_counter() - t0
                t, cpu = _time(compiled, (data, seeds), repeats)
                _emit(
                    "gnn_train",
                    {
                        "n": n,
                        "p": p,
                        "edges": nnz,
                        "graph": graph_name,
                        "layout": layout,
                        "model": model,
                        "seeds": num_seeds,
                        "hidden": 64,
                        "steps": steps,
                    },
                    compile_s,
                    t,
                    steps / t,
                    "epochs/s (all seeds)",
                    seed_epochs_per_s=round(steps * num_seeds / t, 2),
                    cpu_s=round(cpu, 4),
                )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (CI smoke)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", choices=("jdr", "gnn_train"), default=None)
    args = ap.parse_args()
    if args.quick:
        sizes = {"dense": (250, 500), "lobpcg": (250, 500)}
        gnn_n, steps = 300, 20
    else:
        sizes = {"dense": (250, 500, 1000, 2000), "lobpcg": (250, 500, 1000, 2000, 4000)}
        gnn_n, steps = 1000, 50
    if args.only in (None, "jdr"):
        bench_jdr(sizes, args.repeats)
    if args.only in (None, "gnn_train"):
        bench_gnn(gnn_n, 10, args.repeats, steps)


if __name__ == "__main__":
    main()
