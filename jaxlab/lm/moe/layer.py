"""The OLMoE mixture-of-experts feed-forward layer (arXiv 2409.02060): pure function and module.

For tokens ``x [B, ..., d]``, flattened to ``T`` rows, ``E`` SwiGLU experts and a linear router
``W_r [d, E]``::

    z_t = x_t W_r                                   router logits, [T, E]
    p_t = softmax(z_t)                              router probabilities (OLMoE §2)
    S_t = top_k(p_t)                                chosen experts, |S_t| = k
    y_t = sum_{i in S_t} g_ti FFN_i(x_t)            g_ti = p_ti (OLMoE; ``normalize_topk=False``)
                                                    or p_ti / sum_{j in S_t} p_tj (renormalised)
    FFN_i(x) = (silu(x W1_i) * (x W3_i)) W2_i       W1_i, W3_i: [d, ff], W2_i: [ff, d]

:func:`moe_ffn` routes (:mod:`jaxlab.lm.moe.router`), runs the experts on one device
(:mod:`jaxlab.lm.moe.experts`) or split over the mesh (:mod:`jaxlab.lm.moe.expert_parallel`) and
returns the raw auxiliary losses ``L_LB``, ``L_RZ`` with the routing statistics.
:class:`MoEFeedForward` wraps it as a flax module that sows them, and :func:`aux_loss` combines the
sown losses of all layers into the training objective's auxiliary term.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.lm.moe.config import MoEConfig
from jaxlab.lm.moe.expert_parallel import expert_parallel_experts, validate_expert_parallel
from jaxlab.lm.moe.experts import (
    ExpertWeights,
    capacity_experts,
    dropless_experts,
    expert_capacity,
)
from jaxlab.lm.moe.router import _token_entropy, _z_loss_from_lse, load_balancing_loss, route
from jaxlab.lm.routing_stats import RoutingStats, routing_stats
from jaxlab.nn.initializers import kernel_init
from jaxlab.nn.quantization import QuantConfig

#: flax ``sow`` collection holding each MoE layer's raw (unweighted) auxiliary losses.
AUX_LOSS_COLLECTION = "moe_aux_loss"
#: flax ``sow`` collection holding each MoE layer's :class:`RoutingStats`.
STATS_COLLECTION = "moe_stats"


@flax.struct.dataclass
class MoEAux:
    """Auxiliary outputs of one MoE layer: raw (unweighted) losses and routing statistics."""

    lb_loss: Float[Array, ""]
    z_loss: Float[Array, ""]
    stats: RoutingStats


def moe_ffn(
    x: Float[Array, "batch ... embed"],
    router_kernel: Float[Array, "embed expert"],
    expert_weights: ExpertWeights,
    *,
    config: MoEConfig,
    mesh: Any = None,
) -> tuple[Float[Array, "batch ... embed"], MoEAux]:
    """The MoE feed-forward layer as a pure function (see the module docstring for the equations).

    Args:
        x: ``[B, ..., d]`` tokens (any number of middle axes).
        router_kernel: ``[d, E]`` router ``W_r``.
        expert_weights: SwiGLU weights of the ``E`` experts.
        config: static layer configuration.
        mesh: mesh for ``expert_parallel`` (default: the mesh in context, ``jax.set_mesh``).

    Returns:
        ``y`` with the shape of ``x``, and :class:`MoEAux` with ``L_LB``, ``L_RZ`` and stats.
    """
    d = x.shape[-1]
    num_experts = config.num_experts
    if router_kernel.shape != (d, num_experts):
        raise ValueError(
            f"router_kernel: got shape {router_kernel.shape}, expected ({d}, {num_experts})"
        )
    if config.expert_parallel:
        validate_expert_parallel(config, x.shape[0], mesh)
    num_tokens = math.prod(x.shape[:-1])
    logits = jnp.einsum("...d,de->...e", x, router_kernel, preferred_element_type=jnp.float32)
    routing = route(
        logits.reshape(num_tokens, num_experts),
        top_k=config.top_k,
        normalize=config.normalize_topk,
    )
    if config.expert_parallel:
        lead = (x.shape[0], num_tokens // x.shape[0])
        y, dropped = expert_parallel_experts(
            x.reshape(*lead, d),
            routing.experts.reshape(*lead, config.top_k),
            routing.weights.reshape(*lead, config.top_k),
            expert_weights,
            config=config,
            mesh=mesh,
        )
    elif config.dispatch == "dropless":
        y = dropless_experts(
            x.reshape(num_tokens, d),
            routing.experts,
            routing.weights,
            expert_weights,
            impl=config.grouped_matmul,
            tile_size=config.tile_size,
        )
        dropped = jnp.zeros((), jnp.int32)
    else:
        capacity = expert_capacity(
            num_tokens,
            num_experts=num_experts,
            top_k=config.top_k,
            capacity_factor=config.capacity_factor,
        )
        y, dropped = capacity_experts(
            x.reshape(num_tokens, d),
            routing.experts,
            routing.weights,
            expert_weights,
            capacity=capacity,
        )
    aux = MoEAux(
        lb_loss=load_balancing_loss(routing.probs, routing.experts),
        z_loss=_z_loss_from_lse(routing.lse),
        stats=routing_stats(
            routing.probs, routing.experts, dropped=dropped, token_entropy=_token_entropy(routing)
        ),
    )
    return y.reshape(x.shape).astype(x.dtype), aux


class MoEFeedForward(nn.Module):
    """OLMoE MoE feed-forward block, a drop-in FFN for a transformer block: ``[B, ..., d] -> same``.

    Parameters (logical axes for :mod:`jaxlab.core.sharding`): ``router [d, E]`` ("embed", None),
    ``w1, w3 [E, d, ff]`` ("expert", "embed", "mlp"), ``w2 [E, ff, d]`` ("expert", "mlp", "embed").

    Side outputs via ``sow``: ``moe_aux_loss/{lb_loss, z_loss}`` (raw, unweighted; combine them with
    :func:`aux_loss`) and ``moe_stats/routing`` (:class:`RoutingStats`). Apply with
    ``mutable=[AUX_LOSS_COLLECTION, STATS_COLLECTION]`` to read them.

    Attributes:
        config: :class:`MoEConfig`.
        dtype: computation dtype.
        param_dtype: parameter dtype.
        quant: fake quantisation of the experts (group ``"experts"`` of
            :class:`jaxlab.nn.quantization.QuantConfig`): ``w1, w3, w2`` per expert and output
            channel, the layer input (seen by router and experts) per tensor. The router kernel
            stays in full precision, and so does the experts' hidden activation (it lives inside
            the grouped-matmul kernels).
    """

    config: MoEConfig
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32
    quant: QuantConfig | None = None

    @nn.compact
    def __call__(self, x: Float[Array, "batch ... embed"]) -> Float[Array, "batch ... embed"]:
        cfg = self.config
        d, e, ff = x.shape[-1], cfg.num_experts, cfg.expert_ff
        init = kernel_init(cfg.init_std)

        def param(name, shape, axes):
            return self.param(
                name, nn.with_logical_partitioning(init, axes), shape, self.param_dtype
            )

        router = param("router", (d, e), ("embed", None))
        weights = ExpertWeights(
            w1=param("w1", (e, d, ff), ("expert", "embed", "mlp")),
            w3=param("w3", (e, d, ff), ("expert", "embed", "mlp")),
            w2=param("w2", (e, ff, d), ("expert", "mlp", "embed")),
        )
        quant = self.quant or QuantConfig()
        weights = jax.tree.map(
            lambda w: quant.weights("experts", jnp.asarray(w, self.dtype), (1,)), weights
        )
        x = quant.activations("experts", jnp.asarray(x, self.dtype))
        y, aux = moe_ffn(x, jnp.asarray(router, self.dtype), weights, config=cfg)
        self.sow(AUX_LOSS_COLLECTION, "lb_loss", aux.lb_loss)
        self.sow(AUX_LOSS_COLLECTION, "z_loss", aux.z_loss)
        self.sow(STATS_COLLECTION, "routing", aux.stats)
        return y


def _collect(tree: Any, name: str) -> list[Array]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [
        leaf
        for path, leaf in leaves
        if any(getattr(p, "key", getattr(p, "name", None)) == name for p in path)
    ]


def aux_loss(
    aux_losses: Mapping[str, Any], *, lb_loss_weight: float, z_loss_weight: float
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """``w_LB mean_l L_LB^(l) + w_RZ mean_l L_RZ^(l)`` over all MoE layers of a sown collection.

    Layers are averaged as in megablocks' ``batched_load_balancing_loss`` (scale ``1/L``). Layers
    stacked by ``nn.scan`` (leading ``[L]`` axis) are averaged over that axis too.

    Args:
        aux_losses: the ``moe_aux_loss`` collection returned by ``apply(..., mutable=...)``.
        lb_loss_weight: ``w_LB`` (OLMoE 0.01).
        z_loss_weight: ``w_RZ`` (OLMoE 0.001).

    Returns:
        The weighted scalar loss and ``{"moe/lb_loss", "moe/z_loss"}`` (unweighted layer means).
    """
    lb = _collect(aux_losses, "lb_loss")
    z = _collect(aux_losses, "z_loss")
    if not lb:
        zero = jnp.zeros((), jnp.float32)
        return zero, {"moe/lb_loss": zero, "moe/z_loss": zero}
    lb_mean = jnp.mean(jnp.concatenate([jnp.ravel(v) for v in lb]))
    z_mean = jnp.mean(jnp.concatenate([jnp.ravel(v) for v in z]))
    total = lb_loss_weight * lb_mean + z_loss_weight * z_mean
    return total, {"moe/lb_loss": lb_mean, "moe/z_loss": z_mean}
