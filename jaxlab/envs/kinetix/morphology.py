"""A Kinetix morphology as a reward-free body with continuous motors, for skill discovery.

Registered as ``"kinetix-morphology"``. One level file (default: the shipped ``l/knee_walker``, a
torso on two two-link legs with four motors; ``s/car_left`` is a car) is the body and its terrain;
the env is ``KinetixEnv`` with ``action_type="continuous"`` (``Box(-1, 1, (motors +
thrusters,))``) and ``observation_type="symbolic_flat"``, and:

* the level's goal and death roles (blue, red) are cleared to default, so an episode never
  terminates (the fixed-horizon, "dones off" setting of skill discovery); the reward is Kinetix's
  (zero without a blue shape) and skill methods ignore it;
* ``info["xy"]`` is the agent's x-y position: the mean position of the level's green (agent)
  shapes, or of all its movable (``inverse_mass > 0``) shapes when it has no green one, so the
  coverage metric of ``jaxlab.rl.skills.evaluate`` applies.
"""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxlab.core.config import ConfigError
from jaxlab.envs.kinetix.env import KinetixEnv, _override_params
from jaxlab.envs.kinetix.levels import load_level
from jaxlab.envs.kinetix.state import EnvState

LEVELS = Path(__file__).parent / "levels"
DEFAULT_LEVEL = LEVELS / "l" / "knee_walker.json"

_GREEN, _BLUE, _RED = 1, 2, 3


class KinetixMorphology(KinetixEnv):
    """``KinetixEnv`` with ``info["xy"]``: the mean position of the shapes flagged in
    ``agent_polygons [P]`` and ``agent_circles [C]`` (static boolean masks)."""

    def __init__(self, *args, agent_polygons: np.ndarray, agent_circles: np.ndarray, **kwargs):
        super().__init__(*args, **kwargs)
        self.agent_polygons = np.asarray(agent_polygons, bool)
        self.agent_circles = np.asarray(agent_circles, bool)
        if not (self.agent_polygons.any() or self.agent_circles.any()):
            raise ConfigError("level", "(no shapes)", "a level with a movable or green shape")

    def xy(self, state: EnvState) -> Float[Array, " 2"]:
        """Mean position of the agent's shapes."""
        pos = jnp.concatenate([state.sim.polygon.position, state.sim.circle.position], axis=0)
        mask = jnp.asarray(np.concatenate([self.agent_polygons, self.agent_circles]), jnp.float32)
        return (jnp.sum(pos * mask[:, None], axis=0) / jnp.sum(mask)).astype(jnp.float32)

    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, truncated, info = super().step_env(
            key, state, action, params
        )
        return obs, state, reward, terminated, truncated, {**info, "xy": self.xy(state)}


def agent_masks(state: EnvState) -> tuple[np.ndarray, np.ndarray]:
    """``(polygons [P], circles [C])``: the active green shapes, or (no green one) the active
    movable shapes."""
    sim = state.sim
    p_active, c_active = np.asarray(sim.polygon.active), np.asarray(sim.circle.active)
    p_green = p_active & (np.asarray(state.polygon_shape_roles) == _GREEN)
    c_green = c_active & (np.asarray(state.circle_shape_roles) == _GREEN)
    if p_green.any() or c_green.any():
        return p_green, c_green
    p_move = p_active & (np.asarray(sim.polygon.inverse_mass) > 0)
    c_move = c_active & (np.asarray(sim.circle.inverse_mass) > 0)
    return p_move, c_move


def clear_goal_roles(state: EnvState) -> EnvState:
    """The level with blue and red shapes turned into default (grey) ones."""

    def clear(roles):
        roles = jnp.asarray(roles)
        return jnp.where((roles == _BLUE) | (roles == _RED), 0, roles).astype(roles.dtype)

    return state.replace(
        polygon_shape_roles=clear(state.polygon_shape_roles),
        circle_shape_roles=clear(state.circle_shape_roles),
    )


def make_kinetix_morphology(
    *,
    level: str | Path | None = None,
    auto_reset: bool = True,
    max_timesteps: int | None = 200,
    frame_skip: int | None = None,
) -> tuple[KinetixMorphology, object]:
    """The registry factory: ``level`` is a path or a shipped level name such as
    ``"l/knee_walker"`` or ``"s/car_left"`` (default ``l/knee_walker``)."""
    path = DEFAULT_LEVEL if level is None else Path(level)
    if level is not None and not path.exists():
        path = LEVELS / f"{level}.json"
    if not path.exists():
        shipped = sorted(f"{p.parent.name}/{p.stem}" for p in LEVELS.glob("*/*.json"))
        raise ConfigError("level", level, f"a level file or one of {shipped}")
    loaded = load_level(path)
    static = loaded.static_params
    if frame_skip is not None:
        static = static.replace(frame_skip=frame_skip)
    params = _override_params(loaded.params, max_timesteps, None)
    polygons, circles = agent_masks(loaded.state)
    env = KinetixMorphology(
        static,
        action_type="continuous",
        observation_type="symbolic_flat",
        level=clear_goal_roles(loaded.state),
        auto_reset=auto_reset,
        params=params,
        agent_polygons=polygons,
        agent_circles=circles,
    )
    return env, params
