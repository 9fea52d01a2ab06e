"""``task-arithmetic``: task vectors on the one-layer transformer of arXiv 2504.10957.

A loop step is one SGD step (hinge loss, fresh batch) of both fine-tunes ``Ψ_1`` (task ``μ_1``)
and ``Ψ_2`` (task ``μ_2``) from the shared ``Ψ_0``, for the three task relations at once
(irrelevant α=0, aligned α=+0.7, contradictory α=−0.7: a vmap axis). ``finalize`` evaluates
``Ψ_0 + λ_1 ΔΨ_1 + λ_2 ΔΨ_2`` over the λ grid for the full, rank-1 and 50 %-pruned task vectors and
writes ``results.json`` (the addition / negation table) and one heat map per relation
(``heatmap_<relation>_{T1,T2,both,ood}.png``: T1, T2, min(T1, T2) and the out-of-domain target
``μ' ∝ μ_1 + μ_2``).

Examples::

    jaxlab train task-arithmetic --preset cpu
    jaxlab train task-arithmetic experiment.data.d=64
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.recipe import Parts, Recipe, hparams_of, register
from jaxlab.core.sharding import MeshConfig, constrain_leading
from jaxlab.lm import task_arithmetic as ta

RELATIONS = tuple(ta.RELATIONS)


@dataclasses.dataclass(frozen=True)
class TaskArithmeticConfig:
    """``loop.total_steps`` is the number of fine-tuning steps (``experiment.steps`` is unused).

    Attributes:
      seed: PRNG seed.
      experiment: data model, model width, batch, lr, grid, rank and pruning fraction.
    """

    seed: int = 0
    experiment: ta.ExperimentConfig = ta.ExperimentConfig()
    mesh: MeshConfig = MeshConfig(data=1)
    loop: LoopConfig = LoopConfig(
        total_steps=200, steps_per_call=50, log_every=50, eval_every=100, checkpoint_every=100
    )

    def __post_init__(self):
        if self.experiment.grid < 2:
            raise ConfigError("experiment.grid", self.experiment.grid, "an integer >= 2")


@flax.struct.dataclass
class EditState:
    """Per relation (leading axis 3): ``Ψ_0``, the two fine-tunes and their optimiser states;
    ``hparams["experiment.lr"]`` is the (traced) SGD learning rate."""

    p0: Any
    p1: Any
    p2: Any
    opt1: Any
    opt2: Any
    mu: jax.Array
    irrelevant: jax.Array
    key: jax.Array
    step: jax.Array
    hparams: dict


def build(cfg: TaskArithmeticConfig, mesh: jax.sharding.Mesh) -> Parts:
    """The recipe's parts: data parallel over ``mesh`` (each fine-tuning batch is split over the
    data axes, the small state is replicated)."""

    def spread(x):  # a batch made inside the step, split over the data axes
        return constrain_leading(x, mesh)

    ex = cfg.experiment
    alphas = jnp.asarray([ta.RELATIONS[r] for r in RELATIONS])
    # SGD keeps no state, so the traced learning rate only scales the update in train_step
    opt = optax.sgd(1.0)

    def _setup(key):
        return jax.vmap(lambda a: ta.setup(key, ex, a)[1:4], 0)(alphas)

    model = ta.OneLayerTransformer(width=ex.width)

    def init(key: jax.Array) -> EditState:
        k_setup, k_data = jax.random.split(key)
        p0, mu, irrelevant = _setup(k_setup)
        o = jax.vmap(opt.init)(p0)
        return EditState(
            p0,
            p0,
            p0,
            o,
            o,
            mu,
            irrelevant,
            k_data,
            jnp.zeros((), jnp.int32),
            hparams=hparams_of(RECIPE, cfg),
        )

    def train_step(state: EditState, batch: None) -> tuple[EditState, dict]:
        del batch
        lr = state.hparams["experiment.lr"]

        def one(p, o, mu, irrelevant, key):
            x, y = ta.sample(key, ex.data, mu, irrelevant, ex.batch)
            x, y = spread(x), spread(y)
            loss, g = jax.value_and_grad(lambda q: ta.hinge_loss(model.apply(q, x), y))(p)
            u, o = opt.update(g, o, p)
            return optax.apply_updates(p, jax.tree.map(lambda v: lr * v, u)), o, loss

        key = jax.random.fold_in(state.key, state.step)
        k1, k2 = jax.random.split(key)
        r = len(RELATIONS)
        p1, o1, l1 = jax.vmap(one)(
            state.p1, state.opt1, state.mu[:, 0], state.irrelevant, jax.random.split(k1, r)
        )
        p2, o2, l2 = jax.vmap(one)(
            state.p2, state.opt2, state.mu[:, 1], state.irrelevant, jax.random.split(k2, r)
        )
        new = state.replace(p1=p1, p2=p2, opt1=o1, opt2=o2, step=state.step + 1)
        return new, {"loss_t1": jnp.mean(l1), "loss_t2": jnp.mean(l2)}

    @jax.jit
    def _grids(state: EditState, key: jax.Array):
        def one(p0, p1, p2, mu, irrelevant):
            tests = tuple(
                ta.sample(jax.random.fold_in(key, i), ex.data, mu[i], irrelevant, ex.eval_samples)
                for i in range(3)
            )
            return ta.evaluate_edits(model, ex, p0, p1, p2, tests)

        return jax.vmap(one)(state.p0, state.p1, state.p2, state.mu, state.irrelevant)

    def _all(state):
        return jax.device_get(_grids(state, jax.random.PRNGKey(cfg.seed + 7)))

    def evaluate(state: EditState) -> dict[str, float]:
        out = summarize(_all(state))
        return {
            f"{rel}_{name}_{task}": v
            for rel, table in out.items()
            for name in ("add", "negate")
            for task, v in table["full"][name].items()
        }

    def finalize(state: EditState, run_dir: Path) -> None:
        grids = _all(state)
        run_dir = Path(run_dir)
        table = summarize(grids)
        (run_dir / "results.json").write_text(json.dumps(table, indent=1) + "\n")
        for r, rel in enumerate(RELATIONS):
            full = grids["full"][r]
            ta.write_heatmaps(
                run_dir,
                f"heatmap_{rel}",
                grids["grid"][r],
                {
                    "T1": full[..., 0],
                    "T2": full[..., 1],
                    "both": np.minimum(full[..., 0], full[..., 1]),
                    "ood": full[..., 2],
                },
                title=f"{rel} (α={ta.RELATIONS[rel]:+.1f}):",
            )

    return Parts(
        init=init,
        train_step=train_step,
        evaluate=evaluate,
        finalize=finalize,
        units_per_step=(2 * len(RELATIONS) * ex.batch, "sample"),
    )


def summarize(grids: dict[str, np.ndarray]) -> dict[str, Any]:
    """Per relation and variant: accuracies at addition ``(1, 1)`` and negation ``(1, −1)`` and
    the best ``min(T1, T2)`` over the grid (with its λ) and the best out-of-domain accuracy."""
    out: dict[str, Any] = {}
    for r, rel in enumerate(RELATIONS):
        grid = np.asarray(grids["grid"][r])
        flat = grid.reshape(-1, 2)
        rel_out = {}
        for variant in ("full", "low_rank", "pruned"):
            acc = np.asarray(grids[variant][r])

            def at(l1, l2, acc=acc, grid=grid):
                i, j = ta.grid_index(grid, l1, l2)
                return {t: round(float(acc[i, j, n]), 4) for n, t in enumerate(("T1", "T2", "OOD"))}

            both = np.minimum(acc[..., 0], acc[..., 1]).reshape(-1)
            ood = acc[..., 2].reshape(-1)
            rel_out[variant] = {
                "add": at(1.0, 1.0),
                "negate": at(1.0, -1.0),
                "best_both": round(float(both.max()), 4),
                "best_both_lambda": flat[both.argmax()].tolist(),
                "best_ood": round(float(ood.max()), 4),
                "best_ood_lambda": flat[ood.argmax()].tolist(),
            }
        out[rel] = rel_out
    return out


RECIPE = register(
    Recipe(
        name="task-arithmetic",
        config_cls=TaskArithmeticConfig,
        build=build,
        description="task vectors (add / negate, rank-1, pruned) on the one-layer transformer of "
        "the task-vector theory, for irrelevant, aligned and contradictory tasks",
        default_preset="cpu",
        traced=("experiment.lr",),
    )
)
