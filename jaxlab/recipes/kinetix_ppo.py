"""``kinetix-ppo``: the Kinetix general agent — PPO with the entity transformer (or an MLP on flat
observations), level curricula (uniform / SFL / PLR / ACCEL), zero-shot evaluation and
fine-tuning, on the shared training loop.

One loop step is one PPO update (a rollout of ``ppo.num_envs x ppo.num_steps`` env steps, then
``update_epochs x num_minibatches`` Adam steps); the env state and the PRNG key live in the train
state (no batch), so checkpoints resume bit-identically on the CPU. ``make_train(cfg)(key)`` is
the same run as one pure function (``jax.vmap`` it over keys for many seeds). The optimiser is
``optim`` (``jaxlab.core.optim``; default ``jaxlab.rl.ppo.OPTIM``, ``optim.schedule=linear``
anneals the rate to 0 over the run's Adam steps). The learning rate, clip range and loss
coefficients are traced (``state.hparams``), so ``jaxlab sweep kinetix-ppo optim.lr=1e-4,3e-4
--seeds 3`` is one program.

Levels (``env.train_levels``, ``eval.levels``) are level specs
(``jaxlab.envs.kinetix.level_sets``) or ``random`` (the procedural generator, optionally through
the no-op filter); levels are padded to ``env.size``. An MLP on flat observations is evaluated
on the evaluation levels that fit ``env.size`` (``jaxlab.rl.kinetix_eval``).

Fine-tuning: ``init_from=RUN_DIR`` starts from the parameters of the latest checkpoint of a
pretrained run (same network and observation/action types), opened with
``jaxlab.core.run.open_run``; the optimiser starts fresh.

Multi-device: ``mesh.data = D > 1`` splits the envs (and the SFL buffer) over the ``data`` mesh
axis with ``shard_map`` (``jaxlab.rl.kinetix_agent``; ``tpu_configs/kinetix-ppo-*.yaml``).
With ``ppo.shard_invariant`` the update equals the one-device update.

After training, ``run_dir`` holds ``agent.gif`` and ``eval_levels.txt``/``eval_levels.json``.
``jaxlab eval kinetix-ppo --run-dir DIR [--levels SPEC] [--attempts K]`` prints the table for any
level set.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxlab.core import config as config_lib
from jaxlab.core.config import ConfigError
from jaxlab.core.loop import Hook, LoopConfig
from jaxlab.core.optim import OptimConfig
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.core.run import RunNotFoundError, open_run, read_run
from jaxlab.core.sharding import MeshConfig
from jaxlab.envs.kinetix.level_sets import KinetixEnvConfig, resolve_level_files
from jaxlab.rl import evaluate as ev
from jaxlab.rl import kinetix_eval as ke
from jaxlab.rl import ppo as ppo_lib
from jaxlab.rl.kinetix_agent import KinetixAgent, make_agent, state_shardings
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
        data = self.mesh.data
        if data > 1:
            local = self.ppo.num_envs // data * self.ppo.num_steps
            if self.ppo.num_envs % data:
                raise ConfigError(
                    "ppo.num_envs", self.ppo.num_envs, f"a multiple of mesh.data={data}"
                )
            if local % self.ppo.num_minibatches:
                raise ConfigError(
                    "ppo.num_minibatches",
                    self.ppo.num_minibatches,
                    f"a divisor of the per-device batch {local}",
                )
            if self.curriculum.kind in ("plr", "accel"):
                raise ConfigError(
                    "curriculum.kind",
                    self.curriculum.kind,
                    "'uniform' or 'sfl' when mesh.data > 1 (PLR/ACCEL buffers are single-device)",
                )
            if self.curriculum.kind == "sfl":
                for name in ("buffer_size", "batch_size"):
                    if getattr(self.curriculum.sfl, name) % data:
                        raise ConfigError(
                            f"curriculum.sfl.{name}",
                            getattr(self.curriculum.sfl, name),
                            f"a multiple of mesh.data={data}",
                        )


def agent(cfg: KinetixPPOConfig) -> KinetixAgent:
    """Env, network and PPO of ``cfg`` (on one device)."""
    return make_agent(
        cfg.env, cfg.network, cfg.ppo, cfg.optim, cfg.curriculum, cfg.loop.total_steps
    )


def make_train(cfg: KinetixPPOConfig):
    """``train(key) -> (final PPOState, metrics [loop.total_steps])`` as one pure function."""
    return agent(cfg).ppo.make_train(cfg.loop.total_steps)


def build(cfg: KinetixPPOConfig, mesh: jax.sharding.Mesh) -> Parts:
    ag = agent(cfg)  # a bad env.train_levels is refused here, by its name
    update = ag.update_on(mesh)
    files, left_out = ke.eval_files(cfg.env, cfg.network, cfg.eval)  # an unplayable eval set
    left_names = [ev.level_name(f) for f in left_out]
    max_steps = cfg.eval.max_steps or cfg.env.max_timesteps
    cache: list[ke.Evaluator] = []
    last: dict[str, Any] = {}

    def evaluator() -> ke.Evaluator:
        if not cache:
            cache.append(
                ke.Evaluator(
                    ag,
                    files,
                    num_attempts=cfg.eval.num_attempts,
                    max_steps=max_steps,
                    record=cfg.eval.gif_levels,
                )
            )
        return cache[0]

    def evaluate(state: PPOState) -> dict[str, float]:
        names, res, shown = evaluator()(state, jax.random.PRNGKey(cfg.seed + 1))
        last.update(update=int(jax.device_get(state.update)), out=(names, res, shown))
        s = ev.summary(res)
        if cfg.loop.progress:
            skipped = f" ({len(left_names)} larger than env.size left out)" if left_names else ""
            _write(
                f"eval @ update {last['update']}: solve rate {s['solve_rate']:.2f} on "
                f"{len(names)} level(s){skipped} x {res.num_attempts} attempts, "
                f"return {s['return']:.3f}"
            )
        return {"solve_rate": s["solve_rate"], "return": s["return"], "length": s["length"]}

    def finalize(state: PPOState, run_dir: Path) -> None:
        if last.get("update") == int(jax.device_get(state.update)):
            names, res, shown = last["out"]  # the loop's final evaluation of this same state
        else:
            names, res, shown = evaluator()(state, jax.random.PRNGKey(cfg.seed + 1))
        ke.write_table(Path(run_dir), names, res, left_out=left_names)
        if cfg.eval.gif_levels > 0 and shown is not None:
            ke.write_gif(evaluator().groups[0], shown, Path(run_dir) / "agent.gif")

    return Parts(
        init=ag.ppo.init,
        train_step=lambda state, batch: update(state),
        abstract_batch=None,
        state_sharding=lambda abstract: state_shardings(abstract, mesh),
        evaluate=evaluate,
        finalize=finalize,
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
    checks = {
        "network": (pre.network, cfg.network),
        "env.observation_type": (pre.env.observation_type, cfg.env.observation_type),
        "env.action_type": (pre.env.action_type, cfg.env.action_type),
        "ppo.normalize_obs": (pre.ppo.normalize_obs, cfg.ppo.normalize_obs),
    }
    if cfg.network.kind != "transformer":
        checks["env.size"] = (pre.env.size, cfg.env.size)
    for key, (a, b) in checks.items():
        if a != b:
            raise ConfigError(key, b, f"the pretrained run's value {a!r} (init_from={run_dir})")
    # Shapes depend on the size and the run's own settings, not on which level files were used,
    # so the pretrained run's state is rebuilt on this run's levels when the sizes agree.
    levels = cfg.env.train_levels if pre.env.size == cfg.env.size else pre.env.train_levels
    over = {"env.train_levels": levels, "init_from": ""}
    pretrained = open_run(run_dir, recipe=RECIPE, cfg=config_lib.replace(pre, **over))
    where = lambda tree: jax.tree.map(lambda x: x.sharding, tree)
    params = jax.device_put(pretrained.state.params, where(state.params))
    opt = ppo_lib.make_optimizer(cfg.ppo, cfg.optim, cfg.loop.total_steps).init(params)
    return state.replace(params=params, opt_state=jax.device_put(opt, where(state.opt_state)))


def _write(line: str) -> None:
    """Prints a line without breaking the loop's progress bar."""
    from tqdm.auto import tqdm

    tqdm.write(line)


def progress_hooks(cfg: KinetixPPOConfig, run_dir: Path) -> list[Hook]:
    """A one-line training summary every ``loop.log_every`` updates (with ``loop.progress``)."""
    if not cfg.loop.progress or cfg.loop.log_every < 1:
        return []
    per = cfg.ppo.num_envs * cfg.ppo.num_steps

    def show(step: int, state: PPOState, m: dict[str, Any]) -> None:
        _write(
            f"update {step}/{cfg.loop.total_steps}  env steps {step * per:,}  "
            f"train solve rate {float(m['solve_rate']):.2f}  "
            f"return {float(m['episode_return']):.3f}  "
            f"episode length {float(m['episode_length']):.0f}  entropy {float(m['entropy']):.2f}"
        )

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
    names, res, _ = evaluator(run.state, key)
    extra = {}
    if args.baselines:
        for kind in ("random", "noop"):
            extra[kind] = evaluator(run.state, key, kind)[1].solve_rate
    if args.json:
        out = {
            "step": run.step,
            "levels": {n: float(res.solve_rate[i]) for i, n in enumerate(names)},
            "summary": ev.summary(res),
        }
        out.update({f"{k}_solve_rate": float(np.mean(v)) for k, v in extra.items()})
        print(json.dumps(out))
    else:
        print(f"checkpoint step {run.step} of {run_dir}")
        print(ev.format_table(names, res, extra=extra))
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
