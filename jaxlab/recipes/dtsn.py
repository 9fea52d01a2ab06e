"""``dtsn``: D-TSN learning to search from oracle demonstrations (grid mazes or Game of 24).

The run is a pure function of the config: ``init`` generates the demonstrations (BFS shortest
paths on procedurally generated mazes, or solution sequences of training Game of 24 instances)
and the networks; each step draws a batch with the key kept in the state and takes one step of
``optim`` (default: clipping at 10, then Adam at 1e-3; ``optim.lr`` traced) on ``jax.grad`` of
the D-TSN objective (``jaxlab.rl.search.dtsn.dtsn_loss``), or of the
baselines' (``learner.method=bc`` behaviour cloning, ``learner.method=fixed`` breadth-first
search). Evaluation plays greedy episodes on held-out layouts / instances and reports the
success rate and the path-length ratio to the BFS optimum; ``finalize`` writes ``results.json``
and, for mazes, ``episode.gif`` (one held-out episode, at the held-out size, on the layout with the
longest shortest path of 16, each step's search tree drawn). ``learner.eval_height`` /
``learner.eval_width`` add an evaluation on held-out mazes of another size (e.g. 1.5-2x the
training size) in the same static map (``learner.map_height`` / ``learner.map_width``);
``learner.layout=perfect`` trains and evaluates on Procgen-style perfect mazes.

Examples::

    jaxlab train dtsn --preset cpu                  # 8x8 mazes, 500 demonstrations, K = 10
    jaxlab train dtsn --preset game24-cpu
    jaxlab train dtsn --preset cpu learner.method=bc
    jaxlab train dtsn --preset procgen-cpu          # Procgen-style mazes, pixels
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax

from jaxlab.core import json_files
from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.optim import OptimConfig
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.core.sharding import MeshConfig, constrain_leading
from jaxlab.rl.search import render, training
from jaxlab.rl.search.training import LearnerConfig


@dataclasses.dataclass(frozen=True)
class DtsnConfig:
    """Attributes: ``seed``; ``learner`` (env, method, sizes, K, T, losses); ``optim`` (the
    optimiser; ``optim.lr`` traced); ``eval_seed`` of the held-out layouts; ``gif`` writes the
    maze episode GIF at the end; ``loop``."""

    seed: int = 0
    learner: LearnerConfig = LearnerConfig()
    optim: OptimConfig = training.OPTIM
    eval_seed: int = 1234
    gif: bool = True
    mesh: MeshConfig = MeshConfig(data=1)
    loop: LoopConfig = LoopConfig(
        total_steps=2000, steps_per_call=50, log_every=100, eval_every=1000, checkpoint_every=1000
    )

    def __post_init__(self):
        if self.eval_seed == self.seed:
            raise ConfigError("eval_seed", self.eval_seed, f"a seed other than seed={self.seed}")


def build(cfg: DtsnConfig, mesh: jax.sharding.Mesh) -> Parts:
    """Data parallel over ``mesh``: each step's sampled transitions are split over the data axes;
    the parameters and the demonstrations are replicated."""
    learner = cfg.learner
    run = dict(optim=cfg.optim, total_steps=cfg.loop.total_steps)

    def spread(x):  # a batch made inside the step, split over the data axes
        return constrain_leading(x, mesh)

    eval_fn = jax.jit(
        lambda params: training.evaluate(jax.random.key(cfg.eval_seed), params, learner)
    )

    def evaluate(state) -> dict[str, float]:
        return {k: float(v) for k, v in jax.device_get(eval_fn(state.params)).items()}

    def finalize(state, run_dir: Path) -> None:
        out = {"env": learner.env, "method": learner.method, "steps": int(state.step)}
        out.update(evaluate(state))
        if learner.env == "maze" and learner.method != "bc" and cfg.gif:
            candidates = training.heldout_mazes(jax.random.key(cfg.eval_seed), learner, 16, True)
            steps, solved = render.episode_gif(
                Path(run_dir) / "episode.gif",
                state.params,
                render.longest_layout(candidates),
                model=training.search_model(learner),
                config=learner.search_config(),
                max_steps=learner.eval_max_steps,
                env=training.maze_env(learner)[0],
            )
            out["gif"] = {"steps": steps, "solved": bool(solved)}
        json_files.write(Path(run_dir) / "results.json", out)

    return Parts(
        init=lambda key: training.init(key, learner, **run),
        train_step=lambda state, batch: training.train_step(state, learner, spread, **run),
        evaluate=evaluate,
        finalize=finalize,
        units_per_step=(learner.batch_size, "transition"),
    )


RECIPE = register(
    Recipe(
        name="dtsn",
        config_cls=DtsnConfig,
        build=build,
        description="D-TSN: learning to search from demonstrations (grid mazes, Game of 24)",
        default_preset="cpu",
        traced=training.TRACED,
    )
)

__all__ = ["DtsnConfig", "RECIPE", "build"]
