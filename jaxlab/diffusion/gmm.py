"""Isotropic Gaussian mixtures: an exact denoiser (oracle model) and the exponentially tilted mixture.

For p_0 = sum_k w_k N(mu_k, s_k^2 I) and x_t = alpha x_0 + sigma eps, the marginal is
p_t = sum_k w_k N(alpha mu_k, (alpha^2 s_k^2 + sigma^2) I), and the posterior mean is

    E[x_0 | x_t] = sum_k gamma_k(x_t) [mu_k + alpha s_k^2 (x_t - alpha mu_k) / (alpha^2 s_k^2 + sigma^2)],

gamma_k the responsibilities of the components under p_t. The exact noise prediction is
E[eps | x_t] = (x_t - alpha E[x_0 | x_t]) / sigma, so the probability-flow ODE of the mixture is known in
closed form: samplers can be tested without training a network.

Tilting by a linear reward r(x) = a.x at temperature tau gives again a mixture:
p_0(x) e^{a.x / tau} / Z = sum_k w'_k N(mu_k + s_k^2 a / tau, s_k^2 I),
w'_k proportional to w_k exp(a.mu_k / tau + s_k^2 |a|^2 / (2 tau^2)).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.diffusion.model_wrapper import EpsFn, expand_to
from jaxlab.diffusion.schedules import Schedule


@struct.dataclass
class GaussianMixture:
    """p_0 = sum_k softmax(logits)_k N(means_k, stds_k^2 I).

    Attributes:
        means: (k, d) component means.
        stds: (k,) component standard deviations.
        logits: (k,) unnormalised log weights.
    """

    means: Float[Array, "k d"]
    stds: Float[Array, " k"]
    logits: Float[Array, " k"]

    @classmethod
    def create(cls, means, stds, weights=None) -> GaussianMixture:
        """Host-side constructor with checks; ``stds`` may be a scalar, ``weights`` default uniform."""
        means = jnp.asarray(means, jnp.float32)
        if means.ndim != 2:
            raise ValueError(f"means: got shape {means.shape}, expected (k, d)")
        k = means.shape[0]
        stds = jnp.broadcast_to(jnp.asarray(stds, jnp.float32), (k,))
        if not bool(jnp.all(stds > 0)):
            raise ValueError("stds: expected every value > 0")
        if weights is None:
            logits = jnp.zeros((k,), jnp.float32)
        else:
            weights = jnp.asarray(weights, jnp.float32)
            if weights.shape != (k,) or not bool(jnp.all(weights > 0)):
                raise ValueError(f"weights: got shape {weights.shape}, expected ({k},) positive")
            logits = jnp.log(weights)
        return cls(means=means, stds=stds, logits=logits)

    @property
    def dim(self) -> int:
        return self.means.shape[1]

    @property
    def weights(self) -> Float[Array, " k"]:
        return jax.nn.softmax(self.logits)

    def sample(self, key: PRNGKeyArray, n: int) -> Float[Array, "n d"]:
        """n independent samples."""
        kc, kn = jax.random.split(key)
        comp = jax.random.categorical(kc, self.logits, shape=(n,))
        z = jax.random.normal(kn, (n, self.dim), self.means.dtype)
        return self.means[comp] + self.stds[comp, None] * z

    def _marginal_terms(self, x, alpha, sigma):
        """Per-component log-density of x under N(alpha mu_k, v_k I) and v_k; x (n, d), alpha (n,)."""
        a = alpha[:, None]
        var = a**2 * self.stds[None, :] ** 2 + sigma[:, None] ** 2  # (n, k)
        diff = x[:, None, :] - a[..., None] * self.means[None]  # (n, k, d)
        d = self.dim
        logn = -0.5 * jnp.sum(diff**2, -1) / var - 0.5 * d * jnp.log(2 * math.pi * var)
        return logn + jax.nn.log_softmax(self.logits)[None], var, diff

    def log_prob(self, x: Float[Array, "n d"]) -> Float[Array, " n"]:
        """log p_0(x)."""
        n = x.shape[0]
        logp, _, _ = self._marginal_terms(x, jnp.ones((n,), x.dtype), jnp.zeros((n,), x.dtype))
        return jax.nn.logsumexp(logp, axis=-1)

    def marginal_log_prob(
        self, x: Float[Array, "n d"], alpha: Float[Array, " n"], sigma: Float[Array, " n"]
    ) -> Float[Array, " n"]:
        """log p_t(x) for x_t = alpha x_0 + sigma eps."""
        logp, _, _ = self._marginal_terms(x, alpha, sigma)
        return jax.nn.logsumexp(logp, axis=-1)

    def denoise(
        self, x: Float[Array, "n d"], alpha: Float[Array, " n"], sigma: Float[Array, " n"]
    ) -> Float[Array, "n d"]:
        """E[x_0 | x_t = x], the exact posterior mean (module docstring)."""
        logp, var, diff = self._marginal_terms(x, alpha, sigma)
        gamma = jax.nn.softmax(logp, axis=-1)  # (n, k)
        gain = alpha[:, None] * self.stds[None] ** 2 / var  # (n, k)
        post = self.means[None] + gain[..., None] * diff  # (n, k, d)
        return jnp.sum(gamma[..., None] * post, axis=1)

    def eps(
        self, x: Float[Array, "n d"], alpha: Float[Array, " n"], sigma: Float[Array, " n"]
    ) -> Float[Array, "n d"]:
        """E[eps | x_t = x] = (x - alpha E[x_0 | x]) / sigma."""
        return (x - expand_to(alpha, x) * self.denoise(x, alpha, sigma)) / expand_to(sigma, x)

    def tilt(self, a: Float[Array, " d"], temperature: float = 1.0) -> GaussianMixture:
        """The mixture proportional to p_0(x) exp(a.x / temperature) (module docstring)."""
        a = jnp.asarray(a, self.means.dtype)
        means = self.means + (self.stds**2)[:, None] * a[None] / temperature
        logits = (
            jax.nn.log_softmax(self.logits)
            + self.means @ a / temperature
            + 0.5 * self.stds**2 * jnp.sum(a**2) / temperature**2
        )
        return GaussianMixture(means=means, stds=self.stds, logits=logits)


def gmm_eps_fn(gmm: GaussianMixture, schedule: Schedule) -> EpsFn:
    """The exact noise-prediction model of the mixture under a schedule, for the samplers."""

    def eps_fn(x: Float[Array, "n d"], t: Float[Array, " n"]) -> Float[Array, "n d"]:
        t = jnp.broadcast_to(t, x.shape[:1])
        return gmm.eps(x, schedule.alpha(t).astype(x.dtype), schedule.sigma(t).astype(x.dtype))

    return eps_fn


def ring_mixture(k: int = 8, radius: float = 1.0, std: float = 0.1) -> GaussianMixture:
    """k equally weighted components on a circle (the usual 2-D toy), as a :class:`GaussianMixture`."""
    if k < 1:
        raise ValueError(f"k: got {k!r}, expected >= 1")
    ang = 2 * math.pi * jnp.arange(k) / k
    means = radius * jnp.stack([jnp.cos(ang), jnp.sin(ang)], -1)
    return GaussianMixture.create(means, std)
