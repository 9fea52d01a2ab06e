"""``metra`` and ``csf``: unsupervised skill discovery with METRA (``jaxlab.rl.skills.metra``) or
CSF (``jaxlab.rl.skills.csf``) on a point env or a Kinetix morphology, run by the shared loop.

One loop step is one skill-learning iteration (``off_policy.num_envs`` env steps per seed, a replay
add and ``updates_per_iteration`` gradient steps) of ``seeds`` independent runs vmapped into one
program (state leaves carry a leading seed axis, but for the traced hyper-parameters
``hparams``, which the seeds share); the whole state (networks, Adam states, METRA's
dual variable, the on-device replay buffer, env states, skills, keys and the traced
hyper-parameters) is the checkpointed train state, so a resume is bit-identical. Logged training
metrics are means over seeds; evaluation (``jaxlab.rl.skills.evaluate``) reports coverage and
displacement directions of the skills and of the random and zero policies and zero-shot goal
success, as means over seeds plus the per-seed values; ``finalize`` writes ``skills.png`` (the
first seed's skill trajectories coloured by direction). The two recipes differ only in the method.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab import envs
from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.optim import OptimConfig
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.core.sharding import MeshConfig, constrain_leading
from jaxlab.rl.off_policy import OffPolicyConfig
from jaxlab.rl.skills import csf, metra
from jaxlab.rl.skills.evaluate import (
    SkillEvalConfig,
    make_evaluate,
    plot_skill_trajectories,
    rollout_xy,
    skill_policy,
)
from jaxlab.rl.skills.training import SkillConfig, SkillOptim, sample_skills

_ADAM = OptimConfig(name="adam", lr=1e-3)


@dataclasses.dataclass(frozen=True)
class SkillRecipeConfig:
    """``off_policy``, ``skills`` and ``optim`` as in ``jaxlab.rl.off_policy`` and
    ``rl.skills.training``; ``max_steps`` is the episode length (and the evaluation rollouts'),
    ``size`` the half-width of ``point-mass-2d``'s arena and ``level`` the body of
    ``kinetix-morphology`` (each ignored by other envs), ``seeds`` the vmapped runs, ``eval`` the
    evaluation's ``rl.skills.evaluate.SkillEvalConfig``."""

    seed: int = 0
    seeds: int = 1
    off_policy: OffPolicyConfig = OffPolicyConfig(num_envs=8)
    skills: SkillConfig = SkillConfig(tau=0.01)
    optim: SkillOptim = SkillOptim(_ADAM, _ADAM, _ADAM, _ADAM, _ADAM)
    max_steps: int = 50
    size: float = 5.0
    level: str = "s/car_left"
    eval: SkillEvalConfig = SkillEvalConfig()
    mesh: MeshConfig = MeshConfig(data=1)
    loop: LoopConfig = LoopConfig(
        total_steps=2000, steps_per_call=50, log_every=200, eval_every=1000, checkpoint_every=500
    )

    def __post_init__(self):
        for name in ("seeds", "max_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(name, v, "an int >= 1")
        if not self.size > 0:
            raise ConfigError("size", self.size, "a float > 0 (arena half-width)")

    def env_options(self) -> dict[str, object]:
        env, opts = self.off_policy.env, {}
        if "max_steps" in envs.spec(env).options:
            opts["max_steps"] = self.max_steps
        elif "max_timesteps" in envs.spec(env).options:
            opts["max_timesteps"] = self.max_steps
        if env == "point-mass-2d":
            opts["size"] = float(self.size)
        if env == "kinetix-morphology":
            opts["level"] = self.level
        return opts


def _build(method, cfg: SkillRecipeConfig, mesh: jax.sharding.Mesh) -> Parts:
    """Data parallel over ``mesh``: every gradient step's replay batch is split over the data
    axes; networks, optimiser states, buffers and env states are replicated."""
    parts = method.make_parts(
        cfg.skills,
        cfg.off_policy,
        cfg.optim,
        env_options=cfg.env_options(),
        iterations=cfg.loop.total_steps,
        spread=lambda tree: constrain_leading(tree, mesh),
    )
    evaluate = jax.jit(jax.vmap(make_evaluate(parts, cfg.eval, cfg.max_steps), in_axes=(0, None)))

    def per_seed(state):
        """The state with its (shared, scalar) ``hparams`` given to every seed."""
        hp = jax.tree.map(lambda v: jnp.broadcast_to(v, (cfg.seeds,)), state.hparams)
        return state.replace(hparams=hp)

    def init(key):
        state = jax.vmap(parts.init)(jax.random.split(key, cfg.seeds))
        return state.replace(hparams=jax.tree.map(lambda v: v[0], state.hparams))

    def train_step(state, batch):
        del batch  # RL: the data is the env, driven by the keys in the state
        new, metrics = jax.vmap(parts.iteration)(per_seed(state))
        new = new.replace(hparams=state.hparams)
        return new, jax.tree.map(lambda x: jnp.mean(x.astype(jnp.float32)), metrics)

    def host_evaluate(state) -> dict[str, float]:
        out = jax.device_get(evaluate(per_seed(state), jax.random.key(cfg.seed + 1)))
        res = {k: float(np.mean(v)) for k, v in out.items()}
        for k in ("coverage", "directions", "goal_success"):
            if k in out and cfg.seeds > 1:
                res.update({f"{k}_seed{i}": float(v) for i, v in enumerate(out[k])})
        return res

    def finalize(state, run_dir: Path) -> None:
        first = jax.tree.map(lambda x: x[0], per_seed(state))
        skills = sample_skills(jax.random.key(cfg.seed + 2), 16, cfg.skills.skill_dim)
        act = skill_policy(parts, first)
        xy = jax.jit(
            lambda k: rollout_xy(parts.env, parts.env_params, act, skills, cfg.max_steps, k)
        )(jax.random.key(cfg.seed + 3))
        name = method.__name__.rsplit(".", 1)[-1]
        title = f"{name} skills"
        plot_skill_trajectories(
            Path(run_dir) / "skills.png", xy, skills, env=parts.env, title=title
        )

    return Parts(
        init=init,
        train_step=train_step,
        evaluate=host_evaluate,
        finalize=finalize,
        units_per_step=(cfg.off_policy.num_envs * cfg.seeds, "env-step"),
    )


def build_metra(cfg: SkillRecipeConfig, mesh: jax.sharding.Mesh) -> Parts:
    return _build(metra, cfg, mesh)


def build_csf(cfg: SkillRecipeConfig, mesh: jax.sharding.Mesh) -> Parts:
    return _build(csf, cfg, mesh)


METRA = register(
    Recipe(
        name="metra",
        config_cls=SkillRecipeConfig,
        build=build_metra,
        description="METRA: skills that maximise (phi(s')-phi(s))^T z under a temporal-distance "
        "constraint (dual descent), SAC policy",
        default_preset="cpu",
        traced=metra.TRACED,
    )
)
CSF = register(
    Recipe(
        name="csf",
        config_cls=SkillRecipeConfig,
        build=build_csf,
        description="CSF: contrastive successor features (contrastive phi, bottleneck reward, SF "
        "critics), unsupervised skills",
        default_preset="cpu",
        traced=csf.TRACED,
    )
)
