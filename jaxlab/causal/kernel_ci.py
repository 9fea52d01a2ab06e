"""Kernel conditional-independence tests of one query ``x _||_ y | z`` on arrays, in float64.

* :func:`rcit_pvalue` - RCIT (Strobl, Zhang & Visweswaran 2019), the random-feature approximation
  of KCI, as the original R code computes it: inputs standardised, ``num_xy = 5`` random Fourier
  features of x and of y, ``num_z = 100`` of z, bandwidths the median pairwise distance of the
  first ``rows = 500`` rows, features standardised, x- and y-features regressed on z-features
  with a ``1e-10`` ridge, statistic ``n ||C_{xy|z}||_F^2`` and a gamma approximation of its null
  (mean ``tr Sigma``, variance ``2 ||Sigma||_F^2``, ``Sigma`` the second moment of the products of
  residual features). The regression needs float64: a ``1e-10`` ridge is below float32 round-off,
  and a larger ridge (``1e-3`` on unstandardised features) leaves z in the residuals, so the test
  rejects true conditional independences (over half of them for ``x = sin(1.5 z) + e``,
  ``y = z^2 + e``).
* :func:`kci_pvalue` - exact KCI (Zhang, Peters, Janzing & Schölkopf 2011) with Gaussian kernels
  and median-heuristic widths (causal-learn's ``est_width="median"``: ``k = exp(-d^2 / (4 m^2))``,
  ``m`` the median nonzero distance), for small n (O(n^3) per query). Unconditional:
  ``T = tr(K_x K_y)`` of centred Gram matrices, null ``Gamma`` with mean ``tr K_x tr K_y / n`` and
  variance ``2 ||K_x||^2 ||K_y||^2 / n^2``. Conditional: x is augmented with ``z / 2``,
  ``R = eps (K_z + eps I)^{-1}`` (``eps = 1e-3``), ``T = tr(R K_x R R K_y R)``; the null is
  ``sum_k lambda_k chi^2_1`` with ``lambda`` the eigenvalues of ``(K_xR o K_yR)`` (Hadamard
  product: the Gram matrix of the products of the two eigenbases), so its gamma approximation
  needs no eigendecomposition: mean ``sum_t K_xR[t,t] K_yR[t,t]``, variance
  ``2 ||K_xR o K_yR||_F^2``.

Both take ``z`` padded to a fixed width with a column mask (masked columns are zero and count for
nothing), so one compiled program serves conditioning sets of every size up to the width, and
both ``vmap`` (the linear algebra goes through :mod:`jaxlab.core.linalg`). For a batch of RCIT
queries, :func:`rcit_pvalues_by_set` computes the same p-values with the features of x and y
computed once per column (:func:`rcit_column_features`) and the conditioning set's part (its
bandwidth, features and Cholesky factor: most of a query's cost) once per distinct set. Call them with float64
inputs under ``jax.enable_x64(True)`` (the :class:`~jaxlab.causal.ci_tests.CITest` classes do).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from jaxlab.core import linalg


def _standardise(v: Float[Array, "n k"]) -> Float[Array, "n k"]:
    sd = v.std(0)
    return (v - v.mean(0)[None, :]) / jnp.where(sd > 0, sd, 1.0)[None, :]


def _median_distance(v: Float[Array, "n k"], rows: int, nonzero: bool) -> Float[Array, ""]:
    """Median pairwise Euclidean distance over the first ``rows`` rows, ties (zero distances)
    counted as RCIT does or left out (``nonzero``) as KCI does; 1 where it is not positive."""
    w = v[:rows]
    i, j = np.triu_indices(w.shape[0], k=1)
    d = jnp.sqrt(jnp.sum((w[i] - w[j]) ** 2, axis=-1))
    med = jnp.nanmedian(jnp.where(d > 1e-12, d, jnp.nan)) if nonzero else jnp.median(d)
    return jnp.where(med > 1e-12, med, 1.0)


def _rff(key: PRNGKeyArray, v: Float[Array, "n k"], num: int, sigma) -> Float[Array, "n num"]:
    """``num`` random Fourier features of a Gaussian kernel of width ``sigma``, standardised."""
    kw, kb = jax.random.split(key)
    w = jax.random.normal(kw, (v.shape[1], num), v.dtype)
    b = jax.random.uniform(kb, (num,), v.dtype, maxval=2 * jnp.pi)
    return _standardise(jnp.sqrt(2.0) * jnp.cos(v @ w / sigma + b[None, :]))


def _rcit_xy_features(key: PRNGKeyArray, v: Float[Array, " n"], num: int, rows: int):
    """Random features (n, num) of one standardised variable, x or y of a query."""
    vs = _standardise(v[:, None])
    return _rff(key, vs, num, _median_distance(vs, rows, False))


def _rcit_z_part(key: PRNGKeyArray, z, zmask, num_z: int, rows: int, ridge: float):
    """What RCIT computes from the conditioning set alone: its random features ``fz`` (n, num_z),
    zero for an empty set, and the Cholesky factor of their ridge-regularised second moment."""
    zs = _standardise(z) * zmask[None, :]
    fz = _rff(key, zs, num_z, _median_distance(zs, rows, False))
    has_z = jnp.any(zmask)
    fz = jnp.where(has_z, fz, 0.0)
    czz = fz.T @ fz / z.shape[0] + ridge * jnp.eye(num_z, dtype=fz.dtype)
    return fz, linalg.cholesky(czz), has_z


def _rcit_from_features(fx, fy, fz, chol, has_z) -> Float[Array, ""]:
    """RCIT's p-value from the features of x (n, a), of y (n, b) and the set's z part."""
    n, num_xy = fx.shape
    fxy = jnp.concatenate([fx, fy], axis=1)
    rhs = fz.T @ fxy / n
    beta = jax.scipy.linalg.cho_solve((chol, True), rhs)
    rxy = fxy - fz @ jnp.where(has_z, beta, 0.0)
    rx, ry = rxy[:, :num_xy], rxy[:, num_xy:]
    c = rx.T @ ry / n
    stat = n * jnp.sum(c * c)
    prod = (rx[:, :, None] * ry[:, None, :]).reshape(n, -1)
    sigma = prod.T @ prod / n
    mean = jnp.trace(sigma)
    var = 2.0 * jnp.sum(sigma * sigma)
    return jax.scipy.special.gammaincc(mean * mean / var, stat * mean / var)


@partial(jax.jit, static_argnames=("num_xy", "num_z", "rows"))
def rcit_pvalue(
    key: PRNGKeyArray,
    x: Float[Array, " n"],
    y: Float[Array, " n"],
    z: Float[Array, "n m"],
    zmask: Bool[Array, " m"],
    *,
    num_xy: int = 5,
    num_z: int = 100,
    rows: int = 500,
    ridge: float = 1e-10,
) -> Float[Array, ""]:
    """RCIT p-value of ``x _||_ y | z[:, zmask]`` (see the module docstring)."""
    kx, ky, kz = jax.random.split(key, 3)
    fx = _rcit_xy_features(kx, x, num_xy, rows)
    fy = _rcit_xy_features(ky, y, num_xy, rows)
    return _rcit_from_features(fx, fy, *_rcit_z_part(kz, z, zmask, num_z, rows, ridge))


@partial(jax.jit, static_argnames=("num_xy", "rows"))
def rcit_column_features(
    key: PRNGKeyArray, data: Float[Array, "n d"], *, num_xy: int = 5, rows: int = 500
) -> tuple[Float[Array, "d n k"], Float[Array, "d n k"]]:
    """The x- and y-features :func:`rcit_pvalue` draws with ``key`` for each column of ``data``
    as x and as y (they depend on the column only, so a batch of queries computes them once)."""
    kx, ky, _ = jax.random.split(key, 3)
    cols = data.T
    fx = jax.vmap(lambda v: _rcit_xy_features(kx, v, num_xy, rows))(cols)
    fy = jax.vmap(lambda v: _rcit_xy_features(ky, v, num_xy, rows))(cols)
    return fx, fy


@partial(jax.jit, static_argnames=("num_z", "rows"))
def rcit_pvalues_by_set(
    key: PRNGKeyArray,
    data: Float[Array, "n d"],
    fx: Float[Array, "d n k"],
    fy: Float[Array, "d n k"],
    sets: Int[Array, "r m"],
    smask: Bool[Array, "r m"],
    valid: Bool[Array, " r"],
    qx: Int[Array, "r s"],
    qy: Int[Array, "r s"],
    *,
    num_z: int = 100,
    rows: int = 500,
    ridge: float = 1e-10,
) -> Float[Array, "r s"]:
    """:func:`rcit_pvalue` of ``qx[i, t] _||_ qy[i, t] | data[:, sets[i]][:, smask[i]]`` for
    every row i and slot t, ``fx``/``fy`` from :func:`rcit_column_features` with the same key.

    The z part (the bandwidth median, random features and Cholesky factor of the conditioning
    set), which costs most of a query, is computed once per row and shared by the row's ``s``
    queries; rows run one after another and an invalid row (padding) is skipped (p = 1).
    """
    kz = jax.random.split(key, 3)[2]

    def row(args):
        s, sm, ok, xs, ys = args

        def compute(_):
            part = _rcit_z_part(kz, data[:, s], sm, num_z, rows, ridge)
            return jax.vmap(lambda a, b: _rcit_from_features(fx[a], fy[b], *part))(xs, ys)

        return jax.lax.cond(ok, compute, lambda _: jnp.ones(xs.shape, data.dtype), None)

    return jax.lax.map(row, (sets, smask, valid, qx, qy))


def _gram(v: Float[Array, "n k"], rows: int) -> Float[Array, "n n"]:
    """Centred Gaussian Gram matrix, width ``sqrt(2)`` times the median distance."""
    med = _median_distance(v, rows, True)
    sq = jnp.sum((v[:, None, :] - v[None, :, :]) ** 2, axis=-1)
    k = jnp.exp(-sq / (4.0 * med * med))
    k = k - k.mean(0)[None, :]
    return k - k.mean(1)[:, None]


@partial(jax.jit, static_argnames=("rows",))
def kci_pvalue(
    x: Float[Array, " n"],
    y: Float[Array, " n"],
    z: Float[Array, "n m"],
    zmask: Bool[Array, " m"],
    *,
    rows: int = 1000,
    eps: float = 1e-3,
) -> Float[Array, ""]:
    """Exact KCI p-value of ``x _||_ y | z[:, zmask]`` (see the module docstring)."""
    n = x.shape[0]
    xs = _standardise(x[:, None])
    ys = _standardise(y[:, None])
    zs = _standardise(z) * zmask[None, :]
    has_z = jnp.any(zmask)
    ky = _gram(ys, rows)
    # unconditional
    kx0 = _gram(xs, rows)
    stat0 = jnp.sum(kx0 * ky)
    mean0 = jnp.trace(kx0) * jnp.trace(ky) / n
    var0 = 2.0 * jnp.sum(kx0 * kx0) * jnp.sum(ky * ky) / (n * n)
    # conditional
    kx = _gram(jnp.concatenate([xs, 0.5 * zs], axis=1), rows)
    kz = _gram(zs, rows)
    r = eps * linalg.inv(kz + eps * jnp.eye(n, dtype=kz.dtype))
    kxr = r @ kx @ r
    kyr = r @ ky @ r
    had = kxr * kyr
    stat1 = jnp.sum(had)
    mean1 = jnp.sum(jnp.diagonal(kxr) * jnp.diagonal(kyr))
    var1 = 2.0 * jnp.sum(had * had)
    stat = jnp.where(has_z, stat1, stat0)
    mean = jnp.where(has_z, mean1, mean0)
    var = jnp.where(has_z, var1, var0)
    return jax.scipy.special.gammaincc(mean * mean / var, stat * mean / var)
