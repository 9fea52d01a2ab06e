"""Sorting the ``T k`` (token, expert) assignments by expert, and back.

The dropless layer multiplies each expert's rows as one contiguous block, so the assignments are
put in expert order first (:func:`sort_by_expert`), the token rows gathered in that order
(``_sort_rows``, ``[T, d] -> [T k, d]``) and, after the experts, gathered back and summed with the
routing weights (``_unsort_combine``, ``[T k, d] -> [T, d]``). Both have custom VJPs whose
transposes are gathers too, so neither direction scatters.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Int


def sort_by_expert(flat_experts: Int[Array, " n"], num_experts: int) -> Int[Array, " n"]:
    """The stable sort order of assignments by expert id: ``argsort(flat, stable=True)``.

    ``flat_experts`` must lie in ``[0, num_experts)``.

    When ``num_experts * n < 2^31`` it sorts the unique int32 keys ``expert * n + index`` (one
    array, no stability bookkeeping) and takes the index back as ``key mod n``, which XLA:CPU sorts
    several times faster than the stable argsort.
    """
    n = flat_experts.shape[0]
    if num_experts * n >= 2**31:
        return jnp.argsort(flat_experts, stable=True).astype(jnp.int32)
    keys = flat_experts.astype(jnp.int32) * n + jnp.arange(n, dtype=jnp.int32)
    return jnp.sort(keys) % n


def _inverse_permutation(order: Int[Array, " n"]) -> Int[Array, " n"]:
    n = order.shape[0]
    return jnp.zeros((n,), jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32))


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
