"""Play mode: one jitted env step per frame, keys to actions, and the frame and scene payloads.

``frame_step(static_params)`` is ``KinetixEnv.step_env`` with the continuous (unified) action,
compiled once per level size and shared by every workspace; the observation it would compute is
not returned, so XLA drops it. Keys map to the unified action: the arrow keys drive motor
bindings 0 (left -1 / right +1) and 1 (down -1 / up +1), the number keys ``1..N`` fire thruster
bindings ``0..N-1``.

``scene(level)`` is what the page draws from (shapes, joints, thrusters, the arena scale);
``frame(state, ...)`` is one play frame: the poses of all shapes (float32 values written as
Python floats, so the page sees exactly the engine's numbers), the step's reward and flags.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.envs.kinetix import KinetixEnv
from jaxlab.envs.kinetix.levels import Level
from jaxlab.envs.kinetix.state import EnvParams, EnvState, StaticEnvParams, create_empty_env

#: Keys (``KeyboardEvent.key`` names) of the motor bindings: (binding, value).
MOTOR_KEYS = {
    "ArrowLeft": (0, -1.0),
    "ArrowRight": (0, 1.0),
    "ArrowDown": (1, -1.0),
    "ArrowUp": (1, 1.0),
}


def keys_to_action(keys, static_params: StaticEnvParams) -> np.ndarray:
    """The unified action [M + N] (motors in -1..1, thrusters in 0..1) of the held ``keys``."""
    M, N = static_params.num_motor_bindings, static_params.num_thruster_bindings
    u = np.zeros(M + N, np.float32)
    for k in keys or ():
        if k in MOTOR_KEYS:
            b, v = MOTOR_KEYS[k]
            if b < M:
                u[b] = np.clip(u[b] + v, -1.0, 1.0)
        elif isinstance(k, str) and k.isdigit() and 1 <= int(k) <= N:
            u[M + int(k) - 1] = 1.0
    return u


@functools.lru_cache(maxsize=8)
def frame_step(static_params: StaticEnvParams) -> Callable:
    """``step(state, action [M+N], params) -> (state, reward, terminated, truncated, solved)``,
    one env step (``frame_skip`` physics substeps) jitted for ``static_params``."""
    env = KinetixEnv(
        static_params,
        action_type="continuous",
        observation_type="symbolic_flat",
        level=create_empty_env(static_params),
        auto_reset=False,
    )
    key = jax.random.PRNGKey(0)  # the env step draws no randomness

    def step(state: EnvState, action, params: EnvParams):
        _, state, reward, terminated, truncated, info = env.step_env(key, state, action, params)
        return state, reward, terminated, truncated, info["solved"]

    return jax.jit(step)


def _floats(x) -> list:
    return np.asarray(x, np.float32).astype(np.float64).tolist()


def poses(state: EnvState, sizes: tuple[int, int] | None = None) -> dict[str, list]:
    """Positions [N][2] and rotations [N] of all shapes in global-index order (host floats).

    ``sizes = (P, C)``: only the first P polygon and C circle slots, the level's own indices
    when ``state`` was padded into larger capacities (``expand_level`` keeps slot order)."""
    sim = jax.device_get(state.sim)
    P, C = sizes or (sim.polygon.active.shape[0], sim.circle.active.shape[0])
    pos = np.concatenate([sim.polygon.position[:P], sim.circle.position[:C]])
    rot = np.concatenate([sim.polygon.rotation[:P], sim.circle.rotation[:C]])
    return {"positions": _floats(pos), "rotations": _floats(rot)}


def frame(state: EnvState, out=None, action=None, sizes: tuple[int, int] | None = None) -> dict:
    """One play frame: poses, timestep and (after a step) reward, flags and the action."""
    msg = {"type": "frame", "t": int(jax.device_get(state.timestep)), **poses(state, sizes)}
    if out is not None:
        reward, terminated, truncated, solved = jax.device_get(out)
        msg.update(
            reward=float(reward),
            terminated=bool(terminated),
            truncated=bool(truncated),
            solved=bool(solved),
        )
    if action is not None:
        msg["action"] = _floats(action)
    return msg


def scene(level: Level) -> dict:
    """What the page draws: every active shape, joint and thruster, gravity and the screen."""
    s = jax.device_get(level.state)
    sp, params = level.static_params, level.params
    P = sp.num_polygons
    shapes = []
    for kind, body, roles, dens in (
        ("polygon", s.sim.polygon, s.polygon_shape_roles, s.polygon_densities),
        ("circle", s.sim.circle, s.circle_shape_roles, s.circle_densities),
    ):
        for i in np.nonzero(body.active)[0]:
            i = int(i)
            shape = {
                "id": i if kind == "polygon" else P + i,
                "kind": kind,
                "position": _floats(body.position[i]),
                "rotation": float(body.rotation[i]),
                "role": int(roles[i]),
                "fixed": float(body.inverse_mass[i]) == 0.0,
                "density": float(dens[i]),
                "friction": float(body.friction[i]),
                "restitution": float(body.restitution[i]),
                "arena": kind == "polygon" and i < sp.num_static_fixated_polys,
            }
            if kind == "polygon":
                shape["vertices"] = _floats(body.vertices[i][: int(body.n_vertices[i])])
            else:
                shape["radius"] = float(body.radius[i])
            shapes.append(shape)
    j = s.sim.joint
    joints = [
        {
            "id": int(k),
            "a": int(j.a_index[k]),
            "b": int(j.b_index[k]),
            "a_relative_pos": _floats(j.a_relative_pos[k]),
            "kind": "fixed" if bool(j.is_fixed_joint[k]) else "revolute",
            "motor_on": bool(j.motor_on[k]),
            "motor_speed": float(j.motor_speed[k]),
            "motor_power": float(j.motor_power[k]),
            "motor_binding": int(s.motor_bindings[k]),
        }
        for k in np.nonzero(j.active)[0]
    ]
    t = s.sim.thruster
    thrusters = [
        {
            "id": int(k),
            "shape": int(t.object_index[k]),
            "relative_position": _floats(t.relative_position[k]),
            "rotation": float(t.rotation[k]),
            "power": float(t.power[k]),
            "binding": int(s.thruster_bindings[k]),
        }
        for k in np.nonzero(t.active)[0]
    ]
    return {
        "shapes": shapes,
        "joints": joints,
        "thrusters": thrusters,
        "gravity": _floats(s.sim.gravity),
        "screen": list(sp.screen_dim),
        "pixels_per_unit": float(jnp.asarray(params.pixels_per_unit)),
        "sizes": {
            "polygons": sp.num_polygons,
            "circles": sp.num_circles,
            "joints": sp.num_joints,
            "thrusters": sp.num_thrusters,
            "motor_bindings": sp.num_motor_bindings,
            "thruster_bindings": sp.num_thruster_bindings,
        },
        "max_timesteps": int(params.max_timesteps),
        **poses(level.state),
    }


def traced_params(params: EnvParams) -> EnvParams:
    """``params`` as float32 / int32 arrays, so levels whose JSON writes ``15`` or ``15.0`` for
    the same field share one compiled step."""
    return jax.tree.map(
        lambda x: np.asarray(x, np.int32 if isinstance(x, int | np.integer) else np.float32),
        params,
    )
