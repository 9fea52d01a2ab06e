"""``kinetix-ppo``: the Kinetix general agent — PPO with the entity transformer (or an MLP on flat
observations), level curricula (uniform / SFL / PLR / ACCEL), zero-shot evaluation and
fine-tuning, on the shared training loop.

One loop step is one PPO update (``jaxlab.rl.ppo``: a rollout of ``ppo.num_envs x ppo.num_steps``
env steps, then ``update_epochs x num_minibatches`` optimiser steps of ``optim``); the env state
and the PRNG key live in the train state (no batch), so checkpoints resume bit-identically on the
CPU. ``make_train(cfg)(key)`` is the same run as one pure function. ``optim.lr``, ``ppo.clip_eps``,
``ppo.ent_coef`` and ``ppo.vf_coef`` are traced, so ``jaxlab sweep kinetix-ppo
optim.lr=1e-4,3e-4 --seeds 3`` is one program; ``optim.schedule=linear`` anneals the rate to 0.

Levels (``env.train_levels``, ``eval.levels``) are level specs (``jaxlab.envs.kinetix.level_sets``)
or ``random`` (the procedural generator), padded to ``env.size``; the run's evaluation is
``jaxlab.rl.kinetix_eval.RunEvaluation`` (``agent.gif``, ``eval_levels.txt``/``.json``).
``init_from=RUN_DIR`` fine-tunes the parameters of a pretrained run (fresh optimiser).
``mesh.data = D > 1`` splits the envs and the SFL buffer over the ``data`` axis
(``jaxlab.rl.kinetix_agent``; ``tpu_configs/kinetix-ppo-*.yaml``). ``jaxlab eval kinetix-ppo
--run-dir DIR [--levels SPEC] [--attempts K]`` prints the table for any level set.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from pathlib import Path

import jax

from jaxlab.core import config as config_lib
from jaxlab.core.config import ConfigError
from jaxlab.core.loop import Hook, LoopConfig
from jaxlab.core.optim import OptimConfig
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.core.run import RunNotFoundError, open_run, read_run
from jaxlab.core.sharding import MeshConfig
from jaxlab.envs.kinetix.level_sets import KinetixEnvConfig, resolve_level_files
from jaxlab.rl import kinetix_agent as ka
from jaxlab.rl import kinetix_eval as ke
from jaxlab.rl import ppo as ppo_lib
from jaxlab.rl.networks import NetworkConfig, check_network_for_observation
from jaxlab.rl.ppo import PPOConfig, PPOState
from jaxlab.rl.ued import CurriculumConfig


@dataclasses.dataclass(frozen=True)
class KinetixPPOConfig:
    """The recipe's whole configuration (see the module docstring)."""

    seed: int = 0
    env: KinetixEnvConfig = KinetixEnvConfig()
    network: NetworkConfig = NetworkConfig()
    ppo: PPOConfig = PPOConfig()
    optim: OptimConfig = ppo_lib.OPTIM
    curriculum: CurriculumConfig = CurriculumConfig()
    eval: ke.KinetixEvalConfig = ke.KinetixEvalConfig()
    init_from: str = ""
    mesh: MeshConfig = MeshConfig(data=1)
    loop: LoopConfig = LoopConfig(
        total_steps=200, steps_per_call=10, log_every=10, eval_every=0, checkpoint_every=50
    )

    def __post_init__(self):
        check_network_for_observation(self.network, self.env.observation_type)
        if any(s != 1 for s in self.mesh.sizes()[1:]):
            raise ConfigError(
                "mesh", self.mesh.sizes(), "only the data axis > 1 (envs are data-parallel)"
            )
        ka.check_data_shards(self.ppo, self.curriculum, self.mesh.data)


def agent(cfg: KinetixPPOConfig) -> ka.KinetixAgent:
    """Env, network and PPO of ``cfg`` (on one device)."""
    return ka.make_agent(
        cfg.env, cfg.network, cfg.ppo, cfg.optim, cfg.curriculum, cfg.loop.total_steps
    )


def make_train(cfg: KinetixPPOConfig):
    """``train(key) -> (final PPOState, metrics [loop.total_steps])`` as one pure function."""
    return functools.partial(ppo_lib.train, agent(cfg).ppo, num_updates=cfg.loop.total_steps)


def build(cfg: KinetixPPOConfig, mesh: jax.sharding.Mesh) -> Parts:
    ag = agent(cfg)  # a bad env.train_levels is refused here, by its name
    update = ag.update_on(mesh)
    run_eval = ke.RunEvaluation(ag, cfg.eval, seed=cfg.seed + 1, progress=cfg.loop.progress)
    return Parts(
        init=functools.partial(ppo_lib.init, ag.ppo),
        train_step=lambda state, batch: update(state),
        state_sharding=lambda abstract: ka.state_shardings(abstract, mesh),
        evaluate=run_eval.evaluate,
        finalize=run_eval.finalize,
        units_per_step=(cfg.ppo.num_envs * cfg.ppo.num_steps, "env-step"),
    )


def finetune(cfg: KinetixPPOConfig, state: PPOState) -> PPOState:
    """``state`` with the parameters of the pretrained run ``cfg.init_from`` (checked to be
    compatible) and a fresh optimiser; unchanged when ``init_from`` is empty."""
    if not cfg.init_from.strip():
        return state
    run_dir = Path(cfg.init_from).expanduser()
    try:
        _, pre = read_run(run_dir, RECIPE)
    except RunNotFoundError as e:
        raise ConfigError("init_from", str(run_dir), f"a kinetix-ppo run directory ({e})") from None
    own = ka.finetune_keys(cfg.env, cfg.network, cfg.ppo)
    for key, value in ka.finetune_keys(pre.env, pre.network, pre.ppo).items():
        if value != own[key]:
            raise ConfigError(key, own[key], f"the pretrained run's value {value!r} ({run_dir})")
    # Shapes depend on the size and the run's own settings, not on which level files were used,
    # so the pretrained run's state is rebuilt on this run's levels when the sizes agree.
    levels = cfg.env.train_levels if pre.env.size == cfg.env.size else pre.env.train_levels
    over = {"env.train_levels": levels, "init_from": ""}
    pretrained = open_run(run_dir, recipe=RECIPE, cfg=config_lib.replace(pre, **over))
    optimizer = ppo_lib.make_optimizer(cfg.ppo, cfg.optim, cfg.loop.total_steps)
    return ka.with_params(state, pretrained.state.params, optimizer)


def progress_hooks(cfg: KinetixPPOConfig, run_dir: Path) -> list[Hook]:
    """A one-line training summary every ``loop.log_every`` updates (with ``loop.progress``)."""
    if not cfg.loop.progress or cfg.loop.log_every < 1:
        return []
    total, per = cfg.loop.total_steps, cfg.ppo.num_envs * cfg.ppo.num_steps
    show = lambda step, state, m: ke.write_line(ka.progress_line(step, total, per, m))
    return [Hook(show, cfg.loop.log_every)]


def eval_main(cfg: KinetixPPOConfig, run_dir: Path, argv: list[str]) -> int:
    """``jaxlab eval kinetix-ppo --run-dir DIR [--levels SPEC] [--attempts K] [--seed S]
    [--baselines] [--json]``: prints the per-level solve table of the latest checkpoint."""
    p = argparse.ArgumentParser(prog="jaxlab eval kinetix-ppo")
    p.add_argument("--levels", default=None, help="level spec (default: the run's eval levels)")
    p.add_argument("--attempts", type=int, default=cfg.eval.num_attempts)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--baselines", action="store_true", help="also random and no-op policies")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = p.parse_args(argv)
    if args.attempts < 1:
        raise ConfigError("--attempts", args.attempts, "an integer >= 1")
    spec = args.levels or ke.eval_level_spec(cfg.env, cfg.eval)
    try:
        resolve_level_files(spec)
    except ValueError as e:
        raise ConfigError("--levels", spec, str(e)) from None
    run = open_run(run_dir, recipe=RECIPE)
    ag = agent(run.cfg)
    max_steps = cfg.eval.max_steps or cfg.env.max_timesteps
    # the run's own level set: the levels its policy plays; a named one: all of them or an error
    levels = spec if args.levels else ke.eval_files(ag.env_cfg, ag.network_cfg, run.cfg.eval)[0]
    try:
        evaluator = ke.Evaluator(ag, levels, num_attempts=args.attempts, max_steps=max_steps)
    except ValueError as e:
        raise ConfigError("--levels", spec, str(e)) from None
    key = jax.random.PRNGKey(args.seed)
    out = ke.report(
        evaluator, run.state, key, step=run.step, baselines=args.baselines, as_json=args.json
    )
    print(out if args.json else f"checkpoint step {run.step} of {run_dir}\n{out}")
    return 0


RECIPE = register(
    Recipe(
        name="kinetix-ppo",
        config_cls=KinetixPPOConfig,
        build=build,
        description="Kinetix general agent: PPO + entity transformer, SFL/PLR curricula, fine-tuning",
        default_preset="cpu-single",
        traced=ppo_lib.TRACED,
        finetune=finetune,
        eval_main=eval_main,
        hooks=progress_hooks,
    )
)
