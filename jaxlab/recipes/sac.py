"""``sac``: soft actor-critic (``jaxlab.rl.sac``) on a registered continuous-action env, run by the
shared loop.

One loop step is one SAC iteration (``num_envs`` env steps, a replay-buffer add and
``updates_per_iteration`` gradient steps); the whole ``SACState`` — networks, Adam states, the
on-device replay buffer, env states and the PRNG key — is the checkpointed train state, so a
resumed run is bit-identical. The learning rates (``optim.actor.lr``, ``optim.critic.lr``,
``optim.alpha.lr``) and ``sac.target_entropy_per_dim`` are traced: ``jaxlab sweep`` vmaps them.
Evaluation: mean return and goal success of the deterministic policy over ``eval_episodes``
episodes. The default env is ``point-mass-2d`` reaching a fixed goal.
"""

from __future__ import annotations

import dataclasses

import jax

from jaxlab import envs
from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.optim import OptimConfig
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.core.sharding import MeshConfig, constrain_leading
from jaxlab.rl.off_policy import OffPolicyConfig
from jaxlab.rl.sac import TRACED, SACConfig, SACOptim, make_evaluate, make_parts

_ADAM = OptimConfig(name="adam", lr=1e-3)


@dataclasses.dataclass(frozen=True)
class SacRecipeConfig:
    """``off_policy``, ``sac`` and ``optim`` as in ``jaxlab.rl.off_policy`` and ``rl.sac``;
    ``max_steps`` and ``goal`` are env options (episode length and the reward's goal)."""

    seed: int = 0
    off_policy: OffPolicyConfig = OffPolicyConfig(
        env="point-mass-2d", num_envs=4, buffer_size=100_000, batch_size=256, learning_starts=25
    )
    sac: SACConfig = SACConfig(gamma=0.9, tau=0.01, init_alpha=0.1)
    optim: SACOptim = SACOptim(actor=_ADAM, critic=_ADAM, alpha=_ADAM)
    max_steps: int = 50
    goal: tuple[float, float] = (0.5, 0.5)
    eval_episodes: int = 16
    mesh: MeshConfig = MeshConfig(data=1)
    loop: LoopConfig = LoopConfig(
        total_steps=2500, steps_per_call=50, log_every=250, eval_every=500, checkpoint_every=500
    )

    def __post_init__(self):
        if self.eval_episodes < 1:
            raise ConfigError("eval_episodes", self.eval_episodes, "an int >= 1")
        if {"max_steps", "goal"} <= set(envs.spec(self.off_policy.env).options):
            envs.make(self.off_policy.env, **self.env_options())

    def env_options(self) -> dict[str, object]:
        return {"max_steps": self.max_steps, "goal": tuple(self.goal)}


def build(cfg: SacRecipeConfig, mesh: jax.sharding.Mesh) -> Parts:
    """Data parallel over ``mesh``: every gradient step's replay batch is split over the data
    axes; networks, optimizer states, the buffer and the env states are replicated."""
    parts = make_parts(
        cfg.sac,
        cfg.off_policy,
        cfg.optim,
        env_options=cfg.env_options(),
        iterations=cfg.loop.total_steps,
        spread=lambda tree: constrain_leading(tree, mesh),
    )
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
        units_per_step=(cfg.off_policy.num_envs, "env-step"),
    )


RECIPE = register(
    Recipe(
        name="sac",
        config_cls=SacRecipeConfig,
        build=build,
        description="soft actor-critic on a continuous-action env (point-mass-2d goal reaching)",
        traced=TRACED,
    )
)
