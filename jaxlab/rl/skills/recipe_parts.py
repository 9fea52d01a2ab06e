"""The recipe wiring the ``csf`` and ``metra`` recipes share (recipes never import each other).

One loop step is one skill-learning iteration (``num_envs`` env steps per seed, a replay add and
``updates_per_iteration`` gradient steps) of ``seeds`` independent runs vmapped into one program
(state leaves carry a leading seed axis); the whole state (networks, Adam states, METRA's dual
variable, the on-device replay buffer, env states, skills and keys) is the checkpointed train
state, so a resume is bit-identical. Logged training metrics are means over seeds; evaluation
(``jaxlab.rl.skills.evaluate``) reports coverage and displacement directions of the skills and
of the random and zero policies and zero-shot goal success, as means over seeds plus the per-seed values; ``finalize``
writes ``skills.png`` (the first seed's skill trajectories coloured by direction).
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
from jaxlab.core.recipe import Parts
from jaxlab.core.sharding import MeshConfig, constrain_leading, state_shardings
from jaxlab.rl.skills import csf, metra
from jaxlab.rl.skills.evaluate import (
    SkillEvalConfig,
    make_evaluate,
    plot_skill_trajectories,
    rollout_xy,
    skill_policy,
)
from jaxlab.rl.skills.training import SkillConfig, check_config, sample_skills


@dataclasses.dataclass(frozen=True)
class SkillRecipeConfig:
    """Attributes as in ``rl.skills.training.SkillConfig`` and ``evaluate.SkillEvalConfig``;
    ``max_steps`` is the episode length (and the evaluation rollouts'), ``size`` the half-width
    of ``point-mass-2d``'s arena and ``level`` the body of ``kinetix-morphology`` (each ignored
    by other envs), ``seeds`` the vmapped runs."""

    method: str = "metra"
    seed: int = 0
    seeds: int = 1
    env: str = "point-mass-2d"
    max_steps: int = 50
    size: float = 5.0
    level: str = "s/car_left"
    skill_dim: int = 2
    num_envs: int = 8
    buffer_size: int = 100_000
    batch_size: int = 256
    learning_starts: int = 25
    updates_per_iteration: int = 1
    hidden: tuple[int, ...] = (256, 256)
    lr: float = 1e-3
    gamma: float = 0.99
    tau: float = 0.01
    init_alpha: float = 0.1
    dual_lam_init: float = 30.0
    dual_slack: float = 1e-3
    num_negatives: int = 256
    infonce_coef: float = 5.0
    eval_skills: int = 64
    coverage_cell: float = 1.0
    eval_goals: int = 50
    goal_radius: float = 0.5
    mesh: MeshConfig = MeshConfig(data=1)
    loop: LoopConfig = LoopConfig(
        total_steps=2000, steps_per_call=50, log_every=200, eval_every=1000, checkpoint_every=500
    )

    def __post_init__(self):
        if isinstance(self.seeds, bool) or not isinstance(self.seeds, int) or self.seeds < 1:
            raise ConfigError("seeds", self.seeds, "an int >= 1")
        if not self.size > 0:
            raise ConfigError("size", self.size, "a float > 0 (arena half-width)")
        envs.spec(self.env)  # unknown env names are refused by name
        check_config(self.skills())
        self.eval_config()

    def env_options(self) -> tuple[tuple[str, object], ...]:
        opts: tuple[tuple[str, object], ...] = ()
        if "max_steps" in envs.spec(self.env).options:
            opts += (("max_steps", self.max_steps),)
        elif "max_timesteps" in envs.spec(self.env).options:
            opts += (("max_timesteps", self.max_steps),)
        if self.env == "point-mass-2d":
            opts += (("size", float(self.size)),)
        if self.env == "kinetix-morphology":
            opts += (("level", self.level),)
        return opts

    def skills(self) -> SkillConfig:
        """The library config of one seed's run."""
        return SkillConfig(
            method=self.method,
            env=self.env,
            env_options=self.env_options(),
            skill_dim=self.skill_dim,
            num_envs=self.num_envs,
            total_env_steps=self.num_envs * self.loop.total_steps,
            buffer_size=self.buffer_size,
            batch_size=self.batch_size,
            learning_starts=self.learning_starts,
            updates_per_iteration=self.updates_per_iteration,
            hidden=tuple(self.hidden),
            lr=float(self.lr),
            gamma=float(self.gamma),
            tau=float(self.tau),
            init_alpha=float(self.init_alpha),
            dual_lam_init=float(self.dual_lam_init),
            dual_slack=float(self.dual_slack),
            num_negatives=self.num_negatives,
            infonce_coef=float(self.infonce_coef),
        )

    def eval_config(self) -> SkillEvalConfig:
        return SkillEvalConfig(
            num_skills=self.eval_skills,
            steps=self.max_steps,
            cell=float(self.coverage_cell),
            num_goals=self.eval_goals,
            goal_radius=float(self.goal_radius),
        )


def build(cfg: SkillRecipeConfig, mesh: jax.sharding.Mesh) -> Parts:
    """Data parallel over ``mesh``: every gradient step's replay batch is split over the data
    axes; networks, optimiser states, buffers and env states are replicated."""
    make_parts = {"metra": metra.make_parts, "csf": csf.make_parts}[cfg.method]
    parts = make_parts(cfg.skills(), spread=lambda tree: constrain_leading(tree, mesh))
    evaluate = jax.jit(jax.vmap(make_evaluate(parts, cfg.eval_config()), in_axes=(0, None)))

    def init(key):
        return jax.vmap(parts.init)(jax.random.split(key, cfg.seeds))

    def train_step(state, batch):
        del batch  # RL: the data is the env, driven by the keys in the state
        state, metrics = jax.vmap(parts.iteration)(state)
        return state, jax.tree.map(lambda x: jnp.mean(x.astype(jnp.float32)), metrics)

    def host_evaluate(state) -> dict[str, float]:
        out = jax.device_get(evaluate(state, jax.random.key(cfg.seed + 1)))
        res = {k: float(np.mean(v)) for k, v in out.items()}
        for k in ("coverage", "directions", "goal_success"):
            if k in out and cfg.seeds > 1:
                res.update({f"{k}_seed{i}": float(v) for i, v in enumerate(out[k])})
        return res

    def finalize(state, run_dir: Path) -> None:
        first = jax.tree.map(lambda x: x[0], state)
        skills = sample_skills(jax.random.key(cfg.seed + 2), 16, cfg.skill_dim)
        act = skill_policy(parts, first)
        xy = jax.jit(
            lambda k: rollout_xy(parts.env, parts.env_params, act, skills, cfg.max_steps, k)
        )(jax.random.key(cfg.seed + 3))
        plot_skill_trajectories(
            Path(run_dir) / "skills.png", xy, skills, env=parts.env, title=f"{cfg.method} skills"
        )

    return Parts(
        init=init,
        train_step=train_step,
        state_sharding=lambda abstract: state_shardings(abstract, mesh),
        evaluate=host_evaluate,
        finalize=finalize,
        units_per_step=(cfg.num_envs * cfg.seeds, "env-step"),
    )
