"""Kinetix level generator throughput and compile time (one JSON line per measurement).

Measures, per size (S, M, L):

* ``generator``: ``vmap(sample_level)`` over ``--batch`` keys (levels/s), compile separately;
* ``generator_ratio`` (when the peer venv exists, ``--no-peer`` skips it): the same
  ``generator`` work by the original (``peers/bench_kinetix_generator_peer.py``), with both
  compile times;
* ``generator_noop_filtered``: ``sample_filtered_levels`` returning ``--batch`` levels from
  ``2 * batch`` candidates run for 64 no-op steps (levels/s), compile separately.

Usage::

    python -m benchmarks.bench_kinetix_generator                    # S, M, L, both measurements
    python -m benchmarks.bench_kinetix_generator --sizes s --no-filter --seconds 2
"""

from __future__ import annotations

import argparse
import os
import time

import jax

from benchmarks.harness import emit, peer_available, run_peer
from jaxlab.envs.kinetix import StaticEnvParams
from jaxlab.envs.kinetix.generator import GeneratorParams, _sample_levels
from jaxlab.envs.kinetix.noop_filter import _sample_filtered
from jaxlab.envs.kinetix.state import EnvParams


def _measure(fn, seconds: float):
    """(compile seconds, seconds per call) of a jitted ``fn(key)``."""
    t = time.perf_counter()
    compiled = jax.jit(fn).lower(jax.random.key(0)).compile()
    compile_s = time.perf_counter() - t
    jax.block_until_ready(compiled(jax.random.key(1)))
    n, t = 0, time.perf_counter()
    while True:
        jax.block_until_ready(compiled(jax.random.key(2 + n)))
        n += 1
        if time.perf_counter() - t >= seconds:
            break
    return compile_s, (time.perf_counter() - t) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="s,m,l")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--no-filter", action="store_true", help="skip the no-op filtered sampler")
    ap.add_argument("--no-peer", action="store_true", help="skip the original's generator")
    args = ap.parse_args()
    use_peer = peer_available(args.no_peer)
    device = jax.devices()[0].platform
    gp, ep = GeneratorParams(), EnvParams()
    for size in args.sizes.split(","):
        sp = StaticEnvParams.from_size(size)
        works = [("generator", lambda k, sp=sp: _sample_levels(k, args.batch, sp, gp, ep))]
        if not args.no_filter:
            works.append(
                (
                    "generator_noop_filtered",
                    lambda k, sp=sp: _sample_filtered(k, args.batch, sp, gp, ep, 2, 64, 0.001)[0],
                )
            )
        ours = {}
        for what, fn in works:
            compile_s, per_call = _measure(fn, args.seconds)
            ours[what] = rec = {
                "what": what,
                "impl": "jaxlab",
                "size": size,
                "batch": args.batch,
                "device": device,
                "compile_s": round(compile_s, 2),
                "time_s": round(per_call, 5),
                "rate": round(args.batch / per_call, 1),
                "unit": "levels/s",
                "loadavg_1m": round(os.getloadavg()[0], 2),
            }
            emit(rec)
        if not use_peer:
            continue
        peer_lines = run_peer(
            "bench_kinetix_generator_peer.py",
            [f"--sizes={size}", f"--batch={args.batch}", f"--seconds={args.seconds}"],
            size,
        )
        for peer in peer_lines:
            emit(peer)
            mine = ours["generator"]
            ratio = {
                "what": "generator_ratio",
                "size": size,
                "batch": args.batch,
                "jaxlab_rate": mine["rate"],
                "kinetix_rate": peer["rate"],
                "ratio": round(mine["rate"] / peer["rate"], 3),
                "jaxlab_compile_s": mine["compile_s"],
                "kinetix_compile_s": peer["compile_s"],
                "compile_ratio": round(mine["compile_s"] / max(peer["compile_s"], 1e-9), 3),
                "unit": "levels/s",
            }
            emit(ratio)


if __name__ == "__main__":
    main()
