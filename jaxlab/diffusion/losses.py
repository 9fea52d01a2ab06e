"""Denoising score-matching losses for training diffusion models.

- ``eps_loss`` (DDPM, Ho et al. 2020, eq. 14, continuous time): t ~ U[t_min, t_max], eps ~ N(0, I),
  x_t = alpha_t x_0 + sigma_t eps, L = E ||eps_hat(x_t, t) - eps||^2 (mean over elements).
- ``edm_loss`` (Karras et al. 2022, eq. 8 and Table 1): ln sigma ~ N(P_mean, P_std^2),
  L = E lambda(sigma) ||D(x_0 + sigma eps; sigma) - x_0||^2 with lambda = (sigma^2 + sigma_d^2) /
  (sigma sigma_d)^2.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.diffusion.model_wrapper import expand_to
from jaxlab.diffusion.schedules import Schedule


def sample_noisy(
    key: PRNGKeyArray, x0: Float[Array, "batch ..."], schedule: Schedule
) -> tuple[Float[Array, " batch"], Float[Array, "batch ..."], Float[Array, "batch ..."]]:
    """(t, eps, x_t) with t ~ U[t_min, t_max] per sample and x_t = alpha_t x_0 + sigma_t eps."""
    kt, ke = jax.random.split(key)
    t = jax.random.uniform(kt, x0.shape[:1], minval=schedule.t_min, maxval=schedule.t_max)
    eps = jax.random.normal(ke, x0.shape, x0.dtype)
    xt = expand_to(schedule.alpha(t), x0) * x0 + expand_to(schedule.sigma(t), x0) * eps
    return t, eps, xt


def eps_loss(
    key: PRNGKeyArray,
    eps_model: Callable[
        [Float[Array, "batch ..."], Float[Array, " batch"]], Float[Array, "batch ..."]
    ],
    x0: Float[Array, "batch ..."],
    schedule: Schedule,
) -> Float[Array, ""]:
    """Noise-prediction DSM loss; ``eps_model(x_t, t)`` takes the schedule's time t."""
    t, eps, xt = sample_noisy(key, x0, schedule)
    return jnp.mean((eps_model(xt, t) - eps) ** 2)


def edm_loss(
    key: PRNGKeyArray,
    denoiser: Callable[
        [Float[Array, "batch ..."], Float[Array, " batch"]], Float[Array, "batch ..."]
    ],
    x0: Float[Array, "batch ..."],
    *,
    p_mean: float = -1.2,
    p_std: float = 1.2,
    sigma_data: float = 0.5,
) -> Float[Array, ""]:
    """EDM's weighted denoising loss; ``denoiser(x, sigma)`` is D of :func:`precond.edm_denoise`."""
    ks, ke = jax.random.split(key)
    sigma = jnp.exp(p_mean + p_std * jax.random.normal(ks, x0.shape[:1]))
    eps = jax.random.normal(ke, x0.shape, x0.dtype)
    weight = (sigma**2 + sigma_data**2) / (sigma * sigma_data) ** 2
    err = (denoiser(x0 + expand_to(sigma, x0) * eps, sigma) - x0) ** 2
    return jnp.mean(expand_to(weight, x0) * err)
