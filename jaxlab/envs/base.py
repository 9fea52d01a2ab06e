"""The functional environment contract (gymnax 1.0 style, six-value step).

An environment is a Python object holding only static configuration; all dynamic data lives in
pytrees that flow through pure functions::

    obs, state = env.reset(key, params)
    obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)

``step`` auto-resets: when ``terminated | truncated`` the returned ``obs``/``state`` are those of a
fresh episode (from ``reset_env`` with a key split off ``key``, or from ``reset_state`` when given),
and ``info["final_observation"]`` holds the observation the finished episode ended on. Without a
reset ``info["final_observation"]`` equals ``obs``, so ``info`` has the same structure every step.
With ``auto_reset=False`` the env keeps stepping the finished episode (no reset at all).

``terminated`` means the episode reached a terminal state (do not bootstrap); ``truncated`` means it
was cut by a time limit while not terminal (bootstrap from ``final_observation``). They are never
both true. ``reward`` is a float32 scalar, the flags are bool scalars.

Subclasses implement ``default_params``, ``reset_env``, ``step_env``, ``get_obs``,
``action_space`` and ``observation_space``. Every method is pure, so ``jit``, ``vmap`` and
``lax.scan`` apply directly (the env object is closed over, never traced).
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, PRNGKeyArray

from jaxlab.envs.spaces import Space

TState = TypeVar("TState")
TParams = TypeVar("TParams")

StepResult = tuple[Any, Any, Float[Array, ""], Bool[Array, ""], Bool[Array, ""], dict[str, Any]]


def tree_select(pred: Bool[Array, ""], on_true, on_false):
    """Leaf-wise ``where(pred, on_true, on_false)`` for two pytrees of the same structure."""
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)


class Environment(Generic[TState, TParams]):
    """Base class of functional environments.

    Attributes:
        auto_reset: whether ``step`` starts a new episode when one ends (default True).
    """

    auto_reset: bool = True

    # ------------------------------------------------------------------ to implement
    @property
    def default_params(self) -> TParams:
        """The default traced parameters."""
        raise TypeError(f"{type(self).__name__} does not define default_params")

    #: ``True`` when ``get_obs(state, params)`` is the observation ``reset_env``/``step_env``
    #: return (a pure function of the state). ``step`` then observes the post-reset state once
    #: instead of observing both candidates and selecting; ``info["final_observation"]`` is still
    #: the pre-reset observation (and costs nothing when unused: jit drops it).
    obs_is_function_of_state: bool = False

    def reset_env(self, key: PRNGKeyArray, params: TParams) -> tuple[Any, TState]:
        """A fresh episode: ``(obs, state)``."""
        raise TypeError(f"{type(self).__name__} does not define reset_env")

    def step_env(
        self, key: PRNGKeyArray, state: TState, action: Any, params: TParams
    ) -> StepResult:
        """One transition without auto-reset: ``(obs, state, reward, terminated, truncated, info)``."""
        raise TypeError(f"{type(self).__name__} does not define step_env")

    def get_obs(self, state: TState, params: TParams) -> Any:
        """The observation of ``state``."""
        raise TypeError(f"{type(self).__name__} does not define get_obs")

    def action_space(self, params: TParams | None = None) -> Space:
        """The space of valid actions."""
        raise TypeError(f"{type(self).__name__} does not define action_space")

    def observation_space(self, params: TParams | None = None) -> Space:
        """The space observations live in."""
        raise TypeError(f"{type(self).__name__} does not define observation_space")

    @property
    def name(self) -> str:
        """A short name."""
        return type(self).__name__

    # ------------------------------------------------------------------ the contract
    def reset(self, key: PRNGKeyArray, params: TParams | None = None) -> tuple[Any, TState]:
        """Start an episode: ``(obs, state)``."""
        if params is None:
            params = self.default_params
        return self.reset_env(key, params)

    def step(
        self,
        key: PRNGKeyArray,
        state: TState,
        action: Any,
        params: TParams | None = None,
        *,
        reset_state: TState | None = None,
    ) -> StepResult:
        """One step with auto-reset.

        Args:
            key: PRNG key; split into a step key and a reset key.
            state: current state.
            action: an element of ``action_space(params)``.
            params: traced parameters (default ``default_params``).
            reset_state: optional state to start the next episode from instead of ``reset_env``
                (for level buffers in unsupervised environment design).

        Returns:
            ``(obs, state, reward, terminated, truncated, info)`` with
            ``info["final_observation"]`` the pre-reset observation.
        """
        if params is None:
            params = self.default_params
        key_step, key_reset = jax.random.split(key)
        obs_st, state_st, reward, terminated, truncated, info = self.step_env(
            key_step, state, action, params
        )
        info = dict(info)
        info["final_observation"] = obs_st
        if not self.auto_reset:
            return obs_st, state_st, reward, terminated, truncated, info
        done = jnp.logical_or(terminated, truncated)
        if self.obs_is_function_of_state:
            state_re = self.reset_env(key_reset, params)[1] if reset_state is None else reset_state
            state = tree_select(done, state_re, state_st)
            return self.get_obs(state, params), state, reward, terminated, truncated, info
        if reset_state is None:
            obs_re, state_re = self.reset_env(key_reset, params)
        else:
            obs_re, state_re = self.get_obs(reset_state, params), reset_state
        state = tree_select(done, state_re, state_st)
        obs = tree_select(done, obs_re, obs_st)
        return obs, state, reward, terminated, truncated, info
