"""How the tiled grouped kernels cover each group's rows with fixed-size row tiles.

Rows ``[M, ...]`` are sorted by group (expert); group ``g`` owns rows ``[o_g, o_g + s_g)``. A
tiled kernel visits, for every group in turn, tiles of a few static sizes (:func:`tile_levels`,
largest first) that cover its rows (:func:`_group_tile_loop`), so each expert's weights are sliced
once and every matmul has a static shape. Tiles of ``tile_size`` rows come first, then 8-row tiles
for the rest (at most 7 wasted rows per group); when groups get many rows (``M / G >= 512``) tiles
of at least 512 rows come before them, which XLA:CPU spreads over its threads.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


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
#: :func:`tile_levels`); tile levels this large round half up in :func:`_group_tile_loop`.
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


def _zero_rows_from(buf, start, tile):
    """``buf`` with rows ``start ..`` set to 0, in place, by tiles (no pass when ``start = M``)."""
    m = buf.shape[0]

    def body(i, buf):
        row = start + i * tile
        r0 = jnp.minimum(row, m - tile)
        valid = r0 + jnp.arange(tile, dtype=jnp.int32) >= row
        return _put_rows(buf, jnp.zeros((tile, buf.shape[1]), buf.dtype), r0, valid)

    return jax.lax.fori_loop(0, (m - start + tile - 1) // tile, body, buf)
