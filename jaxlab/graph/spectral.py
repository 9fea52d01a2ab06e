"""Leading spectral spaces: top-k eigenpairs of a symmetric matrix and top-k singular triplets.

Two solvers, both jit-able:

* ``dense``: a full ``jnp.linalg.eigh`` / ``jnp.linalg.svd`` then a slice; O(n^3), exact, fine for
  graphs up to a few thousand nodes on a CPU.
* ``lobpcg``: ``jax.experimental.sparse.linalg.lobpcg_standard`` on the matrix (eigenpairs) or on
  the smaller Gram matrix ``X^T X`` / ``X X^T`` (singular triplets); O(n^2 k) per iteration with a
  dense operand, warm-startable from the previous solution. LOBPCG needs ``5 k < dim``.

Orders are "best first": the leading pair is column 0. ``by_magnitude`` ranks eigenvalues by
``|lambda|`` (for heterophilic graphs, whose informative eigenvalues are large and negative); the
LOBPCG solver then runs on ``A`` and on ``-A`` and keeps the ``k`` largest magnitudes of the
``2k`` candidates.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
from jax.experimental.sparse.linalg import lobpcg_standard
from jaxtyping import Array, Float

from jaxlab.core import linalg

Solver = Literal["dense", "lobpcg"]


def _ranked(lam: Float[Array, " m"], by_magnitude: bool) -> jax.Array:
    """Indices sorting ``lam`` best first (descending value, or descending magnitude)."""
    score = jnp.abs(lam) if by_magnitude else lam
    return jnp.argsort(-score, stable=True)


def top_eigenpairs_dense(
    a: Float[Array, "n n"], k: int, *, by_magnitude: bool = False
) -> tuple[Float[Array, " k"], Float[Array, "n k"]]:
    """The ``k`` leading eigenpairs of symmetric ``a`` via a full ``eigh`` (best first)."""
    lam, v = linalg.eigh(a)
    idx = _ranked(lam, by_magnitude)[:k]
    return lam[idx], v[:, idx]


def top_eigenpairs_lobpcg(
    a: Float[Array, "n n"],
    init: Float[Array, "n k"] | tuple[Float[Array, "n k"], Float[Array, "n k"]],
    *,
    by_magnitude: bool = False,
    iterations: int = 50,
) -> tuple[Float[Array, " k"], Float[Array, "n k"], Float[Array, "n k"] | tuple]:
    """The ``k`` leading eigenpairs of symmetric ``a`` by LOBPCG (best first).

    Args:
      a: ``(n, n)`` symmetric matrix.
      init: start vectors ``(n, k)``; a pair ``(pos, neg)`` when ``by_magnitude`` (for ``A`` and
        ``-A``). Pass the returned ``state`` back to warm-start the next call.
      by_magnitude: rank by ``|lambda|``.
      iterations: LOBPCG iteration cap.

    Returns:
      ``(lam, v, state)``: eigenvalues ``(k,)``, eigenvectors ``(n, k)``, warm-start state.
    """
    if not by_magnitude:
        lam, v, _ = lobpcg_standard(a, init, m=iterations)
        return lam, v, v
    pos0, neg0 = init
    k = pos0.shape[1]
    lam_p, v_p, _ = lobpcg_standard(a, pos0, m=iterations)
    lam_n, v_n, _ = lobpcg_standard(-a, neg0, m=iterations)
    lam = jnp.concatenate([lam_p, -lam_n])
    v = jnp.concatenate([v_p, v_n], axis=1)
    idx = _ranked(lam, True)[:k]
    return lam[idx], v[:, idx], (v_p, v_n)


def top_singular_dense(
    x: Float[Array, "n f"], k: int
) -> tuple[Float[Array, "n k"], Float[Array, " k"], Float[Array, "k f"]]:
    """``(U_k, s_k, W_k^T)``: the ``k`` leading singular triplets of ``x`` via a thin SVD."""
    u, s, wt = linalg.svd(x, full_matrices=False)
    return u[:, :k], s[:k], wt[:k]


def top_singular_lobpcg(
    x: Float[Array, "n f"], init: Float[Array, "m k"], *, iterations: int = 50
) -> tuple[Float[Array, "n k"], Float[Array, " k"], Float[Array, "k f"], Float[Array, "m k"]]:
    """The ``k`` leading singular triplets of ``x`` by LOBPCG on the smaller Gram matrix.

    With ``f <= n`` the right singular vectors ``W`` are the top eigenvectors of ``X^T X`` and
    ``U = X W / s``; otherwise the roles swap. ``init`` has ``m = min(n, f)`` rows.

    Returns:
      ``(U_k, s_k, W_k^T, state)``; ``state`` warm-starts the next call.
    """
    n, f = x.shape
    if f <= n:
        theta, w, _ = lobpcg_standard(lambda v: x.T @ (x @ v), init, m=iterations)
        s = jnp.sqrt(jnp.maximum(theta, 0.0))
        u = (x @ w) / jnp.where(s > 0, s, 1.0)[None, :]
        return u, s, w.T, w
    theta, u, _ = lobpcg_standard(lambda v: x @ (x.T @ v), init, m=iterations)
    s = jnp.sqrt(jnp.maximum(theta, 0.0))
    wt = (u.T @ x) / jnp.where(s > 0, s, 1.0)[:, None]
    return u, s, wt, u


def check_lobpcg_size(name: str, k: int, dim: int) -> None:
    """LOBPCG's size rule ``5 k < dim`` as a ValueError naming the field."""
    if not 5 * k < dim:
        raise ValueError(
            f"{name}: got {k} leading vectors for dimension {dim}, expected 5 * {name} < {dim} "
            "for the lobpcg solver (use solver='dense' for small problems)"
        )
