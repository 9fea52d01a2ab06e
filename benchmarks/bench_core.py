"""lm-tiny training throughput on this machine: compile time, steps/s and tokens/s, with K = 1
(one host dispatch per step) and K > 1 steps fused into one call by the loop's ``lax.scan``.

Prints one JSON line per measurement. Usage: ``python -m benchmarks.bench_core [--steps N] [--quick]``
(``--quick``: the tiny preset only, K in {1, 4}, 8 steps: a check that it runs, in well under a minute).
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from benchmarks.harness import device, emit
from jaxlab.core import config as C
from jaxlab.core import recipe as recipe_lib
from jaxlab.core import run as run_lib
from jaxlab.core.loop import _multi_step
from jaxlab.lm.data import train_iterator


def measure(cfg, k: int, calls: int) -> dict:
    recipe = recipe_lib.get("lm-tiny")
    task = run_lib.build(recipe, cfg)
    # as the loop does: the state starts on the recipe's mesh, so the step compiles once
    state = run_lib.init_state(task, jax.random.PRNGKey(0))
    it = train_iterator(cfg.data)
    fn = _multi_step(task.train_step, k, True, jax.tree.map(lambda x: x.sharding, state))

    def batches():
        stacked = jax.tree.map(lambda *x: np.stack(x), *[next(it) for _ in range(k)])
        return run_lib.place_batches(stacked, task.abstract_batch)

    b = batches()
    t0 = time.perf_counter()
    state, m = fn(state, b)
    jax.block_until_ready(m)
    compile_s = time.perf_counter() - t0
    pre = [batches() for _ in range(calls)]
    t0 = time.perf_counter()
    for b in pre:
        state, m = fn(state, b)
    jax.block_until_ready(m)
    dt = time.perf_counter() - t0
    steps = k * calls
    tokens = steps * cfg.data.batch_size * cfg.data.seq_len
    return {
        "what": "lm_tiny_train_step",
        "size": {
            "d_model": cfg.model.d_model,
            "layers": cfg.model.n_layers,
            "batch": cfg.data.batch_size,
            "seq": cfg.data.seq_len,
        },
        "steps_per_call": k,
        "device": device(),
        "compile_s": round(compile_s, 3),
        "time_s": round(dt, 3),
        "steps_per_s": round(steps / dt, 2),
        "tokens_per_s": round(tokens / dt, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--quick", action="store_true", help="tiny preset, K in {1, 4}, 8 steps")
    args = ap.parse_args()
    recipe = recipe_lib.get("lm-tiny")
    presets = {"tiny": recipe.config("tiny")}
    if not args.quick:
        presets["default"] = recipe.config(None)
    steps, ks = (8, (1, 4)) if args.quick else (args.steps, (1, 10))
    for name, cfg in presets.items():
        cfg = C.replace(cfg, **{"mesh.data": 1})
        base = None
        for k in ks:
            row = measure(cfg, k, max(1, steps // k))
            row["preset"] = name
            if k == 1:
                base = row["steps_per_s"]
            else:
                row["speedup_vs_k1"] = round(row["steps_per_s"] / base, 3)
            emit(row)


if __name__ == "__main__":
    main()
