"""The tanh-squashed Gaussian policy head of SAC (Haarnoja et al. 2018, appendix C).

``u ~ N(mu(h), diag(sigma(h)^2))``, ``a = tanh(u)``; by the change of variables (SAC eq. 21)

    log pi(a | s) = log N(u; mu, sigma) - sum_i log(1 - tanh(u_i)^2)

built as ``distrax.Transformed(MultivariateNormalDiag, Block(Tanh, 1))`` (distrax's ``Tanh``
computes ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))`` stably). ``log sigma`` is
state-dependent and squashed into ``[log_std_min, log_std_max]`` with a tanh.
"""

from __future__ import annotations

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray


def squashed_gaussian(
    mean: Float[Array, "*b d"], log_std: Float[Array, "*b d"]
) -> distrax.Transformed:
    """``tanh(N(mean, exp(log_std)^2))`` as a distrax distribution over ``(-1, 1)^d``."""
    base = distrax.MultivariateNormalDiag(mean, jnp.exp(log_std))
    return distrax.Transformed(base, distrax.Block(distrax.Tanh(), ndims=1))


class SquashedGaussianHead(nn.Module):
    """Features ``[..., h]`` -> ``squashed_gaussian(mu, log_std)`` over ``[..., action_dim]``."""

    action_dim: int
    log_std_min: float = -5.0
    log_std_max: float = 2.0

    @nn.compact
    def __call__(self, h: Float[Array, "*b h"]) -> distrax.Transformed:
        mean = nn.Dense(self.action_dim, name="mean")(h)
        raw = nn.Dense(self.action_dim, name="log_std")(h)
        lo, hi = self.log_std_min, self.log_std_max
        log_std = lo + 0.5 * (hi - lo) * (jnp.tanh(raw) + 1.0)
        return squashed_gaussian(mean, log_std)


def sample_and_log_prob(
    dist: distrax.Distribution, seed: PRNGKeyArray
) -> tuple[Float[Array, "*b d"], Float[Array, "*b"]]:
    """``dist.sample_and_log_prob(seed=seed)`` (reparameterised: differentiable in the
    parameters), traced with implicit rank promotion allowed: distrax's sampler broadcasts
    ``scale * eps + loc`` across the sample axis, which ``jax_numpy_rank_promotion="raise"``
    (jaxlab's test setting) would reject."""
    with jax.numpy_rank_promotion("allow"):
        return dist.sample_and_log_prob(seed=seed)
