"""Sparsification of a dense weighted graph: top-k entries per column, or a threshold.

Both rewiring methods (JDR's final step, DIGL's diffusion matrix) end with one of these. Columns
index receivers (``a[s, r]``, see :mod:`jaxlab.graph.graph`), so "top-k per column" keeps, for every
node, its ``k`` strongest incoming edges; the result is in general not symmetric.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float


def top_k_per_column(a: Float[Array, "n n"], k: int) -> Float[Array, "n n"]:
    """Keeps the ``k`` largest (signed) entries of each column, zeroing the rest.

    ``k >= n`` keeps everything. Ties are broken by ``lax.top_k`` (lowest row index first), so
    every column has exactly ``min(k, n)`` kept slots (some may hold zeros).

    Args:
      a: ``(n, n)`` matrix.
      k: entries to keep per column (static, >= 1).

    Returns:
      ``(n, n)`` matrix with at most ``k`` non-zeros per column.
    """
    n = a.shape[0]
    if k < 1:
        raise ValueError(f"k: got {k}, expected an integer >= 1")
    if k >= n:
        return a
    vals, rows = jax.lax.top_k(a.T, k)
    cols = jnp.broadcast_to(jnp.arange(n)[:, None], rows.shape)
    return jnp.zeros_like(a).at[rows, cols].set(vals)


def threshold(a: Float[Array, "n n"], eps: Float[Array, ""] | float) -> Float[Array, "n n"]:
    """Zeroes entries below ``eps`` (signed comparison, as JDR's ``get_clipped_matrix``)."""
    return jnp.where(a < eps, 0.0, a)
