"""``dreamer`` and ``ls-imagine``: a DreamerV3-style agent, and LS-Imagine on top of it
(``jaxlab.rl.world_models``), on the egocentric ``open-world`` env, run by the shared loop.

One loop step is one agent iteration (``off_policy.num_envs`` env steps, one sequence-buffer write per env
and, once learning, ``updates_per_iteration`` world-model + imagination actor-critic steps). The
whole ``DreamerState`` (networks, Adam states, return scale, the on-device sequence buffer, env
states, the acting latent and the PRNG key; for LS-Imagine also the relevance model, the
affordance predictor and the jump statistics) is the checkpointed train state, so a resumed run
is bit-identical. The learning rates (``optim.model.lr``, ``optim.actor.lr``, ``optim.critic.lr``;
LS-Imagine also ``optim.affordance.lr``), the entropy weight and the KL scales
(``dreamer.entropy``, ``dreamer.dyn_scale``, ``dreamer.rep_scale``) are traced. Evaluation: mean
return and success rate over ``eval_episodes`` episodes.
``finalize`` writes ``imagination.gif`` (real frames | open-loop imagined frames after
``context`` observed ones) and, for ``ls-imagine``, ``affordance.gif`` (observations with the
predicted affordance map).

Both recipes live in this one module because they are one method with a switch (``ls``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax

from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.core.sharding import MeshConfig, constrain_leading
from jaxlab.rl.off_policy import OffPolicyConfig
from jaxlab.rl.world_models.dreamer import (
    LS_TRACED,
    TRACED,
    DreamerConfig,
    DreamerOptim,
    make_evaluate,
    make_parts,
)
from jaxlab.rl.world_models.gifs import make_write_gifs
from jaxlab.rl.world_models.ls_imagine import LSConfig


@dataclasses.dataclass(frozen=True)
class DreamerRecipeConfig:
    """``off_policy``, ``dreamer`` and ``optim`` as in ``jaxlab.rl.off_policy`` and
    ``rl.world_models.dreamer``; ``variant``, ``obs_size``, ``max_steps`` and
    ``num_distractors`` are ``open-world`` env options; ``context`` is the number of observed
    frames of the imagination GIF."""

    seed: int = 0
    variant: str = "easy"
    obs_size: int = 32
    max_steps: int = 64
    num_distractors: int = 4
    off_policy: OffPolicyConfig = OffPolicyConfig(
        env="open-world", num_envs=8, buffer_size=8 * 4096, batch_size=16, learning_starts=100
    )
    dreamer: DreamerConfig = DreamerConfig(gamma=0.99)
    optim: DreamerOptim = DreamerOptim()
    eval_episodes: int = 16
    context: int = 4
    mesh: MeshConfig = MeshConfig(data=1)
    loop: LoopConfig = LoopConfig(
        total_steps=3000, steps_per_call=50, log_every=250, eval_every=1000, checkpoint_every=1000
    )

    def __post_init__(self):
        for name in ("eval_episodes", "obs_size", "max_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an int >= 1")
        if self.num_distractors < 0:
            raise ConfigError("num_distractors", self.num_distractors, "an int >= 0")
        if not 1 <= self.context < self.dreamer.sequence_length:
            limit = self.dreamer.sequence_length
            raise ConfigError("context", self.context, f"an int in [1, {limit})")

    def env_options(self) -> dict[str, object]:
        return {
            "variant": self.variant,
            "obs_size": self.obs_size,
            "max_steps": self.max_steps,
            "num_distractors": self.num_distractors,
        }


@dataclasses.dataclass(frozen=True)
class LSImagineRecipeConfig(DreamerRecipeConfig):
    """``dreamer``'s config plus LS-Imagine's settings (``ls``), on the hard variant."""

    variant: str = "hard"
    ls: LSConfig = LSConfig()


def build(cfg: DreamerRecipeConfig, mesh: jax.sharding.Mesh) -> Parts:
    """Data parallel over ``mesh``: every update's replayed sequences are split over the data
    axes; networks, optimizer states, the buffer and the env states are replicated."""
    parts = make_parts(
        cfg.dreamer,
        cfg.off_policy,
        cfg.optim,
        ls=getattr(cfg, "ls", None),
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

    write_gifs = make_write_gifs(parts, cfg.context)

    def finalize(state, run_dir: Path) -> None:
        write_gifs(state, jax.random.key(cfg.seed + 2), run_dir)

    return Parts(
        init=parts.init,
        train_step=train_step,
        evaluate=host_evaluate,
        finalize=finalize,
        units_per_step=(cfg.off_policy.num_envs, "env-step"),
    )


RECIPE = register(
    Recipe(
        name="dreamer",
        config_cls=DreamerRecipeConfig,
        build=build,
        description="DreamerV3-style world-model agent on the egocentric open world (easy)",
        traced=TRACED,
    )
)
LS_RECIPE = register(
    Recipe(
        name="ls-imagine",
        config_cls=LSImagineRecipeConfig,
        build=build,
        description="LS-Imagine: long short-term imagination with affordance-guided jumps",
        traced=LS_TRACED,
    )
)
