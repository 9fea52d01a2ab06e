"""Evaluating a policy on a set of levels: solve rate, return and episode length per level.

``evaluate_levels`` plays ``num_attempts`` independent episodes (different keys) from every level
of a stacked batch, all in one ``vmap`` over ``levels x attempts`` and one ``lax.scan`` over
time, and reports for each level (the original's ``kinetix/util/eval_utils.py`` measure):

    solve_rate = (1 / K) sum_k [episode k ended on the goal],
    return     = (1 / K) sum_k sum_{t < T_k} r_t,      length = (1 / K) sum_k T_k,

counting only the first episode of each attempt (an attempt that never ends within
``max_steps`` counts as unsolved with length ``max_steps``).

Level sets are given as text (``resolve_level_files``, from ``jaxlab.envs.kinetix.level_sets``).
``format_table`` prints the per-level table and a summary.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.envs.base import Environment
from jaxlab.envs.kinetix.level_sets import LIBRARY, level_name, resolve_level_files

__all__ = [
    "LIBRARY",
    "LevelResults",
    "evaluate_levels",
    "format_table",
    "level_name",
    "resolve_level_files",
    "summary",
]


@struct.dataclass
class LevelResults:
    """Per-level evaluation results ([L] arrays), the attempts they average over, and each
    attempt's return (``[L, A]``; None when built by hand)."""

    solve_rate: Float[Array, " l"]
    mean_return: Float[Array, " l"]
    mean_length: Float[Array, " l"]
    num_attempts: int = struct.field(pytree_node=False)
    attempt_returns: Float[Array, "l a"] | None = None


def evaluate_levels(
    key: PRNGKeyArray,
    policy_fn: Callable[[PRNGKeyArray, Any], Any],
    env: Environment,
    env_params: Any,
    levels: Any,
    *,
    num_attempts: int,
    max_steps: int,
    record: int = 0,
) -> tuple[LevelResults, Any]:
    """Plays ``num_attempts`` episodes from each of the stacked ``levels`` [L] (module docstring).

    Episodes are stepped with ``env.step_env`` (no auto-reset): only the first episode of each
    attempt counts, and a finished attempt's state is frozen from then on.

    Args:
        key: PRNG key (attempt ``k`` of level ``l`` gets its own key).
        policy_fn: ``policy_fn(key, obs [B]) -> actions [B]`` for a batch of observations.
        env: the env (its ``get_obs`` must accept a level as a state).
        env_params: env parameters.
        levels: stacked level states with leading axis L.
        num_attempts: episodes per level.
        max_steps: time steps simulated (use ``env_params.max_timesteps``).
        record: also return the states of the first attempt on the first ``record`` levels at
            every step (for rendering), frozen once the episode ends.

    Returns:
        ``(LevelResults with [L] arrays, states [max_steps, record] or None)``.
    """
    n_levels = jax.tree.leaves(levels)[0].shape[0]
    batch = n_levels * num_attempts
    record = min(record, n_levels)
    shown_idx = jnp.arange(record) * num_attempts
    starts = jax.tree.map(lambda x: jnp.repeat(x, num_attempts, axis=0), levels)
    obs = jax.vmap(lambda s: env.get_obs(s, env_params))(starts)

    def step(carry, k):
        state, obs, ended, ret, length, solved = carry
        k_act, k_env = jax.random.split(k)
        action = policy_fn(k_act, obs)
        keys = jax.random.split(k_env, batch)
        obs2, state2, reward, term, trunc, info = jax.vmap(
            lambda kk, s, a: env.step_env(kk, s, a, env_params)
        )(keys, state, action)
        live = jnp.logical_not(ended)
        done = term | trunc
        ret = ret + jnp.where(live, reward, 0.0)
        length = length + live.astype(jnp.int32)
        solved = solved | (live & done & jnp.asarray(info["solved"], bool))
        freeze = lambda new, old: jnp.where(ended.reshape((-1,) + (1,) * (new.ndim - 1)), old, new)
        state2 = jax.tree.map(freeze, state2, state)
        obs2 = jax.tree.map(freeze, obs2, obs)
        shown = jax.tree.map(lambda x: x[shown_idx], state2) if record else None
        return (state2, obs2, ended | done, ret, length, solved), shown

    zeros_f = jnp.zeros(batch, jnp.float32)
    carry = (starts, obs, jnp.zeros(batch, bool), zeros_f, jnp.zeros(batch, jnp.int32))
    carry = carry + (jnp.zeros(batch, bool),)
    (_, _, _, ret, length, solved), shown = jax.lax.scan(
        step, carry, jax.random.split(key, max_steps)
    )
    shape = (n_levels, num_attempts)
    results = LevelResults(
        solve_rate=jnp.mean(solved.reshape(shape).astype(jnp.float32), axis=1),
        mean_return=jnp.mean(ret.reshape(shape), axis=1),
        mean_length=jnp.mean(length.reshape(shape).astype(jnp.float32), axis=1),
        num_attempts=num_attempts,
        attempt_returns=ret.reshape(shape),
    )
    return results, shown


def summary(results: LevelResults) -> dict[str, float]:
    """Means over levels, and the fraction of levels solved in at least half the attempts."""
    sr = np.asarray(results.solve_rate)
    return {
        "solve_rate": float(sr.mean()) if sr.size else math.nan,
        "return": float(np.mean(np.asarray(results.mean_return))) if sr.size else math.nan,
        "length": float(np.mean(np.asarray(results.mean_length))) if sr.size else math.nan,
        "levels_solved": float(np.mean(sr >= 0.5)) if sr.size else math.nan,
        "num_levels": float(sr.size),
    }


def format_table(names: Sequence[str], results: LevelResults, *, extra: dict | None = None) -> str:
    """The per-level table (name, solve rate, return, length) and a summary line.

    ``extra`` maps a column title to [L] values printed after the standard columns (e.g. the
    solve rate of a random policy).
    """
    extra = extra or {}
    width = max([len("level")] + [len(n) for n in names])
    head = f"{'level':<{width}}  solve   return   length"
    head += "".join(f"  {t:>9}" for t in extra)
    lines = [head, "-" * len(head)]
    sr = np.asarray(results.solve_rate)
    ret = np.asarray(results.mean_return)
    ln = np.asarray(results.mean_length)
    for i, n in enumerate(names):
        row = f"{n:<{width}}  {sr[i]:5.2f}  {ret[i]:7.3f}  {ln[i]:7.1f}"
        row += "".join(f"  {float(np.asarray(v)[i]):9.2f}" for v in extra.values())
        lines.append(row)
    s = summary(results)
    lines.append("-" * len(head))
    lines.append(
        f"{'mean':<{width}}  {s['solve_rate']:5.2f}  {s['return']:7.3f}  {s['length']:7.1f}"
        + "".join(f"  {float(np.mean(np.asarray(v))):9.2f}" for v in extra.values())
    )
    lines.append(
        f"{len(names)} levels x {results.num_attempts} attempts; "
        f"{int(round(s['levels_solved'] * len(names)))} solved in >= half the attempts"
    )
    return "\n".join(lines)
