"""Evaluating a Kinetix agent on level sets: the per-level solve table, the agent GIF, and the
random / no-op baselines (``evaluate.evaluate_levels`` per static size group).

The evaluation levels of a run (:func:`eval_files`) are ``eval.levels``, else the training levels,
else the shipped ``library``. :class:`RunEvaluation` is a training run's evaluation (its summary
during training, its table and GIF at the end); :func:`report` is ``jaxlab eval``'s table. A policy on a flat observation (MLP) plays only the levels that fit
its training size ``env.size``; the entity transformer plays every level at the smallest size it
fits. Levels that the policy cannot play are left out of the evaluation (and named); a level set
with none left is a ConfigError before training.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import atomic, json_files
from jaxlab.core.compile import jit
from jaxlab.core.config import ConfigError
from jaxlab.envs.kinetix import level_sets as ls
from jaxlab.envs.kinetix import make_render_pixels, save_gif, to_image
from jaxlab.envs.kinetix.actions import noop_action, random_action
from jaxlab.rl import evaluate as ev
from jaxlab.rl import ppo as ppo_lib
from jaxlab.rl.kinetix_agent import KinetixAgent
from jaxlab.rl.networks import NetworkConfig
from jaxlab.rl.ppo import PPOState


@dataclasses.dataclass(frozen=True)
class KinetixEvalConfig:
    """Evaluation (during training, at the end, and in ``jaxlab eval``); config keys ``eval.*``.

    Attributes:
        levels: level spec; empty = the training levels (or ``library`` for random levels).
        num_attempts: episodes per level (the paper: 20).
        max_steps: steps per attempt; 0 = ``env.max_timesteps``.
        gif_levels: levels shown in ``agent.gif`` (0: no GIF).
    """

    levels: str = ""
    num_attempts: int = 20
    max_steps: int = 0
    gif_levels: int = 4

    def __post_init__(self):
        if self.num_attempts < 1:
            raise ConfigError("num_attempts", self.num_attempts, "an integer >= 1")
        for name in ("max_steps", "gif_levels"):
            if getattr(self, name) < 0:
                raise ConfigError(name, getattr(self, name), "an integer >= 0")


def eval_level_spec(env_cfg: ls.KinetixEnvConfig, eval_cfg: KinetixEvalConfig) -> str:
    """The evaluation level spec: ``eval.levels``, else the training levels, else the library."""
    if eval_cfg.levels.strip():
        return eval_cfg.levels
    if not env_cfg.random_levels:
        return env_cfg.train_levels
    return "library"


def plays_any_size(agent: KinetixAgent) -> bool:
    """Whether the agent plays levels of any size (the entity transformer)."""
    return agent.network_cfg.kind == "transformer"


def eval_files(
    env_cfg: ls.KinetixEnvConfig, network_cfg: NetworkConfig, eval_cfg: KinetixEvalConfig
) -> tuple[list[Path], list[Path]]:
    """``(played, left out)``: the evaluation level files an agent of ``network_cfg`` on
    ``env_cfg`` plays and those it cannot (larger than ``env.size`` for a flat-observation
    policy). No playable level is a ConfigError naming ``eval.levels``, ``env.size`` and
    ``network.kind``. Needs only the configs, so a recipe checks this before building its agent."""
    spec = eval_level_spec(env_cfg, eval_cfg)
    try:
        files = ls.resolve_level_files(spec)
    except ValueError as e:
        raise ConfigError("eval.levels", spec, str(e)) from None
    played, left = ls.split_playable(files, env_cfg, network_cfg.kind == "transformer")
    if not played:
        raise ConfigError(
            "eval.levels",
            spec,
            f"levels that fit env.size={env_cfg.size!r} for network.kind="
            f"{network_cfg.kind!r} on {env_cfg.observation_type} observations (only "
            "the transformer on symbolic_entity plays larger sizes); none of its "
            f"{len(files)} levels does",
        )
    return played, left


def policy_fn_for(agent: KinetixAgent, kind: str = "agent") -> Callable:
    """``policy(params, obs_stats) -> (key, obs [B]) -> actions [B]``: the agent (sampling from
    its policy), ``random`` (the original's random actions) or ``noop``."""
    sp, at = agent.static, agent.env_cfg.action_type
    batch = lambda obs: jax.tree.leaves(obs)[0].shape[0]
    if kind == "random":
        return lambda params, stats: (
            lambda key, obs: jax.vmap(lambda k: random_action(k, at, sp))(
                jax.random.split(key, batch(obs))
            )
        )
    if kind == "noop":
        a = noop_action(at, sp)
        return lambda params, stats: lambda key, obs: jnp.broadcast_to(a, (batch(obs),) + a.shape)
    if kind != "agent":
        raise ValueError(f"policy kind={kind!r}; expected agent, random or noop")

    def make(params, stats):
        return lambda key, obs: ppo_lib.policy(agent.ppo, params, stats, obs)[0].sample(seed=key)

    return make


class Evaluator:
    """An agent's evaluation levels with one compiled evaluation per (level group, policy kind);
    parameters are arguments, so evaluating a new checkpoint does not recompile.

    ``levels`` is a level spec or a list of files; a level the agent cannot play is a ValueError
    (filter with :func:`eval_files` first). ``record``: levels of the first group whose states
    are returned for the GIF."""

    def __init__(
        self,
        agent: KinetixAgent,
        levels: str | Sequence[Path],
        *,
        num_attempts: int,
        max_steps: int,
        record: int = 0,
    ):
        files = ls.resolve_level_files(levels) if isinstance(levels, str) else list(levels)
        self.agent = agent
        self.groups = ls.load_eval_groups(agent.env_cfg, files, plays_any_size(agent))
        self.num_attempts = num_attempts
        self.max_steps = max_steps
        self.record = record
        self._fns: dict[tuple[int, str], Callable] = {}

    def _fn(self, i: int, kind: str) -> Callable:
        if (i, kind) not in self._fns:
            g, make = self.groups[i], policy_fn_for(self.agent, kind)
            record = self.record if i == 0 else 0

            def run(key, levels, params, stats):
                return ev.evaluate_levels(
                    key,
                    make(params, stats),
                    g.env,
                    g.env_params,
                    levels,
                    num_attempts=self.num_attempts,
                    max_steps=self.max_steps,
                    record=record,
                )

            self._fns[(i, kind)] = jit(run)
        return self._fns[(i, kind)]

    def __call__(self, state: PPOState, key: jax.Array, kind: str = "agent"):
        """``(names, LevelResults over all groups, recorded states of the first group)``."""
        names, results, shown = [], [], None
        params, stats = jax.device_get((state.params, state.obs_stats))
        for i, g in enumerate(self.groups):
            key, sub = jax.random.split(key)
            res, rec = jax.device_get(self._fn(i, kind)(sub, g.levels, params, stats))
            results.append(res)
            names += g.names
            shown = rec if i == 0 else shown
        cat = lambda f: np.concatenate([np.asarray(getattr(r, f)) for r in results])
        res = ev.LevelResults(
            solve_rate=cat("solve_rate"),
            mean_return=cat("mean_return"),
            mean_length=cat("mean_length"),
            num_attempts=self.num_attempts,
            attempt_returns=cat("attempt_returns"),
        )
        return names, res, shown


def write_gif(group: ls.EvalGroup, shown: Any, path: Path) -> None:
    """``path``: recorded states ``[T, G]`` of ``group`` rendered side by side as a GIF."""
    render = jit(jax.vmap(make_render_pixels(group.env.static_params), in_axes=(0, None)))
    steps = jax.tree.leaves(shown)[0].shape[0]
    frames = []
    for t in range(steps):
        imgs = np.asarray(render(jax.tree.map(lambda x, t=t: x[t], shown), group.env_params))
        frames.append(np.concatenate([to_image(im) for im in imgs], axis=1))
    save_gif(path, frames, fps=30)


def write_table(
    run_dir: Path, names: list[str], res: ev.LevelResults, left_out: Sequence[str] = ()
) -> None:
    """``eval_levels.txt`` (the printed table) and ``eval_levels.json`` (per level + summary);
    ``left_out``: names of evaluation levels the agent cannot play (:func:`eval_files`)."""
    text = ev.format_table(names, res)
    if left_out:
        text += f"\nleft out (larger than the training size): {', '.join(left_out)}"
    atomic.write_text(run_dir / "eval_levels.txt", text + "\n")
    rows = [
        {
            "level": n,
            "solve_rate": float(res.solve_rate[i]),
            "return": float(res.mean_return[i]),
            "length": float(res.mean_length[i]),
        }
        for i, n in enumerate(names)
    ]
    out = {"levels": rows, "summary": ev.summary(res), "attempts": res.num_attempts}
    if left_out:
        out["left_out"] = list(left_out)
    json_files.write(run_dir / "eval_levels.json", out)


def write_line(line: str) -> None:
    """Prints a line without breaking a training loop's progress bar."""
    from tqdm.auto import tqdm

    tqdm.write(line)


class RunEvaluation:
    """A training run's evaluation on its evaluation levels (:func:`eval_files`, checked when
    made, so an unplayable level set fails before training).

    ``evaluate(state)`` gives the solve rate, return and episode length over all levels (and,
    with ``progress``, prints a summary line); ``finalize(state, run_dir)`` writes the per-level
    table and ``agent.gif``, reusing the last evaluation when it was of the same update. The
    compiled evaluation is built on first use; every evaluation draws from ``PRNGKey(seed)``."""

    def __init__(
        self, agent: KinetixAgent, eval_cfg: KinetixEvalConfig, *, seed: int, progress: bool
    ):
        files, left_out = eval_files(agent.env_cfg, agent.network_cfg, eval_cfg)
        self.agent, self.cfg, self.files = agent, eval_cfg, files
        self.left_names = [ev.level_name(f) for f in left_out]
        self.max_steps = eval_cfg.max_steps or agent.env_cfg.max_timesteps
        self.seed, self.progress = seed, progress
        self._evaluator: Evaluator | None = None
        self._last: dict[str, Any] = {}

    @property
    def evaluator(self) -> Evaluator:
        if self._evaluator is None:
            self._evaluator = Evaluator(
                self.agent,
                self.files,
                num_attempts=self.cfg.num_attempts,
                max_steps=self.max_steps,
                record=self.cfg.gif_levels,
            )
        return self._evaluator

    def evaluate(self, state: PPOState) -> dict[str, float]:
        names, res, shown = self.evaluator(state, jax.random.PRNGKey(self.seed))
        update = int(jax.device_get(state.update))
        self._last = {"update": update, "out": (names, res, shown)}
        s = ev.summary(res)
        if self.progress:
            left = len(self.left_names)
            skipped = f" ({left} larger than env.size left out)" if left else ""
            write_line(
                f"eval @ update {update}: solve rate {s['solve_rate']:.2f} on "
                f"{len(names)} level(s){skipped} x {res.num_attempts} attempts, "
                f"return {s['return']:.3f}"
            )
        return {"solve_rate": s["solve_rate"], "return": s["return"], "length": s["length"]}

    def finalize(self, state: PPOState, run_dir: Path) -> None:
        if self._last.get("update") == int(jax.device_get(state.update)):
            names, res, shown = self._last["out"]  # the loop's final evaluation of this state
        else:
            names, res, shown = self.evaluator(state, jax.random.PRNGKey(self.seed))
        write_table(Path(run_dir), names, res, left_out=self.left_names)
        if self.cfg.gif_levels > 0 and shown is not None:
            write_gif(self.evaluator.groups[0], shown, Path(run_dir) / "agent.gif")


def report(
    evaluator: Evaluator,
    state: PPOState,
    key: jax.Array,
    *,
    step: int,
    baselines: bool = False,
    as_json: bool = False,
) -> str:
    """``jaxlab eval``'s output for the checkpoint ``state`` of step ``step``: the per-level
    solve table (or one JSON line), with the random and no-op policies' solve rates when
    ``baselines``."""
    names, res, _ = evaluator(state, key)
    extra = {}
    if baselines:
        for kind in ("random", "noop"):
            extra[kind] = evaluator(state, key, kind)[1].solve_rate
    if not as_json:
        return ev.format_table(names, res, extra=extra)
    out = {
        "step": step,
        "levels": {n: float(res.solve_rate[i]) for i, n in enumerate(names)},
        "summary": ev.summary(res),
    }
    out.update({f"{k}_solve_rate": float(np.mean(v)) for k, v in extra.items()})
    return json_files.dumps(out, where="the evaluation summary")
