"""Sliced Wasserstein distance between two point clouds (Rabin et al. 2011; Bonneel et al. 2015).

SW_p(X, Y) = ( E_{theta ~ U(S^{d-1})} W_p^p(theta.X, theta.Y) )^{1/p}, estimated with random unit
directions; each 1-D W_p between empirical measures of equal size is the mean |x_(i) - y_(i)|^p of
the sorted projections. For unequal sizes both are compared at the m = min(n_x, n_y) mid-point
quantiles (i + 1/2)/m.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray


def _quantiles(proj: Float[Array, "n l"], m: int) -> Float[Array, "m l"]:
    n = proj.shape[0]
    s = jnp.sort(proj, axis=0)
    if n == m:
        return s
    q = (jnp.arange(m) + 0.5) / m
    return jnp.quantile(proj, q, axis=0, method="linear")


def sliced_wasserstein(
    key: PRNGKeyArray,
    x: Float[Array, "n d"],
    y: Float[Array, "m d"],
    *,
    num_projections: int = 256,
    p: float = 2.0,
) -> Float[Array, ""]:
    """Monte-Carlo sliced p-Wasserstein distance between the empirical measures of x and y.

    Args:
        key: PRNG key for the random projection directions.
        x: (n, d) points.
        y: (m, d) points, same d.
        num_projections: number of random directions L.
        p: the order p >= 1.

    Returns:
        A scalar; the same key gives the same directions, so distances are comparable across calls.
    """
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"x, y: got shapes {x.shape} and {y.shape}, expected (n, d) and (m, d)")
    if p < 1:
        raise ValueError(f"p: got {p!r}, expected >= 1")
    theta = jax.random.normal(key, (x.shape[1], num_projections), x.dtype)
    theta = theta / jnp.linalg.norm(theta, axis=0, keepdims=True)
    m = min(x.shape[0], y.shape[0])
    qx = _quantiles(x @ theta, m)
    qy = _quantiles(y @ theta, m)
    return jnp.mean(jnp.abs(qx - qy) ** p) ** (1.0 / p)
