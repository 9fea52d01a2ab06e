"""Symlog and two-hot heads of DreamerV3 (Hafner et al. 2023, eq. 9-11).

``symlog(x) = sign(x) log(1 + |x|)``, ``symexp(x) = sign(x) (exp|x| - 1)``. A scalar ``y`` is
encoded over ``K`` fixed bins ``b`` (evenly spaced in symlog space on ``[-20, 20]``) as the
two-hot vector with weight ``(b_{k+1} - s)/(b_{k+1} - b_k)`` on ``b_k`` and the rest on
``b_{k+1}``, where ``b_k <= s = symlog(y) < b_{k+1}``. The head's prediction is
``symexp(softmax(logits) . b)`` and its loss the cross-entropy ``-twohot(y) . log_softmax(logits)``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

LOW, HIGH = -20.0, 20.0


def symlog(x: Float[Array, "*s"]) -> Float[Array, "*s"]:
    """``sign(x) log(1 + |x|)``."""
    return jnp.sign(x) * jnp.log1p(jnp.abs(x))


def symexp(x: Float[Array, "*s"]) -> Float[Array, "*s"]:
    """``sign(x) (exp(|x|) - 1)``, the inverse of :func:`symlog`."""
    return jnp.sign(x) * jnp.expm1(jnp.abs(x))


def bins(num_bins: int) -> Float[Array, " k"]:
    """The ``num_bins`` bin centres in symlog space."""
    return jnp.linspace(LOW, HIGH, num_bins)


def twohot(y: Float[Array, "*s"], num_bins: int) -> Float[Array, "*s k"]:
    """The two-hot encoding of ``symlog(y)`` over :func:`bins` (weights sum to one)."""
    b = bins(num_bins)
    s = jnp.clip(symlog(y), LOW, HIGH)
    k = jnp.clip(jnp.searchsorted(b, s, side="right") - 1, 0, num_bins - 2)
    lo, hi = b[k], b[k + 1]
    w_hi = jnp.clip((s - lo) / (hi - lo), 0.0, 1.0)
    return (
        jax.nn.one_hot(k, num_bins) * (1 - w_hi)[..., None]
        + jax.nn.one_hot(k + 1, num_bins) * w_hi[..., None]
    )


def mean(logits: Float[Array, "*s k"]) -> Float[Array, "*s"]:
    """The head's prediction ``symexp(softmax(logits) . bins)``."""
    b = bins(logits.shape[-1])
    return symexp(jax.nn.softmax(logits, -1) @ b)


def loss(logits: Float[Array, "*s k"], y: Float[Array, "*s"]) -> Float[Array, "*s"]:
    """Cross-entropy of the head against ``twohot(y)`` (``y`` is not differentiated)."""
    target = jax.lax.stop_gradient(twohot(y, logits.shape[-1]))
    return -jnp.sum(target * jax.nn.log_softmax(logits, -1), -1)
