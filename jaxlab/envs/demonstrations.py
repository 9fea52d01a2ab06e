"""Demonstration sequences from an oracle policy: what D-TSN and behaviour cloning learn from.

``oracle_demonstrations(key, env, params, policy, num_episodes=N, length=L)`` rolls ``N`` episodes
of at most ``L`` steps of ``policy(state, params) -> action`` through ``env.step_env`` (no
auto-reset), as one jit-able ``vmap`` of ``lax.scan``. Steps after the episode ended are masked.
The oracles of the shipped envs are ``maze_oracle_policy`` (BFS shortest path) and
``game24_oracle_policy`` (an action keeping the instance solvable, by exhaustive search).
``replay_demonstrations`` replays stored oracle solutions instead (Game of 24: one solution per
solvable instance is stored with the pool, so demonstrations cost no search).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from jaxlab.envs import game24, grid_maze


@struct.dataclass
class Demonstrations:
    """``N`` episodes of ``L`` steps (leading axes ``[N, L]``).

    Attributes:
        obs: observation before each step.
        action: the demonstrated action.
        reward: the reward of the step.
        next_obs: observation after the step.
        terminated: the step ended the episode in a terminal state.
        mask: the step is part of the episode (false after it ended).
        state: the env state before each step (for oracle values in tests and rendering).
    """

    obs: Any
    action: Int[Array, "N L"]
    reward: Float[Array, "N L"]
    next_obs: Any
    terminated: Bool[Array, "N L"]
    mask: Bool[Array, "N L"]
    state: Any

    def transitions(self) -> Demonstrations:
        """The same data with the episode axes flattened to one ``[N * L]`` axis."""
        return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), self)


def maze_oracle_policy(state: grid_maze.MazeState, params) -> Int[Array, ""]:
    """BFS shortest-path action of a grid-maze state."""
    dist = grid_maze.distances(state.walls, state.goal)
    return grid_maze.oracle_action(dist, state.walls, state.pos)


def game24_oracle_policy(state: game24.Game24State, params) -> Int[Array, ""]:
    """An action of a Game of 24 state whose successor is still solvable."""
    return game24.oracle_action(state.numbers, state.alive)


def rollout(env, params, policy: Callable[[Any, Any], Any], state, length: int) -> Demonstrations:
    """One episode of at most ``length`` steps of ``policy`` from ``state`` (fields ``[L]``)."""

    def body(carry, _):
        s, alive = carry
        a = policy(s, params)
        obs = env.get_obs(s, params)
        next_obs, s2, r, term, trunc, _ = env.step_env(jax.random.key(0), s, a, params)
        out = (obs, a, r, next_obs, term, alive, s)
        return (s2, alive & ~(term | trunc)), out

    _, (obs, act, rew, nobs, term, mask, states) = jax.lax.scan(
        body, (state, jnp.asarray(True)), None, length=length
    )
    return Demonstrations(
        obs=obs,
        action=act,
        reward=rew * mask,
        next_obs=nobs,
        terminated=term & mask,
        mask=mask,
        state=states,
    )


def oracle_demonstrations(
    key: PRNGKeyArray,
    env,
    params,
    policy: Callable[[Any, Any], Any],
    *,
    num_episodes: int,
    length: int,
    chunk: int | None = None,
) -> Demonstrations:
    """``num_episodes`` oracle episodes from fresh resets (fields ``[N, L, ...]``).

    ``chunk`` rolls the episodes ``chunk`` at a time (``lax.map``) instead of all at once, which
    bounds the memory of expensive oracles (Game of 24's exhaustive search).
    """
    keys = jax.random.split(key, num_episodes)
    states = jax.vmap(lambda k: env.reset_env(k, params)[1])(keys)
    one = lambda s: rollout(env, params, policy, s, length)  # noqa: E731
    if chunk is None:
        return jax.vmap(one)(states)
    return jax.lax.map(one, states, batch_size=chunk)


def replay_demonstrations(
    key: PRNGKeyArray,
    env,
    params,
    starts: Any,
    actions: Int[Array, "P L"],
    *,
    num_episodes: int,
) -> Demonstrations:
    """``num_episodes`` episodes drawn uniformly from a table of start states ``starts`` (leaves
    ``[P, ...]``) and the oracle's action sequences ``actions`` (fields ``[N, L, ...]``)."""
    idx = jax.random.randint(key, (num_episodes,), 0, actions.shape[0])

    def one(i):
        state = jax.tree.map(lambda x: x[i], starts)
        seq = actions[i]
        return rollout(
            env, params, lambda s, p: seq[jnp.minimum(s.t, seq.shape[0] - 1)], state, seq.shape[0]
        )

    return jax.vmap(one)(idx)
