"""D-TSN search throughput: node expansions/s vs tree size K and batch, train steps/s, compile time.

One JSON line per measurement (``what``, sizes, ``compile_s`` measured separately from the timed
steady state, ``time`` per call, ``rate``). The model is the maze world model of the ``cpu``
preset (8x8 symbolic observations, latent 32, hidden 64, 4 actions).

* ``search``: greedy ``search_batch`` at K in ``--ks`` (default 1, 10, 50) and batch in
  ``--batches`` (default 1, 256); rate = node expansions per second (``K * batch`` per call).
* ``train``: one D-TSN Adam step (search + backups for every ``t`` + REINFORCE + consistency),
  batch 32, per K; rate = steps per second.
* ``compile_s`` against K: the search is a ``lax.scan`` over expansions (and the per-``t`` losses
  a ``vmap`` of a reverse scan), so the program does not grow with K; the bound checked here is
  ``compile_s(K=50) < 2 x compile_s(K=1)`` (printed as ``compile_ratio_50_vs_1``).

Timings on the shared 2-core machine are noisy (``load`` is the 1-minute load average).

Usage: ``python -m benchmarks.bench_search [--ks 1,10,50] [--batches 1,256] [--seconds 2]``.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp

from benchmarks.harness import emit, steady_rate
from jaxlab.rl.search import dtsn, models, training


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ks", default="1,10,50")
    ap.add_argument("--batches", default="1,256")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--no-train", action="store_true")
    args = ap.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    base = training.LearnerConfig(num_demos=64, demo_length=16, batch_size=32)
    net, obs1 = training.networks(base)
    params = net.init(jax.random.key(0), obs1)
    model = models.maze_search_model(net)
    env, env_params = training.maze_env(base)
    compile_by_k = {}
    for batch in [int(b) for b in args.batches.split(",")]:
        obs = jax.vmap(lambda k: env.reset_env(k, env_params)[0])(
            jax.random.split(jax.random.key(1), batch)
        )
        for k in ks:
            cfg = dtsn.SearchConfig(num_expansions=k, num_actions=4, gamma=0.9)
            fn = jax.jit(
                lambda key, p, o, cfg=cfg: (
                    dtsn.search_batch(key, p, o, model=model, config=cfg, mode="greedy").q
                )
            )
            t0 = time.perf_counter()
            compiled = fn.lower(jax.random.key(0), params, obs).compile()
            compile_s = time.perf_counter() - t0
            compile_by_k.setdefault(batch, {})[k] = compile_s

            def call(q, compiled=compiled, obs=obs):
                return compiled(jax.random.key(0), params, obs)

            elapsed, calls, _ = steady_rate(call, jnp.zeros(()), (), args.seconds)
            per = elapsed / calls
            emit(
                {
                    "what": "search_expansions",
                    "K": k,
                    "batch": batch,
                    "compile_s": round(compile_s, 3),
                    "time": per,
                    "rate": k * batch / per,
                    "unit": "expansions/s",
                    "load": round(os.getloadavg()[0], 1),
                }
            )
        if 1 in compile_by_k[batch] and 50 in compile_by_k[batch]:
            ratio = compile_by_k[batch][50] / compile_by_k[batch][1]
            emit(
                {
                    "what": "compile_vs_K",
                    "batch": batch,
                    "compile_s": compile_by_k[batch],
                    "compile_ratio_50_vs_1": round(ratio, 2),
                    "bound": 2.0,
                    "ok": ratio < 2.0,
                }
            )
    if args.no_train:
        return
    for k in ks:
        cfg = training.LearnerConfig(num_demos=64, demo_length=16, batch_size=32, num_expansions=k)
        state = jax.jit(lambda key, cfg=cfg: training.init(key, cfg))(jax.random.key(0))
        step = jax.jit(lambda s, cfg=cfg: training.train_step(s, cfg)[0])
        t0 = time.perf_counter()
        compiled = step.lower(state).compile()
        compile_s = time.perf_counter() - t0
        elapsed, calls, _ = steady_rate(compiled, state, (), args.seconds)
        emit(
            {
                "what": "train_step",
                "K": k,
                "batch": 32,
                "compile_s": round(compile_s, 3),
                "time": elapsed / calls,
                "rate": calls / elapsed,
                "unit": "steps/s",
                "load": round(os.getloadavg()[0], 1),
            }
        )


if __name__ == "__main__":
    main()
