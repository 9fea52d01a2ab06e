"""The contextual stochastic block model (cSBM; Deshpande et al. 2018) with JDR's parameterisation.

Two balanced classes ``y_i in {-1, +1}``. Edges are independent (undirected, no self-loops) with

    P[i ~ j] = (d + sqrt(d) lambda) / n   if y_i = y_j,      (d - sqrt(d) lambda) / n   otherwise,

and node features are a rank-one spike in Gaussian noise,

    x_i = sqrt(mu / n) y_i u + z_i / sqrt(p),    u ~ N(0, I_p / p),  z_i ~ N(0, I_p).

The informativeness of graph and features is set by one angle phi in [-1, 1] on the ellipse
``lambda^2 + mu^2 / gamma = 1 + epsilon`` (gamma = n / p; epsilon > 0 puts the model above the
detection threshold):

    lambda = sqrt(1 + epsilon) sin(phi pi / 2),    mu = sqrt(gamma (1 + epsilon)) cos(phi pi / 2).

phi = 0: features only; phi = +1: homophilic graph only; phi = -1: heterophilic graph only.
The paper's setting is n = 5000, p = 2000, d = 5, epsilon = 3.25, phi in {-1, -0.875, ..., 1}.

``n`` and ``p`` fix shapes and are static; ``d``, ``epsilon`` and ``phi`` are traced
(:class:`CSBMParams`), so a sweep over phi can be one ``vmap``.
"""

from __future__ import annotations

import math
from functools import partial

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int


@flax.struct.dataclass
class CSBMParams:
    """Traced cSBM parameters.

    Attributes:
      d: mean degree.
      epsilon: distance of the (lambda, mu) ellipse above the detection threshold.
      phi: angle in [-1, 1]; its sign is the sign of lambda (homophily vs heterophily).
    """

    d: Float[Array, ""] | float = 5.0
    epsilon: Float[Array, ""] | float = 3.25
    phi: Float[Array, ""] | float = 0.0


@flax.struct.dataclass
class CSBMSample:
    """One cSBM graph.

    Attributes:
      adjacency: symmetric 0/1 adjacency without self-loops, ``(n, n)`` float32.
      features: node features ``(n, p)``.
      labels: class ids in {0, 1} (``(y + 1) / 2``), ``(n,)`` int32.
    """

    adjacency: Float[Array, "n n"]
    features: Float[Array, "n p"]
    labels: Int[Array, " n"]


def lambda_mu(
    phi: Float[Array, ""] | float, *, n: int, p: int, epsilon: Float[Array, ""] | float
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """``(lambda, mu)`` on the ellipse ``lambda^2 + mu^2 p / n = 1 + epsilon`` at angle ``phi``."""
    gamma = n / p
    lam = jnp.sqrt(1.0 + epsilon) * jnp.sin(phi * jnp.pi / 2)
    # cos(+-pi/2) rounds to about -4e-8 in float32; mu is >= 0 by definition
    mu = jnp.maximum(jnp.sqrt(gamma * (1.0 + epsilon)) * jnp.cos(phi * jnp.pi / 2), 0.0)
    return lam, mu


def _check_sizes(n: int, p: int) -> None:
    if not isinstance(n, int) or n < 4:
        raise ValueError(f"n: got {n!r}, expected an integer >= 4")
    if not isinstance(p, int) or p < 1:
        raise ValueError(f"p: got {p!r}, expected an integer >= 1")


def check_csbm_args(n: int, p: int, d: float, epsilon: float, phi: float) -> None:
    """Host-side validation of concrete cSBM arguments; raises ValueError naming the field."""
    _check_sizes(n, p)
    if not -1.0 <= phi <= 1.0:
        raise ValueError(f"phi: got {phi!r}, expected a value in [-1, 1]")
    if epsilon < 0:
        raise ValueError(f"epsilon: got {epsilon!r}, expected a value >= 0")
    if not 0 < d:
        raise ValueError(f"d: got {d!r}, expected a positive mean degree")
    lam_max = math.sqrt(1.0 + epsilon)
    if d + math.sqrt(d) * lam_max > n:
        raise ValueError(
            f"d: got {d!r}, expected d + sqrt(d) sqrt(1 + epsilon) <= n = {n} so that the edge "
            "probabilities are <= 1"
        )


def sample_csbm(key: jax.Array, params: CSBMParams, *, n: int, p: int) -> CSBMSample:
    """Draws one cSBM graph (jit-able; vmap over ``key`` or ``params``).

    Class sizes are exactly ``n // 2`` and ``n - n // 2``, assigned to a random permutation of the
    nodes. Edge probabilities are clipped to [0, 1] (they are in range whenever
    ``d + sqrt(d (1 + epsilon)) <= n``). Concrete (Python or NumPy scalar) parameters are
    validated by :func:`check_csbm_args`; traced ones (inside ``jit``/``vmap``) cannot be.

    Args:
      key: PRNG key.
      params: ``d``, ``epsilon``, ``phi``.
      n: number of nodes (static).
      p: feature dimension (static).

    Returns:
      A :class:`CSBMSample` with adjacency ``(n, n)``, features ``(n, p)`` and labels ``(n,)``.
    """
    values = (params.d, params.epsilon, params.phi)
    if all(isinstance(v, int | float | np.number) for v in values):
        check_csbm_args(n, p, float(params.d), float(params.epsilon), float(params.phi))
    else:
        _check_sizes(n, p)
    return _sample_csbm(key, params, n=n, p=p)


@partial(jax.jit, static_argnames=("n", "p"))
def _sample_csbm(key: jax.Array, params: CSBMParams, *, n: int, p: int) -> CSBMSample:
    k_perm, k_edge, k_u, k_z = jax.random.split(key, 4)
    d = jnp.asarray(params.d, jnp.float32)
    lam, mu = lambda_mu(params.phi, n=n, p=p, epsilon=params.epsilon)
    labels = (jax.random.permutation(k_perm, n) < n // 2).astype(jnp.int32)
    y = (2 * labels - 1).astype(jnp.float32)

    same = y[:, None] * y[None, :] > 0
    c_in = d + jnp.sqrt(d) * lam
    c_out = d - jnp.sqrt(d) * lam
    prob = jnp.clip(jnp.where(same, c_in, c_out) / n, 0.0, 1.0)
    draw = jax.random.uniform(k_edge, (n, n)) < prob
    upper = jnp.triu(draw, k=1)
    adjacency = (upper | upper.T).astype(jnp.float32)

    u = jax.random.normal(k_u, (p,)) / jnp.sqrt(p)
    z = jax.random.normal(k_z, (n, p))
    features = jnp.sqrt(mu / n) * y[:, None] * u[None, :] + z / jnp.sqrt(p)
    return CSBMSample(adjacency=adjacency, features=features, labels=labels)


def edge_homophily(adjacency: Float[Array, "n n"], labels: Int[Array, " n"]) -> Float[Array, ""]:
    """Weighted fraction of edges whose endpoints share a label (PyG ``homophily(method='edge')``)."""
    same = (labels[:, None] == labels[None, :]).astype(adjacency.dtype)
    total = jnp.sum(jnp.abs(adjacency))
    return jnp.sum(jnp.abs(adjacency) * same) / jnp.maximum(total, 1e-12)
