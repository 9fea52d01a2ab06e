"""The random-feature CI test as shipped before float64 (kept to reproduce its type-I error in
``ci_calibration --old-rcit``): float32, a 1e-3 ridge on unstandardised features, 50 conditioning
features, bandwidth of S the root sum of squares of per-column median distances."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray


def median_distances(data: np.ndarray, rows: int = 200) -> np.ndarray:
    """Per-column median pairwise distance over the first ``rows`` rows (the RCIT bandwidth)."""
    v = np.asarray(data[:rows], np.float64)
    diff = np.abs(v[:, None, :] - v[None, :, :])
    iu = np.triu_indices(v.shape[0], k=1)
    med = np.median(diff[iu], axis=0)
    return np.where(med > 1e-6, med, 1.0)


def _rff(key, v, num, sigma):
    kw, kb = jax.random.split(key)
    w = jax.random.normal(kw, (v.shape[1], num))
    b = jax.random.uniform(kb, (num,), maxval=2 * jnp.pi)
    f = jnp.sqrt(2.0 / num) * jnp.cos(v @ w / sigma + b[None, :])
    return f - f.mean(0)[None, :]


@partial(jax.jit, static_argnames=("num_xy", "num_z", "chunk"))
def rcit_pvalues(
    key: PRNGKeyArray,
    data: Float[Array, "n d"],
    bandwidth: Float[Array, " d"],
    x: Int[Array, " q"],
    y: Int[Array, " q"],
    cond: Int[Array, "q m"],
    mask: Bool[Array, "q m"],
    *,
    num_xy: int = 5,
    num_z: int = 50,
    ridge: float = 1e-3,
    chunk: int = 16,
) -> Float[Array, " q"]:
    """RCIT p-values for a batch of triples on standardized ``data``.

    For one triple: ``f_x``, ``f_y`` (``num_xy`` random Fourier features each, bandwidth the
    per-column median distance ``bandwidth``) and ``f_S`` (``num_z`` features of the masked
    conditioning vector, bandwidth ``sqrt(sum_{s in S} bandwidth_s^2)``); ``r_x = f_x - f_S beta_x`` with ridge ``beta``; ``C = r_x^T r_y
    / n``; statistic ``n ||C||_F^2``; null ``Gamma(k, theta)`` with ``k theta = tr Sigma``,
    ``k theta^2 = 2 ||Sigma||_F^2`` where ``Sigma`` is the covariance of ``vec(r_x,i r_y,i^T)``.
    Processed ``chunk`` triples at a time (``lax.map``) to bound memory at large n.
    """
    n = data.shape[0]
    kx, ky, kz = jax.random.split(key, 3)

    def one(args):
        xi, yi, ci, mi = args
        xv = data[:, xi][:, None]
        yv = data[:, yi][:, None]
        zv = data[:, ci] * mi[None, :]
        sz = jnp.sqrt(jnp.maximum(jnp.sum(jnp.where(mi, bandwidth[ci] ** 2, 0.0)), 1e-12))
        fx = _rff(kx, xv, num_xy, bandwidth[xi])
        fy = _rff(ky, yv, num_xy, bandwidth[yi])
        fz = _rff(kz, zv, num_z, sz) * jnp.any(mi)
        gram = fz.T @ fz / n + ridge * jnp.eye(num_z)
        fxy = jnp.concatenate([fx, fy], axis=1)
        beta = jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(gram), fz.T @ fxy / n)
        rxy = fxy - fz @ beta
        rx, ry = rxy[:, :num_xy], rxy[:, num_xy:]
        c = rx.T @ ry / n
        stat = n * jnp.sum(c * c)
        prod = (rx[:, :, None] * ry[:, None, :]).reshape(n, -1)
        prod = prod - prod.mean(0)[None, :]
        sigma = prod.T @ prod / n
        mean = jnp.trace(sigma)
        var = 2.0 * jnp.sum(sigma * sigma)
        shape = mean * mean / var
        scale = var / mean
        return jax.scipy.special.gammaincc(shape, stat / scale)

    return jax.lax.map(one, (x, y, cond, mask), batch_size=chunk)
