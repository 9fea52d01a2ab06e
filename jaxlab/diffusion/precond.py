"""EDM preconditioning (Karras et al. 2022, Table 1) of a raw network F into a denoiser D.

D(x; sigma) = c_skip(sigma) x + c_out(sigma) F(c_in(sigma) x; c_noise(sigma)), with
c_skip = sigma_d^2 / (sigma^2 + sigma_d^2), c_out = sigma sigma_d / sqrt(sigma^2 + sigma_d^2),
c_in = 1 / sqrt(sigma^2 + sigma_d^2), c_noise = ln(sigma) / 4.
D is an x_0-prediction in the EDM schedule (alpha = 1, sigma = t), i.e. ``model_type="data"``.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.diffusion.model_wrapper import expand_to


def edm_coefficients(sigma: Float[Array, " batch"], sigma_data: float = 0.5):
    """(c_skip, c_out, c_in, c_noise) of EDM's Table 1."""
    s2 = sigma**2 + sigma_data**2
    return (
        sigma_data**2 / s2,
        sigma * sigma_data / jnp.sqrt(s2),
        1.0 / jnp.sqrt(s2),
        jnp.log(sigma) / 4,
    )


def edm_loss_weight(
    sigma: Float[Array, " batch"], sigma_data: float = 0.5
) -> Float[Array, " batch"]:
    """EDM's loss weight lambda(sigma) = 1 / c_out^2 = (sigma^2 + sigma_data^2) / (sigma sigma_data)^2
    (Karras et al. 2022, eq. 8): it weighs the raw network's own error uniformly over sigma."""
    return (sigma**2 + sigma_data**2) / (sigma * sigma_data) ** 2


def edm_denoise(
    net: Callable[[Float[Array, "batch ..."], Float[Array, " batch"]], Float[Array, "batch ..."]],
    x: Float[Array, "batch ..."],
    sigma: Float[Array, " batch"],
    sigma_data: float = 0.5,
) -> Float[Array, "batch ..."]:
    """D(x; sigma) from the raw network ``net(x_in, c_noise)`` (module docstring)."""
    sigma = jnp.broadcast_to(sigma, x.shape[:1])
    c_skip, c_out, c_in, c_noise = edm_coefficients(sigma, sigma_data)
    f = net(expand_to(c_in, x) * x, c_noise)
    return expand_to(c_skip, x) * x + expand_to(c_out, x) * f
