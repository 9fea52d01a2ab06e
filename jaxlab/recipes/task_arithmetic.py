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
from pathlib import Path
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from jaxlab.core import json_files, optim
from jaxlab.core.loop import LoopConfig
from jaxlab.core.optim import OptimConfig
from jaxlab.core.recipe import Parts, Recipe, hparams_of, register
from jaxlab.core.sharding import MeshConfig, constrain_leading
from jaxlab.lm import task_arithmetic as ta

RELATIONS = tuple(ta.RELATIONS)


@dataclasses.dataclass(frozen=True)
class TaskArithmeticConfig:
    """``loop.total_steps`` is the number of fine-tuning steps.

    Attributes:
      seed: PRNG seed.
      experiment: data model, model width, batch, grid, rank and pruning fraction.
      optim: the fine-tuning optimiser (SGD at 0.5; its rate traced).
    """

    seed: int = 0
    experiment: ta.ExperimentConfig = ta.ExperimentConfig()
    optim: OptimConfig = ta.SGD
    mesh: MeshConfig = MeshConfig(data=1)
    loop: LoopConfig = LoopConfig(
        total_steps=200, steps_per_call=50, log_every=50, eval_every=100, checkpoint_every=100
    )


@flax.struct.dataclass
class EditState:
    """Per relation (leading axis 3): ``Ψ_0``, the two fine-tunes and their optimiser states;
    ``hparams["optim.lr"]`` is the (traced) learning rate."""

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
    ex, total = cfg.experiment, cfg.loop.total_steps
    alphas = jnp.asarray([ta.RELATIONS[r] for r in RELATIONS])
    model = ta.OneLayerTransformer(width=ex.width)

    def spread(x):  # a batch made inside the step, split over the data axes
        return constrain_leading(x, mesh)

    def init(key: jax.Array) -> EditState:
        k_setup, k_data = jax.random.split(key)
        p0, mu, irrelevant = jax.vmap(lambda a: ta.setup(k_setup, ex, a)[1:4], 0)(alphas)
        o = jax.vmap(optim.make(cfg.optim, total).init)(p0)
        zero = jnp.zeros((), jnp.int32)
        return EditState(p0, p0, p0, o, o, mu, irrelevant, k_data, zero, hparams_of(RECIPE, cfg))

    def train_step(state: EditState, batch: None) -> tuple[EditState, dict]:
        del batch
        opt = optim.from_hparams(cfg.optim, total, state.hparams)

        def one(p, o, mu, irrelevant, key):
            return ta.finetune_step(
                key, model, p, o, opt, ex.data, mu, irrelevant, ex.batch, spread
            )

        k1, k2 = jax.random.split(jax.random.fold_in(state.key, state.step))
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
        out = ta.summarize(_all(state), RELATIONS)
        return {
            f"{rel}_{name}_{task}": v
            for rel, table in out.items()
            for name in ("add", "negate")
            for task, v in table["full"][name].items()
        }

    def finalize(state: EditState, run_dir: Path) -> None:
        grids = _all(state)
        table = ta.summarize(grids, RELATIONS)
        json_files.write(Path(run_dir) / "results.json", table)
        ta.write_relation_heatmaps(run_dir, grids, RELATIONS)

    return Parts(
        init=init,
        train_step=train_step,
        evaluate=evaluate,
        finalize=finalize,
        units_per_step=(2 * len(RELATIONS) * ex.batch, "sample"),
    )


RECIPE = register(
    Recipe(
        name="task-arithmetic",
        config_cls=TaskArithmeticConfig,
        build=build,
        description="task vectors (add / negate, rank-1, pruned) on the one-layer transformer of "
        "the task-vector theory, for irrelevant, aligned and contradictory tasks",
        default_preset="cpu",
        traced=("optim.lr",),
    )
)
