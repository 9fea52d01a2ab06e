"""The Kinetix environment (``kinetix/environment/env.py`` of the original) on ``jaxlab.physics``.

One env step applies the agent's action (``actions.py``) for ``frame_skip`` physics substeps.
After every substep the contact manifolds' ``active`` flags give the sparse reward:

    r_k = -1 if a green(1) shape touches a red(3) one, else +1 if a green touches a blue(2) one,
    else 0,

where "touches" means an active manifold between the two shapes (polygon-polygon: the first
contact point, as returned by the engine); the collision matrix is not consulted. A substep with
``r_k != 0`` ends the episode; the step's sparse reward is that of the **first** such substep
(the remaining substeps are still simulated). The episode also terminates when any state value is
NaN, and is truncated (when not terminated) once ``timestep >= max_timesteps``.

Dense shaping (paper; ``kappa = dense_reward_scale``): with ``d_t`` the sum of centre distances
over green-blue pairs after the step (taken at the first terminal substep, else the last),

    r_t += -kappa (d_t - d_{t-1}),

skipped on the first step of an episode (``last_distance == -1``) or when ``kappa == 0``;
non-finite values count as 0. ``info`` holds ``GoalR``/``solved`` (the step ended on a goal
contact) and ``distance`` (``d_t``).

The episode distribution is a fixed level (``level=``, a single ``EnvState``; a stacked batch is
sampled uniformly) or any ``reset_fn(key) -> EnvState`` (the original's interface, e.g. a level
generator).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, PRNGKeyArray

from jaxlab.envs.base import Environment, StepResult
from jaxlab.envs.kinetix import actions as act
from jaxlab.envs.kinetix import observations as obs_lib
from jaxlab.envs.kinetix.levels import (
    Level,
    demo_level,
    load_level,
    load_levels,
    make_reset_fn,
    static_sizes_of,
)
from jaxlab.envs.kinetix.state import EnvParams, EnvState, StaticEnvParams, global_roles
from jaxlab.envs.spaces import Space
from jaxlab.physics import pair_indices
from jaxlab.physics import step as physics_step


@functools.lru_cache(maxsize=64)
def _pairs(static_params: StaticEnvParams) -> tuple[np.ndarray, np.ndarray]:
    """Global shape indices (a, b) of every contact pair, in the order (rr, cr, cc) of the
    manifolds the physics step returns."""
    P = static_params.num_polygons
    cc, cr, rr = pair_indices(static_params.sim)
    a = np.concatenate([rr[:, 0], cr[:, 0] + P, cc[:, 0] + P]).astype(np.int32)
    b = np.concatenate([rr[:, 1], cr[:, 1], cc[:, 1] + P]).astype(np.int32)
    return a, b


def reward_terms(
    state: EnvState, manifolds, static_params: StaticEnvParams
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """Sparse reward of one substep and the green-blue distance ``d`` (module docstring).

    Args:
        state: the state after the substep (positions and roles).
        manifolds: ``(rr, cr, cc)`` as returned by the physics step.
        static_params: sizes.

    Returns:
        ``(r, d)``: ``r`` in {-1, 0, 1}; ``d = sum over green-blue pairs of |x_a - x_b|``.
    """
    pair_a, pair_b = _pairs(static_params)
    roles = global_roles(state)
    prod = roles[pair_a] * roles[pair_b]
    win, lose = prod == 2, prod == 3
    active = jnp.concatenate([m.active for m in manifolds])
    reward = jnp.where(jnp.any(lose & active), -1.0, jnp.where(jnp.any(win & active), 1.0, 0.0))
    pos = jnp.concatenate([state.sim.polygon.position, state.sim.circle.position])
    dist = jnp.linalg.norm(pos[pair_a] - pos[pair_b], axis=-1)
    return reward.astype(jnp.float32), jnp.sum(win * dist)


@functools.lru_cache(maxsize=64)
def _substep_fn(static_params: StaticEnvParams):
    """The frame-skip scan body for ``static_params``: one shared function object per size, so
    ``lax.scan`` reuses its traced body (and eager calls their compiled executable)."""

    def substep(carry, _):
        state, engine_action, sim_params = carry
        sim, manifolds = physics_step(state.sim, sim_params, static_params.sim, engine_action)
        state = state.replace(sim=sim)
        return (state, engine_action, sim_params), reward_terms(state, manifolds, static_params)

    return substep


def _float_has_nan(tree) -> Bool[Array, ""]:
    leaves = [
        jnp.any(jnp.isnan(x))
        for x in jax.tree.leaves(tree)
        if jnp.issubdtype(x.dtype, jnp.floating)
    ]
    return jnp.any(jnp.stack(leaves)) if leaves else jnp.asarray(False)


def _fingerprint(tree) -> tuple:
    """A hashable summary of a pytree's values (structure, dtypes, shapes and a digest)."""
    leaves, treedef = jax.tree.flatten(tree)
    h = hashlib.sha1()
    meta = []
    for x in leaves:
        a = np.asarray(x)
        meta.append((a.dtype.str, a.shape))
        h.update(np.ascontiguousarray(a).tobytes())
    return (str(treedef), tuple(meta), h.hexdigest())


class KinetixEnv(Environment):
    """Kinetix: reach a blue shape with a green one, avoid red ones.

    Args:
        static_params: sizes and other shape-fixing settings.
        action_type: ``"multi_discrete"`` (default), ``"continuous"`` or ``"discrete"``.
        observation_type: ``"symbolic_entity"`` (default), ``"symbolic_flat"``,
            ``"symbolic_flat_padded"`` or ``"pixels"``.
        reset_fn: ``reset_fn(key) -> EnvState`` drawing each episode's initial state.
        level: alternatively a fixed initial ``EnvState`` (or a stacked batch of them, drawn
            uniformly); exactly one of ``reset_fn`` and ``level``.
        auto_reset: start a new episode when one ends.
        params: the env's ``default_params`` (default ``EnvParams()``).
    """

    #: Observations are ``get_obs(state)``: auto-reset observes the chosen state once.
    obs_is_function_of_state = True

    def __init__(
        self,
        static_params: StaticEnvParams,
        *,
        action_type: str = "multi_discrete",
        observation_type: str = "symbolic_entity",
        reset_fn: Callable[[PRNGKeyArray], EnvState] | None = None,
        level: EnvState | None = None,
        auto_reset: bool = True,
        params: EnvParams | None = None,
    ):
        if not isinstance(static_params, StaticEnvParams):
            raise ValueError(f"static_params={static_params!r}; expected a StaticEnvParams")
        if (reset_fn is None) == (level is None):
            raise ValueError("KinetixEnv: pass exactly one of reset_fn= and level=")
        if reset_fn is not None and not callable(reset_fn):
            raise ValueError(
                f"reset_fn={reset_fn!r}; expected a callable reset_fn(key) -> EnvState"
            )
        self.static_params = static_params
        self.action_type = act.check_action_type(action_type)
        self.observation_type = obs_lib.check_observation_type(observation_type)
        self.auto_reset = bool(auto_reset)
        self._params = EnvParams() if params is None else params
        if level is not None:
            want = (
                static_params.num_polygons,
                static_params.num_circles,
                static_params.num_joints,
                static_params.num_thrusters,
            )
            if static_sizes_of(level) != want:
                raise ValueError(
                    f"level has (polygons, circles, joints, thrusters) = {static_sizes_of(level)}; "
                    f"expected {want} from static_params (pad it with levels.expand_level)"
                )
            if level.timestep.ndim == 1:
                reset_fn = make_reset_fn(level)
                level = None
        self.level = level
        self.reset_fn = reset_fn
        self._obs_fn = obs_lib.make_observation_fn(self.observation_type, static_params)
        self._key = (
            static_params,
            self.action_type,
            self.observation_type,
            self.auto_reset,
            _fingerprint(self._params),
            ("reset_fn", reset_fn) if reset_fn is not None else ("level", _fingerprint(level)),
        )

    def __eq__(self, other) -> bool:
        """Envs with the same configuration, default params and episode distribution (same
        ``reset_fn`` object, or a level with identical arrays) are equal, so ``jax.jit`` with the
        env as a static argument reuses compiled code across equal env objects."""
        return isinstance(other, KinetixEnv) and other._key == self._key

    def __hash__(self) -> int:
        return hash(self._key)

    # ------------------------------------------------------------------ contract
    @property
    def default_params(self) -> EnvParams:
        return self._params

    @property
    def name(self) -> str:
        sp = self.static_params
        return (
            f"Kinetix(P={sp.num_polygons},C={sp.num_circles},J={sp.num_joints},"
            f"T={sp.num_thrusters},{self.action_type},{self.observation_type})"
        )

    def get_obs(self, state: EnvState, params: EnvParams | None = None):
        return self._obs_fn(state, self._params if params is None else params)

    def reset_env(self, key: PRNGKeyArray, params: EnvParams):
        state = self.level if self.reset_fn is None else self.reset_fn(key)
        return self.get_obs(state, params), state

    def action_space(self, params: EnvParams | None = None) -> Space:
        return act.action_space(self.action_type, self.static_params)

    def observation_space(self, params: EnvParams | None = None) -> Space:
        return obs_lib.observation_space(self.observation_type, self.static_params)

    def noop_action(self):
        """The action that drives nothing (``actions.noop_action``)."""
        return act.noop_action(self.action_type, self.static_params)

    # ------------------------------------------------------------------ dynamics
    def step_env(self, key: PRNGKeyArray, state: EnvState, action, params: EnvParams) -> StepResult:
        del key
        sp = self.static_params
        engine_action = act.process_action(action, self.action_type, state, sp)
        carry = (state, engine_action, params.sim)
        (state, _, _), (rewards, dists) = jax.lax.scan(
            _substep_fn(sp), carry, None, length=sp.frame_skip
        )
        state = state.replace(timestep=state.timestep + 1)
        dones = rewards != 0
        has_done = jnp.any(dones)
        first = jnp.argmax(dones)
        reward = jnp.where(has_done, rewards[first], jnp.sum(rewards))
        distance = jnp.where(has_done, dists[first], dists[-1])
        terminated = has_done | _float_has_nan(state)
        time_up = state.timestep >= params.max_timesteps
        truncated = time_up & jnp.logical_not(terminated)
        done = terminated | time_up
        scale = params.dense_reward_scale
        dense = jnp.nan_to_num(
            -(distance - state.last_distance) * scale, nan=0.0, posinf=0.0, neginf=0.0
        )
        skip = (state.last_distance == -1) | (scale == 0.0)
        reward = (reward + jnp.where(skip, 0.0, dense)).astype(jnp.float32)
        state = state.replace(last_distance=jnp.where(done, -1.0, distance).astype(jnp.float32))
        goal = has_done & (rewards[first] > 0)
        info = {"GoalR": goal, "solved": goal, "distance": distance}
        return self.get_obs(state, params), state, reward, terminated, truncated, info


# ---------------------------------------------------------------------------------------------
# Registry factories


def _override_params(params: EnvParams, max_timesteps, dense_reward_scale) -> EnvParams:
    if max_timesteps is not None:
        if (
            isinstance(max_timesteps, bool)
            or not isinstance(max_timesteps, int)
            or max_timesteps < 1
        ):
            raise ValueError(f"max_timesteps={max_timesteps!r}; expected an int >= 1")
        params = params.replace(max_timesteps=max_timesteps)
    if dense_reward_scale is not None:
        if isinstance(dense_reward_scale, bool) or not isinstance(dense_reward_scale, int | float):
            raise ValueError(f"dense_reward_scale={dense_reward_scale!r}; expected a number")
        params = params.replace(dense_reward_scale=dense_reward_scale)
    return params


def make_kinetix(
    size: str,
    *,
    level: str | None = None,
    levels: Sequence[str] | None = None,
    reset_fn: Callable[[PRNGKeyArray], EnvState] | None = None,
    action_type: str = "multi_discrete",
    observation_type: str = "symbolic_entity",
    auto_reset: bool = True,
    max_timesteps: int | None = None,
    dense_reward_scale: float | None = None,
    frame_skip: int | None = None,
) -> tuple[KinetixEnv, EnvParams]:
    """Kinetix at preset ``size`` ("s", "m" or "l"); see ``registry`` for the options.

    Level files are padded into the preset sizes; their ``env_params`` become the env's params.
    Without ``level``/``levels``/``reset_fn`` the episode starts from ``levels.demo_level``.
    """
    options = (("level", level), ("levels", levels), ("reset_fn", reset_fn))
    given = [n for n, v in options if v is not None]
    if len(given) > 1:
        raise ValueError(f"pass at most one of level=, levels=, reset_fn=; got {given}")
    changes = {} if frame_skip is None else {"frame_skip": frame_skip}
    static = StaticEnvParams.from_size(size, **changes)
    params = EnvParams()
    fixed = None
    if level is not None:
        loaded: Level = load_level(level, static)
        fixed, params = loaded.state, loaded.params
    elif levels is not None:
        if isinstance(levels, str):
            raise ValueError("levels= must be a list of paths; use level= for one file")
        batch, _, params = load_levels(list(levels), static)
        reset_fn = make_reset_fn(batch)
    elif reset_fn is None:
        fixed = demo_level(static)
    params = _override_params(params, max_timesteps, dense_reward_scale)
    env = KinetixEnv(
        static,
        action_type=action_type,
        observation_type=observation_type,
        reset_fn=reset_fn,
        level=fixed,
        auto_reset=auto_reset,
        params=params,
    )
    return env, params


def make_kinetix_s(**options):
    """``make_kinetix("s", **options)``."""
    return make_kinetix("s", **options)


def make_kinetix_m(**options):
    """``make_kinetix("m", **options)``."""
    return make_kinetix("m", **options)


def make_kinetix_l(**options):
    """``make_kinetix("l", **options)``."""
    return make_kinetix("l", **options)


def make_kinetix_level(
    *,
    level: str | None = None,
    action_type: str = "multi_discrete",
    observation_type: str = "symbolic_entity",
    auto_reset: bool = True,
    max_timesteps: int | None = None,
    dense_reward_scale: float | None = None,
    frame_skip: int | None = None,
) -> tuple[KinetixEnv, EnvParams]:
    """One level file at the sizes stored in it (``level=PATH`` is required)."""
    if level is None:
        raise ValueError('make("kinetix-level") needs level=PATH (a Kinetix level JSON file)')
    loaded = load_level(level)
    static = loaded.static_params
    if frame_skip is not None:
        static = static.replace(frame_skip=frame_skip)
    params = _override_params(loaded.params, max_timesteps, dense_reward_scale)
    env = KinetixEnv(
        static,
        action_type=action_type,
        observation_type=observation_type,
        level=loaded.state,
        auto_reset=auto_reset,
        params=params,
    )
    return env, params
