"""Cost of ``jaxlab.core.linalg`` (one LAPACK call per matrix on the CPU) against ``jnp.linalg``'s
batched call, for one batched decomposition alone in a program (the case where the batched call
does not hang): best wall seconds and mean CPU seconds per call, interleaved so load affects both
alike.

Prints one JSON line per (op, batch, size) with ``ratio = ours / jnp.linalg`` (wall) and
``cpu_ratio`` (CPU).
Usage: ``python -m benchmarks.bench_linalg [--sizes 8,32,128] [--batches 8,256] [--reps 5]``.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

from benchmarks.harness import compile_timed, emit, wall_cpu
from jaxlab.core import linalg

OPS = {
    "qr": (linalg.qr, jnp.linalg.qr, "general"),
    "eigh": (linalg.eigh, jnp.linalg.eigh, "symmetric"),
    "svd": (linalg.svd, lambda a: jnp.linalg.svd(a, full_matrices=False), "general"),
    "cholesky": (linalg.cholesky, jnp.linalg.cholesky, "spd"),
    "inv": (linalg.inv, jnp.linalg.inv, "spd"),
}


def _matrices(kind: str, batch: int, n: int) -> jax.Array:
    g = jax.random.normal(jax.random.PRNGKey(0), (batch, n, n))
    if kind == "symmetric":
        return g + jnp.swapaxes(g, -1, -2)
    if kind == "spd":
        return g @ jnp.swapaxes(g, -1, -2) + n * jnp.eye(n)[None]
    return g


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--sizes", default="8,32,128")
    ap.add_argument("--batches", default="8,256")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    for name in args.ops.split(","):
        ours, plain, kind = OPS[name]
        for n in map(int, args.sizes.split(",")):
            for batch in map(int, args.batches.split(",")):
                a = _matrices(kind, batch, n)
                fo, co = compile_timed(ours, a)
                fp, cp = compile_timed(plain, a)
                t = wall_cpu({"ours": (fo, (a,)), "jnp": (fp, (a,))}, args.reps)
                best_o, best_p = t["ours"][0], t["jnp"][0]
                cpu_o, cpu_p = t["ours"][3], t["jnp"][3]
                emit(what="linalg", op=name, size={"batch": batch, "n": n},
                     compile_s={"ours": round(co, 4), "jnp": round(cp, 4)},
                     time_s={"ours": best_o, "jnp": best_p},
                     cpu_s_mean={"ours": cpu_o, "jnp": cpu_p},
                     rate=round(batch / best_o, 1), unit="matrices/s",
                     ratio=round(best_o / best_p, 3), cpu_ratio=round(cpu_o / cpu_p, 3))  # fmt: skip


if __name__ == "__main__":
    main()
