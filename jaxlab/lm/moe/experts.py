"""The ``E`` SwiGLU experts on one device: dropless and capacity-limited dispatch.

For tokens ``x [T, d]``, chosen experts ``[T, k]`` and combine weights ``g [T, k]``::

    y_t = sum_{i in S_t} g_ti FFN_i(x_t)            FFN_i(x) = (silu(x W1_i) * (x W3_i)) W2_i
                                                    W1_i, W3_i: [d, ff], W2_i: [ff, d]

- ``dropless`` (megablocks dMoE, as in OLMoE, arXiv 2409.02060): the ``T k`` (token, expert)
  assignments are sorted by expert (:mod:`jaxlab.lm.moe.sorting`), each expert's contiguous rows
  are multiplied by its weights with one grouped matmul (:mod:`jaxlab.lm.moe.kernels`;
  ``group_sizes = bincount(experts)``), and the rows are un-sorted and combined with the routing
  weights. No token is ever dropped.
- ``capacity`` (GShard/Switch style, for comparison): every expert has ``C = ceil(cf T k / E)``
  slots ``[E, C, d]``; assignments are served in priority order (all first choices, then all
  second choices, ..., each in token order); overflowing assignments are dropped (they contribute
  0) and counted.
"""

from __future__ import annotations

import functools
import math
from typing import Literal

import flax.struct
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jaxlab.lm.moe.kernels import _tiled_swiglu, grouped_matmul, resolve_grouped_matmul
from jaxlab.lm.moe.sorting import _inverse_permutation, _sort_rows, _unsort_combine, sort_by_expert
from jaxlab.lm.moe.tiling import _BACKWARD_SMALL_TILE, tile_levels
from jaxlab.lm.routing_stats import expert_counts


@flax.struct.dataclass
class ExpertWeights:
    """SwiGLU expert weights: ``w1, w3: [E, d, ff]`` (gate, up), ``w2: [E, ff, d]`` (down)."""

    w1: Float[Array, "expert embed mlp"]
    w3: Float[Array, "expert embed mlp"]
    w2: Float[Array, "expert mlp embed"]


def _swiglu_grouped(xs, weights: ExpertWeights, group_sizes, *, impl, tile_size):
    """``(silu(xs W1_g) * (xs W3_g)) W2_g`` per group: fused row tiles or three grouped matmuls."""
    if resolve_grouped_matmul(impl) == "tiled":
        groups = weights.w1.shape[0]
        levels = (
            tile_levels(xs.shape[0], tile_size, num_groups=groups),
            tile_levels(xs.shape[0], tile_size, _BACKWARD_SMALL_TILE, num_groups=groups),
        )
        w = (weights.w1, weights.w3, weights.w2)
        return _tiled_swiglu(xs, *w, group_sizes.astype(jnp.int32), levels)
    gmm = functools.partial(grouped_matmul, group_sizes=group_sizes, impl=impl, tile_size=tile_size)
    h = jax.nn.silu(gmm(xs, weights.w1)) * gmm(xs, weights.w3)
    return gmm(h, weights.w2)


def _swiglu_batched(xbuf: Float[Array, "... expert cap embed"], weights: ExpertWeights):
    h = jax.nn.silu(jnp.einsum("...ecd,edf->...ecf", xbuf, weights.w1))
    h = h * jnp.einsum("...ecd,edf->...ecf", xbuf, weights.w3)
    return jnp.einsum("...ecf,efd->...ecd", h, weights.w2)


def _combine(y_assign: Float[Array, "tokens k embed"], weights: Float[Array, "tokens k"]):
    return jnp.einsum("tkd,tk->td", y_assign, weights.astype(y_assign.dtype))


def dropless_experts(
    x: Float[Array, "tokens embed"],
    experts: Int[Array, "tokens k"],
    weights: Float[Array, "tokens k"],
    expert_weights: ExpertWeights,
    *,
    impl: Literal["auto", "ragged_dot", "tiled"] = "auto",
    tile_size: int = 128,
) -> Float[Array, "tokens embed"]:
    """Dropless MoE: ``y_t = sum_j weights[t, j] FFN_{experts[t, j]}(x_t)`` via sort + grouped matmul.

    Args:
        x: ``[T, d]`` tokens.
        experts: ``[T, k]`` expert ids.
        weights: ``[T, k]`` combine weights.
        expert_weights: SwiGLU weights of all ``E`` experts.
        impl, tile_size: grouped-matmul backend (see :func:`jaxlab.lm.moe.kernels.grouped_matmul`).

    Returns:
        ``[T, d]``.
    """
    num_tokens, top_k = experts.shape
    num_experts = expert_weights.w1.shape[0]
    # Materialise the routing before the expert loops: without the barrier XLA:CPU fuses the
    # router's top-k into consumers inside the loops and recomputes it there, on every tile.
    experts, weights = jax.lax.optimization_barrier((experts, weights))
    flat = experts.reshape(-1)
    order = sort_by_expert(flat, num_experts)
    group_sizes = expert_counts(experts, num_experts=num_experts)
    slots = _inverse_permutation(order).reshape(num_tokens, top_k)
    xs = _sort_rows(x, order // top_k, slots)
    ys = _swiglu_grouped(xs, expert_weights, group_sizes, impl=impl, tile_size=tile_size)
    return _unsort_combine(ys, weights.astype(ys.dtype), order, slots)


def expert_capacity(
    num_tokens: int, *, num_experts: int, top_k: int, capacity_factor: float
) -> int:
    """``C = ceil(cf T k / E)`` slots per expert (at least 1, at most ``T``: more is never used)."""
    return max(1, min(num_tokens, math.ceil(capacity_factor * num_tokens * top_k / num_experts)))


def _capacity_plan(experts: Int[Array, "tokens k"], num_experts: int, capacity: int):
    """Slots of a capacity-limited dispatch, in priority order (slot-major, then token order).

    Returns ``buf_token [E, C]`` (token feeding each buffer slot), ``buf_valid [E, C]``,
    ``slot [k*T]`` (flat buffer index ``e C + pos`` of each assignment in slot-major order) and
    ``keep [k*T]``.
    """
    num_tokens, _ = experts.shape
    flat = experts.T.reshape(-1)
    n = flat.shape[0]
    order = sort_by_expert(flat, num_experts)
    counts = jnp.bincount(flat, length=num_experts)
    starts = jnp.cumsum(counts) - counts
    pos = (jnp.arange(n, dtype=jnp.int32) - starts[flat[order]])[_inverse_permutation(order)]
    keep = pos < capacity
    c = jnp.arange(capacity, dtype=jnp.int32)
    src = jnp.clip(starts[:, None] + c[None, :], 0, n - 1)
    buf_valid = c[None, :] < counts[:, None]
    buf_token = (order % num_tokens)[src]
    slot = jnp.where(keep, flat * capacity + pos, 0)
    return buf_token, buf_valid, slot, keep


def _capacity_dispatch(x, experts, num_experts, capacity):
    buf_token, buf_valid, slot, keep = _capacity_plan(experts, num_experts, capacity)
    xbuf = jnp.where(buf_valid[..., None], x[buf_token], 0)
    return xbuf, (slot, keep)


def _capacity_combine(ybuf, plan, weights, num_tokens):
    slot, keep = plan
    num_experts, capacity, d = ybuf.shape
    y = jnp.where(keep[:, None], ybuf.reshape(num_experts * capacity, d)[slot], 0)
    y_assign = jnp.transpose(y.reshape(-1, num_tokens, d), (1, 0, 2))
    return _combine(y_assign, weights), jnp.sum(~keep).astype(jnp.int32)


def capacity_experts(
    x: Float[Array, "tokens embed"],
    experts: Int[Array, "tokens k"],
    weights: Float[Array, "tokens k"],
    expert_weights: ExpertWeights,
    *,
    capacity: int,
) -> tuple[Float[Array, "tokens embed"], Int[Array, ""]]:
    """Capacity-limited MoE (token dropping): each expert serves at most ``capacity`` assignments.

    Assignments are served in priority order (all first choices, then second choices, ..., each in
    token order); the rest are dropped and contribute 0. With ``capacity >= T`` nothing is dropped
    and the result equals :func:`dropless_experts`.

    Returns:
        ``y [T, d]`` and the number of dropped assignments, ``sum_i max(0, count_i - C)``.
    """
    num_experts = expert_weights.w1.shape[0]
    # as in dropless_experts: keep XLA from recomputing the router's top-k inside the consumers
    experts, weights = jax.lax.optimization_barrier((experts, weights))
    xbuf, plan = _capacity_dispatch(x, experts, num_experts, capacity)
    return _capacity_combine(_swiglu_batched(xbuf, expert_weights), plan, weights, x.shape[0])
