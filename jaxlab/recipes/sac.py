"""``sac``: soft actor-critic (``jaxlab.rl.sac``) on a registered continuous-action env, run by the
shared loop.

One loop step is one SAC iteration (``num_envs`` env steps, a replay-buffer add and
``updates_per_iteration`` gradient steps); the whole ``SACState`` — networks, Adam states, the
on-device replay buffer, env states and the PRNG key — is the checkpointed train state, so a
resumed run is bit-identical. Evaluation: mean return and goal success of the deterministic policy
over ``eval_episodes`` episodes. The default env is ``point-mass-2d`` reaching a fixed goal.
"""

from __future__ import annotations

import dataclasses

import jax

from jaxlab import envs
from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.core.sharding import MeshConfig, constrain_leading
from jaxlab.rl.sac import SACConfig, check_config, make_evaluate, make_parts


@dataclasses.dataclass(frozen=True)
class SacRecipeConfig:
    """Attributes as in ``rl.sac.SACConfig``; ``max_steps`` and ``goal`` are env options
    (episode length and the reward's goal), ``lr`` is the actor, critic and temperature rate."""

    seed: int = 0
    env: str = "point-mass-2d"
    max_steps: int = 50
    goal: tuple[float, float] = (0.5, 0.5)
    num_envs: int = 4
    buffer_size: int = 100_000
    batch_size: int = 256
    learning_starts: int = 25
    updates_per_iteration: int = 1
    hidden: tuple[int, ...] = (256, 256)
    lr: float = 1e-3
    gamma: float = 0.9
    tau: float = 0.01
    init_alpha: float = 0.1
    eval_episodes: int = 16
    mesh: MeshConfig = MeshConfig(data=1)
    loop: LoopConfig = LoopConfig(
        total_steps=2500, steps_per_call=50, log_every=250, eval_every=500, checkpoint_every=500
    )

    def __post_init__(self):
        if self.eval_episodes < 1:
            raise ConfigError("eval_episodes", self.eval_episodes, "an int >= 1")
        check_config(self.sac())
        envs.spec(self.env)  # unknown env names are refused by name
        if {"max_steps", "goal"} <= set(envs.spec(self.env).options):
            envs.make(self.env, max_steps=self.max_steps, goal=tuple(self.goal))

    def sac(self) -> SACConfig:
        """The library config of this run."""
        return SACConfig(
            env=self.env,
            env_options=(("max_steps", self.max_steps), ("goal", tuple(self.goal))),
            num_envs=self.num_envs,
            total_env_steps=self.num_envs * self.loop.total_steps,
            buffer_size=self.buffer_size,
            batch_size=self.batch_size,
            learning_starts=self.learning_starts,
            updates_per_iteration=self.updates_per_iteration,
            hidden=tuple(self.hidden),
            actor_lr=self.lr,
            critic_lr=self.lr,
            alpha_lr=self.lr,
            gamma=self.gamma,
            tau=self.tau,
            init_alpha=self.init_alpha,
        )


def build(cfg: SacRecipeConfig, mesh: jax.sharding.Mesh) -> Parts:
    """Data parallel over ``mesh``: every gradient step's replay batch is split over the data
    axes; networks, optimizer states, the buffer and the env states are replicated."""
    parts = make_parts(cfg.sac(), spread=lambda tree: constrain_leading(tree, mesh))
    evaluate = jax.jit(make_evaluate(parts, cfg.eval_episodes, cfg.max_steps))

    def train_step(state, batch):
        del batch  # RL: the data is the env, driven by the key in the state
        return parts.iteration(state)

    def host_evaluate(state) -> dict[str, float]:
        out = evaluate(state, jax.random.key(cfg.seed + 1))
        return {k: float(v) for k, v in out.items()}

    return Parts(
        init=parts.init,
        train_step=train_step,
        evaluate=host_evaluate,
        units_per_step=(cfg.num_envs, "env-step"),
    )


RECIPE = register(
    Recipe(
        name="sac",
        config_cls=SacRecipeConfig,
        build=build,
        description="soft actor-critic on a continuous-action env (point-mass-2d goal reaching)",
    )
)
