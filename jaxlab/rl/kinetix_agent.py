"""The Kinetix general agent's pieces: the env of a :class:`KinetixEnvConfig` on its training
levels, the actor-critic network, the level curriculum and PPO, and the PPO update placed on a
mesh (envs and the SFL buffer split over the ``data`` axis with ``shard_map``; each device rolls
out its share and the gradients are averaged, :mod:`jaxlab.rl.ppo`).

``make_agent(...)`` is what the ``kinetix-ppo`` recipe, its evaluation, the benchmarks and the
tests share; ``ppo.train(agent.ppo, key, n)`` is a whole run as one pure function.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
from jax.sharding import NamedSharding, PartitionSpec

from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig
from jaxlab.core.sharding import shard_map
from jaxlab.envs.kinetix import KinetixEnv, StaticEnvParams
from jaxlab.envs.kinetix import level_sets as ls
from jaxlab.rl import ppo as ppo_lib
from jaxlab.rl.action_heads import head_for_space
from jaxlab.rl.networks import ActorCritic, NetworkConfig
from jaxlab.rl.ppo import PPO, PPOConfig, PPOState
from jaxlab.rl.ued import CurriculumConfig, make_curriculum

#: PPOState fields with one entry per env (and the SFL buffer): split over the ``data`` axis
PER_ENV_FIELDS: tuple[str, ...] = ("env_state", "obs", "levels", "curriculum")


@dataclasses.dataclass(frozen=True)
class KinetixAgent:
    """Env, network and PPO of one Kinetix run (all static; the PPO functions are pure)."""

    env_cfg: ls.KinetixEnvConfig
    network_cfg: NetworkConfig
    ppo_cfg: PPOConfig
    optim_cfg: OptimConfig
    curriculum_cfg: CurriculumConfig
    num_updates: int
    levels: ls.TrainLevels
    env: KinetixEnv
    network: ActorCritic
    ppo: PPO
    mutate: Callable | None

    @property
    def static(self) -> StaticEnvParams:
        return self.levels.static

    @property
    def env_params(self) -> Any:
        return self.levels.env_params

    @property
    def train_files(self) -> tuple[Path, ...]:
        return self.levels.files

    def make_ppo(
        self, ppo_cfg: PPOConfig, curriculum_cfg: CurriculumConfig, axis_name: str | None = None
    ) -> PPO:
        return _make_ppo(
            self.levels, self.env, self.network, self.mutate, self.num_updates,
            ppo_cfg, self.optim_cfg, curriculum_cfg, axis_name,
        )  # fmt: skip

    def update_on(self, mesh: jax.sharding.Mesh) -> Callable[[PPOState], tuple[PPOState, Any]]:
        """The PPO update for ``mesh``: ``ppo.update`` on one data shard, else the per-device
        update (``num_envs / D`` envs, ``1 / D`` of the SFL buffer) under ``shard_map``; the
        config checked that ``D`` divides them (``KinetixPPOConfig``)."""
        data = mesh.shape["data"]
        if data == 1:
            return functools.partial(ppo_lib.update, self.ppo)
        local_ppo = dataclasses.replace(self.ppo_cfg, num_envs=self.ppo_cfg.num_envs // data)
        sfl = self.curriculum_cfg.sfl
        local_cur = dataclasses.replace(
            self.curriculum_cfg,
            sfl=dataclasses.replace(
                sfl, buffer_size=sfl.buffer_size // data, batch_size=sfl.batch_size // data
            ),
        )
        local = self.make_ppo(local_ppo, local_cur, axis_name="data")
        specs = state_specs(
            jax.eval_shape(functools.partial(ppo_lib.init, self.ppo), jax.random.PRNGKey(0))
        )
        return shard_map(
            functools.partial(ppo_lib.update, local),
            mesh,
            in_specs=(specs,),
            out_specs=(specs, PartitionSpec()),
        )


def _make_ppo(
    levels: ls.TrainLevels,
    env: KinetixEnv,
    network: ActorCritic,
    mutate: Callable | None,
    num_updates: int,
    ppo_cfg: PPOConfig,
    optim_cfg: OptimConfig,
    curriculum_cfg: CurriculumConfig,
    axis_name: str | None,
) -> PPO:
    curriculum = make_curriculum(curriculum_cfg, levels.sample, ppo_cfg.num_envs, mutate_fn=mutate)
    return PPO(
        ppo_cfg,
        env,
        levels.env_params,
        network,
        optim=optim_cfg,
        num_updates=num_updates,
        curriculum=curriculum,
        axis_name=axis_name,
    )


def make_agent(
    env_cfg: ls.KinetixEnvConfig,
    network_cfg: NetworkConfig,
    ppo_cfg: PPOConfig,
    optim_cfg: OptimConfig,
    curriculum_cfg: CurriculumConfig,
    num_updates: int,
) -> KinetixAgent:
    """The agent on ``env_cfg.train_levels`` (a ConfigError names a bad level spec)."""
    levels = ls.train_levels(env_cfg)
    env = ls.make_env(env_cfg, levels.static, levels.env_params, reset_fn=levels.sample)
    obs_ndim = 2 if env_cfg.observation_type == "symbolic_flat_padded" else 1
    space = env.action_space(levels.env_params)
    network = ActorCritic(network_cfg, head_for_space(space), obs_ndim)
    mutate = None
    if curriculum_cfg.kind == "accel":
        mutate = ls.mutate_function(levels.static, levels.env_params)
    ppo = _make_ppo(
        levels, env, network, mutate, num_updates, ppo_cfg, optim_cfg, curriculum_cfg, None
    )
    return KinetixAgent(
        env_cfg,
        network_cfg,
        ppo_cfg,
        optim_cfg,
        curriculum_cfg,
        num_updates,
        levels,
        env,
        network,
        ppo,
        mutate,
    )


def state_specs(state: PPOState) -> PPOState:
    """PartitionSpecs of a PPOState: per-env leaves (and the SFL buffer) split over ``data``,
    everything else (parameters, optimizer, statistics, key, hyper-parameters) replicated."""
    specs = {}
    for f in dataclasses.fields(state):
        spec = PartitionSpec("data") if f.name in PER_ENV_FIELDS else PartitionSpec()
        specs[f.name] = jax.tree.map(lambda _, s=spec: s, getattr(state, f.name))
    return PPOState(**specs)


def state_shardings(abstract: PPOState, mesh: jax.sharding.Mesh) -> PPOState:
    """NamedShardings of :func:`state_specs` on ``mesh``."""
    return jax.tree.map(lambda _, s: NamedSharding(mesh, s), abstract, state_specs(abstract))


def check_data_shards(ppo_cfg: PPOConfig, curriculum_cfg: CurriculumConfig, data: int) -> None:
    """ConfigError (by the recipe's dotted key) unless the envs, each device's minibatches and
    the curriculum split over ``data > 1`` shards: ``ppo.num_envs`` and the SFL buffer and batch
    multiples of ``data``, PLR/ACCEL (single-device buffers) refused."""
    if data == 1:
        return
    if ppo_cfg.num_envs % data:
        raise ConfigError("ppo.num_envs", ppo_cfg.num_envs, f"a multiple of mesh.data={data}")
    local = ppo_cfg.num_envs // data * ppo_cfg.num_steps
    if local % ppo_cfg.num_minibatches:
        raise ConfigError(
            "ppo.num_minibatches",
            ppo_cfg.num_minibatches,
            f"a divisor of the per-device batch {local}",
        )
    if curriculum_cfg.kind in ("plr", "accel"):
        raise ConfigError(
            "curriculum.kind",
            curriculum_cfg.kind,
            "'uniform' or 'sfl' when mesh.data > 1 (PLR/ACCEL buffers are single-device)",
        )
    if curriculum_cfg.kind == "sfl":
        for name in ("buffer_size", "batch_size"):
            value = getattr(curriculum_cfg.sfl, name)
            if value % data:
                raise ConfigError(
                    f"curriculum.sfl.{name}", value, f"a multiple of mesh.data={data}"
                )


def finetune_keys(
    env_cfg: ls.KinetixEnvConfig, network_cfg: NetworkConfig, ppo_cfg: PPOConfig
) -> dict[str, Any]:
    """The settings a run fine-tuned from a pretrained run must share with it, by dotted key:
    the network, the observation and action types and observation normalisation (and, for a
    network on flat observations, the size)."""
    keys = {
        "network": network_cfg,
        "env.observation_type": env_cfg.observation_type,
        "env.action_type": env_cfg.action_type,
        "ppo.normalize_obs": ppo_cfg.normalize_obs,
    }
    if network_cfg.kind != "transformer":
        keys["env.size"] = env_cfg.size
    return keys


def with_params(state: PPOState, params: Any, optimizer: Any) -> PPOState:
    """``state`` with ``params`` (placed as its own parameters are) and a fresh state of the
    optax ``optimizer``: the start of a fine-tuning run."""
    where = lambda tree: jax.tree.map(lambda x: x.sharding, tree)
    params = jax.device_put(params, where(state.params))
    opt = jax.device_put(optimizer.init(params), where(state.opt_state))
    return state.replace(params=params, opt_state=opt)


def progress_line(step: int, total: int, env_steps_per_update: int, m: dict[str, Any]) -> str:
    """A one-line training summary after update ``step`` of ``total`` from its metrics ``m``."""
    return (
        f"update {step}/{total}  env steps {step * env_steps_per_update:,}  "
        f"train solve rate {float(m['solve_rate']):.2f}  "
        f"return {float(m['episode_return']):.3f}  "
        f"episode length {float(m['episode_length']):.0f}  entropy {float(m['entropy']):.2f}"
    )
