"""``gnn``: node classification on cSBM or karate with optional DIGL/JDR rewiring, on the shared loop.

One loop step is one full-batch optimisation step of *all* seeds at once (``num_seeds`` random
splits x initialisations, vmapped inside the state), followed by evaluation and early-stopping
bookkeeping on validation accuracy (best validation accuracy and the test accuracy at that epoch
are kept in the state). ``loop.total_steps`` is the number of epochs.

The data (graph sample, rewiring, GCN normalisation) are computed inside ``init`` from the config,
so the run is a pure function of the config and resumes from a checkpoint bit for bit. The seeds
are the data-parallel axis: their stacked states are split over the mesh's data axes (the graph is
replicated), so ``num_seeds`` seeds train on as many devices as divide them.

Traced hyper-parameters (``state.hparams``): ``optim.lr`` and ``optim.weight_decay``. The JDR
rates (``jdr.eta_*``), ``graph.phi`` and the rewiring run in ``init`` (they make the data), so
they are static: a sweep over them is a sequence of runs.

Examples::

    jaxlab train gnn graph.phi=0.25 rewire=jdr
    jaxlab train gnn --preset karate trainer.model=gprgnn
    jaxlab sweep gnn graph.phi=-0.5,0,0.5 rewire=none,jdr --seeds 10
"""

from __future__ import annotations

from pathlib import Path

import flax.struct
import jax
import jax.numpy as jnp
from jaxtyping import Array, Int

from jaxlab.core import json_files
from jaxlab.core import optim as optim_lib
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.core.sharding import leading_axis_sharding, state_shardings
from jaxlab.graph.experiment import GnnConfig, make_data_fn, trainer_spec
from jaxlab.graph.node_classification import (
    NodeData,
    SeedState,
    current_accuracy,
    init_seeds,
    make_model,
    per_seed_results,
    seeds_summary,
    train_epoch,
)

__all__ = ["GnnConfig", "GnnState", "TRACED", "build", "RECIPE"]


@flax.struct.dataclass
class GnnState:
    """Train state of the ``gnn`` recipe.

    Attributes:
      step: epochs done.
      data: features, labels and normalised graph shared by all seeds.
      seeds: per-seed states stacked on a leading ``num_seeds`` axis.
      hparams: the traced ``{"optim.lr": ..., "optim.weight_decay": ...}``.
    """

    step: Int[Array, ""]
    data: NodeData
    seeds: SeedState
    hparams: dict[str, jax.Array] = flax.struct.field(default_factory=dict)


TRACED: tuple[str, ...] = optim_lib.traced_keys()


def build(cfg: GnnConfig, mesh: jax.sharding.Mesh) -> Parts:
    """The ``gnn`` parts: data + seeds in ``init``, one vmapped epoch per ``train_step``, the
    seeds split over the mesh's data axes."""
    spec = trainer_spec(cfg)
    data_fn = make_data_fn(cfg)
    model = make_model(spec)
    optim_args = dict(optim=cfg.optim, total_steps=cfg.loop.total_steps)

    def init(key: jax.Array) -> GnnState:
        data = data_fn()
        return GnnState(
            step=jnp.zeros((), jnp.int32),
            data=data,
            seeds=init_seeds(key, data, spec, cfg.num_seeds, **optim_args),
            hparams=optim_lib.hparams(cfg.optim),
        )

    def state_sharding(abstract: GnnState) -> GnnState:
        replicated = state_shardings(abstract, mesh)
        seeds = jax.tree.map(lambda x: leading_axis_sharding(x.shape, mesh), abstract.seeds)
        return replicated.replace(seeds=seeds)

    def train_step(state: GnnState, batch: None) -> tuple[GnnState, dict]:
        del batch
        seeds, metrics = train_epoch(
            state.data, state.seeds, spec, hparams=state.hparams, **optim_args
        )
        return state.replace(step=state.step + 1, seeds=seeds), metrics

    def evaluate(state: GnnState) -> dict[str, float]:
        return seeds_summary(state.seeds, current_accuracy(model, state.data, state.seeds))

    def finalize(state: GnnState, run_dir: Path) -> None:
        out = {
            "graph": cfg.graph.name,
            "phi": cfg.graph.phi if cfg.graph.name == "csbm" else None,
            "model": cfg.trainer.model,
            "rewire": cfg.rewire,
            "epochs": int(state.step),
            "summary": evaluate(state),
            "per_seed": per_seed_results(state.seeds),
        }
        json_files.write(Path(run_dir) / "results.json", out)

    return Parts(
        init=init,
        train_step=train_step,
        state_sharding=state_sharding,
        evaluate=evaluate,
        finalize=finalize,
        units_per_step=(cfg.num_seeds, "seed-epoch"),
    )


RECIPE = register(
    Recipe(
        name="gnn",
        config_cls=GnnConfig,
        build=build,
        description="GCN/GPRGNN node classification on cSBM/karate with DIGL or JDR rewiring",
        traced=TRACED,
    )
)
