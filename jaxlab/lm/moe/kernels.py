"""Grouped matmuls for the MoE experts, with custom VJPs.

:func:`grouped_matmul` multiplies rows ``[o_g, o_g + s_g)`` of ``lhs [M, K]`` by ``rhs[g] [K, N]``
(``s = group_sizes [G]``). Backends: ``jax.lax.ragged_dot`` (native on GPU/TPU; XLA:CPU lowers
it to a dense matmul over *all* groups, ``G`` times the useful work) and ``tiled`` (the default on
CPU): a loop over groups and, inside, over row tiles of that group's rows
(:mod:`jaxlab.lm.moe.tiling`).

For the expert SwiGLU ``(silu(x W1_g) * (x W3_g)) W2_g`` the three matmuls are fused per tile
(``_tiled_swiglu``): the forward overwrites the sorted activations in place (one ``[M, d]``
buffer) and a custom VJP computes all gradients in one tiled pass. Inside ``shard_map`` the loop
carries are marked varying over the axes of their inputs, and cotangents of inputs that were
implicitly broadcast are summed over the extra axes.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jaxlab.lm.moe.tiling import (
    _BACKWARD_SMALL_TILE,
    _group_tile_loop,
    _put_rows,
    _rows,
    _zero_rows_from,
    tile_levels,
)


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
        tile_size: row tile of the tiled implementation (see
            :func:`jaxlab.lm.moe.tiling.tile_levels`).

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
