"""``gnn``: node classification on cSBM or karate with optional DIGL/JDR rewiring, on the shared loop.

One loop step is one full-batch optimisation step of *all* seeds at once (``num_seeds`` random
splits x initialisations, vmapped inside the state), followed by evaluation and early-stopping
bookkeeping on validation accuracy (best validation accuracy and the test accuracy at that epoch
are kept in the state). ``loop.total_steps`` is the number of epochs.

The data (graph sample, rewiring, GCN normalisation) are computed inside ``init`` from the config,
so the run is a pure function of the config and resumes from a checkpoint bit for bit.

Examples::

    jaxlab train gnn graph.phi=0.25 rewire=jdr
    jaxlab train gnn --preset karate model=gprgnn
"""

from __future__ import annotations

import json
from pathlib import Path

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int

from jaxlab.core.recipe import Recipe, Task, register
from jaxlab.graph.experiment import GnnConfig, make_data_fn, trainer_spec
from jaxlab.graph.node_classification import (
    NodeData,
    SeedState,
    init_seeds,
    make_model,
    train_epoch,
)

__all__ = ["GnnConfig", "GnnState", "build", "RECIPE"]


@flax.struct.dataclass
class GnnState:
    """Train state of the ``gnn`` recipe.

    Attributes:
      step: epochs done.
      data: features, labels and normalised graph shared by all seeds.
      seeds: per-seed states stacked on a leading ``num_seeds`` axis.
    """

    step: Int[Array, ""]
    data: NodeData
    seeds: SeedState


def _summary(state: GnnState, current: dict[str, np.ndarray]) -> dict[str, float]:
    s = jax.device_get(state.seeds)
    test = np.asarray(s.test_acc_at_best, np.float64)
    num = test.shape[0]
    return {
        "best_val_acc": float(np.mean(s.best_val_acc)),
        "test_acc_at_best": float(np.mean(test)),
        "test_acc_at_best_std": float(np.std(test)),
        "test_acc_at_best_ci95": float(1.96 * np.std(test) / np.sqrt(num)),
        "best_epoch": float(np.mean(s.best_epoch)),
        "active_seeds": float(np.sum(~np.asarray(s.stopped))),
        "val_acc": float(np.mean(current["val"])),
        "test_acc": float(np.mean(current["test"])),
    }


def build(cfg: GnnConfig) -> Task:
    """The ``gnn`` task: data + seeds in ``init``, one vmapped epoch per ``train_step``."""
    spec = trainer_spec(cfg)
    data_fn = make_data_fn(cfg)
    model = make_model(spec)

    def init(key: jax.Array) -> GnnState:
        data = data_fn()
        return GnnState(
            step=jnp.zeros((), jnp.int32),
            data=data,
            seeds=init_seeds(key, data, spec, cfg.num_seeds),
        )

    def train_step(state: GnnState, batch: None) -> tuple[GnnState, dict]:
        del batch
        seeds, metrics = train_epoch(state.data, state.seeds, spec)
        return state.replace(step=state.step + 1, seeds=seeds), metrics

    @jax.jit
    def current_accuracy(state: GnnState) -> dict[str, jax.Array]:
        def one(params, split):
            logp = model.apply({"params": params}, state.data.features, state.data.graph)
            correct = jnp.argmax(logp, axis=-1) == state.data.labels
            return {
                name: jnp.sum(correct & mask) / jnp.maximum(jnp.sum(mask), 1)
                for name, mask in (("val", split.val), ("test", split.test))
            }

        return jax.vmap(one)(state.seeds.params, state.seeds.split)

    def evaluate(state: GnnState) -> dict[str, float]:
        return _summary(state, jax.device_get(current_accuracy(state)))

    def finalize(state: GnnState, run_dir: Path) -> None:
        s = jax.device_get(state.seeds)
        out = {
            "graph": cfg.graph.name,
            "phi": cfg.graph.phi if cfg.graph.name == "csbm" else None,
            "model": cfg.model,
            "rewire": cfg.rewire,
            "epochs": int(state.step),
            "summary": evaluate(state),
            "per_seed": {
                "test_acc_at_best": [float(v) for v in s.test_acc_at_best],
                "best_val_acc": [float(v) for v in s.best_val_acc],
                "best_epoch": [int(v) for v in s.best_epoch],
            },
        }
        (Path(run_dir) / "results.json").write_text(json.dumps(out, indent=1) + "\n")

    return Task(
        init=init,
        train_step=train_step,
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
        presets_dir=Path(__file__).parent / "presets" / "gnn",
    )
)
