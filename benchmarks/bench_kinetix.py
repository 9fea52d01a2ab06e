"""Kinetix env throughput, side by side with the original ``kinetix-env`` on the same work.

Work per measurement (the peer benchmark's, ``benchmarks/peers/bench_jax2d_peer.py``): ``n``
copies of one level with auto-reset to it, uniform random actions drawn from the action space,
``k = max(1, min(32, 2048 // n))`` vmapped env steps per jitted ``lax.scan`` call; every
observation leaf, reward and done is summed into the carry so nothing is dead code. Scenes: S
``s/h2_one_wheel_car``, M ``m/h5_angry_birds``. L rows run on real L levels (``--l-levels``,
``benchmarks/kinetix_l_levels.py``: every human-designed L level of the kinetix-env wheel and
``--random-l`` generator levels), one compiled program per observation type and ``n`` with the
level as its argument (the auto-reset state), each level timed in turn, and a
``kinetix_env_l_summary`` line (median and worst ratio); the M level padded to L sizes is an
extra row, named for what it is. Steady-state
time ``--seconds`` after one untimed call; compile (lower + XLA) of the step scan and of the
batched reset are reported separately.

Prints one JSON line per measurement: ``kinetix_env_step`` (``impl`` = ``jaxlab`` or
``kinetix-env``) and ``kinetix_env_ratio`` (jaxlab rate / original rate, both compile times).
Generator lines come from ``benchmarks/bench_kinetix_generator.py`` when ``--generator``.

Usage::

    python -m benchmarks.bench_kinetix                                # S,M,L x flat,entity x 1,256,4096
    python -m benchmarks.bench_kinetix --sizes s --obs pixels,padded --n 256
    python -m benchmarks.bench_kinetix --no-peer --action multi_discrete
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from benchmarks.harness import REPO, emit, peer_available, steady_rate
from benchmarks.harness import run_peer as run_peer_script
from benchmarks.kinetix_l_levels import LEVEL_DIR, level_files, level_name, ratio_lines
from jaxlab import envs
from jaxlab.core.compile import compiler_options, jit
from jaxlab.envs.kinetix.levels import load_level

LEVELS = REPO.parent / "shared" / "kinetix-levels"
SCENES = {"s": "s/h2_one_wheel_car", "m": "m/h5_angry_birds", "l": "m/h5_angry_birds"}
OBS = {
    "flat": "symbolic_flat",
    "entity": "symbolic_entity",
    "padded": "symbolic_flat_padded",
    "pixels": "pixels",
}


def steps_per_call(n: int) -> int:
    """Env steps per timed call, as in the peer benchmark."""
    return max(1, min(32, 2048 // n))


def measure(size: str, n: int, obs: str, action: str, seconds: float) -> dict:
    """Compile and time ``n`` auto-resetting envs on the ``size`` scene; one JSON record."""
    env, params = envs.make(
        f"kinetix-{size}",
        level=str(LEVELS / f"{SCENES[size]}.json"),
        observation_type=OBS[obs],
        action_type=action,
    )
    space = env.action_space(params)
    k = steps_per_call(n)

    def reset(key):
        return jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, n), params)

    def run(carry, _unused):
        def body(c, _):
            key, states, acc = c
            key, k_act, k_step = jax.random.split(key, 3)
            actions = jax.vmap(space.sample)(jax.random.split(k_act, n))
            obs_, states, reward, term, trunc, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(k_step, n), states, actions, params
            )
            leaves = [jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(obs_)]
            acc = acc + jnp.sum(reward) + jnp.sum(term | trunc) + sum(leaves)
            return (key, states, acc), None

        return jax.lax.scan(body, carry, None, length=k)[0]

    key = jax.random.key(0)
    t0 = time.perf_counter()
    reset_c = jit(reset).lower(key).compile()
    reset_compile_s = time.perf_counter() - t0
    _, states = reset_c(key)
    carry = (key, states, jnp.zeros((), jnp.float32))
    t0 = time.perf_counter()
    step_c = jit(run).lower(carry, 0).compile()
    compile_s = time.perf_counter() - t0
    elapsed, calls, _ = steady_rate(step_c, carry, (0,), seconds)
    rate = n * k * calls / elapsed
    d = jax.devices()[0]
    return {
        "what": "kinetix_env_step",
        "impl": "jaxlab",
        "size": size.upper(),
        "n": n,
        "scene": SCENES[size] + (" (padded to L)" if size == "l" else ""),
        "obs": obs,
        "action": action,
        "auto_reset": True,
        "compile_s": round(compile_s, 3),
        "reset_compile_s": round(reset_compile_s, 3),
        "steps_per_call": k,
        "calls": calls,
        "time_s": round(elapsed, 3),
        "rate": round(rate, 1),
        "unit": "env_steps/s",
        "device": f"{d.platform}:{d.device_kind}",
        "jax": jax.__version__,
        "compiler_options": compiler_options(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def measure_levels(paths: list, n: int, obs: str, action: str, seconds: float) -> list[dict]:
    """``measure`` for each level of ``paths`` (one static size) with one compiled program: the
    level is the program's argument, reset to by ``env.step(..., reset_state=level)``."""
    levels = [load_level(p) for p in paths]
    env, params = envs.make(
        "kinetix-l", level=str(paths[0]), observation_type=OBS[obs], action_type=action
    )
    space = env.action_space(params)
    k = steps_per_call(n)

    def run(carry, level):
        def body(c, _):
            key, states, acc = c
            key, k_act, k_step = jax.random.split(key, 3)
            actions = jax.vmap(space.sample)(jax.random.split(k_act, n))
            step = functools.partial(env.step, reset_state=level)
            obs_, states, reward, term, trunc, _ = jax.vmap(step, in_axes=(0, 0, 0, None))(
                jax.random.split(k_step, n), states, actions, params
            )
            leaves = [jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(obs_)]
            acc = acc + jnp.sum(reward) + jnp.sum(term | trunc) + sum(leaves)
            return (key, states, acc), None

        return jax.lax.scan(body, carry, None, length=k)[0]

    def start(level):
        states = jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *jnp.shape(x))), level.state)
        return (jax.random.key(0), states, jnp.zeros((), jnp.float32))

    t0 = time.perf_counter()
    step_c = jit(run).lower(start(levels[0]), levels[0].state).compile()
    compile_s = time.perf_counter() - t0
    out = []
    for i, (path, level) in enumerate(zip(paths, levels, strict=True)):
        elapsed, calls, _ = steady_rate(step_c, start(level), (level.state,), seconds)
        out.append(
            {
                "what": "kinetix_env_step",
                "impl": "jaxlab",
                "size": "L",
                "n": n,
                "scene": level_name(Path(path)),
                "obs": obs,
                "action": action,
                "auto_reset": True,
                "compile_s": round(compile_s, 3),
                "compile_shared": i > 0,
                "steps_per_call": k,
                "calls": calls,
                "time_s": round(elapsed, 3),
                "rate": round(n * k * calls / elapsed, 1),
                "unit": "env_steps/s",
                "jax": jax.__version__,
                "compiler_options": compiler_options(),
                "loadavg_1m": round(os.getloadavg()[0], 2),
            }
        )
    return out


def bench_l_levels(args, ns: list[int], obs_list: list[str], peer: bool) -> None:
    """Every level of ``--l-levels`` against the original, then one summary line per (obs, n)."""
    paths = level_files(args.l_levels, args.random_l, LEVEL_DIR)
    ours = {}
    for obs in obs_list:
        for n in ns:
            for rec in measure_levels(paths, n, obs, args.action, args.seconds):
                ours[(rec["scene"], obs, n)] = rec
                emit(rec)
    if not peer:
        return
    listing = LEVEL_DIR / "level_list.txt"
    listing.write_text("\n".join(str(Path(p).resolve()) for p in paths))
    peer_args = ["--skip-engine", "--level-list", str(listing), "--env-n", ",".join(map(str, ns))]
    peer_args += ["--obs", ",".join(obs_list), "--action", args.action]
    peer_rows = run_peer_script(
        "bench_jax2d_peer.py", peer_args + ["--seconds", str(args.seconds)], "L levels"
    )
    for line in ratio_lines(
        ours,
        peer_rows,
        what="kinetix_env_ratio",
        summary_what="kinetix_env_l_summary",
        peer="kinetix",
        by=("obs", "n"),
        unit="env_steps/s",
        action=args.action,
    ):
        emit(line)


def run_peer(size: str, ns: list[int], obs: list[str], action: str, seconds: float) -> list[dict]:
    """The original's env lines for ``size`` (empty when it fails)."""
    args = ["--skip-engine", "--sizes", size.upper(), "--env-n", ",".join(map(str, ns))]
    args += ["--env-big-n", "0", "--obs", ",".join(obs), "--action", action]
    return run_peer_script("bench_jax2d_peer.py", args + ["--seconds", str(seconds)], size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="s,m,l")
    parser.add_argument("--n", default="1,256,4096", help="numbers of parallel envs")
    parser.add_argument("--obs", default="flat,entity", help="comma list of " + ",".join(OBS))
    parser.add_argument(
        "--action", default="continuous", choices=("continuous", "multi_discrete", "discrete")
    )
    parser.add_argument("--seconds", type=float, default=2.5, help="steady-state time each")
    parser.add_argument("--no-peer", action="store_true", help="jaxlab lines only")
    parser.add_argument(
        "--l-levels",
        default="official,random",
        help="the L rows' level sets (official, random; '' for the padded M level only)",
    )
    parser.add_argument("--random-l", type=int, default=16, help="random L levels")
    parser.add_argument(
        "--generator", action="store_true", help="also run bench_kinetix_generator.py"
    )
    args = parser.parse_args(argv)
    ns = [int(v) for v in args.n.split(",")]
    sizes = [s.strip().lower() for s in args.sizes.split(",")]
    obs_list = [o.strip() for o in args.obs.split(",")]
    for s in sizes:
        if s not in SCENES:
            parser.error(f"--sizes: {s!r} is not one of {sorted(SCENES)}")
    for o in obs_list:
        if o not in OBS:
            parser.error(f"--obs: {o!r} is not one of {sorted(OBS)}")
    peer = peer_available(args.no_peer)
    for size in sizes:
        if size == "l" and args.l_levels:
            bench_l_levels(args, ns, obs_list, peer)
        ours = {}
        for obs in obs_list:
            for n in ns:
                rec = measure(size, n, obs, args.action, args.seconds)
                ours[(obs, n)] = rec
                emit(rec)
        if not peer:
            continue
        for rec in run_peer(size, ns, obs_list, args.action, args.seconds):
            emit(rec)
            mine = ours.get((rec["obs"], rec["n"]))
            if mine is None:
                continue
            ratio = {
                "what": "kinetix_env_ratio",
                "size": size.upper(),
                "n": rec["n"],
                "obs": rec["obs"],
                "action": args.action,
                "jaxlab_rate": mine["rate"],
                "kinetix_rate": rec["rate"],
                "ratio": round(mine["rate"] / rec["rate"], 3),
                "jaxlab_compile_s": mine["compile_s"],
                "kinetix_compile_s": rec["compile_s"],
                "compile_ratio": round(mine["compile_s"] / max(rec["compile_s"], 1e-9), 3),
                "unit": "env_steps/s",
            }
            emit(ratio)
    if args.generator:
        gen = "benchmarks.bench_kinetix_generator"
        subprocess.run([sys.executable, "-m", gen], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
