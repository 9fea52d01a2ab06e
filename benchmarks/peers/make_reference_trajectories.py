"""Record reference trajectories from the original Jax2D engine and Kinetix env.

Runs inside the peer venv only (``benchmarks/peers/.venv-kinetix``, made by
``setup_kinetix_peer.sh``); it imports ``kinetix`` (kinetix-env 3.0.2) and ``jax2d`` (1.0.1),
never ``jaxlab``. For every level JSON it writes one compressed ``.npz`` to
``tests/physics/fixtures/<size>_<level>.npz`` plus ``manifest.json`` and ``README.md`` there.

Per level it records, with the level loaded by ``kinetix.util.saving.load_from_json_file``:

* ``zero``: 240 raw ``jax2d.engine.PhysicsEngine.step`` calls with all-zero engine actions,
  using the loaded ``StaticEnvParams`` (as static sim params) and ``EnvParams`` (as sim params),
  i.e. exactly what ``KinetixEnv.engine_step`` passes to the engine, without the env around it.
* ``act_`` (levels with a motor or thruster): 120 engine steps with the engine action that
  ``ContinuousActions.process_action`` makes from the unified action ``ones(6)`` (+1 on every
  motor binding and thruster binding).
* ``env_``: 128 ``KinetixEnv.step`` calls (frame_skip engine steps each) with zero continuous
  actions and ``auto_reset=False``, so the rollout continues past termination.

Usage (from the repository root)::

    benchmarks/peers/.venv-kinetix/bin/python benchmarks/peers/make_reference_trajectories.py

The semantics of every array are documented in ``tests/physics/fixture_io.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import hashlib
import importlib.metadata
import json
import os
import platform
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax2d.engine import PhysicsEngine
from kinetix.environment import ActionType, ObservationType, make_kinetix_env
from kinetix.environment.spaces import ContinuousActions
from kinetix.util.saving import load_from_json_file

REPO = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEFAULT_LEVELS = os.path.realpath(os.path.join(REPO, "..", "shared", "kinetix-levels"))
DEFAULT_OUT = os.path.join(REPO, "tests", "physics", "fixtures")

N_ZERO_STEPS = 240
N_ACT_STEPS = 120
N_ENV_STEPS = 128
FORMAT_VERSION = 1
MAX_FILE_BYTES = 200_000
MAX_TOTAL_BYTES = 5_000_000

RIGID_BODY_FIELDS = (
    "position",
    "rotation",
    "velocity",
    "angular_velocity",
    "inverse_mass",
    "inverse_inertia",
    "friction",
    "restitution",
    "collision_mode",
    "active",
    "n_vertices",
    "vertices",
    "radius",
)
JOINT_FIELDS = (
    "a_index",
    "b_index",
    "a_relative_pos",
    "b_relative_pos",
    "global_position",
    "active",
    "acc_impulse",
    "acc_r_impulse",
    "motor_speed",
    "motor_power",
    "motor_on",
    "motor_has_joint_limits",
    "min_rotation",
    "max_rotation",
    "is_fixed_joint",
    "rotation",
)
THRUSTER_FIELDS = (
    "object_index",
    "relative_position",
    "rotation",
    "power",
    "global_position",
    "active",
)
TRAJ_FIELDS = ("position", "rotation", "velocity", "angular_velocity")


def _np(x) -> np.ndarray:
    """Host copy with the fixture dtypes: float32, int32 or bool."""
    a = np.asarray(x)
    if a.dtype == np.bool_:
        return a
    if np.issubdtype(a.dtype, np.integer):
        return a.astype(np.int32)
    return a.astype(np.float32)


def _params_dict(params, prefix: str) -> dict[str, np.ndarray]:
    out = {}
    for f in dataclasses.fields(params):
        v = getattr(params, f.name)
        if isinstance(v, tuple):
            out[f"{prefix}{f.name}"] = np.asarray(v, dtype=np.int32)
        elif isinstance(v, bool | np.bool_):
            out[f"{prefix}{f.name}"] = np.asarray(v, dtype=np.bool_)
        elif f.type is int or isinstance(v, np.integer):
            out[f"{prefix}{f.name}"] = np.asarray(v, dtype=np.int32)
        else:
            out[f"{prefix}{f.name}"] = np.asarray(v, dtype=np.float32)
    return out


def _initial_state_arrays(state) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for kind in ("polygon", "circle"):
        body = getattr(state, kind)
        for f in RIGID_BODY_FIELDS:
            out[f"init_{kind}_{f}"] = _np(getattr(body, f))
    for f in JOINT_FIELDS:
        out[f"init_joint_{f}"] = _np(getattr(state.joint, f))
    for f in THRUSTER_FIELDS:
        out[f"init_thruster_{f}"] = _np(getattr(state.thruster, f))
    out["init_collision_matrix"] = _np(state.collision_matrix)
    out["init_gravity"] = _np(state.gravity)
    out["init_polygon_role"] = _np(state.polygon_shape_roles)
    out["init_circle_role"] = _np(state.circle_shape_roles)
    out["init_polygon_density"] = _np(state.polygon_densities)
    out["init_circle_density"] = _np(state.circle_densities)
    out["init_motor_binding"] = _np(state.motor_bindings)
    out["init_thruster_binding"] = _np(state.thruster_bindings)
    out["init_motor_auto"] = _np(state.motor_auto)
    return out


class PeerRunner:
    """Jitted engine and env rollouts for one ``StaticEnvParams`` (compiled once, reused)."""

    def __init__(self, static_env_params):
        self.static_env_params = static_env_params
        self.engine = PhysicsEngine(static_env_params)
        self.env = make_kinetix_env(
            ActionType.CONTINUOUS,
            ObservationType.SYMBOLIC_FLAT,
            None,
            static_env_params=static_env_params,
            auto_reset=False,
        )
        self.engine_rollout = {
            n: jax.jit(self._make_engine_rollout(n)) for n in (N_ZERO_STEPS, N_ACT_STEPS)
        }
        self.env_rollout = jax.jit(self._make_env_rollout(N_ENV_STEPS))

    def _make_engine_rollout(self, n_steps: int):
        engine = self.engine

        def rollout(state, params, action):
            def body(s, _):
                s, _ = engine.step(s, params, action)
                rec = {}
                for kind in ("polygon", "circle"):
                    for f in TRAJ_FIELDS:
                        rec[f"{kind}_{f}"] = getattr(getattr(s, kind), f)
                return s, rec

            return jax.lax.scan(body, state, None, length=n_steps)

        return rollout

    def _make_env_rollout(self, n_steps: int):
        env = self.env
        n_actions = (
            self.static_env_params.num_motor_bindings + self.static_env_params.num_thruster_bindings
        )

        def rollout(key, state, params):
            _, state = env.reset(key, params, override_reset_state=state)

            def body(carry, k):
                s = carry
                _, s, reward, done, info = env.step(k, s, jnp.zeros((n_actions,)), params)
                rec = {
                    "reward": reward,
                    "done": done,
                    "distance": info["distance"],
                    "goal": info["GoalR"],
                    "polygon_position": s.polygon.position,
                    "circle_position": s.circle.position,
                }
                return s, rec

            keys = jax.random.split(key, n_steps)
            return jax.lax.scan(body, state, keys)

        return rollout


def _has_actuators(state) -> bool:
    motors = np.asarray(
        state.joint.active & state.joint.motor_on & jnp.logical_not(state.joint.is_fixed_joint)
    )
    thrusters = np.asarray(state.thruster.active & (state.thruster.power > 0))
    return bool(motors.any() or thrusters.any())


def _versions() -> dict[str, str]:
    out = {}
    for name in ("kinetix-env", "jax2d", "jax", "jaxlib", "numpy", "flax", "gymnax"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "missing"
    out["python"] = platform.python_version()
    out["backend"] = jax.default_backend()
    return out


def _level_files(levels_root: str, sizes: list[str], extra_l_root: str | None) -> list[tuple]:
    items = []
    for size in sizes:
        root = os.path.join(levels_root, size)
        source = "shared/kinetix-levels"
        if not os.path.isdir(root) and size == "l" and extra_l_root is not None:
            root, source = extra_l_root, "kinetix-env package kinetix/levels/l"
        for path in sorted(glob.glob(os.path.join(root, "*.json"))):
            name = os.path.splitext(os.path.basename(path))[0]
            items.append((size, name, os.path.abspath(path), source))
    return items


def record_level(runner_cache: dict, size: str, name: str, path: str, source: str) -> dict:
    """Run the three rollouts for one level and return the npz payload."""
    state, static_env_params, env_params = load_from_json_file(path)
    if static_env_params not in runner_cache:
        runner_cache[static_env_params] = PeerRunner(static_env_params)
    runner = runner_cache[static_env_params]

    n_engine_actions = static_env_params.num_joints + static_env_params.num_thrusters
    data: dict[str, np.ndarray] = {}
    data.update(_initial_state_arrays(state))
    data.update(_params_dict(env_params, "param_"))
    data.update(_params_dict(static_env_params, "static_"))

    zero_action = jnp.zeros((n_engine_actions,), dtype=jnp.float32)
    _, rec = runner.engine_rollout[N_ZERO_STEPS](state, env_params, zero_action)
    for k, v in rec.items():
        data[k] = _np(v)
    data["steps"] = np.arange(1, N_ZERO_STEPS + 1, dtype=np.int32)

    has_act = _has_actuators(state)
    data["has_actuators"] = np.asarray(has_act)
    if has_act:
        unified = jnp.ones(
            (static_env_params.num_motor_bindings + static_env_params.num_thruster_bindings,),
            dtype=jnp.float32,
        )
        engine_action = ContinuousActions(env_params, static_env_params).process_action(
            unified, state, static_env_params
        )
        _, rec = runner.engine_rollout[N_ACT_STEPS](state, env_params, engine_action)
        for k, v in rec.items():
            data[f"act_{k}"] = _np(v)
        data["act_steps"] = np.arange(1, N_ACT_STEPS + 1, dtype=np.int32)
        data["act_unified_action"] = _np(unified)
        data["act_engine_action"] = _np(engine_action)

    _, env_rec = runner.env_rollout(jax.random.PRNGKey(0), state, env_params)
    done = np.asarray(env_rec["done"], dtype=bool)
    data["env_reward"] = _np(env_rec["reward"])
    data["env_done"] = done
    data["env_distance"] = _np(env_rec["distance"])
    data["env_goal"] = np.asarray(env_rec["goal"], dtype=bool)
    data["env_first_done"] = np.asarray(int(np.argmax(done)) if done.any() else -1, np.int32)
    data["env_steps"] = np.arange(1, N_ENV_STEPS + 1, dtype=np.int32)

    # Self-check: env step k (zero actions) must be engine step frame_skip*(k+1).
    fs = static_env_params.frame_skip
    k_max = min(N_ENV_STEPS, N_ZERO_STEPS // fs)
    idx = fs * np.arange(1, k_max + 1) - 1
    env_vs_engine = max(
        float(
            np.max(
                np.abs(
                    np.asarray(env_rec["polygon_position"])[:k_max] - data["polygon_position"][idx]
                )
            )
        ),
        float(
            np.max(
                np.abs(
                    np.asarray(env_rec["circle_position"])[:k_max] - data["circle_position"][idx]
                )
            )
        ),
    )

    meta = {
        "format_version": FORMAT_VERSION,
        "size": size,
        "level": name,
        "source": source,
        "source_file_sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(),
        "n_zero_steps": N_ZERO_STEPS,
        "n_act_steps": N_ACT_STEPS if has_act else 0,
        "n_env_steps": N_ENV_STEPS,
        "versions": _versions(),
        "env_vs_engine_max_abs_position_diff": env_vs_engine,
    }
    data["meta"] = np.asarray(json.dumps(meta, sort_keys=True))
    return data


def _write_readme(out_dir: str, manifest: dict, command: str) -> None:
    lines = [
        "# Reference fixtures from the original Jax2D / Kinetix",
        "",
        "Generated by `benchmarks/peers/make_reference_trajectories.py` inside the peer venv",
        "(`bash benchmarks/peers/setup_kinetix_peer.sh`). Do not edit by hand; regenerate with:",
        "",
        "```",
        command,
        "```",
        "",
        "One `<size>_<level>.npz` per level. `s` and `m` come from the original Kinetix levels;",
        "`l` (when present) from the levels shipped inside the kinetix-env wheel",
        "(`kinetix/levels/l`), because that folder has no L levels. Each file holds the initial scene",
        "(every RigidBody, Joint and Thruster field, collision matrix, gravity, roles, densities,",
        "bindings), the sim/static params as used, a 240-step zero-action engine trajectory,",
        "a 120-step all-+1 action trajectory (`act_*`, levels with motors or thrusters) and a",
        "128-step zero-action env rollout (`env_*`, no auto-reset). Exact per-array semantics:",
        "`tests/physics/fixture_io.py`. `manifest.json` lists every file with its sha256.",
        "",
        "Behaviour of the original worth knowing when comparing (checked by",
        "`tests/physics/test_fixtures_sane.py`):",
        "",
        "- Inactive shapes are integrated too: gravity acts on every shape whose stored",
        "  `inverse_mass` is non-zero, so inactive padding left over from the level editor falls",
        "  until the +-15 position clip. Compare active shapes, or reproduce this.",
        "- Bodies without joints obey `x_{k+1} = x_k + v_{k+1} dt` to float32 rounding; jointed",
        "  bodies also get the revolute joint's direct position shift (up to ~0.06 m a step).",
        "- With zero actions the env's physics equals engine step `frame_skip*(k+1)` bit for bit",
        "  (`env_vs_engine_max_abs_position_diff` in the manifest is 0 for every level).",
        "- The loader recomputes `collision_matrix` from the joints (it equals the stored one in",
        "  all 74 levels), forces `max_timesteps`, `screen_dim` and `downscale` to defaults, drops",
        "  `highlighted`, and leaves `motor_auto` False (the JSON has no such field).",
        "",
        "Provenance (JSON):",
        "",
        "```json",
        json.dumps(
            {k: manifest[k] for k in ("format_version", "versions", "command", "generated_utc")},
            indent=2,
            sort_keys=True,
        ),
        "```",
        "",
    ]
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels-root", default=DEFAULT_LEVELS)
    parser.add_argument("--sizes", default="s,m,l", help="comma list of size folders to use")
    parser.add_argument(
        "--l-from-package",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="if LEVELS_ROOT/l is absent, use the L levels shipped in the kinetix-env wheel",
    )
    parser.add_argument("--only", default="", help="comma list of <size>/<level> to record")
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument(
        "--readme-only", action="store_true", help="rewrite README.md from manifest.json"
    )
    args = parser.parse_args(argv)
    manifest_path = os.path.join(args.out, "manifest.json")
    if args.readme_only:
        manifest = json.load(open(manifest_path))
        _write_readme(args.out, manifest, manifest["command"])
        return 0

    import kinetix

    extra_l = os.path.join(os.path.dirname(kinetix.__file__), "levels", "l")
    levels = _level_files(
        args.levels_root, args.sizes.split(","), extra_l if args.l_from_package else None
    )
    if args.only:
        wanted = set(args.only.split(","))
        levels = [lv for lv in levels if f"{lv[0]}/{lv[1]}" in wanted]
    if not levels:
        raise ValueError(f"no level JSON found under levels_root={args.levels_root!r}")
    os.makedirs(args.out, exist_ok=True)

    command = (
        "benchmarks/peers/.venv-kinetix/bin/python benchmarks/peers/make_reference_trajectories.py"
    )
    if not args.l_from_package:
        command += " --no-l-from-package"
    files = {}
    if args.only and os.path.exists(manifest_path):
        files = json.load(open(manifest_path))["files"]

    cache: dict = {}
    for size, name, path, source in levels:
        t0 = time.perf_counter()
        data = record_level(cache, size, name, path, source)
        fname = f"{size}_{name}.npz"
        fpath = os.path.join(args.out, fname)
        np.savez_compressed(fpath, **data)
        nbytes = os.path.getsize(fpath)
        meta = json.loads(str(data["meta"]))
        files[fname] = {
            "size": size,
            "level": name,
            "source": source,
            "bytes": nbytes,
            "sha256": hashlib.sha256(open(fpath, "rb").read()).hexdigest(),
            "has_actuators": bool(data["has_actuators"]),
            "env_first_done": int(data["env_first_done"]),
            "env_vs_engine_max_abs_position_diff": meta["env_vs_engine_max_abs_position_diff"],
        }
        print(
            f"{fname}: {nbytes / 1e3:.1f} kB, act={bool(data['has_actuators'])}, "
            f"first_done={int(data['env_first_done'])}, "
            f"env_vs_engine={meta['env_vs_engine_max_abs_position_diff']:.2e}, "
            f"{time.perf_counter() - t0:.1f}s",
            flush=True,
        )
        if nbytes > MAX_FILE_BYTES:
            raise ValueError(f"{fname} is {nbytes} bytes, expected < {MAX_FILE_BYTES}")

    total = sum(v["bytes"] for v in files.values())
    manifest = {
        "format_version": FORMAT_VERSION,
        "versions": _versions(),
        "command": command,
        "generated_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "total_bytes": total,
        "files": dict(sorted(files.items())),
    }
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    _write_readme(args.out, manifest, command)
    print(f"total {total / 1e6:.2f} MB in {len(files)} files")
    if total > MAX_TOTAL_BYTES:
        raise ValueError(f"fixtures total {total} bytes, expected < {MAX_TOTAL_BYTES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
