"""SAC throughput on point-mass-2d: env steps/s and gradient steps/s at 1 and 256 envs, compile time.

Every measurement prints one JSON line. For each env count ``N`` (``--envs``), one chunk of
``--chunk`` SAC iterations (``lax.scan`` of ``rl.sac``'s iteration: N env steps + a buffer add +
``updates_per_iteration`` gradient steps on a batch of 256) is compiled (``compile_s``, trace +
XLA) and run to steady state (``benchmarks/harness.steady_rate``) after the buffer is full
enough to learn. Where the time goes: the same chunk with learning switched off (``act_add``:
policy forward, env step, buffer add only) and gradient steps alone (``update``: the learning
part, from a filled buffer). Networks are 256x256 MLPs (SAC's usual size; the CSF original uses
1024). ``rate_cpu`` is per CPU-second of this process, meaningful on a loaded shared machine.

Usage: ``python -m benchmarks.bench_sac [--envs 1,256] [--chunk 64] [--seconds 3]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import jax

from benchmarks.harness import emit as _emit
from benchmarks.harness import steady_rate
from jaxlab.rl.off_policy import OffPolicyConfig
from jaxlab.rl.sac import SACConfig, SACOptim, make_parts


def emit(**row) -> None:
    row["load"] = round(os.getloadavg()[0], 1)
    _emit(**row)


def chunk_fn(parts, length: int):
    def run(state):
        return jax.lax.scan(lambda s, _: parts.iteration(s), state, None, length=length)

    return jax.jit(run)


def measure(what: str, fn, state, n_env_steps: int, n_grad: int, seconds: float, **extra):
    t0 = time.perf_counter()
    compiled = fn.lower(state).compile()
    compile_s = time.perf_counter() - t0
    c0 = time.process_time()
    elapsed, calls, _ = steady_rate(lambda s: compiled(s)[0], state, (), seconds)
    cpu = time.process_time() - c0
    row = dict(what=what, compile_s=round(compile_s, 2), time_per_chunk=elapsed / calls, **extra)
    if n_env_steps:
        row["env_steps_per_s"] = round(n_env_steps * calls / elapsed, 1)
        row["env_steps_per_cpu_s"] = round(n_env_steps * (calls + 1) / cpu, 1)
    if n_grad:
        row["grad_steps_per_s"] = round(n_grad * calls / elapsed, 1)
        row["grad_steps_per_cpu_s"] = round(n_grad * (calls + 1) / cpu, 1)
    emit(**row)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--envs", default="1,256")
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    for n in (int(v) for v in args.envs.split(",")):
        cfg, optim, opts = SACConfig(hidden=(256, 256)), SACOptim(), {"max_steps": 50}
        off = OffPolicyConfig(
            env="point-mass-2d",
            num_envs=n,
            buffer_size=max(100_000, 4 * n * args.chunk),
            batch_size=256,
            learning_starts=0,
        )
        parts = make_parts(cfg, off, optim, env_options=opts, iterations=args.chunk)
        state = parts.init(jax.random.key(0))
        # Fill the buffer past the batch size with random actions, so every timed step learns.
        no_learning = dataclasses.replace(off, learning_starts=10**9)
        fill = chunk_fn(make_parts(cfg, no_learning, optim, env_options=opts), args.chunk)
        while not bool(parts.replay.can_sample(state.buffer)):
            state = fill(state)[0]
        state = state.replace(iteration=state.iteration * 0 + 1)
        k = args.chunk
        size = dict(num_envs=n, chunk=k, batch=256, hidden=256)
        measure("sac_iteration", chunk_fn(parts, k), state, n * k, k, args.seconds, **size)
        measure("act_add", fill, state, n * k, 0, args.seconds, **size)
        upd = jax.jit(update_chunk(parts, k))
        measure("update", upd, state, 0, k, args.seconds, **size)


def update_chunk(parts, length: int):
    """``length`` gradient steps alone (the learning branch of an iteration)."""

    def run(state):
        return jax.lax.scan(parts.update, state, jax.random.split(state.key, length))

    return run


if __name__ == "__main__":
    main()
