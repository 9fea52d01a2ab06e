"""Static configuration of the OLMoE mixture-of-experts layer (arXiv 2409.02060).

:class:`MoEConfig` fixes everything that shapes the layer's arrays or picks its code path (``E``
experts, ``k`` per token, expert width, dispatch, grouped-matmul backend and tile, expert
parallelism), and the weights of its two auxiliary losses. It is frozen and hashable, so it is a
static argument under ``jit``; every field is validated at construction and an invalid value
raises :class:`jaxlab.core.config.ConfigError` naming the field.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from jaxlab.core.config import ConfigError


@dataclasses.dataclass(frozen=True)
class MoEConfig:
    """Static configuration of an MoE feed-forward layer.

    Attributes:
        num_experts: ``E``, number of experts (OLMoE-1B-7B: 64).
        top_k: ``k``, experts per token (OLMoE-1B-7B: 8).
        expert_ff: hidden width of each SwiGLU expert (OLMoE-1B-7B: 1024).
        normalize_topk: renormalise the top-k probabilities to sum to 1 (OLMoE: False).
        dispatch: ``"dropless"`` (sorted + grouped matmul) or ``"capacity"`` (token dropping).
        capacity_factor: ``cf`` in ``C = ceil(cf T k / E)``; used by ``dispatch="capacity"``.
        grouped_matmul: ``"ragged_dot"``, ``"tiled"`` or ``"auto"`` (tiled on CPU, else ragged_dot).
        tile_size: row tile of the ``tiled`` grouped matmul (larger tiles are added for large
            groups, see :func:`jaxlab.lm.moe.tiling.tile_levels`).
        expert_parallel: shard experts over the mesh axis ``expert`` (needs a mesh in context).
        lb_loss_weight: weight of ``L_LB`` in the training loss (OLMoE: 0.01).
        z_loss_weight: weight of ``L_RZ`` in the training loss (OLMoE: 0.001).
        init_std: std of the normal initialiser of all MoE weights, truncated at 3 std (OLMoE:
            0.02; :func:`jaxlab.nn.initializers.kernel_init`).
    """

    num_experts: int = 8
    top_k: int = 2
    expert_ff: int = 64
    normalize_topk: bool = False
    dispatch: Literal["dropless", "capacity"] = "dropless"
    capacity_factor: float = 1.25
    grouped_matmul: Literal["auto", "ragged_dot", "tiled"] = "auto"
    tile_size: int = 128
    expert_parallel: bool = False
    lb_loss_weight: float = 0.01
    z_loss_weight: float = 0.001
    init_std: float = 0.02

    def __post_init__(self):
        for name in ("num_experts", "top_k", "expert_ff", "tile_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(name, v, "a positive integer")
        if self.top_k > self.num_experts:
            raise ConfigError(
                "top_k", self.top_k, f"an integer in [1, num_experts={self.num_experts}]"
            )
        if self.dispatch not in ("dropless", "capacity"):
            raise ConfigError("dispatch", self.dispatch, "'dropless' or 'capacity'")
        if self.grouped_matmul not in ("auto", "ragged_dot", "tiled"):
            raise ConfigError(
                "grouped_matmul", self.grouped_matmul, "'auto', 'ragged_dot', 'tiled'"
            )
        if not self.capacity_factor > 0:
            raise ConfigError("capacity_factor", self.capacity_factor, "a positive number")
        for name in ("lb_loss_weight", "z_loss_weight"):
            if not getattr(self, name) >= 0:
                raise ConfigError(name, getattr(self, name), "a non-negative number")
        if not self.init_std > 0:
            raise ConfigError("init_std", self.init_std, "a positive number")
