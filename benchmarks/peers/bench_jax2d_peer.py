"""Throughput of the original Jax2D engine and Kinetix env (the *peer* side of comparisons).

Runs inside the peer venv only (``benchmarks/peers/.venv-kinetix``, made by
``setup_kinetix_peer.sh``). Prints one JSON line per measurement, for example::

    {"what": "jax2d_engine_step", "impl": "jax2d", "size": "S", "n": 256,
     "scene": "s/h2_one_wheel_car", "compile_s": 9.1, "steps_per_s": 41000.0, ...}

* ``jax2d_engine_step``: ``jax.vmap(PhysicsEngine.step)`` over ``n`` copies of one level,
  zero actions, ``lax.scan`` of ``k`` steps per call. ``steps_per_s`` counts scene-steps
  (``n * k * calls / time``). ``compile_s`` is lowering + XLA compile of that call.
* ``kinetix_env_step``: ``jax.vmap(KinetixEnv.step)`` with auto-reset to the same level,
  uniform random continuous actions, flat or entity observations. ``steps_per_s`` counts env
  steps (each is ``frame_skip`` engine steps); ``engine_steps_per_s`` multiplies that out.

Scenes: S ``s/h2_one_wheel_car`` and M ``m/h5_angry_birds`` of the original Kinetix levels
(``LEVELS``, byte-identical to the wheel's);
L is ``m/h5_angry_birds`` padded to L capacities with ``kinetix.util.saving.expand_env_state``
(``LEVELS`` holds no L level) and, for the engine, also ``l/h0_angrybirds`` shipped in the
kinetix-env wheel. Same static sizes share one compiled program.

Usage (repository root)::

    benchmarks/peers/.venv-kinetix/bin/python benchmarks/peers/bench_jax2d_peer.py \
        | tee benchmarks/peers/results_cpu.jsonl
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax2d.engine import PhysicsEngine
from kinetix.environment import (
    ActionType,
    ObservationType,
    make_kinetix_env,
    static_env_params_from_size,
)
from kinetix.util.saving import expand_env_state, load_from_json_file

REPO = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
LEVELS = os.path.realpath(os.path.join(REPO, "..", "shared", "kinetix-levels"))
EXPECTED = {  # size: (polygons, circles, joints, thrusters)
    "S": (5, 2, 1, 1),
    "M": (6, 3, 2, 2),
    "L": (12, 4, 6, 2),
}


def _device() -> str:
    d = jax.devices()[0]
    return f"{d.platform}:{d.device_kind} x{jax.device_count()} ({os.cpu_count()} host cores)"


def _common() -> dict:
    return {
        "device": _device(),
        "jax": jax.__version__,
        "peer_version": {
            n: importlib.metadata.version(n) for n in ("kinetix-env", "jax2d", "jaxlib")
        },
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def load_scene(size: str, scene: str):
    """Return (state, static_env_params, env_params) for a scene name.

    ``scene`` is ``<dir>/<level>`` under ``LEVELS`` or, for ``l/...``,
    the kinetix-env wheel's own level directory. For size L with an M scene, the level is
    padded with ``expand_env_state`` to ``static_env_params_from_size("l")``.
    """
    sub, name = scene.split("/")
    path = os.path.join(LEVELS, sub, name + ".json")
    if not os.path.exists(path):
        import kinetix

        path = os.path.join(os.path.dirname(kinetix.__file__), "levels", sub, name + ".json")
    state, static_env_params, env_params = load_from_json_file(os.path.abspath(path))
    if size == "L" and sub != "l":
        target = static_env_params_from_size("l")
        target = target.replace(frame_skip=static_env_params.frame_skip)
        state = expand_env_state(state, target)
        static_env_params = target
    got = (
        static_env_params.num_polygons,
        static_env_params.num_circles,
        static_env_params.num_joints,
        static_env_params.num_thrusters,
    )
    if got != EXPECTED[size]:
        raise ValueError(f"scene {scene!r} has sizes {got}, expected {EXPECTED[size]} for {size}")
    if static_env_params.max_polygon_vertices != 4 or static_env_params.num_solver_iterations != 10:
        raise ValueError(
            f"scene {scene!r}: max_polygon_vertices={static_env_params.max_polygon_vertices}, "
            f"num_solver_iterations={static_env_params.num_solver_iterations}, expected 4 and 10"
        )
    return state, static_env_params, env_params


def _batch(tree, n: int):
    return jax.tree.map(lambda x: jnp.broadcast_to(jnp.asarray(x), (n, *jnp.shape(x))), tree)


def _steady_rate(fn, state, rest: tuple, work_per_call: int, seconds: float):
    """Run ``state = fn(state, *rest)`` until ``seconds`` pass; returns (rate, elapsed, calls).

    The first call (warm-up, first execution) is not timed.
    """
    state = fn(state, *rest)
    jax.block_until_ready(state)
    calls, t0 = 0, time.perf_counter()
    while True:
        state = fn(state, *rest)
        jax.block_until_ready(state)
        calls += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds and calls >= 2:
            return work_per_call * calls / elapsed, elapsed, calls


_ENGINE_CACHE: dict = {}


def bench_engine(size: str, scene: str, n: int, seconds: float) -> dict:
    state, static_env_params, env_params = load_scene(size, scene)
    label = scene + (" (padded to L)" if size == "L" and not scene.startswith("l/") else "")
    return _engine_line(state, static_env_params, env_params, n, seconds, size, label)


def _engine_line(state, static_env_params, env_params, n, seconds, size, label) -> dict:
    """Time ``n`` copies of ``state`` (one compile per static sizes and ``n``); one line."""
    k = max(1, min(64, 8192 // n))
    key = (static_env_params, n, k)
    n_actions = static_env_params.num_joints + static_env_params.num_thrusters
    actions = jnp.zeros((n_actions,), dtype=jnp.float32)
    states = _batch(state, n)
    compile_s = 0.0
    if key not in _ENGINE_CACHE:
        engine = PhysicsEngine(static_env_params)

        def run(states, params, actions):
            def body(s, _):
                s, _ = jax.vmap(engine.step, in_axes=(0, None, None))(s, params, actions)
                return s, None

            return jax.lax.scan(body, states, None, length=k)[0]

        t0 = time.perf_counter()
        compiled = jax.jit(run).lower(states, env_params, actions).compile()
        compile_s = time.perf_counter() - t0
        _ENGINE_CACHE[key] = (compiled, compile_s)
    compiled, first_compile_s = _ENGINE_CACHE[key]
    rate, elapsed, calls = _steady_rate(compiled, states, (env_params, actions), n * k, seconds)
    return {
        "what": "jax2d_engine_step",
        "impl": "jax2d",
        "size": size,
        "n": n,
        "scene": label,
        "compile_s": round(compile_s if compile_s else first_compile_s, 3),
        "compile_shared": compile_s == 0.0,
        "steps_per_call": k,
        "calls": calls,
        "time_s": round(elapsed, 3),
        "steps_per_s": round(rate, 1),
        "rate": round(rate, 1),
        "unit": "scene_steps/s",
        **_common(),
    }


OBS_TYPES = {
    "flat": ObservationType.SYMBOLIC_FLAT,
    "entity": ObservationType.SYMBOLIC_ENTITY,
    "padded": ObservationType.SYMBOLIC_FLAT_PADDED,
    "pixels": ObservationType.PIXELS,
}
ACTION_TYPES = {
    "continuous": ActionType.CONTINUOUS,
    "multi_discrete": ActionType.MULTI_DISCRETE,
    "discrete": ActionType.DISCRETE,
}


def bench_env(
    size: str, scene: str, n: int, obs: str, seconds: float, action: str = "continuous"
) -> dict:
    state, static_env_params, env_params = load_scene(size, scene)
    label = scene + (" (padded to L)" if size == "L" and not scene.startswith("l/") else "")
    return _env_line(state, static_env_params, env_params, n, obs, seconds, action, size, label)


SCENES = {"S": "s/h2_one_wheel_car", "M": "m/h5_angry_birds", "L": "m/h5_angry_birds"}


def _level_name(path: str) -> str:
    stem = os.path.splitext(os.path.basename(path))[0]
    return f"{'random' if stem.startswith('random_') else 'l'}/{stem}"


def bench_engine_file(path: str, n: int, seconds: float) -> dict:
    """``bench_engine`` on a level file (any size; one compile per static sizes and ``n``)."""
    state, static_env_params, env_params = load_from_json_file(os.path.abspath(path))
    return _engine_line(state, static_env_params, env_params, n, seconds, "L", _level_name(path))


_ENV_CACHE: dict = {}


def bench_env_file(path: str, n: int, obs: str, seconds: float, action: str) -> dict:
    """``bench_env`` on a level file."""
    state, static_env_params, env_params = load_from_json_file(os.path.abspath(path))
    label = _level_name(path)
    return _env_line(state, static_env_params, env_params, n, obs, seconds, action, "L", label)


def _env_line(state, static_env_params, env_params, n, obs, seconds, action, size, label) -> dict:
    """``n`` auto-resetting envs on ``state``; the level is an argument of the compiled program
    (the auto-reset state), so every level of one static size shares one compile."""
    k = max(1, min(32, 2048 // n))
    key = (static_env_params, n, obs, action)

    # The env (and its engine) is built outside ``jit``; its reset function returns the level
    # the traced program is called with.
    current = {"level": state}
    env = make_kinetix_env(
        ACTION_TYPES[action],
        OBS_TYPES[obs],
        lambda _key: current["level"],
        env_params,
        static_env_params,
        auto_reset=True,
    )
    space = env.action_space(env_params)

    def run(carry, level):
        current["level"] = level

        def body(c, _):
            key, states, acc = c
            key, k_act, k_step = jax.random.split(key, 3)
            actions = jax.vmap(space.sample)(jax.random.split(k_act, n))
            obs_, states, reward, done, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(k_step, n), states, actions, env_params
            )
            leaves = [jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(obs_)]
            acc = acc + jnp.sum(reward) + jnp.sum(done) + sum(leaves)
            return (key, states, acc), None

        return jax.lax.scan(body, carry, None, length=k)[0]

    rng = jax.random.PRNGKey(0)
    current["level"] = state
    t0 = time.perf_counter()
    reset_c = (
        jax.jit(
            lambda r: jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(r, n), env_params)
        )
        .lower(rng)
        .compile()
    )
    reset_compile_s = time.perf_counter() - t0
    _, states = reset_c(rng)
    carry = (rng, states, jnp.zeros((), jnp.float32))
    compile_s = 0.0
    if key not in _ENV_CACHE:
        t0 = time.perf_counter()
        _ENV_CACHE[key] = (jax.jit(run).lower(carry, state).compile(), time.perf_counter() - t0)
        compile_s = _ENV_CACHE[key][1]
    compiled, first_compile_s = _ENV_CACHE[key]
    rate, elapsed, calls = _steady_rate(compiled, carry, (state,), n * k, seconds)
    return {
        "what": "kinetix_env_step",
        "impl": "kinetix-env",
        "size": size,
        "n": n,
        "scene": label,
        "obs": obs,
        "action": action,
        "auto_reset": True,
        "frame_skip": static_env_params.frame_skip,
        "compile_s": round(compile_s if compile_s else first_compile_s, 3),
        "compile_shared": compile_s == 0.0,
        "reset_compile_s": round(reset_compile_s, 3),
        "steps_per_call": k,
        "calls": calls,
        "time_s": round(elapsed, 3),
        "steps_per_s": round(rate, 1),
        "engine_steps_per_s": round(rate * static_env_params.frame_skip, 1),
        "rate": round(rate, 1),
        "unit": "env_steps/s",
        **_common(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="S,M,L")
    parser.add_argument("--engine-n", default="1,256,4096")
    parser.add_argument("--env-n", default="1,256")
    parser.add_argument(
        "--env-big-n",
        type=int,
        default=4096,
        help="also run the env at this N when the N=256 rate predicts < --big-max-call-s per call",
    )
    parser.add_argument("--big-max-call-s", type=float, default=2.0)
    parser.add_argument("--obs", default="flat,entity", help="comma list of " + ",".join(OBS_TYPES))
    parser.add_argument("--action", default="continuous", choices=sorted(ACTION_TYPES))
    parser.add_argument("--seconds", type=float, default=2.5, help="steady-state time each")
    parser.add_argument(
        "--scene",
        default=None,
        help="engine only: time this one scene (e.g. l/h0_angrybirds) instead of the defaults",
    )
    parser.add_argument("--skip-engine", action="store_true")
    parser.add_argument("--skip-env", action="store_true")
    parser.add_argument(
        "--no-real-l", action="store_true", help="skip the engine on the wheel's l/h0_angrybirds"
    )
    parser.add_argument(
        "--level-list",
        default=None,
        help="a file of level paths, one per line: engine and env on each (replaces --sizes)",
    )
    args = parser.parse_args(argv)
    sizes = args.sizes.split(",")

    def emit(rec):
        print(json.dumps(rec), flush=True)

    if args.level_list is not None:
        with open(args.level_list) as f:
            paths = [ln.strip() for ln in f if ln.strip()]
        if not args.skip_engine:
            for n in [int(x) for x in args.engine_n.split(",")]:
                for path in paths:
                    emit(bench_engine_file(path, n, args.seconds))
        if not args.skip_env:
            for obs in args.obs.split(","):
                for n in [int(x) for x in args.env_n.split(",")]:
                    for path in paths:
                        emit(bench_env_file(path, n, obs, args.seconds, args.action))
        return 0

    if not args.skip_engine:
        for size in sizes:
            scenes = [SCENES[size]] + (
                ["l/h0_angrybirds"] if size == "L" and not args.no_real_l else []
            )
            if args.scene is not None:
                scenes = [args.scene]
            for n in [int(x) for x in args.engine_n.split(",")]:
                for scene in scenes:
                    emit(bench_engine(size, scene, n, args.seconds))
    if not args.skip_env:
        for size in sizes:
            for obs in args.obs.split(","):
                rate_256 = None
                for n in [int(x) for x in args.env_n.split(",")]:
                    rec = bench_env(size, SCENES[size], n, obs, args.seconds, args.action)
                    emit(rec)
                    if n == 256:
                        rate_256 = rec["steps_per_s"]
                big = args.env_big_n
                if big and rate_256 and big / rate_256 < args.big_max_call_s:
                    emit(bench_env(size, SCENES[size], big, obs, args.seconds, args.action))
                elif big:
                    print(
                        f"# skipped kinetix_env_step size={size} obs={obs} n={big}: "
                        f"predicted {big / max(rate_256 or 1e-9, 1e-9):.1f}s per step call",
                        file=sys.stderr,
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    sys.exit(main())
