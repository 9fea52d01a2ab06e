"""Agent mode: the trained policy of a ``kinetix-ppo`` run plays the studio's level.

The run is opened as ``jaxlab eval`` opens it (``core.run.open_run``, the recipe's agent); the
level is padded into the run's training size (``levels.expand_level``) and each frame is one
jitted ``obs -> policy -> env step`` of the run's own env (its action and observation types), with
the policy's mode (deterministic) or a sample, and the value estimate ``V(obs)``.
"""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp

from jaxlab.core.errors import UserError
from jaxlab.envs.kinetix.actions import to_unified
from jaxlab.envs.kinetix.levels import Level, LevelFormatError, expand_level
from jaxlab.envs.kinetix.state import EnvState


class AgentPolicy:
    """The latest checkpoint of the ``kinetix-ppo`` run in ``run_dir``.

    Raises:
        UserError: ``run_dir`` holds no kinetix-ppo run with a checkpoint (the reason named).
    """

    def __init__(self, run_dir: str | Path):
        from jaxlab.core.run import open_run, read_run

        run_dir = Path(run_dir)
        try:
            read_run(run_dir, "kinetix-ppo")
            run = open_run(run_dir, recipe="kinetix-ppo")
        except (FileNotFoundError, ValueError) as e:
            raise UserError(
                f"--run-dir {run_dir}: no kinetix-ppo policy there ({e})",
                "train one first: jaxlab train kinetix-ppo --preset tiny --run-dir DIR",
            ) from None
        from jaxlab.recipes import kinetix_ppo

        self.run_dir, self.step_count = run_dir, run.step
        ag = kinetix_ppo.agent(run.cfg)
        self.static = ag.static
        self.env = getattr(ag.env, "unwrapped", ag.env)
        self.action_type = ag.env_cfg.action_type
        self.ppo = ag.ppo
        self.params, self.stats = jax.device_get((run.state.params, run.state.obs_stats))

    def fit(self, level: Level) -> Level:
        """``level`` padded into the policy's training size (a larger level is a ValueError)."""
        try:
            state = expand_level(level.state, level.static_params, self.static, source="level")
        except LevelFormatError as e:
            raise ValueError(f"the agent cannot play this level: {e}") from None
        return Level(state, self.static, level.params)

    @functools.cached_property
    def _step(self):
        env, ppo, sp, at = self.env, self.ppo, self.static, self.action_type

        def step(key, state: EnvState, env_params, net_params, stats, deterministic):
            obs = env.get_obs(state, env_params)
            pi, value = ppo.policy(net_params, stats, jax.tree.map(lambda x: x[None], obs))
            action = jax.lax.cond(deterministic, lambda: pi.mode(), lambda: pi.sample(seed=key))[0]
            _, state, reward, terminated, truncated, info = env.step_env(
                key, state, action, env_params
            )
            unified = to_unified(action, at, sp)
            out = (reward, terminated, truncated, info["solved"])
            return state, out, unified, jnp.reshape(value, ())

        return jax.jit(step)

    def step(self, key, state: EnvState, env_params, *, deterministic: bool = True):
        """One agent frame: ``(state, (reward, terminated, truncated, solved), action, value)``."""
        return self._step(key, state, env_params, self.params, self.stats, deterministic)
