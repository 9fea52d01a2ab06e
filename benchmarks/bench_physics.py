"""Physics engine throughput, side by side with the original Jax2D on the same scenes.

Scenes are the ones the peer benchmark uses: S ``s/h2_one_wheel_car`` and M ``m/h5_angry_birds``
of the original Kinetix levels (kinetix-env's ``kinetix/levels``, read from ``LEVELS``). L rows run
on real L levels (``--l-levels``, ``benchmarks/kinetix_l_levels.py``): every human-designed L
level of the kinetix-env wheel and ``--random-l`` levels from jaxlab's generator, one compiled
program for all of them, each level timed in turn, with a ``physics_engine_l_summary`` line per
``n`` (median and worst ratio over the levels); the M level padded to L capacities (12
polygons, 4 circles, 6 joints, 2 thrusters) is an extra row, named for what it is. Work per measurement: ``jit(lax.scan(vmap(step)))`` over ``n`` copies of
the scene with zero actions, ``k = max(1, min(64, 8192 // n))`` engine steps per call, timed
at steady state for ``--seconds`` after one untimed call; compile (lower + XLA) separately.

Prints one JSON line per measurement:

* ``physics_engine_step`` (``impl`` = ``jaxlab``) and, from the peer venv, ``jax2d_engine_step``;
* ``physics_engine_ratio``: jaxlab rate / Jax2D rate and the two compile times, same size and n.

Usage::

    python -m benchmarks.bench_physics                          # S, M, L x n = 1, 256, 4096
    python -m benchmarks.bench_physics --sizes l --n 256,4096 --seconds 1   # every L level
    python -m benchmarks.bench_physics --sizes s --n 256 --no-peer
    python -m benchmarks.bench_physics --solver reference        # the unbatched reference solver

The peer venv comes from ``bash benchmarks/peers/setup_kinetix_peer.sh``; without it only the
jaxlab lines are printed (and a note on stderr). Peer and jaxlab runs alternate per size so
that both see the same machine load; ``loadavg_1m`` is recorded on every line.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from benchmarks.harness import REPO, emit, peer_available, steady_rate
from benchmarks.harness import run_peer as run_peer_script
from benchmarks.kinetix_l_levels import LEVEL_DIR, level_files, level_name, ratio_lines
from jaxlab import physics as px
from jaxlab.core.compile import compiler_options, jit
from jaxlab.envs.kinetix.levels import load_level
from jaxlab.envs.kinetix.state import StaticEnvParams

LEVELS = REPO.parent / "shared" / "kinetix-levels"
SCENES = {"s": "s/h2_one_wheel_car", "m": "m/h5_angry_birds", "l": "m/h5_angry_birds"}


def load_scene(size: str, path: str | None = None):
    """``(sim_state, sim_params, static_sim_params)`` of the benchmark scene for ``size`` (or of
    the level file ``path``)."""
    if path is not None:
        level = load_level(path)
        return level.state.sim, level.params.sim, level.static_params.sim
    path = LEVELS / f"{SCENES[size]}.json"
    target = StaticEnvParams.from_size(size) if size == "l" else None
    level = load_level(path, target) if target is not None else load_level(path)
    return level.state.sim, level.params.sim, level.static_params.sim


def steps_per_call(n: int) -> int:
    """Engine steps per timed call, as in the peer benchmark."""
    return max(1, min(64, 8192 // n))


def measure(
    size: str,
    n: int,
    seconds: float,
    solver: str,
    iterations: int | None = None,
    path: str | None = None,
) -> dict:
    """Compile and time ``n`` copies of the ``size`` scene (or the level file ``path``); one
    JSON record. ``iterations`` overrides the solver's sequential-impulse iterations (the
    profile uses 1)."""
    sim, params, sp = load_scene(size, path)
    if iterations is not None:
        sp = dataclasses.replace(sp, num_solver_iterations=iterations)
    k = steps_per_call(n)
    actions = jnp.zeros((sp.num_joints + sp.num_thrusters,), jnp.float32)
    states = jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *jnp.shape(x))), sim)

    def run(states, params, actions):
        def body(s, _):
            s, _ = jax.vmap(lambda x: px.step(x, params, sp, actions, solver=solver))(s)
            return s, None

        return jax.lax.scan(body, states, None, length=k)[0]

    t0 = time.perf_counter()
    compiled = jit(run).lower(states, params, actions).compile()
    compile_s = time.perf_counter() - t0
    elapsed, calls, _ = steady_rate(compiled, states, (params, actions), seconds)
    rate = n * k * calls / elapsed
    d = jax.devices()[0]
    return {
        "what": "physics_engine_step",
        "impl": "jaxlab",
        "solver": solver,
        "size": size.upper(),
        "n": n,
        "scene": SCENES[size] + (" (padded to L)" if size == "l" else ""),
        "compile_s": round(compile_s, 3),
        "steps_per_call": k,
        "calls": calls,
        "time_s": round(elapsed, 3),
        "rate": round(rate, 1),
        "unit": "scene_steps/s",
        "device": f"{d.platform}:{d.device_kind}",
        "jax": jax.__version__,
        "compiler_options": compiler_options(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def measure_collision(size: str, n: int, seconds: float, path: str | None = None) -> float:
    """Microseconds per scene of the contact manifolds alone (``collision.compute_manifolds``,
    the narrow phase of every pair slot), ``n`` scenes, chained so nothing is hoisted."""
    from jaxlab.physics.collision import compute_manifolds, pair_indices

    sim, _, sp = load_scene(size, path)
    pairs = pair_indices(sp)
    k = steps_per_call(n)
    states = jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *jnp.shape(x))), sim)

    def one(x):
        warm = (x.acc_rr_manifolds, x.acc_cr_manifolds, x.acc_cc_manifolds)
        return compute_manifolds(x.polygon, x.circle, warm, pairs)

    def run(states):
        def body(s, _):
            out = jax.vmap(one)(s)
            tie = sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(out)) * 1e-30
            return s.replace(polygon=s.polygon.replace(position=s.polygon.position + tie)), None

        return jax.lax.scan(body, states, None, length=k)[0]

    compiled = jit(run).lower(states).compile()
    elapsed, calls, _ = steady_rate(compiled, states, (), seconds)
    return 1e6 * elapsed / (n * k * calls)


def measure_levels(paths: list, n: int, seconds: float, solver: str) -> list[dict]:
    """Time ``n`` copies of each level of ``paths`` (all of one static size) with one compiled
    program; one JSON record per level, the compile time on the first."""
    levels = [load_level(p) for p in paths]
    sp = levels[0].static_params.sim
    bad = [str(p) for p, lv in zip(paths, levels, strict=True) if lv.static_params.sim != sp]
    if bad:
        raise ValueError(f"levels with other static sizes than {paths[0]}: {bad}")
    k = steps_per_call(n)
    actions = jnp.zeros((sp.num_joints + sp.num_thrusters,), jnp.float32)

    def batch(level):
        return jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *jnp.shape(x))), level.state.sim)

    def run(states, params, actions):
        def body(s, _):
            s, _ = jax.vmap(lambda x: px.step(x, params, sp, actions, solver=solver))(s)
            return s, None

        return jax.lax.scan(body, states, None, length=k)[0]

    t0 = time.perf_counter()
    compiled = jit(run).lower(batch(levels[0]), levels[0].params.sim, actions).compile()
    compile_s = time.perf_counter() - t0
    out = []
    for i, (path, level) in enumerate(zip(paths, levels, strict=True)):
        elapsed, calls, _ = steady_rate(
            compiled, batch(level), (level.params.sim, actions), seconds
        )
        out.append(
            {
                "what": "physics_engine_step",
                "impl": "jaxlab",
                "solver": solver,
                "size": "L",
                "n": n,
                "scene": level_name(Path(path)),
                "compile_s": round(compile_s, 3),
                "compile_shared": i > 0,
                "steps_per_call": k,
                "calls": calls,
                "time_s": round(elapsed, 3),
                "rate": round(n * k * calls / elapsed, 1),
                "unit": "scene_steps/s",
                "jax": jax.__version__,
                "compiler_options": compiler_options(),
                "loadavg_1m": round(os.getloadavg()[0], 2),
            }
        )
    return out


def run_peer(size: str, ns: list[int], seconds: float) -> list[dict]:
    """The peer's engine lines for ``size`` (empty when it fails)."""
    args = ["--skip-env", "--no-real-l", "--sizes", size.upper()]
    args += ["--engine-n", ",".join(map(str, ns)), "--seconds", str(seconds)]
    return run_peer_script("bench_jax2d_peer.py", args, size)


def run_peer_levels(paths: list, ns: list[int], seconds: float) -> list[dict]:
    """The original's engine lines for the level files ``paths``."""
    listing = LEVEL_DIR / "level_list.txt"
    listing.write_text("\n".join(str(Path(p).resolve()) for p in paths))
    args = ["--skip-env", "--level-list", str(listing), "--engine-n", ",".join(map(str, ns))]
    return run_peer_script("bench_jax2d_peer.py", args + ["--seconds", str(seconds)], "L levels")


def bench_l_levels(args, ns: list[int], peer: bool) -> None:
    """Every level of ``--l-levels`` against the original, then one summary line per ``n``."""
    paths = level_files(args.l_levels, args.random_l, LEVEL_DIR)
    ours = {}
    for n in ns:
        for rec in measure_levels(paths, n, args.seconds, args.solver):
            ours[(rec["scene"], n)] = rec
            emit(rec)
    if not peer:
        return
    for line in ratio_lines(
        ours,
        run_peer_levels(paths, ns, args.seconds),
        what="physics_engine_ratio",
        summary_what="physics_engine_l_summary",
        peer="jax2d",
        by=("n",),
        unit="scene_steps/s",
        solver=args.solver,
    ):
        emit(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="s,m,l")
    parser.add_argument("--n", default="1,256,4096", help="numbers of parallel scenes")
    parser.add_argument("--solver", default="fast", choices=("fast", "reference"))
    parser.add_argument("--seconds", type=float, default=2.5, help="steady-state time each")
    parser.add_argument("--no-peer", action="store_true", help="jaxlab lines only")
    parser.add_argument(
        "--l-levels",
        default="official,random",
        help="the L rows' level sets (official, random; '' for the padded M level only)",
    )
    parser.add_argument("--random-l", type=int, default=16, help="random L levels")
    parser.add_argument(
        "--profile-level", default=None, help="--profile on this level file instead of the size's"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="where the time goes: the step with 1 vs the default solver iterations (no peer)",
    )
    args = parser.parse_args(argv)
    ns = [int(v) for v in args.n.split(",")]
    sizes = [s.strip().lower() for s in args.sizes.split(",")]
    for s in sizes:
        if s not in SCENES:
            parser.error(f"--sizes: {s!r} is not one of {sorted(SCENES)}")
    peer = peer_available(args.no_peer)
    if args.profile:
        for size in sizes:
            for n in ns:
                path = args.profile_level
                full = measure(size, n, args.seconds, args.solver, path=path)
                one = measure(size, n, args.seconds, args.solver, iterations=1, path=path)
                t_coll = measure_collision(size, n, args.seconds, path)
                iters = load_scene(size, path)[2].num_solver_iterations
                t_full, t_one = 1e6 / full["rate"], 1e6 / one["rate"]
                per_iter = (t_full - t_one) / (iters - 1)
                rec = {
                    "what": "physics_step_profile",
                    "size": size.upper(),
                    "n": n,
                    "scene": full["scene"] if path is None else level_name(Path(path)),
                    "us_per_step": round(t_full, 3),
                    "us_per_step_1_iteration": round(t_one, 3),
                    "us_per_solver_iteration": round(per_iter, 3),
                    "us_collision": round(t_coll, 3),
                    "solver_share": round(iters * per_iter / t_full, 3),
                    "collision_share": round(t_coll / t_full, 3),
                    "rest_share": round(1 - (iters * per_iter + t_coll) / t_full, 3),
                    "note": "solver = the sequential-impulse iterations (joints, then contact "
                    "batches); collision = every pair slot's manifold; rest = gravity, motors, "
                    "thrusters, contact rows, warm starting, integration",
                }
                emit(rec)
        return 0
    for size in sizes:
        if size == "l" and args.l_levels:
            bench_l_levels(args, ns, peer)
        ours = {}
        for n in ns:
            rec = measure(size, n, args.seconds, args.solver)
            ours[n] = rec
            emit(rec)
        if not peer:
            continue
        for rec in run_peer(size, ns, args.seconds):
            emit(rec)
            mine = ours.get(rec["n"])
            if mine is None:
                continue
            emit(
                {
                    "what": "physics_engine_ratio",
                    "size": size.upper(),
                    "n": rec["n"],
                    "solver": args.solver,
                    "jaxlab_rate": mine["rate"],
                    "jax2d_rate": rec["rate"],
                    "ratio": round(mine["rate"] / rec["rate"], 3),
                    "jaxlab_compile_s": mine["compile_s"],
                    "jax2d_compile_s": rec["compile_s"],
                    "compile_ratio": round(mine["compile_s"] / max(rec["compile_s"], 1e-9), 3),
                    "unit": "scene_steps/s",
                }
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
