"""Mixture-of-experts feed-forward layer as in OLMoE (arXiv 2409.02060; brief lm.md §1).

For tokens ``x_t`` (``t = 1..T``), ``E`` SwiGLU experts and a linear router ``W_r``::

    z_t = x_t W_r                                   router logits, [T, E]
    p_t = softmax(z_t)                              router probabilities (OLMoE §2)
    S_t = top_k(p_t)                                chosen experts, |S_t| = k
    y_t = sum_{i in S_t} g_ti FFN_i(x_t)            g_ti = p_ti (OLMoE; ``normalize_topk=False``)
                                                    or p_ti / sum_{j in S_t} p_tj (renormalised)
    FFN_i(x) = (silu(x W1_i) * (x W3_i)) W2_i       W1_i, W3_i: [d, ff], W2_i: [ff, d]

Auxiliary losses (OLMoE §2; megablocks normalisation, see the trap in brief §1):

    L_LB = E * sum_i f_i P_i,  f_i = count_i / (T k),  P_i = mean_t p_ti     (= 1 for uniform routing)
    L_RZ = mean_t (logsumexp_j z_tj)^2

Both are batch-level (global over all ``T`` tokens of the batch); ``f`` carries no gradient.

Expert computation ("dispatch"):

- ``dropless`` (megablocks dMoE): the ``T k`` (token, expert) assignments are sorted by expert,
  each expert's contiguous rows are multiplied by its weights with one grouped matmul
  (:func:`grouped_matmul`; ``group_sizes = bincount(experts)``), and the rows are un-sorted and
  combined with the routing weights. No token is ever dropped.
- ``capacity`` (GShard/Switch style, for comparison): every expert has ``C = ceil(cf T k / E)``
  slots; assignments are served in priority order (all first choices, then all second choices,
  ..., each in token order); overflowing assignments are dropped (they contribute 0) and counted.

Expert parallelism (``expert_parallel=True``): experts are split over the mesh axis ``expert``,
tokens over the mesh axes ``("data", "fsdp", "expert")`` that exist in the mesh. Inside
``jax.shard_map`` each device routes its sorted rows to the devices owning their experts with an
``all_to_all`` over ``expert``, computes its local experts and sends the results back with a second
``all_to_all``. The dropless exchange buffers are sized for the worst case (every assignment going
to one device), so the result is exact; XLA:CPU has no ``ragged_all_to_all``, which would shrink the
bytes moved on GPU/TPU.

Grouped matmul backends: ``jax.lax.ragged_dot`` (native on GPU/TPU; XLA:CPU lowers it to a dense
matmul over *all* groups, ``E`` times the useful work) and ``tiled`` (the default on CPU): a loop
over experts and, inside, over row tiles of that expert's rows (tiles of ``tile_size`` rows, then
8-row tiles for the rest, so at most 7 wasted rows per expert), each expert's weights sliced once.
When experts get many rows (``T k / E >= 512``) tiles of at least 512 rows come first, which
XLA:CPU spreads over its threads (:func:`tile_levels`).
For the expert SwiGLU the three matmuls are fused per tile, the forward overwrites the sorted
activations in place (one ``[T k, d]`` buffer) and a custom VJP computes all gradients in one
tiled pass. Sorting and un-sorting are gathers whose transposes are gathers too (no scatters).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any, Literal

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec
from jaxtyping import Array, Float, Int

from jaxlab.core.config import ConfigError
from jaxlab.lm.routing_stats import RoutingStats, expert_counts, routing_stats
from jaxlab.nn.initializers import kernel_init
from jaxlab.nn.quantization import QuantConfig, fake_quant

#: flax ``sow`` collection holding each MoE layer's raw (unweighted) auxiliary losses.
AUX_LOSS_COLLECTION = "moe_aux_loss"
#: flax ``sow`` collection holding each MoE layer's :class:`RoutingStats`.
STATS_COLLECTION = "moe_stats"
#: mesh axes over which tokens are split in the expert-parallel layer (those present in the mesh).
TOKEN_MESH_AXES: tuple[str, ...] = ("data", "fsdp", "expert")
EXPERT_MESH_AXIS = "expert"


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
            groups, see :func:`tile_levels`).
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


# ----------------------------------------------------------------------------------------------
# Router and auxiliary losses
# ----------------------------------------------------------------------------------------------


@flax.struct.dataclass
class Routing:
    """A routing decision for ``T`` tokens.

    Attributes:
        logits: ``[T, E]`` router logits ``z`` (float32).
        probs: ``[T, E]`` ``softmax(z)``.
        weights: ``[T, k]`` combine weights ``g`` of the chosen experts.
        experts: ``[T, k]`` chosen expert ids, in decreasing probability order.
        lse: ``[T]`` ``logsumexp_j z_j``, the softmax normaliser (reused by the z-loss and the
            router entropy ``H(p_t) = lse_t - sum_j p_tj z_tj``, so the layer takes one ``exp``
            per logit and no ``log`` per probability).
    """

    logits: Float[Array, "tokens expert"]
    probs: Float[Array, "tokens expert"]
    weights: Float[Array, "tokens k"]
    experts: Int[Array, "tokens k"]
    lse: Float[Array, " tokens"]


def route(logits: Float[Array, "tokens expert"], *, top_k: int, normalize: bool = False) -> Routing:
    """Softmax top-k routing: ``p = softmax(z)``, ``S = top_k(p)``, ``g = p_S`` (or renormalised).

    Args:
        logits: ``[T, E]`` router logits.
        top_k: ``k``.
        normalize: divide the chosen probabilities by their sum (OLMoE: no).

    Returns:
        A :class:`Routing`; ties are broken towards the lower expert id.
    """
    if not 1 <= top_k <= logits.shape[-1]:
        raise ValueError(f"top_k: got {top_k}, expected an integer in [1, {logits.shape[-1]}]")
    logits = logits.astype(jnp.float32)
    m = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
    e = jnp.exp(logits - m)
    total = jnp.sum(e, axis=-1, keepdims=True)
    probs = e / total
    weights, experts = top_k_by_max(probs, top_k)
    if normalize:
        weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
    return Routing(
        logits=logits,
        probs=probs,
        weights=weights,
        experts=experts.astype(jnp.int32),
        lse=(m + jnp.log(total))[..., 0],
    )


def top_k_by_max(
    p: Float[Array, "tokens n"], k: int
) -> tuple[Float[Array, "tokens k"], Int[Array, "tokens k"]]:
    """``jax.lax.top_k`` over the last axis, as ``k`` rounds of (max, first index of the max).

    Same values, indices, order and tie-breaking (towards the lower index) as ``lax.top_k``, and
    the same gradient (only the chosen entries receive it). It exists for speed: XLA:CPU lowers
    ``lax.top_k`` to a per-row sort; two plain reductions per round are 2.4x faster for the router
    (T = 2048, E = 64, k = 1..8: 0.16-0.64 ms against 0.38-1.57 ms, softmax included; the
    ``router+losses+stats`` lines of ``benchmarks/bench_moe.py --breakdown`` compare the layer's
    router with the textbook one). Rows with NaN pick index ``n - 1``.
    """
    n = p.shape[-1]
    ids = jax.lax.broadcasted_iota(jnp.int32, p.shape, p.ndim - 1)
    rest = p
    experts = []
    for _ in range(k):
        m = jnp.max(rest, axis=-1, keepdims=True)
        i = jnp.min(jnp.where(rest == m, ids, n - 1), axis=-1)
        experts.append(i)
        rest = jnp.where(ids == i[..., None], -jnp.inf, rest)
    experts = jnp.stack(experts, axis=-1)
    # gather from p (not the running max) so that the gradient goes to exactly the chosen entries
    return jnp.take_along_axis(p, experts, axis=-1), experts


def load_balancing_loss(
    probs: Float[Array, "tokens expert"], experts: Int[Array, "tokens k"]
) -> Float[Array, ""]:
    """``L_LB = E sum_i f_i P_i`` with ``f_i = count_i / (T k)`` and ``P_i = mean_t p_ti``.

    The megablocks (OLMoE) normalisation: exactly 1 when either ``f`` or ``P`` is uniform, ``E/k``
    when every token picks the same ``k`` experts with probability ``1/k`` each. ``f`` is a count
    and carries no gradient; the gradient flows through ``P``.
    """
    num_tokens, num_experts = probs.shape
    top_k = experts.shape[-1]
    f = expert_counts(experts, num_experts=num_experts).astype(jnp.float32) / (num_tokens * top_k)
    p_mean = jnp.mean(probs.astype(jnp.float32), axis=0)
    return num_experts * jnp.sum(jax.lax.stop_gradient(f) * p_mean)


def router_z_loss(logits: Float[Array, "tokens expert"]) -> Float[Array, ""]:
    """``L_RZ = mean_t (logsumexp_j z_tj)^2`` (ST-MoE router z-loss, used by OLMoE)."""
    return _z_loss_from_lse(jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1))


def _z_loss_from_lse(lse: Float[Array, " tokens"]) -> Float[Array, ""]:
    return jnp.mean(jnp.square(lse))


def _token_entropy(routing: Routing) -> Float[Array, " tokens"]:
    """``H(p_t) = -sum_j p_tj log p_tj = lse_t - sum_j p_tj z_tj`` (no ``log`` per probability)."""
    return routing.lse - jnp.sum(routing.probs * routing.logits, axis=-1)


def sort_by_expert(flat_experts: Int[Array, " n"], num_experts: int) -> Int[Array, " n"]:
    """The stable sort order of assignments by expert id: ``argsort(flat, stable=True)``.

    ``flat_experts`` must lie in ``[0, num_experts)``.

    When ``num_experts * n < 2^31`` it sorts the unique int32 keys ``expert * n + index`` (one
    array, no stability bookkeeping) and takes the index back as ``key mod n``: 4-5x faster than
    the stable argsort on XLA:CPU (T = 16384, E = 64, k = 1: 0.58 ms against 2.73 ms).
    """
    n = flat_experts.shape[0]
    if num_experts * n >= 2**31:
        return jnp.argsort(flat_experts, stable=True).astype(jnp.int32)
    keys = flat_experts.astype(jnp.int32) * n + jnp.arange(n, dtype=jnp.int32)
    return jnp.sort(keys) % n


# ----------------------------------------------------------------------------------------------
# Grouped matmul
# ----------------------------------------------------------------------------------------------


def _vma(x: Any) -> frozenset:
    """The ``shard_map`` axes over which ``x`` varies (``.vma`` before jax 0.10)."""
    aval = jax.typeof(x)
    vma = getattr(aval, "vma", None)
    if vma is None:
        vma = getattr(getattr(aval, "manual_axis_type", None), "varying", None)
    return frozenset(vma or ())


def _varying_like(x: Array, *refs: Any) -> Array:
    """Marks a fresh loop carry as varying over the same ``shard_map`` axes as ``refs``."""
    missing = frozenset().union(*(_vma(r) for r in refs)) - _vma(x)
    if missing:
        x = jax.lax.pcast(x, tuple(sorted(missing)), to="varying")
    return x


def _sum_to_vma(ct: Array, primal: Any) -> Array:
    """Cotangent of a value that was implicitly broadcast (``pvary``) inside ``shard_map``: psum."""
    extra = _vma(ct) - _vma(primal)
    return jax.lax.psum(ct, tuple(sorted(extra))) if extra else ct


def tile_levels(
    rows: int, tile_size: int, small: int = 8, *, num_groups: int | None = None
) -> tuple[int, ...]:
    """Row tiles of the tiled grouped kernels, largest first, clipped to ``rows``.

    Each group's rows are covered greedily (:func:`_group_tile_loop`): as many tiles of the
    largest level as fit, then of the next level, the last (smallest) level rounding up, so at most
    ``small - 1`` rows per group are computed and discarded. The base levels are
    ``(tile_size, small)``. The forward uses ``small = 8`` (XLA:CPU runs an 8-row matmul nearly as
    efficiently per row as a large one); the backward uses 32, because its per-group weight
    gradients ``x^T dy`` are rank-``t`` updates that are inefficient for small ``t``.

    With ``num_groups``, a big level is put in front when groups are large: the largest power of
    two ``<= rows / num_groups`` (the mean group), if that is at least ``max(512, 2 tile_size)``.
    XLA:CPU spreads one matmul over its threads only from about 512 rows, so without it the expert
    loop runs on one core while the dense layer uses all. Levels of 512 rows or more round half up
    (a group with ``>= t/2`` rows left takes one more ``t``-row tile), so groups a little smaller
    than the mean still get one; at most ``t/2`` of its rows are computed and discarded.
    """
    levels = {max(1, min(t, rows)) for t in (tile_size, min(small, tile_size))}
    if num_groups:
        mean = rows // num_groups
        big = 1 << (mean.bit_length() - 1) if mean > 0 else 0
        if big >= max(_THREADED_TILE_ROWS, 2 * tile_size):
            levels.add(min(big, rows))
    return tuple(sorted(levels, reverse=True))


#: rows from which XLA:CPU runs one ``[t, d] x [d, ff]`` matmul on several threads (see
#: :func:`tile_levels`; measured at d = 256, ff = 128 on 2 cores: 1.2x CPU over wall time at
#: 256 rows, 1.6x at 512); tile levels this large round half up in :func:`_group_tile_loop`.
_THREADED_TILE_ROWS = 512

#: smallest row tile of the backward pass of the tiled kernels (see :func:`tile_levels`).
_BACKWARD_SMALL_TILE = 32


def _group_tile_loop(group_sizes, rows: int, levels, carry, tile_fn, acc_init=None):
    """Visits every row tile of every group, groups in order, tiles in increasing row order.

    Group ``g`` owns rows ``[o_g, o_g + s_g)``. Its rows are covered by ``s_g // levels[0]`` tiles
    of ``levels[0]`` rows, then by tiles of the next level for the rest, the last level rounding
    up and levels of at least ``_THREADED_TILE_ROWS`` rounding half up (see :func:`tile_levels`).
    A tile that would run past ``rows`` is moved back to end at ``rows``.
    ``tile_fn(g, r0, valid, t, carry, acc) -> (carry, acc)`` handles the tile of ``t`` rows
    starting at ``r0``; ``valid [t]`` marks the rows of the tile that belong to ``g`` and are not
    covered by an earlier tile. With ``acc_init`` (a pytree) each group also accumulates ``acc``
    from ``acc_init``, and the per-group results are returned stacked, ``(carry, accs [G, ...])``
    (a group without rows gives exactly ``acc_init``).
    """
    group_sizes = group_sizes.astype(jnp.int32)
    ends = jnp.cumsum(group_sizes)
    starts = ends - group_sizes

    def per_group(carry, g):
        size, end = group_sizes[g], ends[g]
        acc = acc_init
        row, rest = starts[g], size
        for i, t in enumerate(levels):
            if i == len(levels) - 1:
                count = (rest + t - 1) // t
            elif t >= _THREADED_TILE_ROWS:
                count = (rest + t // 2) // t
            else:
                count = rest // t
            rest = jnp.maximum(rest - count * t, 0)

            def body(_, state, t=t):
                carry, acc, row = state
                r0 = jnp.minimum(row, rows - t)
                r = r0 + jnp.arange(t, dtype=jnp.int32)
                valid = (r >= row) & (r < end)
                carry, acc = tile_fn(g, r0, valid, t, carry, acc)
                return carry, acc, row + t

            carry, acc, row = jax.lax.fori_loop(0, count, body, (carry, acc, row))
        return carry, acc

    num_groups = group_sizes.shape[0]
    if acc_init is None:
        return jax.lax.fori_loop(0, num_groups, lambda g, c: per_group(c, g)[0], carry)
    return jax.lax.scan(per_group, carry, jnp.arange(num_groups, dtype=jnp.int32))


def _rows(x, r0, t):
    return jax.lax.dynamic_slice_in_dim(x, r0, t)


def _put_rows(buf, new, r0, valid):
    """Writes ``new`` into rows ``r0 .. r0 + t`` of ``buf`` where ``valid``, keeps the rest."""
    cur = _rows(buf, r0, new.shape[0])
    return jax.lax.dynamic_update_slice_in_dim(buf, jnp.where(valid[:, None], new, cur), r0, 0)


def _dot_t(a, b):
    """``a^T b`` in float32 accumulation."""
    return jax.lax.dot_general(a, b, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)


def _dot_nt(a, b):
    """``a b^T`` in float32 accumulation."""
    return jax.lax.dot_general(a, b, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)


def _tiled_forward(lhs, rhs, group_sizes, levels):
    """``out[r] = lhs[r] @ rhs[g(r)]`` for rows in a group, 0 elsewhere."""
    m = lhs.shape[0]
    out_dtype = jnp.result_type(lhs.dtype, rhs.dtype)

    def tile_fn(g, r0, valid, t, out, acc):
        res = jnp.dot(_rows(lhs, r0, t), rhs[g], preferred_element_type=jnp.float32)
        return _put_rows(out, res.astype(out_dtype), r0, valid), acc

    out0 = _varying_like(jnp.zeros((m, rhs.shape[2]), out_dtype), lhs, rhs, group_sizes)
    return _group_tile_loop(group_sizes, m, levels, out0, tile_fn)


def _tiled_backward(lhs, rhs, group_sizes, dout, levels):
    """``dlhs[r] = dout[r] @ rhs[g(r)]^T`` and ``drhs[g] = sum_{r in g} lhs[r]^T dout[r]``."""
    m, k = lhs.shape
    refs = (lhs, rhs, group_sizes, dout)

    def tile_fn(g, r0, valid, t, dlhs, acc):
        dt = jnp.where(valid[:, None], _rows(dout, r0, t), 0)
        xt = jnp.where(valid[:, None], _rows(lhs, r0, t), 0)
        dlhs = _put_rows(dlhs, _dot_nt(dt, rhs[g]).astype(dlhs.dtype), r0, valid)
        return dlhs, acc + _dot_t(xt, dt)

    dlhs0 = _varying_like(jnp.zeros((m, k), lhs.dtype), *refs)
    acc0 = _varying_like(jnp.zeros(rhs.shape[1:], jnp.float32), *refs)
    dlhs, drhs = _group_tile_loop(group_sizes, m, levels, dlhs0, tile_fn, acc0)
    return dlhs, drhs.astype(rhs.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _tiled_gmm(lhs, rhs, group_sizes, levels):
    """Tiled grouped matmul; ``levels = (forward tiles, backward tiles)``."""
    return _tiled_forward(lhs, rhs, group_sizes, levels[0])


def _tiled_gmm_fwd(lhs, rhs, group_sizes, levels):
    return _tiled_forward(lhs, rhs, group_sizes, levels[0]), (lhs, rhs, group_sizes)


def _tiled_gmm_bwd(levels, residuals, dout):
    lhs, rhs, group_sizes = residuals
    dlhs, drhs = _tiled_backward(lhs, rhs, group_sizes, dout, levels[1])
    return _sum_to_vma(dlhs, lhs), _sum_to_vma(drhs, rhs), None


_tiled_gmm.defvjp(_tiled_gmm_fwd, _tiled_gmm_bwd)


def _swiglu_tiles_forward(xs, w1, w3, w2, group_sizes, levels, *, keep_preact):
    """Fused grouped SwiGLU: ``ys[r] = (silu(xs[r] W1_g) * (xs[r] W3_g)) W2_g``, ``g = g(r)``.

    Without ``keep_preact`` the result overwrites ``xs`` tile by tile (a tile's rows of its group
    are always read before any tile writes them), so the layer holds one ``[M, d]`` buffer; rows
    past ``sum(group_sizes)`` are then set to 0. With ``keep_preact`` it writes a fresh buffer and
    also returns the pre-activations ``xs[r] W1_g`` and ``xs[r] W3_g``.
    """
    m = xs.shape[0]
    ff, d_out = w2.shape[1], w2.shape[2]
    dtype = jnp.result_type(xs.dtype, w1.dtype)
    refs = (xs, w1, w3, w2, group_sizes)
    in_place = not keep_preact and d_out == xs.shape[1] and dtype == xs.dtype

    def tile_fn(g, r0, valid, t, carry, acc):
        xt = _rows(carry if in_place else xs, r0, t)
        a = jnp.dot(xt, w1[g], preferred_element_type=jnp.float32).astype(dtype)
        b = jnp.dot(xt, w3[g], preferred_element_type=jnp.float32).astype(dtype)
        y = jnp.dot(jax.nn.silu(a) * b, w2[g], preferred_element_type=jnp.float32)
        if not keep_preact:
            return _put_rows(carry, y.astype(dtype), r0, valid), acc
        ys, pa, pb = carry
        return (
            _put_rows(ys, y.astype(dtype), r0, valid),
            _put_rows(pa, a, r0, valid),
            _put_rows(pb, b, r0, valid),
        ), acc

    if in_place:
        ys = _group_tile_loop(group_sizes, m, levels, _varying_like(xs, *refs), tile_fn)
        return _zero_rows_from(ys, jnp.sum(group_sizes.astype(jnp.int32)), levels[0])
    out0 = _varying_like(jnp.zeros((m, d_out), dtype), *refs)
    if keep_preact:
        pre0 = _varying_like(jnp.zeros((m, ff), dtype), *refs)
        out0 = (out0, pre0, pre0)
    return _group_tile_loop(group_sizes, m, levels, out0, tile_fn)


def _zero_rows_from(buf, start, tile):
    """``buf`` with rows ``start ..`` set to 0, in place, by tiles (no pass when ``start = M``)."""
    m = buf.shape[0]

    def body(i, buf):
        row = start + i * tile
        r0 = jnp.minimum(row, m - tile)
        valid = r0 + jnp.arange(tile, dtype=jnp.int32) >= row
        return _put_rows(buf, jnp.zeros((tile, buf.shape[1]), buf.dtype), r0, valid)

    return jax.lax.fori_loop(0, (m - start + tile - 1) // tile, body, buf)


def _swiglu_tiles_backward(xs, w1, w3, w2, group_sizes, pre_a, pre_b, dys, levels):
    """Gradients of the fused grouped SwiGLU w.r.t. ``xs``, ``W1``, ``W3``, ``W2``.

    With ``a = x W1``, ``b = x W3``, ``h = silu(a) b``, ``y = h W2`` and ``dy``:
    ``dW2 += h^T dy``, ``dh = dy W2^T``, ``db = dh silu(a)``,
    ``da = dh b sigma(a) (1 + a (1 - sigma(a)))``, ``dW1 += x^T da``, ``dW3 += x^T db``,
    ``dx = da W1^T + db W3^T``; weight gradients are summed per group.
    """
    m = xs.shape[0]
    refs = (xs, w1, w3, w2, group_sizes, dys)
    in_place = dys.shape == xs.shape and dys.dtype == xs.dtype  # dx overwrites dy tile by tile

    def tile_fn(g, r0, valid, t, dxs, acc):
        mask = valid[:, None]
        xt = jnp.where(mask, _rows(xs, r0, t), 0)
        dy = jnp.where(mask, _rows(dxs if in_place else dys, r0, t), 0)
        a = jnp.where(mask, _rows(pre_a, r0, t), 0).astype(jnp.float32)
        b = jnp.where(mask, _rows(pre_b, r0, t), 0).astype(jnp.float32)
        sig = jax.nn.sigmoid(a)
        silu = a * sig
        dh = _dot_nt(dy, w2[g])
        db = dh * silu
        da = dh * b * sig * (1 + a * (1 - sig))
        dx = _dot_nt(da, w1[g]) + _dot_nt(db, w3[g])
        acc1, acc3, acc2 = acc
        acc = (acc1 + _dot_t(xt, da), acc3 + _dot_t(xt, db), acc2 + _dot_t(silu * b, dy))
        return _put_rows(dxs, dx.astype(dxs.dtype), r0, valid), acc

    dxs0 = _varying_like(dys if in_place else jnp.zeros(xs.shape, xs.dtype), *refs)
    acc0 = tuple(_varying_like(jnp.zeros(w.shape[1:], jnp.float32), *refs) for w in (w1, w3, w2))
    dxs, dws = _group_tile_loop(group_sizes, m, levels, dxs0, tile_fn, acc0)
    if in_place:
        dxs = _zero_rows_from(dxs, jnp.sum(group_sizes.astype(jnp.int32)), levels[0])
    return (dxs, *(dw.astype(w.dtype) for dw, w in zip(dws, (w1, w3, w2), strict=True)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _tiled_swiglu(xs, w1, w3, w2, group_sizes, levels):
    """Fused tiled grouped SwiGLU; ``levels = (forward tiles, backward tiles)``."""
    return _swiglu_tiles_forward(xs, w1, w3, w2, group_sizes, levels[0], keep_preact=False)


def _tiled_swiglu_fwd(xs, w1, w3, w2, group_sizes, levels):
    ys, pa, pb = _swiglu_tiles_forward(xs, w1, w3, w2, group_sizes, levels[0], keep_preact=True)
    return ys, (xs, w1, w3, w2, group_sizes, pa, pb)


def _tiled_swiglu_bwd(levels, residuals, dys):
    xs, w1, w3, w2, group_sizes, pa, pb = residuals
    grads = _swiglu_tiles_backward(xs, w1, w3, w2, group_sizes, pa, pb, dys, levels[1])
    return (*(_sum_to_vma(g, p) for g, p in zip(grads, (xs, w1, w3, w2), strict=True)), None)


_tiled_swiglu.defvjp(_tiled_swiglu_fwd, _tiled_swiglu_bwd)


def resolve_grouped_matmul(impl: str) -> Literal["ragged_dot", "tiled"]:
    """``"auto"`` -> ``"tiled"`` on the CPU backend (no native ragged dot), else ``"ragged_dot"``."""
    if impl == "auto":
        return "tiled" if jax.default_backend() == "cpu" else "ragged_dot"
    if impl not in ("ragged_dot", "tiled"):
        raise ValueError(f"grouped_matmul: got {impl!r}, expected 'auto', 'ragged_dot' or 'tiled'")
    return impl


def grouped_matmul(
    lhs: Float[Array, "rows k"],
    rhs: Float[Array, "groups k n"],
    group_sizes: Int[Array, " groups"],
    *,
    impl: Literal["auto", "ragged_dot", "tiled"] = "auto",
    tile_size: int = 128,
) -> Float[Array, "rows n"]:
    """Grouped matmul: rows ``[o_g, o_g + s_g)`` of ``lhs`` are multiplied by ``rhs[g]``.

    ``o_g = s_0 + ... + s_{g-1}`` with ``s = group_sizes``; rows past ``sum(s)`` give 0. Groups of
    size 0 get an exactly-zero gradient.

    Args:
        lhs: ``[M, K]`` rows sorted by group.
        rhs: ``[G, K, N]`` one matrix per group.
        group_sizes: ``[G]`` integer sizes, ``sum <= M``.
        impl: ``"ragged_dot"`` (``jax.lax.ragged_dot``), ``"tiled"`` or ``"auto"``.
        tile_size: row tile of the tiled implementation (see :func:`tile_levels`).

    Returns:
        ``[M, N]``.
    """
    impl = resolve_grouped_matmul(impl)
    if impl == "ragged_dot":
        return jax.lax.ragged_dot(lhs, rhs, group_sizes.astype(jnp.int32))
    groups = rhs.shape[0]
    levels = (
        tile_levels(lhs.shape[0], tile_size, num_groups=groups),
        tile_levels(lhs.shape[0], tile_size, _BACKWARD_SMALL_TILE, num_groups=groups),
    )
    return _tiled_gmm(lhs, rhs, group_sizes.astype(jnp.int32), levels)


# ----------------------------------------------------------------------------------------------
# Expert computation
# ----------------------------------------------------------------------------------------------


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


def _inverse_permutation(order: Int[Array, " n"]) -> Int[Array, " n"]:
    n = order.shape[0]
    return jnp.zeros((n,), jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32))


def _combine(y_assign: Float[Array, "tokens k embed"], weights: Float[Array, "tokens k"]):
    return jnp.einsum("tkd,tk->td", y_assign, weights.astype(y_assign.dtype))


def _gather_sum(rows, slots, weights=None):
    """``out[t] = sum_j w[t, j] rows[slots[t, j]]`` as ``k`` fused gathers (no ``[T, k, d]``)."""
    out = None
    for j in range(slots.shape[1]):
        r = rows[slots[:, j]]
        if weights is not None:
            r = r * weights[:, j, None]
        out = r if out is None else out + r
    return out


@jax.custom_vjp
def _sort_rows(x, token_of_row, slots):
    """``xs[r] = x[token_of_row[r]]``; ``slots[t, j]`` is the sorted row of token ``t``'s slot ``j``.

    The transpose (gradient) is the gather-sum ``dx[t] = sum_j dxs[slots[t, j]]``, not a scatter.
    """
    return x[token_of_row]


def _sort_rows_fwd(x, token_of_row, slots):
    return x[token_of_row], (token_of_row, slots)


def _sort_rows_bwd(residuals, dxs):
    token_of_row, slots = residuals
    return _gather_sum(dxs, slots), None, None


_sort_rows.defvjp(_sort_rows_fwd, _sort_rows_bwd)


@jax.custom_vjp
def _unsort_combine(ys, weights, order, slots):
    """``y[t] = sum_j weights[t, j] ys[slots[t, j]]`` (un-sort and combine, eq. ``y_t`` above).

    ``order[r]`` is the flat assignment ``t k + j`` of sorted row ``r`` (``slots`` inverted).
    Gradients: ``dys[r] = weights_flat[order[r]] dy[order[r] // k]`` and
    ``dweights[t, j] = <ys[slots[t, j]], dy[t]>``, both gathers.
    """
    return _gather_sum(ys, slots, weights)


def _unsort_combine_fwd(ys, weights, order, slots):
    return _gather_sum(ys, slots, weights), (ys, weights, order, slots)


def _unsort_combine_bwd(residuals, dy):
    ys, weights, order, slots = residuals
    top_k = slots.shape[1]
    dys = dy[order // top_k] * weights.reshape(-1)[order][:, None]
    dw = jnp.stack([jnp.sum(ys[slots[:, j]] * dy, axis=-1) for j in range(top_k)], axis=1)
    return dys.astype(ys.dtype), dw.astype(weights.dtype), None, None


_unsort_combine.defvjp(_unsort_combine_fwd, _unsort_combine_bwd)


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
        impl, tile_size: grouped-matmul backend (see :func:`grouped_matmul`).

    Returns:
        ``[T, d]``.
    """
    num_tokens, top_k = experts.shape
    num_experts = expert_weights.w1.shape[0]
    # Materialise the routing before the expert loops: without the barrier XLA:CPU fuses the
    # router's top-k into consumers inside the loops and recomputes it there (2x slower at E=64).
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


# ----------------------------------------------------------------------------------------------
# Expert parallelism
# ----------------------------------------------------------------------------------------------


def _ep_dropless_local(x, experts, weights, w1, w3, w2, *, n_ep, impl, tile_size):
    """Per-device dropless EP: all_to_all rows to expert owners, grouped matmul, all_to_all back."""
    x, experts, weights = (a.reshape(-1, a.shape[-1]) for a in (x, experts, weights))
    num_tokens, top_k = experts.shape
    d = x.shape[-1]
    n = num_tokens * top_k
    e_loc = w1.shape[0]
    flat = experts.reshape(-1)
    order = sort_by_expert(flat, e_loc * n_ep)
    xs = x[order // top_k]
    dest_counts = jnp.bincount(flat, length=e_loc * n_ep).reshape(n_ep, e_loc)
    send_sizes = jnp.sum(dest_counts, axis=1)
    send_off = jnp.cumsum(send_sizes) - send_sizes
    r = jnp.arange(n, dtype=jnp.int32)
    src = jnp.clip(send_off[:, None] + r[None, :], 0, n - 1)
    send = jnp.where((r[None, :] < send_sizes[:, None])[..., None], xs[src], 0)
    recv = jax.lax.all_to_all(send, EXPERT_MESH_AXIS, 0, 0)
    recv_counts = jax.lax.all_to_all(dest_counts, EXPERT_MESH_AXIS, 0, 0)
    cum = jnp.cumsum(recv_counts, axis=1)
    local_e = jax.vmap(lambda c: jnp.searchsorted(c, r, side="right"))(cum).reshape(-1)
    order2 = sort_by_expert(local_e, e_loc + 1)  # padding rows have local_e = e_loc
    rows = recv.reshape(n_ep * n, d)[order2]
    out = _swiglu_grouped(
        rows,
        ExpertWeights(w1=w1, w3=w3, w2=w2),
        jnp.sum(recv_counts, axis=0),
        impl=impl,
        tile_size=tile_size,
    )
    back = out[_inverse_permutation(order2)].reshape(n_ep, n, d)
    ret = jax.lax.all_to_all(back, EXPERT_MESH_AXIS, 0, 0)
    dest = flat[order] // e_loc
    ys = ret[dest, r - send_off[dest]]
    y_assign = ys[_inverse_permutation(order)].reshape(num_tokens, top_k, d)
    return _combine(y_assign, weights), jnp.zeros((), jnp.int32)


def _ep_capacity_local(x, experts, weights, w1, w3, w2, *, n_ep, capacity_factor, token_axes):
    """Per-device capacity EP (GShard): the device's tokens form one capacity group."""
    x, experts, weights = (a.reshape(-1, a.shape[-1]) for a in (x, experts, weights))
    num_tokens, top_k = experts.shape
    e_loc = w1.shape[0]
    num_experts = e_loc * n_ep
    capacity = expert_capacity(
        num_tokens, num_experts=num_experts, top_k=top_k, capacity_factor=capacity_factor
    )
    xbuf, plan = _capacity_dispatch(x, experts, num_experts, capacity)
    xbuf = xbuf.reshape(n_ep, e_loc, capacity, x.shape[-1])
    recv = jax.lax.all_to_all(xbuf, EXPERT_MESH_AXIS, 0, 0)
    out = _swiglu_batched(recv, ExpertWeights(w1=w1, w3=w3, w2=w2))
    ybuf = jax.lax.all_to_all(out, EXPERT_MESH_AXIS, 0, 0).reshape(num_experts, capacity, -1)
    y, dropped = _capacity_combine(ybuf, plan, weights, num_tokens)
    return y, jax.lax.psum(dropped, token_axes)


def _context_mesh(mesh):
    if mesh is None:
        mesh = jax.sharding.get_abstract_mesh()
    if mesh is None or mesh.empty or EXPERT_MESH_AXIS not in mesh.axis_names:
        raise ValueError(
            f"expert_parallel: got True, but the mesh in context ({mesh}) has no "
            f"'{EXPERT_MESH_AXIS}' axis; expected a mesh set with jax.set_mesh(...) whose axes "
            f"include '{EXPERT_MESH_AXIS}'"
        )
    explicit = [
        name
        for name, kind in zip(mesh.axis_names, getattr(mesh, "axis_types", ()), strict=False)
        if kind == jax.sharding.AxisType.Explicit
    ]
    if explicit:
        raise ValueError(
            f"expert_parallel: mesh axes {explicit} are AxisType.Explicit; expected AxisType.Auto "
            "axes (as built by jaxlab.core.sharding.make_mesh)"
        )
    return mesh


def validate_expert_parallel(config: MoEConfig, batch: int, mesh) -> tuple[str, ...]:
    """Checks an expert-parallel layout before tracing; returns the token mesh axes.

    Raises:
        ValueError: naming ``num_experts`` if the ``expert`` axis size does not divide it, or
            ``batch`` if the token mesh axes do not divide the batch.
    """
    mesh = _context_mesh(mesh)
    n_ep = mesh.shape[EXPERT_MESH_AXIS]
    if config.num_experts % n_ep:
        raise ValueError(
            f"num_experts: got {config.num_experts}, expected a multiple of the mesh axis "
            f"'{EXPERT_MESH_AXIS}' size {n_ep}"
        )
    token_axes = tuple(a for a in TOKEN_MESH_AXES if a in mesh.axis_names)
    n_tok = math.prod(mesh.shape[a] for a in token_axes)
    if batch % n_tok:
        raise ValueError(
            f"batch: got {batch}, expected a multiple of {n_tok}, the product of the mesh axes "
            f"{token_axes} over which the expert-parallel layer splits tokens"
        )
    return token_axes


def expert_parallel_experts(
    x: Float[Array, "batch seq embed"],
    experts: Int[Array, "batch seq k"],
    weights: Float[Array, "batch seq k"],
    expert_weights: ExpertWeights,
    *,
    config: MoEConfig,
    mesh: Any = None,
) -> tuple[Float[Array, "batch seq embed"], Int[Array, ""]]:
    """Expert-parallel MoE inside ``jax.shard_map`` (experts over ``expert``, tokens over
    ``("data", "fsdp", "expert")``).

    Dropless: exact (equals :func:`dropless_experts`). Capacity: each device's tokens form one
    capacity group (GShard), so drops can differ from the single-group layer; without drops the
    results agree.

    Returns:
        ``y [B, S, d]`` and the number of dropped assignments over the whole batch.
    """
    mesh = _context_mesh(mesh)
    token_axes = validate_expert_parallel(config, x.shape[0], mesh)
    n_ep = mesh.shape[EXPERT_MESH_AXIS]
    tok = PartitionSpec(token_axes)
    exp = PartitionSpec(EXPERT_MESH_AXIS)
    if config.dispatch == "dropless":
        local = functools.partial(
            _ep_dropless_local,
            n_ep=n_ep,
            impl=resolve_grouped_matmul(config.grouped_matmul),
            tile_size=config.tile_size,
        )
    else:
        local = functools.partial(
            _ep_capacity_local,
            n_ep=n_ep,
            capacity_factor=config.capacity_factor,
            token_axes=token_axes,
        )

    def shaped(x, experts, weights, w1, w3, w2):
        y, dropped = local(x, experts, weights, w1, w3, w2)
        return y.reshape(x.shape), dropped

    args = (x, experts, weights, expert_weights.w1, expert_weights.w3, expert_weights.w2)
    specs = (tok, tok, tok, exp, exp, exp)
    return jax.shard_map(shaped, mesh=mesh, in_specs=specs, out_specs=(tok, PartitionSpec()))(*args)


# ----------------------------------------------------------------------------------------------
# The layer
# ----------------------------------------------------------------------------------------------


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
        w_bits = quant.weight_bits("experts")
        weights = jax.tree.map(lambda w: fake_quant(jnp.asarray(w, self.dtype), w_bits, 1), weights)
        x = fake_quant(jnp.asarray(x, self.dtype), quant.act_bits("experts"))
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
