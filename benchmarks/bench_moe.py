"""MoE layer (jaxlab.lm.moe, OLMoE) vs the dense SwiGLU layer with the same active parameters.

For each ``E`` (experts) and ``k`` (active experts) the dense reference is a SwiGLU of width
``k * expert_ff``: per token it does the same expert FLOPs as the MoE layer. Measured per variant:

- ``dense``: :class:`jaxlab.nn.mlp.SwiGLU` (``d_ff = k * expert_ff``),
- ``dropless-tiled``: sort + fused tiled grouped SwiGLU (the CPU default),
- ``dropless-ragged_dot``: sort + ``jax.lax.ragged_dot`` (on CPU lowered to a dense matmul over
  all ``E`` groups; skipped where its ``[E, T k, max(d, ff)]`` expansion exceeds ``--ragged-mb``),
- ``capacity``: capacity-factor dispatch (``cf = 1.25``) with batched expert einsums.

Token counts (``--tokens``, default both): ``T = 2048``, where each expert gets ``T k / E = 32-256``
rows (E >= 32, k <= 2) and the layer is bound by one small matmul per expert, and ``T = 16384``
(4 sequences of OLMoE's 4096 tokens), 256-16384 rows per expert, closer to MoE training, where
OLMoE's 4M-token batches give every expert thousands of rows per device.

Modes: ``fwd`` (forward) and ``train`` (forward + backward w.r.t. input and parameters). Reported:
compile seconds (lower + compile), best-of-``--reps`` and mean wall and CPU seconds per call (the
mean CPU time is the unbiased cost measure, see :func:`_time`), tokens/s, the ratios to the dense
layer, the cores the process may use and ``XLA_FLAGS`` (pinned vs free runs), and XLA's static
memory analysis of the compiled executable (``peak_bytes`` = temp + arguments + outputs; CPU has
no runtime ``memory_stats``). ``--breakdown`` times the parts of the dropless forward separately
(router + losses + stats, also in the unfused textbook form with ``lax.top_k`` for reference,
sort + gather, fused grouped SwiGLU, un-sort + combine) to show where the overhead over the dense
layer goes. All variants of one ``(T, E, k, mode)`` are timed interleaved (round-robin), so they
see the same machine load.

Prints one JSON line per measurement. Usage::

    python -m benchmarks.bench_moe                # full grid T in {2048, 16384}, E in {8,32,64},
                                                  # k in {1,2,8}
    python -m benchmarks.bench_moe --experts 64 --topk 8 --breakdown
    python -m benchmarks.bench_moe --tokens 8192  # T = 8192 tokens per call
    XLA_FLAGS=--xla_cpu_multi_thread_eigen=false taskset -c 0 python -m benchmarks.bench_moe
                                                         # everything on one core
"""

from __future__ import annotations

import argparse
import dataclasses
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.harness import compile_timed, device, emit, wall_cpu
from jaxlab.lm import moe
from jaxlab.lm.moe.experts import _swiglu_grouped
from jaxlab.lm.moe.router import _token_entropy, _z_loss_from_lse
from jaxlab.lm.moe.sorting import _inverse_permutation, _sort_rows, _unsort_combine
from jaxlab.lm.routing_stats import routing_stats
from jaxlab.nn.mlp import SwiGLU


def _compile(fn, args):
    compiled, compile_s = compile_timed(fn, *args)
    peak = None
    try:
        mem = compiled.memory_analysis()
        peak = int(mem.temp_size_in_bytes + mem.argument_size_in_bytes + mem.output_size_in_bytes)
    except (AttributeError, NotImplementedError, TypeError):
        pass
    return compiled, compile_s, peak


def _layer_fns(module, mode: str, cot):
    """``fwd(params, x)`` or ``train(params, x)`` = value and gradients w.r.t. params and x."""

    def fwd(params, x):
        return module.apply({"params": params}, x)

    if mode == "fwd":
        return fwd

    def loss(params, x):
        return jnp.sum(fwd(params, x) * cot)

    return jax.value_and_grad(loss, argnums=(0, 1))


def _threads() -> dict:
    """CPU cores this process may run on and the XLA flags in effect (pinned vs free runs)."""
    return {"cores": len(os.sched_getaffinity(0)), "xla_flags": os.environ.get("XLA_FLAGS", "")}


def run_grid(args) -> None:
    tokens = args.batch * args.seq
    x = jax.random.normal(jax.random.key(0), (args.batch, args.seq, args.d_model), jnp.float32)
    cot = jax.random.normal(jax.random.key(1), x.shape, jnp.float32)
    for e in args.experts:
        for k in args.topk:
            if k > e:
                continue
            base = moe.MoEConfig(num_experts=e, top_k=k, expert_ff=args.expert_ff)
            variants = {
                "dense": SwiGLU(d_ff=k * args.expert_ff),
                "dropless-tiled": moe.MoEFeedForward(
                    dataclasses.replace(base, grouped_matmul="tiled", tile_size=args.tile)
                ),
                "dropless-ragged_dot": moe.MoEFeedForward(
                    dataclasses.replace(base, grouped_matmul="ragged_dot")
                ),
                "capacity": moe.MoEFeedForward(
                    dataclasses.replace(base, dispatch="capacity", capacity_factor=args.cf)
                ),
            }
            variants = {n: m for n, m in variants.items() if n in args.variants or n == "dense"}
            for mode in args.modes:
                lines, compiled_fns = {}, {}
                for name, module in variants.items():
                    size = {
                        "tokens": tokens,
                        "d_model": args.d_model,
                        "expert_ff": args.expert_ff,
                        "E": e,
                        "k": k,
                        "dense_ff": k * args.expert_ff,
                    }
                    line = {
                        "what": f"moe_layer/{mode}/{name}",
                        "size": size,
                        "device": device(),
                        "threads": _threads(),
                    }
                    expansion_mb = e * tokens * k * max(args.d_model, args.expert_ff) * 4 / 2**20
                    if name == "dropless-ragged_dot" and (
                        jax.default_backend() == "cpu" and expansion_mb > args.ragged_mb
                    ):
                        line["skipped"] = (
                            f"ragged_dot on CPU materialises [E, T k, max(d, ff)] = "
                            f"{expansion_mb:.0f} MiB > --ragged-mb {args.ragged_mb}"
                        )
                        lines[name] = line
                        continue
                    params = nn.unbox(jax.jit(module.init)(jax.random.key(2), x)["params"])
                    fn = _layer_fns(module, mode, cot)
                    compiled, compile_s, peak = _compile(fn, (params, x))
                    compiled_fns[name] = (compiled, (params, x))
                    line.update(compile_s=round(compile_s, 3), peak_bytes=peak)
                    lines[name] = line
                times = wall_cpu(compiled_fns, args.reps)
                dense = times["dense"]
                for name, line in lines.items():
                    if name in times:
                        t, cpu, mean_t, mean_cpu = times[name]
                        line.update(
                            time_s=round(t, 5),
                            cpu_s=round(cpu, 5),
                            mean_time_s=round(mean_t, 5),
                            mean_cpu_s=round(mean_cpu, 5),
                            rate=round(tokens / t, 1),
                            unit="tokens/s",
                            ratio_vs_dense=round(t / dense[0], 3),
                            cpu_ratio_vs_dense=round(cpu / dense[1], 3),
                            mean_ratio_vs_dense=round(mean_t / dense[2], 3),
                            mean_cpu_ratio_vs_dense=round(mean_cpu / dense[3], 3),
                        )
                    emit(line)


def run_breakdown(args) -> None:
    """Times the parts of the dropless forward for each (E, k) separately (calls interleaved)."""
    tokens = args.batch * args.seq
    d, ff = args.d_model, args.expert_ff
    x = jax.random.normal(jax.random.key(0), (tokens, d), jnp.float32)
    for e in args.experts:
        for k in args.topk:
            if k > e:
                continue
            keys = jax.random.split(jax.random.key(3), 4)
            router = 0.02 * jax.random.normal(keys[0], (d, e))
            ew = moe.ExpertWeights(
                w1=0.02 * jax.random.normal(keys[1], (e, d, ff)),
                w3=0.02 * jax.random.normal(keys[2], (e, d, ff)),
                w2=0.02 * jax.random.normal(keys[3], (e, ff, d)),
            )
            dense_w = (ew.w1[0].repeat(k, 1), ew.w3[0].repeat(k, 1), ew.w2[0].repeat(k, 0))
            cfg = moe.MoEConfig(
                num_experts=e, top_k=k, expert_ff=ff, grouped_matmul="tiled", tile_size=args.tile
            )

            def route(x, router, k=k):
                # as in moe.moe_ffn: one exp per logit, the z-loss and entropy from the lse
                r = moe.route(x @ router, top_k=k)
                aux = (
                    moe.load_balancing_loss(r.probs, r.experts),
                    _z_loss_from_lse(r.lse),
                    routing_stats(r.probs, r.experts, token_entropy=_token_entropy(r)),
                )
                return (r.weights, r.experts), aux

            def route_unfused(x, router, k=k):
                # the textbook formulation: softmax, lax.top_k (a per-row sort on XLA:CPU), a
                # separate logsumexp for the z-loss and p log p for the entropy
                logits = (x @ router).astype(jnp.float32)
                probs = jax.nn.softmax(logits, axis=-1)
                weights, experts = jax.lax.top_k(probs, k)
                aux = (
                    moe.load_balancing_loss(probs, experts),
                    moe.router_z_loss(logits),
                    routing_stats(probs, experts),
                )
                return (weights, experts), aux

            (_, experts), _ = jax.jit(route)(x, router)
            n = tokens * k

            def permute(x, experts, k=k, e=e):
                flat = experts.reshape(-1)
                order = moe.sort_by_expert(flat, e)
                slots = _inverse_permutation(order).reshape(-1, k)
                xs = _sort_rows(x, order // k, slots)
                return xs, jnp.bincount(flat, length=e), order, slots

            xs, gs, order, slots = jax.jit(permute)(x, experts)
            ys = jnp.ones((n, d), jnp.float32)

            def experts_fn(xs, gs, ew):
                return _swiglu_grouped(xs, ew, gs, impl="tiled", tile_size=args.tile)

            def unpermute(ys, weights, order, slots):
                return _unsort_combine(ys, weights, order, slots)

            def full(x, router, ew, cfg=cfg):
                return moe.moe_ffn(x, router, ew, config=cfg)

            def dense(x, w):
                return (jax.nn.silu(x @ w[0]) * (x @ w[1])) @ w[2]

            parts = {
                "router+losses+stats": (route, (x, router)),
                "router+losses+stats(unfused)": (route_unfused, (x, router)),
                "sort+gather": (permute, (x, experts)),
                "grouped_swiglu": (experts_fn, (xs, gs, ew)),
                "unsort+combine": (unpermute, (ys, jnp.ones((tokens, k)), order, slots)),
                "moe_total": (full, (x, router, ew)),
                "dense_total": (dense, (x, dense_w)),
            }
            compiled = {name: (_compile(fn, fa)[0], fa) for name, (fn, fa) in parts.items()}
            times = wall_cpu(compiled, args.reps)
            cpus = {name: c for name, (_, c, _, _) in times.items()}
            for name, (t, cpu, _, _) in times.items():
                line = {
                    "what": f"moe_breakdown/fwd/{name}",
                    "size": {
                        "tokens": tokens,
                        "d_model": d,
                        "expert_ff": ff,
                        "E": e,
                        "k": k,
                        "tiles": list(moe.tile_levels(n, args.tile, num_groups=e)),
                    },
                    "device": device(),
                    "time_s": round(t, 5),
                    "cpu_s": round(cpu, 5),
                    "rate": round(tokens / t, 1),
                    "unit": "tokens/s",
                    "cpu_fraction_of_dense": round(cpu / cpus["dense_total"], 3),
                }
                emit(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument(
        "--tokens",
        type=lambda s: [int(v) for v in s.split(",")],
        default=[2048, 16384],
        help="tokens per call T, comma-separated (multiples of --seq; each runs the whole grid)",
    )
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--expert-ff", type=int, default=128)
    ap.add_argument("--experts", type=lambda s: [int(v) for v in s.split(",")], default=[8, 32, 64])
    ap.add_argument("--topk", type=lambda s: [int(v) for v in s.split(",")], default=[1, 2, 8])
    ap.add_argument("--modes", type=lambda s: s.split(","), default=["fwd", "train"])
    ap.add_argument(
        "--variants",
        type=lambda s: s.split(","),
        default=["dense", "dropless-tiled", "dropless-ragged_dot", "capacity"],
    )
    ap.add_argument("--tile", type=int, default=128, help="largest tile of the tiled gmm")
    ap.add_argument("--cf", type=float, default=1.25, help="capacity factor")
    ap.add_argument("--ragged-mb", type=float, default=256.0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--breakdown", action="store_true", help="only the forward breakdown")
    args = ap.parse_args()
    for t in args.tokens:
        if t < args.seq or t % args.seq:
            ap.error(f"--tokens: got {t}, expected a positive multiple of --seq={args.seq}")
    np.set_printoptions(precision=3)
    for t in args.tokens:
        args.batch = t // args.seq
        if args.breakdown:
            run_breakdown(args)
        else:
            run_grid(args)


if __name__ == "__main__":
    main()
