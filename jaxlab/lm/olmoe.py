"""OLMoE training pieces: the objective, the expert-parallel layout and the early checkpoint.

The OLMoE objective (OLMoE §2, megablocks normalisation, :func:`jaxlab.lm.moe.aux_loss`)

    L = CE + w_LB mean_l L_LB^(l) + w_RZ mean_l L_RZ^(l),   w_LB = 0.01, w_RZ = 0.001

with the weights read from the train state's traced values (:data:`TRACED`), so a sweep over them
is one vmapped program. With ``mesh.expert > 1`` the MoE layers run expert-parallel (experts split
over the mesh axis ``expert``, tokens over ``data x fsdp x expert``, ``all_to_all`` inside
``shard_map``): :func:`check_layout` checks a layout against the experts and the batch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from jaxlab.core.checkpoint import Checkpointer
from jaxlab.core.config import ConfigError
from jaxlab.lm import moe as moe_lib
from jaxlab.lm.model import Decoder, DecoderConfig, next_token_loss
from jaxlab.lm.routing_stats import RoutingStats, summarize
from jaxlab.lm.training import corpus_metrics, validation_windows

#: the auxiliary-loss weights, traced (dotted keys of a config whose ``model`` is a DecoderConfig)
TRACED: tuple[str, ...] = ("model.moe.lb_loss_weight", "model.moe.z_loss_weight")

#: the mesh axes the tokens of a batch are split over
TOKEN_AXES: tuple[str, ...] = ("data", "fsdp", "expert")


def check_layout(model: DecoderConfig, batch_size: int, sizes: Mapping[str, int]) -> None:
    """Checks mesh axis ``sizes`` (``{"data": .., "fsdp": .., "expert": ..}``; ``-1`` or ``0``:
    not fixed yet, skipped) against the experts and the batch.

    Raises:
      ConfigError: naming ``mesh.expert`` (does not divide ``model.moe.num_experts``) or
        ``data.batch_size`` (not a multiple of ``data x fsdp x expert``), before anything compiles.
    """
    e = model.moe.num_experts
    if sizes.get("expert", 0) > 0 and e % sizes["expert"]:
        raise ConfigError("mesh.expert", sizes["expert"], f"a divisor of model.moe.num_experts={e}")
    n_tok = math.prod(sizes[a] for a in TOKEN_AXES if sizes.get(a, 0) > 0)
    if batch_size % n_tok:
        raise ConfigError(
            "data.batch_size",
            batch_size,
            f"a multiple of the mesh data x fsdp x expert = {n_tok} ({dict(sizes)})",
        )


def stack_routing_stats(collection: Any) -> RoutingStats | None:
    """The sown :class:`RoutingStats` of all MoE layers stacked on a leading ``[L]`` axis."""
    leaves = [
        x
        for x in jax.tree.leaves(collection, is_leaf=lambda x: isinstance(x, RoutingStats))
        if isinstance(x, RoutingStats)
    ]
    if not leaves:
        return None
    return jax.tree.map(lambda *xs: jnp.stack(xs), *leaves)


def moe_objective(
    model: Decoder, params: Any, tokens: Int[Array, "batch seq1"], hparams: Mapping[str, Any]
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """``L = CE + w_LB L_LB + w_RZ L_RZ`` of packed windows ``tokens [B, T+1]``, and metrics.

    ``w_LB``, ``w_RZ``: ``hparams``' :data:`TRACED` values (the model config's when absent).
    Metrics: ``ce_loss``, ``moe/lb_loss``, ``moe/z_loss`` (unweighted layer means) and the routing
    statistics of :func:`jaxlab.lm.routing_stats.summarize` over the MoE layers.
    """
    moe = model.cfg.moe
    logits, sown = model.apply(
        params, tokens[:, :-1], mutable=[moe_lib.AUX_LOSS_COLLECTION, moe_lib.STATS_COLLECTION]
    )
    ce = next_token_loss(logits, tokens[:, 1:])
    _, metrics = moe_lib.aux_loss(
        sown.get(moe_lib.AUX_LOSS_COLLECTION, {}),
        lb_loss_weight=moe.lb_loss_weight,
        z_loss_weight=moe.z_loss_weight,
    )
    # the weighted sum of aux_loss with the (traced) weights
    w_lb = hparams.get(TRACED[0], moe.lb_loss_weight)
    w_z = hparams.get(TRACED[1], moe.z_loss_weight)
    aux = w_lb * metrics["moe/lb_loss"] + w_z * metrics["moe/z_loss"]
    stats = stack_routing_stats(sown.get(moe_lib.STATS_COLLECTION, {}))
    if stats is not None:
        metrics.update(summarize(stats))
    return ce + aux, {"ce_loss": ce, **metrics}


def in_mesh(fn: Callable, mesh: jax.sharding.Mesh) -> Callable:
    """``fn`` traced with ``mesh`` as the abstract mesh in context (for the expert-parallel MoE)."""

    def wrapped(*args):
        with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
            return fn(*args)

    return wrapped


def with_expert_parallel(model: DecoderConfig, expert_parallel: bool) -> DecoderConfig:
    """``model`` with its MoE layers' ``expert_parallel`` flag set."""
    return dataclasses.replace(
        model, moe=dataclasses.replace(model.moe, expert_parallel=expert_parallel)
    )


def early_dir(run_dir: str | Path) -> Path:
    """Where a run keeps its early checkpoint (for the router-saturation analysis)."""
    return Path(run_dir) / "early"


def save_early(run_dir: str | Path, config: Any, step: int, state: Any) -> None:
    """Writes ``state`` as the early checkpoint ``early_dir(run_dir)/<step>`` (once)."""
    ck = Checkpointer(early_dir(run_dir), config, keep=1, async_save=False)
    try:
        if ck.latest_step() != step:
            ck.save(step, state, force=True)
    finally:
        ck.close()


def early_params(run_dir: str | Path, config: Any, abstract: Any) -> tuple[Any, int]:
    """``(params, step)`` of the run's early checkpoint restored onto ``abstract`` (the state's
    abstract tree), or of its oldest kept checkpoint when it has none (said on stdout)."""
    directory, step = early_dir(run_dir), None
    if not directory.exists():
        directory = Path(run_dir) / "checkpoints"
        ck = Checkpointer(directory, config)
        try:
            step = min(ck.all_steps())
        finally:
            ck.close()
        print(f"no early checkpoint in {early_dir(run_dir)}; using the oldest kept step {step}")
    ck = Checkpointer(directory, config, create=False)
    try:
        state, s = ck.restore(abstract, step=step)
    finally:
        ck.close()
    return state.params, s


class Evaluation:
    """The MoE LM's evaluation on ``val_batches`` validation windows: mean cross-entropy (as
    ``val_loss`` and bits per byte), the auxiliary losses and the routing statistics; it keeps
    the state of step ``early_step`` in memory and ``finalize`` writes it as the early
    checkpoint, unless a loop hook (multi-host runs) already wrote it.

    ``config`` is the recipe's config (``data``, ``val_batches``, ``analysis_early_step``).
    """

    def __init__(self, config: Any, model: Decoder, batch: Any, mesh, expert_parallel: bool):
        self.config = config

        def val_metrics(params: Any, tokens: jax.Array, hparams: dict) -> dict[str, jax.Array]:
            return moe_objective(model, params, tokens, hparams)[1]

        self.stats_fn = jax.jit(in_mesh(val_metrics, mesh) if expert_parallel else val_metrics)
        self.batch = batch
        self.early: dict[str, Any] = {}

    def evaluate(self, state: Any) -> dict[str, float]:
        cfg = self.config
        if jax.process_count() == 1 and int(state.step) == cfg.analysis_early_step:
            self.early["state"] = jax.device_get(state)
        windows = validation_windows(cfg.data, self.batch, cfg.val_batches)
        rows = [self.stats_fn(state.params, t, state.hparams) for t in windows]
        rows = [{k: float(v) for k, v in r.items()} for r in rows]
        out = {f"val_{k}": float(np.mean([r[k] for r in rows])) for k in rows[0]}
        val = out.pop("val_ce_loss")
        return {"val_loss": val, **corpus_metrics(cfg.data, val), **out}

    def finalize(self, state: Any, run_dir: Path) -> None:
        del state
        if "state" in self.early and not early_dir(run_dir).exists():
            save_early(run_dir, self.config, self.config.analysis_early_step, self.early["state"])


def analyse_run(run: Any, config: Any, run_dir: Path, num_batches: int) -> None:
    """The routing analysis of an opened olmoe run (final checkpoint against the early one) on
    ``num_batches`` validation batches, written to ``run_dir/analysis``
    (:func:`jaxlab.lm.routing_analysis.write_report`)."""
    from jaxlab.lm import routing_analysis
    from jaxlab.lm.data import validation_iterator

    abstract = jax.eval_shape(run.parts.init, jax.random.PRNGKey(config.seed))
    params_early, early_step = early_params(run_dir, config, abstract)
    it = validation_iterator(config.data)
    batches = [b["tokens"] for _, b in zip(range(num_batches), it, strict=False)]
    model = Decoder(with_expert_parallel(config.model, False))
    result = routing_analysis.analyse_routing(model, run.state.params, params_early, batches)
    routing_analysis.write_report(
        result, Path(run_dir) / "analysis", early_step=early_step, final_step=run.step,
        top_k=config.model.moe.top_k,
    )  # fmt: skip
