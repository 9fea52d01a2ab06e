"""``dreamer`` and ``ls-imagine``: a DreamerV3-style agent, and LS-Imagine on top of it
(``jaxlab.rl.world_models``), on the egocentric ``open-world`` env, run by the shared loop.

One loop step is one agent iteration (``num_envs`` env steps, one sequence-buffer write per env
and, once learning, ``updates_per_iteration`` world-model + imagination actor-critic steps). The
whole ``DreamerState`` (networks, Adam states, return scale, the on-device sequence buffer, env
states, the acting latent and the PRNG key; for LS-Imagine also the relevance model, the
affordance predictor and the jump statistics) is the checkpointed train state, so a resumed run
is bit-identical. Evaluation: mean return and success rate over ``eval_episodes`` episodes.
``finalize`` writes ``imagination.gif`` (real frames | open-loop imagined frames after
``context`` observed ones) and, for ``ls-imagine``, ``affordance.gif`` (observations with the
predicted affordance map).

Both recipes live in this one module because they are one method with a switch (``ls``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import numpy as np

from jaxlab import media
from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.core.sharding import MeshConfig, constrain_leading
from jaxlab.rl.world_models.affordance import AffordancePredictor
from jaxlab.rl.world_models.dreamer import (
    DreamerConfig,
    check_config,
    make_evaluate,
    make_parts,
    preprocess,
)
from jaxlab.rl.world_models.ls_imagine import LSConfig


@dataclasses.dataclass(frozen=True)
class DreamerRecipeConfig:
    """Attributes as in ``rl.world_models.dreamer.DreamerConfig``; ``variant``, ``obs_size``,
    ``max_steps`` and ``num_distractors`` are ``open-world`` env options; ``context`` is the
    number of observed frames of the imagination GIF."""

    seed: int = 0
    variant: str = "easy"
    obs_size: int = 32
    max_steps: int = 64
    num_distractors: int = 4
    num_envs: int = 8
    capacity: int = 4096
    batch_size: int = 16
    sequence_length: int = 16
    learning_starts: int = 100
    updates_per_iteration: int = 1
    deter: int = 64
    groups: int = 8
    classes: int = 8
    hidden: int = 64
    embed: int = 64
    depth: int = 8
    num_bins: int = 255
    horizon: int = 15
    gamma: float = 0.99
    lam: float = 0.95
    entropy: float = 3e-4
    model_lr: float = 3e-4
    actor_lr: float = 1e-4
    critic_lr: float = 1e-4
    eval_episodes: int = 16
    context: int = 4
    mesh: MeshConfig = MeshConfig(data=1)
    loop: LoopConfig = LoopConfig(
        total_steps=3000, steps_per_call=50, log_every=250, eval_every=1000, checkpoint_every=1000
    )

    def __post_init__(self):
        if self.eval_episodes < 1:
            raise ConfigError("eval_episodes", self.eval_episodes, "an int >= 1")
        if not 1 <= self.context < self.sequence_length:
            raise ConfigError("context", self.context, f"an int in [1, {self.sequence_length})")
        check_config(self.dreamer())

    def env_options(self) -> tuple[tuple[str, object], ...]:
        return (
            ("variant", self.variant),
            ("obs_size", self.obs_size),
            ("max_steps", self.max_steps),
            ("num_distractors", self.num_distractors),
        )

    def dreamer(self) -> DreamerConfig:
        """The library config of this run."""
        return DreamerConfig(
            env="open-world",
            env_options=self.env_options(),
            num_envs=self.num_envs,
            capacity=self.capacity,
            batch_size=self.batch_size,
            sequence_length=self.sequence_length,
            learning_starts=self.learning_starts,
            updates_per_iteration=self.updates_per_iteration,
            deter=self.deter,
            groups=self.groups,
            classes=self.classes,
            hidden=self.hidden,
            embed=self.embed,
            depth=self.depth,
            num_bins=self.num_bins,
            horizon=self.horizon,
            gamma=self.gamma,
            lam=self.lam,
            entropy=self.entropy,
            model_lr=self.model_lr,
            actor_lr=self.actor_lr,
            critic_lr=self.critic_lr,
            ls=getattr(self, "ls", None),
        )


@dataclasses.dataclass(frozen=True)
class LSImagineRecipeConfig(DreamerRecipeConfig):
    """``dreamer``'s config plus LS-Imagine's settings (``ls``), on the hard variant."""

    variant: str = "hard"
    ls: LSConfig = LSConfig()


def _upscale(frames: np.ndarray, k: int = 4) -> np.ndarray:
    return np.repeat(np.repeat(frames, k, axis=-3), k, axis=-2)


def build(cfg: DreamerRecipeConfig, mesh: jax.sharding.Mesh) -> Parts:
    """Data parallel over ``mesh``: every update's replayed sequences are split over the data
    axes; networks, optimizer states, the buffer and the env states are replicated."""
    parts = make_parts(cfg.dreamer(), spread=lambda tree: constrain_leading(tree, mesh))
    evaluate = jax.jit(make_evaluate(parts, cfg.eval_episodes, cfg.max_steps))

    def train_step(state, batch):
        del batch  # RL: the data is the env, driven by the key in the state
        return parts.iteration(state)

    def host_evaluate(state) -> dict[str, float]:
        out = evaluate(state, jax.random.key(cfg.seed + 1))
        return {k: float(v) for k, v in out.items()}

    @jax.jit
    def _media(state, key):
        k1, k2 = jax.random.split(key)
        batch = parts.replay.sample(state.buffer, k1).experience
        pred = parts.open_loop(state, batch, cfg.context, k2)
        out = {"real": batch["obs"], "imagined": pred}
        if state.aff is not None:
            out["affordance"] = AffordancePredictor().apply(
                state.aff["predictor"], preprocess(batch["obs"])
            )
        return out

    def finalize(state, run_dir: Path) -> None:
        if not bool(parts.replay.can_sample(state.buffer)):
            return
        out = jax.device_get(_media(state, jax.random.key(cfg.seed + 2)))
        real = np.asarray(out["real"][:4])  # [4, L, S, S, 3] uint8
        imag = media.to_uint8(np.clip(np.asarray(out["imagined"][:4]) + 0.5, 0, 1))
        gap = np.full(real.shape[:3] + (2, 3), 255, np.uint8)
        pair = np.concatenate([real, gap, imag], axis=3)  # real | imagined
        frames = np.concatenate(list(pair), axis=1)  # the 4 sequences stacked vertically
        media.save_gif(Path(run_dir) / "imagination.gif", list(_upscale(frames)), fps=4)
        if "affordance" in out:
            m = np.asarray(out["affordance"][:4])[..., None]
            overlay = (0.5 * real + 0.5 * m * np.array([255, 255, 0])).astype(np.uint8)
            aff_frames = np.concatenate(list(np.concatenate([real, gap, overlay], 3)), 1)
            media.save_gif(Path(run_dir) / "affordance.gif", list(_upscale(aff_frames)), fps=4)

    return Parts(
        init=parts.init,
        train_step=train_step,
        evaluate=host_evaluate,
        finalize=finalize,
        units_per_step=(cfg.num_envs, "env-step"),
    )


RECIPE = register(
    Recipe(
        name="dreamer",
        config_cls=DreamerRecipeConfig,
        build=build,
        description="DreamerV3-style world-model agent on the egocentric open world (easy)",
    )
)
LS_RECIPE = register(
    Recipe(
        name="ls-imagine",
        config_cls=LSImagineRecipeConfig,
        build=build,
        description="LS-Imagine: long short-term imagination with affordance-guided jumps",
    )
)
