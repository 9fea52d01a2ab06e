"""The original Kinetix level generator's compile time and levels/s (peer venv only).

Runs ``kinetix.environment.ued.ued.make_reset_fn_sample_kinetix_level`` vmapped over ``--batch``
keys for each size and prints one JSON line per size, the same work as
``benchmarks/bench_kinetix_generator.py``'s ``generator`` line::

    benchmarks/peers/.venv-kinetix/bin/python benchmarks/peers/bench_kinetix_generator_peer.py --sizes s
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
from kinetix.environment.env_state import EnvParams
from kinetix.environment.ued.ued import make_reset_fn_sample_kinetix_level
from kinetix.environment.utils import static_env_params_from_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="s,m,l")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    for size in args.sizes.split(","):
        static = static_env_params_from_size(size)
        static = static[0] if isinstance(static, tuple) else static
        reset = make_reset_fn_sample_kinetix_level(EnvParams(), static)
        fn = jax.jit(lambda k, reset=reset: jax.vmap(reset)(jax.random.split(k, args.batch)))
        t = time.perf_counter()
        compiled = fn.lower(jax.random.PRNGKey(0)).compile()
        compile_s = time.perf_counter() - t
        jax.block_until_ready(compiled(jax.random.PRNGKey(1)))
        n, t = 0, time.perf_counter()
        while True:
            jax.block_until_ready(compiled(jax.random.PRNGKey(2 + n)))
            n += 1
            if time.perf_counter() - t >= args.seconds:
                break
        per_call = (time.perf_counter() - t) / n
        rec = {
            "what": "generator",
            "impl": "kinetix-env",
            "size": size,
            "batch": args.batch,
            "compile_s": round(compile_s, 2),
            "time_s": round(per_call, 5),
            "rate": round(args.batch / per_call, 1),
            "unit": "levels/s",
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
