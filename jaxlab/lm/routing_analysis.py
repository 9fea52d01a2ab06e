"""Routing analysis of a trained mixture-of-experts decoder (OLMoE §4).

On validation batches: per-layer expert load and usage entropy (:mod:`jaxlab.lm.routing_stats`),
router saturation of the final parameters against an early checkpoint (:func:`router_saturation`)
and expert co-activation (:func:`coactivation`); :func:`write_report` writes ``routing.json`` and
PNG plots and prints a per-layer table.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from jaxlab import media
from jaxlab.core import json_files
from jaxlab.lm import moe as moe_lib
from jaxlab.lm.model import Decoder
from jaxlab.lm.routing_stats import routing_stats


def routing_trace(
    model: Decoder, params: Any, tokens: Int[Array, "batch seq"]
) -> tuple[Int[Array, "layer tokens k"], Float[Array, "layer tokens expert"]]:
    """Top-k expert ids and router probabilities of every MoE layer for ``tokens``.

    Intercepts each :class:`jaxlab.lm.moe.MoEFeedForward` call and recomputes
    ``p = softmax(x W_r)``, ``S = top_k(p)`` from its input (the layer's own routing,
    :func:`jaxlab.lm.moe.route`).

    Returns:
        ``experts [L, B*S, k]`` and ``probs [L, B*S, E]`` over the ``L`` MoE layers, in order.
    """
    experts, probs = [], []

    def interceptor(next_fun, args, kwargs, context):
        mod = context.module
        if isinstance(mod, moe_lib.MoEFeedForward) and context.method_name == "__call__":
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
    model: Decoder, params_final: Any, params_early: Any, batches: Sequence[np.ndarray]
) -> dict[str, Any]:
    """Per-layer load, usage entropy, max-load ratio, saturation and co-activation (numpy) of
    ``model`` (not expert-parallel) on ``batches`` of windows ``[B, T+1]``."""
    trace = jax.jit(lambda p, t: routing_trace(model, p, t))
    fin = [trace(params_final, b[:, :-1]) for b in batches]
    ear = [trace(params_early, b[:, :-1])[0] for b in batches]
    experts = jnp.concatenate([f[0] for f in fin], axis=1)  # [L, T, k]
    probs = jnp.concatenate([f[1] for f in fin], axis=1)
    experts_early = jnp.concatenate(ear, axis=1)
    e = model.cfg.moe.num_experts
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


def plot_routing(result: dict[str, Any], out: Path, early_step: int, final_step: int) -> list[Path]:
    """``expert_load.png``, ``router_saturation.png`` and ``coactivation_layer<l>.png``."""
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


def write_report(
    result: dict[str, Any], out: Path, *, early_step: int, final_step: int, top_k: int
) -> None:
    """Writes ``out/routing.json`` and the plots of :func:`plot_routing`, and prints a per-layer
    table (usage entropy ratio, max/min load, router entropy, saturation, max co-activation)."""
    out.mkdir(parents=True, exist_ok=True)
    plots = plot_routing(result, out, early_step, final_step)
    summary = {
        "final_step": final_step,
        "early_step": early_step,
        "tokens": result["tokens"],
        **{k: v.tolist() for k, v in result.items() if isinstance(v, np.ndarray)},
    }
    json_files.write(out / "routing.json", summary, indent=None)
    print(
        f"routing analysis: final step {final_step}, early step {early_step}, "
        f"{result['tokens']} validation tokens, E={result['load'].shape[1]}, k={top_k}"
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
