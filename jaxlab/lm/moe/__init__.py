"""Mixture-of-experts feed-forward layer as in OLMoE (arXiv 2409.02060).

``[B, ..., d] -> [B, ..., d]``: a linear router picks ``k`` of ``E`` SwiGLU experts per token and
the layer sums their outputs weighted by the router probabilities; the equations are in
:mod:`jaxlab.lm.moe.layer`. One module per part:

- :mod:`~jaxlab.lm.moe.config`: :class:`MoEConfig`, the static layer configuration.
- :mod:`~jaxlab.lm.moe.router`: softmax top-k routing and the load-balancing and router z-losses.
- :mod:`~jaxlab.lm.moe.sorting`: assignments sorted by expert and back (gathers, no scatters).
- :mod:`~jaxlab.lm.moe.tiling`: the row tiles of the tiled grouped kernels.
- :mod:`~jaxlab.lm.moe.kernels`: grouped matmul and the fused grouped SwiGLU, with custom VJPs.
- :mod:`~jaxlab.lm.moe.experts`: the experts on one device, dropless or capacity-limited.
- :mod:`~jaxlab.lm.moe.expert_parallel`: experts split over the mesh axis ``expert``
  (all-to-all under ``shard_map``).
- :mod:`~jaxlab.lm.moe.layer`: :func:`moe_ffn`, the flax module :class:`MoEFeedForward` and
  :func:`aux_loss` over the sown losses of all layers.
"""

from jaxlab.lm.moe.config import MoEConfig
from jaxlab.lm.moe.expert_parallel import (
    EXPERT_MESH_AXIS,
    TOKEN_MESH_AXES,
    expert_parallel_experts,
    validate_expert_parallel,
)
from jaxlab.lm.moe.experts import (
    ExpertWeights,
    capacity_experts,
    dropless_experts,
    expert_capacity,
)
from jaxlab.lm.moe.kernels import grouped_matmul, resolve_grouped_matmul
from jaxlab.lm.moe.layer import (
    AUX_LOSS_COLLECTION,
    STATS_COLLECTION,
    MoEAux,
    MoEFeedForward,
    aux_loss,
    moe_ffn,
)
from jaxlab.lm.moe.router import (
    Routing,
    load_balancing_loss,
    route,
    router_z_loss,
    top_k_by_max,
)
from jaxlab.lm.moe.sorting import sort_by_expert
from jaxlab.lm.moe.tiling import tile_levels

__all__ = [
    "AUX_LOSS_COLLECTION",
    "EXPERT_MESH_AXIS",
    "STATS_COLLECTION",
    "TOKEN_MESH_AXES",
    "ExpertWeights",
    "MoEAux",
    "MoEConfig",
    "MoEFeedForward",
    "Routing",
    "aux_loss",
    "capacity_experts",
    "dropless_experts",
    "expert_capacity",
    "expert_parallel_experts",
    "grouped_matmul",
    "load_balancing_loss",
    "moe_ffn",
    "resolve_grouped_matmul",
    "route",
    "router_z_loss",
    "sort_by_expert",
    "tile_levels",
    "top_k_by_max",
    "validate_expert_parallel",
]
