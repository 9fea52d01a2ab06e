"""Evaluation of discovered skills: state coverage, zero-shot goal reaching, and a picture of the
skills (the metrics of Zheng et al. 2025, "Can a MISL Fly?").

* **Coverage**: ``num_skills`` rollouts of ``steps`` env steps, each with one skill from the prior
  (``z`` uniform on the unit sphere) and the deterministic policy ``a = tanh(mu([s, z]))``; the
  count of distinct cells ``floor(xy / cell)`` visited (``info["xy"]`` after every step). The same
  count for a uniformly random policy and for the zero policy is the baseline.
* **Directions**: of the same rollouts, the number of the 8 compass sectors (45 degrees each)
  that hold the net displacement ``xy_T - xy_1`` of at least one rollout that moved more than one
  cell: whether the skills move the body in several distinct directions rather than far along one
  (a car's coverage grows along x only). Same baselines.
* **Zero-shot goal reaching**: for a goal ``g`` (an observation: the point envs observe ``xy``),
  the skill at every step is ``z = (phi(g) - phi(s)) / ||phi(g) - phi(s)||``; a rollout succeeds
  when it comes within ``goal_radius`` of ``g`` at some step. Goals are drawn uniformly over the
  arena (``point-mass-2d``) or its free cells (``point-maze``), with their own key: the methods
  never see a goal while training.
* ``plot_skill_trajectories``: the rollouts' ``xy`` coloured by the direction of their skill
  (hue = angle of ``(z_1, z_2)``), as a PNG via ``jaxlab.media``.

``make_evaluate(parts, cfg, steps)(state, key)`` is pure and jit-able (vmap it over a seed axis).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from jaxlab import media
from jaxlab.core.config import ConfigError
from jaxlab.envs.point_mass_2d import PointMass2D
from jaxlab.envs.point_maze import PointMaze
from jaxlab.rl.skills.training import SkillParts, SkillState, policy_input, sample_skills

#: ``act(key, obs [o], skill [d]) -> action [a]``.
ActFn = Callable[[PRNGKeyArray, Array, Array], Array]


@dataclasses.dataclass(frozen=True)
class SkillEvalConfig:
    """Attributes: rollouts of random skills, the coverage cell size, the number of held-out
    goals and the success radius (the rollouts' length is the episode's, an argument of
    :func:`make_evaluate`)."""

    num_skills: int = 64
    cell: float = 1.0
    num_goals: int = 50
    goal_radius: float = 0.5

    def __post_init__(self):
        for f in ("num_skills", "num_goals"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f, v, "an int >= 1")
        for f in ("cell", "goal_radius"):
            if not getattr(self, f) > 0:
                raise ConfigError(f, getattr(self, f), "a float > 0")


def count_cells(xy: Float[Array, "*b 2"], cell: float) -> Int[Array, ""]:
    """Number of distinct cells ``floor(xy / cell)`` among the points (jit-able: sort the cell
    ids and count the changes)."""
    ij = jnp.floor(xy.reshape(-1, 2) / cell).astype(jnp.int32)
    ij = jnp.clip(ij, -(2**14), 2**14 - 1) + 2**14
    ids = jnp.sort(ij[:, 0] * 2**15 + ij[:, 1])
    return 1 + jnp.sum(ids[1:] != ids[:-1])


def count_directions(xy: Float[Array, "n t 2"], min_distance: float) -> Int[Array, ""]:
    """Number of 45-degree compass sectors holding the net displacement ``xy[:, -1] - xy[:, 0]``
    of at least one rollout that moved more than ``min_distance``."""
    d = xy[:, -1] - xy[:, 0]
    moved = jnp.linalg.norm(d, axis=-1) > min_distance
    sector = jnp.floor((jnp.arctan2(d[:, 1], d[:, 0]) + jnp.pi) / (jnp.pi / 4)).astype(jnp.int32)
    sector = jnp.clip(sector, 0, 7)
    hit = jnp.zeros((8,), bool).at[sector].max(moved)
    return jnp.sum(hit)


def rollout_xy(
    env: Any,
    env_params: Any,
    act: ActFn,
    skills: Float[Array, "n d"],
    steps: int,
    key: PRNGKeyArray,
) -> Float[Array, "n t 2"]:
    """``info["xy"]`` after each of ``steps`` steps of ``n`` rollouts, rollout ``i`` acting with
    ``act(key, obs, skills[i])`` from a fresh reset."""

    def one(k, z):
        k_reset, k_steps = jax.random.split(k)
        obs, s = env.reset(k_reset, env_params)

        def body(carry, k):
            obs, s = carry
            k_act, k_step = jax.random.split(k)
            a = act(k_act, obs.reshape(-1), z)
            obs, s, _, _, _, info = env.step(k_step, s, a, env_params)
            return (obs, s), info["xy"]

        _, xy = jax.lax.scan(body, (obs, s), jax.random.split(k_steps, steps))
        return xy

    return jax.vmap(one)(jax.random.split(key, skills.shape[0]), skills)


def skill_policy(parts: SkillParts, state: SkillState) -> ActFn:
    """The deterministic skill-conditioned policy ``a = tanh(mu([s, z]))``."""

    def act(key, obs, skill):
        del key
        pi = parts.nets.actor.apply(state.actor, policy_input(obs, skill)[None])
        return jnp.tanh(pi.distribution.mean()[0])

    return act


def random_policy(act_dim: int) -> ActFn:
    """Uniform actions in ``[-1, 1]^a`` (ignores the skill)."""

    def act(key, obs, skill):
        del obs, skill
        return jax.random.uniform(key, (act_dim,), minval=-1.0, maxval=1.0)

    return act


def zero_policy(act_dim: int) -> ActFn:
    """The zero action (the point mass stays at its reset position)."""

    def act(key, obs, skill):
        del key, obs, skill
        return jnp.zeros((act_dim,))

    return act


def sample_goals(env: Any, key: PRNGKeyArray, n: int) -> Float[Array, "n 2"]:
    """``n`` goals uniform over the free cells of a ``PointMaze`` or over a ``PointMass2D``'s
    arena."""
    if isinstance(env, PointMaze):
        free = np.argwhere(env.free)  # (row, col)
        k_cell, k_off = jax.random.split(key)
        idx = jax.random.randint(k_cell, (n,), 0, len(free))
        off = jax.random.uniform(k_off, (n, 2), minval=0.05, maxval=0.95)
        return jnp.asarray(free[:, ::-1], jnp.float32)[idx] + off
    if isinstance(env, PointMass2D):
        return jax.random.uniform(key, (n, 2), minval=-env.size, maxval=env.size)
    raise ConfigError("env", type(env).__name__, "a point-mass-2d or point-maze env for goals")


def check_goals(env: Any, goals: Any) -> np.ndarray:
    """``goals`` (array-like ``[n, 2]``) as a float array inside ``env``'s arena (free maze cells), else
    ``ConfigError('goals', ...)``."""
    g = np.asarray(goals, np.float32)
    if g.ndim != 2 or g.shape[1] != 2 or not np.all(np.isfinite(g)):
        raise ConfigError("goals", goals, "a [n, 2] array of finite (x, y)")
    if isinstance(env, PointMaze):
        inside = np.asarray(jax.vmap(env.is_free)(jnp.asarray(g)))
    elif isinstance(env, PointMass2D):
        inside = np.all(np.abs(g) <= env.size, axis=-1)
    else:
        raise ConfigError("env", type(env).__name__, "a point-mass-2d or point-maze env for goals")
    if not inside.all():
        raise ConfigError("goals", g[~inside][0].tolist(), "goals inside the arena (free cells)")
    return g


def goal_reaching(
    parts: SkillParts,
    state: SkillState,
    goals: Float[Array, "g 2"],
    steps: int,
    radius: float,
    key: PRNGKeyArray,
) -> tuple[Float[Array, " g"], Float[Array, " g"]]:
    """``(success [g], min distance [g])`` of zero-shot goal reaching with
    ``z = (phi(g) - phi(s)) / ||phi(g) - phi(s)||`` recomputed at every step."""
    env, env_params, phi = parts.env, parts.env_params, parts.nets.phi
    if parts.nets.obs_dim != 2:
        raise ConfigError(
            "env", parts.off_policy.env, "an env whose observation is its x-y position"
        )
    act = skill_policy(parts, state)

    def one(k, g):
        k_reset, k_steps = jax.random.split(k)
        obs, s = env.reset(k_reset, env_params)
        phi_g = phi.apply(state.phi, g)

        def body(carry, k):
            obs, s = carry
            diff = phi_g - phi.apply(state.phi, obs)
            z = diff / jnp.maximum(jnp.linalg.norm(diff), 1e-6)
            obs, s, _, _, _, info = env.step(k, s, act(k, obs, z), env_params)
            return (obs, s), jnp.linalg.norm(info["xy"] - g)

        _, dist = jax.lax.scan(body, (obs, s), jax.random.split(k_steps, steps))
        return (dist.min() < radius).astype(jnp.float32), dist.min()

    return jax.vmap(one)(jax.random.split(key, goals.shape[0]), goals)


def make_evaluate(
    parts: SkillParts, cfg: SkillEvalConfig, steps: int
) -> Callable[[SkillState, PRNGKeyArray], dict[str, Array]]:
    """``evaluate(state, key) -> {coverage, coverage_random, coverage_zero, directions,
    directions_random, directions_zero, goal_success, goal_distance}`` (module docstring) of
    rollouts of ``steps`` env steps; pure, jit-able, vmappable over a seed axis."""
    env, env_params = parts.env, parts.env_params
    d, a = parts.cfg.skill_dim, parts.nets.act_dim
    goal_capable = parts.nets.obs_dim == 2 and isinstance(env, PointMass2D)

    def evaluate(state: SkillState, key: PRNGKeyArray) -> dict[str, Array]:
        k_z, k_roll, k_rand, k_zero, k_goal, k_reach = jax.random.split(key, 6)
        skills = sample_skills(k_z, cfg.num_skills, d)
        out = {}
        for suffix, act, k in (
            ("", skill_policy(parts, state), k_roll),
            ("_random", random_policy(a), k_rand),
            ("_zero", zero_policy(a), k_zero),
        ):
            xy = rollout_xy(env, env_params, act, skills, steps, k)
            out["coverage" + suffix] = count_cells(xy, cfg.cell).astype(jnp.float32)
            out["directions" + suffix] = count_directions(xy, cfg.cell).astype(jnp.float32)
        if goal_capable:
            goals = sample_goals(env, k_goal, cfg.num_goals)
            success, dist = goal_reaching(parts, state, goals, steps, cfg.goal_radius, k_reach)
            out["goal_success"] = success.mean()
            out["goal_distance"] = dist.mean()
        return out

    return evaluate


def direction_colors(skills: Float[ArrayLike, "n d"]) -> np.ndarray:
    """RGB in ``[0, 1]`` per skill: a colour wheel over the angle of ``(z_1, z_2)`` (``d = 1``:
    the sign)."""
    z = np.asarray(skills, np.float64)
    angle = np.arctan2(z[:, 1], z[:, 0]) if z.shape[1] > 1 else np.where(z[:, 0] > 0, 0.0, np.pi)
    phase = angle[:, None] - np.array([0.0, 2.0, 4.0]) * np.pi / 3.0
    return 0.5 + 0.5 * np.cos(phase) * 0.9


def plot_skill_trajectories(
    path: str | Path,
    xy: Float[ArrayLike, "n t 2"],
    skills: Float[ArrayLike, "n d"],
    *,
    env: Any = None,
    title: str | None = None,
) -> Path:
    """PNG of the ``n`` rollouts' positions, each coloured by its skill's direction; a maze's
    walls are drawn underneath (light red)."""
    xy = np.asarray(xy)
    if xy.ndim != 3 or xy.shape[-1] != 2 or xy.shape[0] != np.asarray(skills).shape[0]:
        raise ValueError(f"xy: shape {xy.shape}, expected [n, t, 2] with n = len(skills)")
    colors = np.repeat(direction_colors(skills), xy.shape[1], axis=0)
    walls, extent = None, None
    if isinstance(env, PointMaze):
        u = (np.arange(8) + 0.5) / 8
        cells = np.argwhere(~env.free)[:, ::-1].astype(np.float64)
        walls = (cells[:, None, None, :] + np.stack(np.meshgrid(u, u), -1)[None]).reshape(-1, 2)
    elif isinstance(env, PointMass2D):
        extent = env.size
    return media.plot_scatter(
        path,
        xy.reshape(-1, 2),
        colors=colors,
        reference=walls,
        extent=extent,
        xlabel="x",
        ylabel="y",
        title=title,
    )
