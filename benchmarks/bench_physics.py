"""Physics engine throughput: engine steps per second for N parallel scenes.

Prints one JSON line per (size, N, solver):
``{"what", "size", "n_envs", "solver", "device", "compile_s", "time_s", "rate", "unit", ...}``
where ``rate`` counts engine steps (one ``step`` of one scene) per second of wall time,
measured as the best of ``--repeats`` timed calls of a jitted ``vmap`` over N scenes of a
``lax.scan`` over ``steps`` engine steps (compile time reported separately).

Usage::

    python benchmarks/bench_physics.py                       # S, M, L x N = 1, 256, 4096
    python benchmarks/bench_physics.py --sizes l --n 256 --solver fast,reference

``measure`` is reusable by a peer benchmark (e.g. the original Jax2D on the same scenes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).parent))

from physics_scenes import benchmark_scene  # noqa: E402

from jaxlab import physics as px  # noqa: E402


def default_steps(n_envs: int) -> int:
    """Engine steps per timed call: enough work per call at small N, bounded at large N."""
    return max(4, min(200, 5120 // max(n_envs, 1)))


def measure(
    step: Callable,
    state,
    params,
    num_actions: int,
    *,
    n_envs: int,
    steps: int,
    repeats: int = 3,
    seed: int = 0,
) -> dict:
    """Compile and time ``steps`` engine steps of ``n_envs`` scenes.

    Args:
        step: ``step(state, params, actions) -> (state, aux)`` for one scene.
        state: one scene (broadcast to ``n_envs`` copies).
        params: simulation parameters (shared).
        num_actions: action vector length; actions are uniform in [-1, 1], fixed per run.
        n_envs: number of parallel scenes (vmap).
        steps: engine steps per timed call (``lax.scan``).
        repeats: timed calls; the fastest counts.
        seed: action seed.

    Returns:
        ``{"compile_s", "time_s", "rate"}`` with ``rate`` in engine steps per second.
    """
    actions = jax.random.uniform(
        jax.random.key(seed), (n_envs, steps, num_actions), minval=-1.0, maxval=1.0
    )

    def rollout(s, acts):
        def body(s, a):
            s, _ = step(s, params, a)
            return s, None

        return jax.lax.scan(body, s, acts)[0]

    batched = jax.tree.map(lambda x: jnp.broadcast_to(x, (n_envs,) + x.shape), state)
    fn = jax.jit(jax.vmap(rollout))
    t0 = time.perf_counter()
    compiled = fn.lower(batched, actions).compile()
    compile_s = time.perf_counter() - t0
    out = compiled(batched, actions)
    jax.block_until_ready(out)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = compiled(out, actions)
        jax.block_until_ready(out)
        best = min(best, time.perf_counter() - t0)
    return {"compile_s": compile_s, "time_s": best, "rate": n_envs * steps / best}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="s,m,l")
    parser.add_argument("--n", default="1,256,4096", help="numbers of parallel scenes")
    parser.add_argument("--solver", default="fast", help="comma list of fast, reference")
    parser.add_argument("--steps", type=int, default=0, help="steps per timed call (0: auto)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    device = f"{jax.devices()[0].platform}:{jax.devices()[0].device_kind}"
    for size in args.sizes.split(","):
        sp, state = benchmark_scene(size)
        for solver in args.solver.split(","):
            for n in (int(v) for v in args.n.split(",")):
                steps = args.steps or default_steps(n)
                res = measure(
                    lambda s, p, a, sp=sp, solver=solver: px.step(s, p, sp, a, solver=solver),
                    state,
                    px.SimParams(),
                    sp.num_joints + sp.num_thrusters,
                    n_envs=n,
                    steps=steps,
                    repeats=args.repeats,
                )
                line = {
                    "what": "physics_engine_step",
                    "size": size,
                    "n_envs": n,
                    "solver": solver,
                    "device": device,
                    "steps_per_call": steps,
                    "compile_s": round(res["compile_s"], 3),
                    "time_s": round(res["time_s"], 5),
                    "rate": round(res["rate"], 1),
                    "unit": "engine_steps/s",
                    "loadavg_1m": round(os.getloadavg()[0], 2),
                }
                print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
