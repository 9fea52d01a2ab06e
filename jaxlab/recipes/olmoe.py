"""``olmoe``: an OLMoE-style mixture-of-experts decoder LM on the shared loop (brief lm.md §1).

The dense ``lm-tiny`` recipe (data, AdamW schedule, parameter placement, state) with every FFN
replaced by the OLMoE MoE layer (:class:`jaxlab.lm.moe.MoEFeedForward`) and the OLMoE objective

    L = CE + w_LB mean_l L_LB^(l) + w_RZ mean_l L_RZ^(l),   w_LB = 0.01, w_RZ = 0.001 (OLMoE §2)

(:func:`jaxlab.lm.moe.aux_loss`, megablocks normalisation). Every step logs routing statistics
(:func:`jaxlab.lm.routing_stats.summarize`: usage-entropy ratio, max/min load ratio, dropped
fraction). With ``mesh.expert > 1`` the MoE layers run expert-parallel (experts split over the mesh
axis ``expert``, tokens over ``data x fsdp x expert``, ``all_to_all`` inside ``shard_map``).

``jaxlab eval olmoe --run-dir DIR --analysis routing`` (:func:`eval_main`) analyses the routing of
the final checkpoint on validation batches (OLMoE §4): per-layer expert load, router saturation
against the early checkpoint kept at step ``analysis_early_step`` (:func:`early_checkpoint_hook`),
expert co-activation; it prints a table and writes PNG plots and ``routing.json`` to
``DIR/analysis``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from jaxlab import media
from jaxlab.core import loop as loop_lib
from jaxlab.core import run as run_lib
from jaxlab.core.checkpoint import Checkpointer
from jaxlab.core.config import ConfigError
from jaxlab.core.loop import Hook, LoopConfig
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.core.sharding import MeshConfig
from jaxlab.lm import moe as moe_lib
from jaxlab.lm import training
from jaxlab.lm.data import (
    ByteLMDataConfig,
    load_corpus,
    train_iterator,
    unigram_entropy,
    validation_iterator,
)
from jaxlab.lm.model import Decoder, DecoderConfig, next_token_loss
from jaxlab.lm.moe import AUX_LOSS_COLLECTION, STATS_COLLECTION, MoEConfig, MoEFeedForward
from jaxlab.lm.routing_stats import RoutingStats, routing_stats, summarize
from jaxlab.lm.training import LmState, OptimConfig

_TOKEN_AXES = ("data", "fsdp", "expert")


@dataclasses.dataclass(frozen=True)
class OlmoeConfig:
    """Config of the ``olmoe`` recipe (``model.moe`` must be set; OLMoE puts it in every layer).

    Attributes:
      analysis_early_step: the step whose checkpoint is kept under ``run_dir/early`` for the
        router-saturation analysis.
      analysis_batches: validation batches used by ``jaxlab eval olmoe --analysis routing``.
    """

    seed: int = 0
    model: DecoderConfig = DecoderConfig(
        d_model=64,
        n_layers=2,
        n_heads=4,
        head_dim=16,
        d_ff=128,
        max_len=128,
        moe=MoEConfig(num_experts=8, top_k=2, expert_ff=64),
    )
    data: ByteLMDataConfig = ByteLMDataConfig(seq_len=128, batch_size=32)
    optim: OptimConfig = OptimConfig()
    mesh: MeshConfig = MeshConfig()
    val_batches: int = 16
    analysis_early_step: int = 100
    analysis_batches: int = 8
    loop: LoopConfig = LoopConfig(
        total_steps=600, steps_per_call=10, log_every=50, eval_every=100, checkpoint_every=200
    )

    def __post_init__(self):
        moe = self.model.moe
        if moe is None:
            raise ConfigError("model.moe", None, "an MoEConfig (the olmoe recipe is MoE)")
        if moe.top_k > moe.num_experts:
            raise ConfigError(
                "model.moe.top_k", moe.top_k, f"at most model.moe.num_experts={moe.num_experts}"
            )
        if self.data.seq_len > self.model.max_len:
            raise ConfigError(
                "data.seq_len", self.data.seq_len, f"at most model.max_len={self.model.max_len}"
            )
        if self.mesh.expert > 0 and moe.num_experts % self.mesh.expert:
            raise ConfigError(
                "mesh.expert",
                self.mesh.expert,
                f"a divisor of model.moe.num_experts={moe.num_experts}",
            )
        fixed = math.prod(getattr(self.mesh, a) for a in _TOKEN_AXES if getattr(self.mesh, a) > 0)
        if self.data.batch_size % fixed:
            raise ConfigError(
                "data.batch_size",
                self.data.batch_size,
                f"a multiple of mesh data x fsdp x expert = {fixed}",
            )
        for name in ("val_batches", "analysis_early_step", "analysis_batches"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an integer >= 1")


def check_layout(cfg: OlmoeConfig, num_devices: int) -> tuple[int, ...]:
    """Resolves ``cfg.mesh`` on ``num_devices`` and checks it against the experts and the batch.

    Raises:
      ConfigError: naming ``mesh.expert`` (does not divide ``num_experts``) or ``data.batch_size``
        (not a multiple of the resolved ``data x fsdp x expert``), before anything is compiled.
    """
    sizes = dict(
        zip(("data", "fsdp", "tensor", "expert"), cfg.mesh.resolve(num_devices), strict=True)
    )
    e = cfg.model.moe.num_experts
    if e % sizes["expert"]:
        raise ConfigError("mesh.expert", sizes["expert"], f"a divisor of model.moe.num_experts={e}")
    n_tok = math.prod(sizes[a] for a in _TOKEN_AXES)
    if cfg.data.batch_size % n_tok:
        raise ConfigError(
            "data.batch_size",
            cfg.data.batch_size,
            f"a multiple of the resolved mesh data x fsdp x expert = {n_tok} ({sizes})",
        )
    return tuple(sizes.values())


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
    model: Decoder, params: Any, tokens: Int[Array, "batch seq1"]
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """``L = CE + w_LB L_LB + w_RZ L_RZ`` of packed windows ``tokens [B, T+1]``, and metrics.

    Metrics: ``ce_loss``, ``moe/lb_loss``, ``moe/z_loss`` (unweighted layer means) and the routing
    statistics of :func:`jaxlab.lm.routing_stats.summarize` over the MoE layers.
    """
    moe = model.cfg.moe
    logits, sown = model.apply(
        params, tokens[:, :-1], mutable=[AUX_LOSS_COLLECTION, STATS_COLLECTION]
    )
    ce = next_token_loss(logits, tokens[:, 1:])
    aux, metrics = moe_lib.aux_loss(
        sown.get(AUX_LOSS_COLLECTION, {}),
        lb_loss_weight=moe.lb_loss_weight,
        z_loss_weight=moe.z_loss_weight,
    )
    stats = stack_routing_stats(sown.get(STATS_COLLECTION, {}))
    if stats is not None:
        metrics.update(summarize(stats))
    return ce + aux, {"ce_loss": ce, **metrics}


def _in_mesh(fn: Any, mesh: jax.sharding.Mesh) -> Any:
    """``fn`` traced with ``mesh`` as the abstract mesh in context (for the expert-parallel MoE)."""

    def wrapped(*args):
        with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
            return fn(*args)

    return wrapped


def model_config(cfg: OlmoeConfig, expert_parallel: bool) -> DecoderConfig:
    moe = dataclasses.replace(cfg.model.moe, expert_parallel=expert_parallel)
    return dataclasses.replace(cfg.model, moe=moe)


def expert_parallel(cfg: OlmoeConfig, mesh: jax.sharding.Mesh) -> bool:
    """Whether the MoE layers run expert-parallel on ``mesh`` (checked against the layout)."""
    n_ep = check_layout(cfg, mesh.devices.size)[3]
    return cfg.model.moe.expert_parallel or n_ep > 1


def train_step_fn(cfg: OlmoeConfig, mesh: jax.sharding.Mesh) -> Any:
    """The LM train step with the MoE objective, expert-parallel when the mesh says so."""
    ep = expert_parallel(cfg, mesh)
    model = Decoder(model_config(cfg, ep))
    step = training.make_train_step(model, cfg.optim, cfg.loop.total_steps, moe_objective)
    return _in_mesh(step, mesh) if ep else step


def init_fn(cfg: OlmoeConfig) -> Any:
    """``key -> LmState``; batch 1 needs no mesh, and both layouts have the same parameters."""
    return training.make_init(
        Decoder(model_config(cfg, False)), cfg.optim, cfg.loop.total_steps, cfg.data.seq_len
    )


def early_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "early"


def save_early(cfg: OlmoeConfig, run_dir: str | Path, step: int, state: Any) -> None:
    """Writes ``state`` as the early checkpoint (``run_dir/early/<step>``), once."""
    ck = Checkpointer(early_dir(run_dir), cfg, keep=1, async_save=False)
    try:
        if ck.latest_step() != step:
            ck.save(step, state, force=True)
    finally:
        ck.close()


def early_checkpoint_hook(cfg: OlmoeConfig, run_dir: str | Path) -> Hook:
    """A loop hook keeping the step-``analysis_early_step`` state under ``run_dir/early``."""

    def fn(step: int, state: Any, metrics: dict) -> None:
        if step == cfg.analysis_early_step:
            save_early(cfg, run_dir, step, state)

    return Hook(fn, every=cfg.analysis_early_step)


def train(cfg: OlmoeConfig, run_dir: str | Path, **kwargs: Any) -> loop_lib.RunResult:
    """``jaxlab.core.loop.run`` of this recipe with the early-checkpoint hook."""
    return loop_lib.run(RECIPE, cfg, run_dir, **kwargs)  # RECIPE.hooks adds the early hook


def build(cfg: OlmoeConfig, mesh: jax.sharding.Mesh) -> Parts:
    host, hosts = jax.process_index(), jax.process_count()
    ep = expert_parallel(cfg, mesh)
    model = Decoder(model_config(cfg, ep))
    batch = training.abstract_batch(cfg.data, mesh)

    def val_metrics(params: Any, tokens: jax.Array) -> dict[str, jax.Array]:
        return moe_objective(model, params, tokens)[1]

    stats_fn = jax.jit(_in_mesh(val_metrics, mesh) if ep else val_metrics)
    early: dict[str, Any] = {}

    def evaluate(state: LmState) -> dict[str, float]:
        # Without a loop hook (``jaxlab train``), the early state is kept from the evaluation at
        # step ``analysis_early_step`` and written by ``finalize`` (single process; multi-host runs
        # use :func:`early_checkpoint_hook`).
        if hosts == 1 and int(state.step) == cfg.analysis_early_step:
            early["state"] = jax.device_get(state)
        rows = []
        it = validation_iterator(cfg.data, shard_index=host, shard_count=hosts)
        for _, b in zip(range(cfg.val_batches), it, strict=False):
            tokens = run_lib.place_batches(b, batch, leading=0)["tokens"]
            rows.append({k: float(v) for k, v in stats_fn(state.params, tokens).items()})
        out = {f"val_{k}": float(np.mean([r[k] for r in rows])) for k in rows[0]}
        val = out.pop("val_ce_loss")
        return {
            "val_loss": val,
            "unigram_entropy": unigram_entropy(load_corpus()),
            "val_bits_per_byte": val / np.log(2),
            **out,
        }

    def finalize(state: LmState, run_dir: Path) -> None:
        if "state" in early and not early_dir(run_dir).exists():
            save_early(cfg, run_dir, cfg.analysis_early_step, early["state"])

    return Parts(
        init=init_fn(cfg),
        train_step=train_step_fn(cfg, mesh),
        abstract_batch=batch,
        data=lambda: train_iterator(cfg.data, shard_index=host, shard_count=hosts),
        evaluate=evaluate,
        finalize=finalize,
        units_per_step=(cfg.data.batch_size * cfg.data.seq_len, "tok"),
    )


# ----------------------------------------------------------------------------------------------
# Routing analysis (OLMoE §4)
# ----------------------------------------------------------------------------------------------


def routing_trace(
    model: Decoder, params: Any, tokens: Int[Array, "batch seq"]
) -> tuple[Int[Array, "layer tokens k"], Float[Array, "layer tokens expert"]]:
    """Top-k expert ids and router probabilities of every MoE layer for ``tokens``.

    Intercepts each :class:`MoEFeedForward` call and recomputes ``p = softmax(x W_r)``,
    ``S = top_k(p)`` from its input (the layer's own routing, :func:`jaxlab.lm.moe.route`).

    Returns:
        ``experts [L, B*S, k]`` and ``probs [L, B*S, E]`` over the ``L`` MoE layers, in order.
    """
    experts, probs = [], []

    def interceptor(next_fun, args, kwargs, context):
        mod = context.module
        if isinstance(mod, MoEFeedForward) and context.method_name == "__call__":
            x = args[0]
            router = nn.meta.unbox(mod.get_variable("params", "router"))
            if router is not None:
                logits = jnp.einsum("...d,de->...e", x, router).reshape(-1, router.shape[-1])
                r = moe_lib.route(
                    logits, top_k=mod.config.top_k, normalize=mod.config.normalize_topk
                )
                experts.append(r.experts)
                probs.append(r.probs)
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(interceptor):
        model.apply(params, tokens)
    return jnp.stack(experts), jnp.stack(probs)


def router_saturation(
    early: Int[Array, "... tokens k"], final: Int[Array, "... tokens k"]
) -> Float[Array, "..."]:
    """OLMoE §4 router saturation: ``mean_t |S_t^early ∩ S_t^final| / k`` (1 = same experts)."""
    k = early.shape[-1]
    match = early[..., :, None] == final[..., None, :]  # [..., T, k, k]
    return jnp.mean(jnp.sum(jnp.any(match, axis=-1), axis=-1) / k, axis=-1)


def coactivation(experts: Int[Array, "tokens k"], num_experts: int) -> Float[Array, "e e"]:
    """OLMoE §4 co-activation ``C[i, j] = #{t: i, j in S_t} / #{t: i in S_t}`` (diagonal 0)."""
    onehot = jnp.sum(jax.nn.one_hot(experts, num_experts, dtype=jnp.float32), axis=-2)  # [T, E]
    both = onehot.T @ onehot
    count = jnp.diag(both)
    c = both / jnp.maximum(count, 1.0)[:, None]
    return c * (1.0 - jnp.eye(num_experts))


def analyse_routing(
    cfg: OlmoeConfig, params_final: Any, params_early: Any, batches: Sequence[np.ndarray]
) -> dict[str, Any]:
    """Per-layer load, usage entropy, max-load ratio, saturation and co-activation (numpy)."""
    model = Decoder(model_config(cfg, False))
    trace = jax.jit(lambda p, t: routing_trace(model, p, t))
    fin = [trace(params_final, b[:, :-1]) for b in batches]
    ear = [trace(params_early, b[:, :-1])[0] for b in batches]
    experts = jnp.concatenate([f[0] for f in fin], axis=1)  # [L, T, k]
    probs = jnp.concatenate([f[1] for f in fin], axis=1)
    experts_early = jnp.concatenate(ear, axis=1)
    e = cfg.model.moe.num_experts
    stats = jax.vmap(routing_stats)(probs, experts)
    return {
        "load": np.asarray(stats.load),
        "usage_entropy_ratio": np.asarray(stats.usage_entropy_ratio),
        "max_load_ratio": np.asarray(stats.max_load_ratio),
        "min_load_ratio": np.asarray(stats.min_load_ratio),
        "router_entropy": np.asarray(stats.router_entropy),
        "saturation": np.asarray(router_saturation(experts_early, experts)),
        "coactivation": np.asarray(jax.vmap(lambda x: coactivation(x, e))(experts)),
        "tokens": int(experts.shape[1]),
    }


def _plots(result: dict[str, Any], out: Path, early_step: int, final_step: int) -> list[Path]:
    load = result["load"]
    n_layers, e = load.shape
    paths = [
        media.plot_heatmap(
            out / "expert_load.png",
            load * e,
            xlabel="expert",
            ylabel="MoE layer",
            title="expert load / mean load (validation)",
        ),
        media.plot_bars(
            out / "router_saturation.png",
            result["saturation"],
            xlabel="MoE layer",
            ylabel="saturation",
            ylim=(0, 1),
            title=f"router saturation: step {early_step} vs {final_step}",
        ),
    ]
    for layer in range(n_layers):
        paths.append(
            media.plot_heatmap(
                out / f"coactivation_layer{layer}.png",
                result["coactivation"][layer],
                vmin=0,
                vmax=1,
                cmap="magma",
                xlabel="expert j",
                ylabel="expert i",
                title=f"layer {layer} co-activation",
            )
        )
    return paths


def _restore(directory: Path, cfg: OlmoeConfig, step: int | None = None) -> tuple[Any, int]:
    """Parameters of an (early) checkpoint directory onto one device (its own config check)."""
    ck = Checkpointer(directory, cfg, create=False)
    try:
        abstract = jax.eval_shape(init_fn(cfg), jax.random.PRNGKey(cfg.seed))
        state, s = ck.restore(abstract, step=step)
    finally:
        ck.close()
    return state.params, s


def eval_main(cfg: OlmoeConfig, run_dir: Path, argv: list[str]) -> int:
    """``jaxlab eval olmoe --run-dir DIR [--analysis routing] [--batches N]``.

    Without ``--analysis``: validation loss and routing statistics of the latest checkpoint (JSON).
    With ``--analysis routing``: the routing analysis (see the module docstring), a printed table,
    ``DIR/analysis/{routing.json, expert_load.png, router_saturation.png, coactivation.png}``.
    """
    p = argparse.ArgumentParser(prog="jaxlab eval olmoe")
    p.add_argument("--analysis", choices=["routing"], default=None)
    p.add_argument("--batches", type=int, default=cfg.analysis_batches)
    args = p.parse_args(argv)
    run_dir = Path(run_dir)
    run = run_lib.open_run(run_dir, recipe=RECIPE, devices=jax.devices()[:1])
    if args.analysis is None:
        print(json.dumps({"step": run.step, **run.parts.evaluate(run.state)}, default=float))
        return 0
    params, step = run.state.params, run.step
    if early_dir(run_dir).exists():
        params_early, early_step = _restore(early_dir(run_dir), cfg)
    else:
        ck = Checkpointer(run_dir / "checkpoints", cfg)
        first = min(ck.all_steps())
        ck.close()
        print(f"no early checkpoint in {early_dir(run_dir)}; using the oldest kept step {first}")
        params_early, early_step = _restore(run_dir / "checkpoints", cfg, step=first)
    it = validation_iterator(cfg.data)
    batches = [b["tokens"] for _, b in zip(range(args.batches), it, strict=False)]
    result = analyse_routing(cfg, params, params_early, batches)
    out = run_dir / "analysis"
    out.mkdir(parents=True, exist_ok=True)
    plots = _plots(result, out, early_step, step)
    summary = {
        "final_step": step,
        "early_step": early_step,
        "tokens": result["tokens"],
        **{k: v.tolist() for k, v in result.items() if isinstance(v, np.ndarray)},
    }
    (out / "routing.json").write_text(json.dumps(summary))
    print(
        f"routing analysis: final step {step}, early step {early_step}, "
        f"{result['tokens']} validation tokens, E={cfg.model.moe.num_experts}, "
        f"k={cfg.model.moe.top_k}"
    )
    print(
        f"{'layer':>5} {'usage_H/logE':>12} {'max_load':>9} {'min_load':>9} "
        f"{'router_H':>9} {'saturation':>10} {'max_coact':>9}"
    )
    for layer in range(result["load"].shape[0]):
        print(
            f"{layer:>5} {result['usage_entropy_ratio'][layer]:>12.3f} "
            f"{result['max_load_ratio'][layer]:>9.3f} {result['min_load_ratio'][layer]:>9.3f} "
            f"{result['router_entropy'][layer]:>9.3f} {result['saturation'][layer]:>10.3f} "
            f"{result['coactivation'][layer].max():>9.3f}"
        )
    print("wrote " + ", ".join(str(p) for p in [out / "routing.json", *plots]))
    return 0


RECIPE = register(
    Recipe(
        name="olmoe",
        config_cls=OlmoeConfig,
        build=build,
        description="OLMoE-style MoE decoder LM (dropless top-k, LB + router z-loss, expert parallel)",
        eval_main=eval_main,
        hooks=lambda cfg, run_dir: (early_checkpoint_hook(cfg, run_dir),),
        traced=training.TRACED,
    )
)
