"""Denoising score-matching losses for training diffusion models.

- ``eps_loss`` (DDPM, Ho et al. 2020, eq. 14, continuous time): t ~ U[t_min, t_max], eps ~ N(0, I),
  x_t = alpha_t x_0 + sigma_t eps, L = E ||eps_hat(x_t, t) - eps||^2 (mean over elements).
- ``edm_loss`` (Karras et al. 2022, eq. 8 and Table 1): ln sigma ~ N(P_mean, P_std^2),
  L = E lambda(sigma) ||D(x_0 + sigma eps; sigma) - x_0||^2 with lambda = (sigma^2 + sigma_d^2) /
  (sigma sigma_d)^2.
- ``x0_loss`` (x_0 / "x_start" prediction, Diffusion Planner ``loss.py``): t ~ U[t_min, t_max],
  x_t = C(alpha_t x_0 + sigma_t eps, t) with an optional correction C (e.g. re-imposing known
  entries), L = sum(w (D(x_t, t) - x_0)^2) / sum(w) over a weight/validity mask w; optionally
  each sample's errors times a weight of its time (``capped_snr_weight``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.diffusion.model_wrapper import expand_to
from jaxlab.diffusion.precond import edm_loss_weight
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
    weight = edm_loss_weight(sigma, sigma_data)
    err = (denoiser(x0 + expand_to(sigma, x0) * eps, sigma) - x0) ** 2
    return jnp.mean(expand_to(weight, x0) * err)


def x0_errors(
    key: PRNGKeyArray,
    denoiser: Callable[
        [Float[Array, "batch ..."], Float[Array, " batch"]], Float[Array, "batch ..."]
    ],
    x0: Float[Array, "batch ..."],
    schedule: Schedule,
    *,
    correct_fn: Callable | None = None,
    time_weight: Callable[[Float[Array, " batch"]], Float[Array, " batch"]] | None = None,
) -> Float[Array, "batch ..."]:
    """Element-wise squared errors (D(x_t, t) - x_0)^2 of an x_0-prediction network.

    ``denoiser(x_t, t)`` returns the x_0 estimate; ``correct_fn(x_t, t)``, if given, is applied to
    the noised sample first (the samplers' correction hook, so training sees what sampling sees);
    ``time_weight(t)``, if given, multiplies each sample's errors (e.g. :func:`capped_snr_weight`).
    """
    t, _, xt = sample_noisy(key, x0, schedule)
    if correct_fn is not None:
        xt = correct_fn(xt, t)
    err = (denoiser(xt, t) - x0) ** 2
    if time_weight is None:
        return err
    return expand_to(time_weight(t).astype(err.dtype), err) * err


def capped_snr_weight(
    schedule: Schedule, t: Float[Array, " batch"], cap: float
) -> Float[Array, " batch"]:
    """w(t) = clip(SNR(t), 1, cap), SNR = alpha_t^2 / sigma_t^2, for the x_0 loss.

    ``SNR(t) ||D - x_0||^2 = ||eps_hat - eps||^2``, so up to ``cap`` the low-noise steps get the
    emphasis of the eps loss, where the plain x_0 loss (weight 1) makes an error in following
    x_t at low noise nearly free; above the cap the weight is that of Min-SNR-gamma (Hang et al.
    2023, gamma = ``cap``), and at high noise it stays the x_0 loss's 1 (Min-SNR would go to 0).
    """
    return jnp.clip(jnp.exp(2.0 * schedule.lambda_t(t)), 1.0, cap)  # lambda_t: half log-SNR


def x0_loss(
    key: PRNGKeyArray,
    denoiser: Callable[
        [Float[Array, "batch ..."], Float[Array, " batch"]], Float[Array, "batch ..."]
    ],
    x0: Float[Array, "batch ..."],
    schedule: Schedule,
    *,
    weights: Float[Array, "..."] | None = None,
    correct_fn: Callable | None = None,
    time_weight: Callable[[Float[Array, " batch"]], Float[Array, " batch"]] | None = None,
) -> Float[Array, ""]:
    """Weighted x_0-prediction loss sum(w err) / max(sum(w), 1e-8), err of :func:`x0_errors`
    (``correct_fn`` and ``time_weight`` as there).

    ``weights`` broadcasts against x0 (a validity mask gives the mean over valid entries; entries
    with weight 0 contribute neither value nor gradient; they are replaced by zeros before noising,
    so a NaN placeholder there is harmless). None: the plain mean.
    """
    errors = functools.partial(
        x0_errors, key, denoiser, schedule=schedule, correct_fn=correct_fn, time_weight=time_weight
    )
    if weights is None:
        return jnp.mean(errors(x0))
    w = jnp.broadcast_to(jnp.asarray(weights, x0.dtype), x0.shape)
    x0 = jnp.where(w != 0, x0, 0.0)  # masked entries (maybe NaN) become zeros before noising
    err = errors(x0)
    return jnp.sum(jnp.where(w != 0, w * err, 0.0)) / jnp.maximum(jnp.sum(w), 1e-8)
