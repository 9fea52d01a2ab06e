"""Turn any diffusion network into the noise-prediction function the samplers call.

The samplers of :mod:`jaxlab.diffusion.samplers` integrate the probability-flow ODE given a
noise-prediction function ``eps_fn(x, t) -> eps_hat`` in the schedule's continuous time t, with
x of shape (batch, ...) and t of shape (batch,). This module builds such a function from a network
of any parametrisation, as DPM-Solver's ``model_wrapper`` does (Lu et al. 2022, app. and code):

- ``"noise"``:  eps_hat = net(x, t)
- ``"data"``:   eps_hat = (x - alpha_t net(x, t)) / sigma_t          (x_0-prediction)
- ``"v"``:      eps_hat = alpha_t net(x, t) + sigma_t x               (v = alpha eps - sigma x_0)
- ``"score"``:  eps_hat = -sigma_t net(x, t)                          (score = -eps / sigma)

and optionally adds guidance:

- classifier guidance (Dhariwal & Nichol 2021): eps_hat <- eps_hat - s sigma_t grad_x log p(c | x_t);
- classifier-free guidance (Ho & Salimans 2022): eps_hat <- eps_u + s (eps_c - eps_u).

The network is called as ``net(x, schedule.model_time(t))`` or, with a condition,
``net(x, schedule.model_time(t), cond)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Shaped

from jaxlab.diffusion.schedules import Schedule

EpsFn = Callable[[Float[Array, "batch ..."], Float[Array, " batch"]], Float[Array, "batch ..."]]
MODEL_TYPES: tuple[str, ...] = ("noise", "data", "v", "score")
GUIDANCE_TYPES: tuple[str, ...] = ("none", "classifier", "classifier_free")


def expand_to(
    v: Shaped[ArrayLike, " batch"] | Shaped[ArrayLike, ""], x: Float[Array, "batch ..."]
) -> Shaped[Array, "batch ..."] | Shaped[Array, ""]:
    """Reshape a per-sample (batch,) or scalar array so it broadcasts against x (batch, ...)."""
    v = jnp.asarray(v)
    if v.ndim == 0:
        return v
    return v.reshape(v.shape + (1,) * (x.ndim - v.ndim))


def to_noise_prediction(
    out: Float[Array, "batch ..."],
    x: Float[Array, "batch ..."],
    t: Float[Array, " batch"],
    schedule: Schedule,
    model_type: str,
) -> Float[Array, "batch ..."]:
    """Convert a network output of the given parametrisation into a noise prediction (module doc)."""
    alpha = expand_to(schedule.alpha(t), x)
    sigma = expand_to(schedule.sigma(t), x)
    if model_type == "noise":
        return out
    if model_type == "data":
        return (x - alpha * out) / sigma
    if model_type == "v":
        return alpha * out + sigma * x
    if model_type == "score":
        return -sigma * out
    raise ValueError(f"model_type: got {model_type!r}, expected one of {MODEL_TYPES}")


def data_from_noise(
    eps: Float[Array, "batch ..."],
    x: Float[Array, "batch ..."],
    t: Float[Array, " batch"],
    schedule: Schedule,
) -> Float[Array, "batch ..."]:
    """x_0-prediction from a noise prediction: x0_hat = (x - sigma_t eps) / alpha_t."""
    return (x - expand_to(schedule.sigma(t), x) * eps) / expand_to(schedule.alpha(t), x)


def model_wrapper(
    net: Callable[..., Float[Array, "batch ..."]],
    schedule: Schedule,
    *,
    model_type: str = "noise",
    guidance: str = "none",
    condition: Any = None,
    unconditional_condition: Any = None,
    guidance_scale: float | Float[Array, ""] = 1.0,
    classifier_fn: Callable[..., Float[Array, " batch"]] | None = None,
) -> EpsFn:
    """Build ``eps_fn(x, t)`` for the samplers from a network and a guidance choice.

    Args:
        net: ``net(x, model_time)``, or ``net(x, model_time, cond)`` when a condition is given;
            returns an array shaped like x.
        schedule: the noise schedule the network was trained with.
        model_type: the network's parametrisation, one of ``MODEL_TYPES``.
        guidance: one of ``GUIDANCE_TYPES``.
        condition: the condition c (any pytree the network accepts), or None.
        unconditional_condition: the null condition for classifier-free guidance.
        guidance_scale: s (may be traced, so it can be vmapped over).
        classifier_fn: ``classifier_fn(x, model_time, cond) -> log p(c | x_t)`` of shape (batch,),
            required for classifier guidance.

    Returns:
        eps_fn mapping x (batch, ...) and t (batch,) or () to eps_hat (batch, ...).
    """
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type: got {model_type!r}, expected one of {MODEL_TYPES}")
    if guidance not in GUIDANCE_TYPES:
        raise ValueError(f"guidance: got {guidance!r}, expected one of {GUIDANCE_TYPES}")
    if guidance == "classifier" and classifier_fn is None:
        raise ValueError("classifier_fn: got None, expected a function for classifier guidance")
    if guidance == "classifier_free" and (condition is None or unconditional_condition is None):
        raise ValueError(
            "condition, unconditional_condition: classifier-free guidance needs both, got None"
        )

    def call(x, t, cond):
        mt = schedule.model_time(t)
        out = net(x, mt) if cond is None else net(x, mt, cond)
        return to_noise_prediction(out, x, t, schedule, model_type)

    def eps_fn(
        x: Float[Array, "batch ..."], t: Float[Array, " batch"]
    ) -> Float[Array, "batch ..."]:
        t = jnp.broadcast_to(t, x.shape[:1])
        if guidance == "none":
            return call(x, t, condition)
        if guidance == "classifier_free":
            eps_c = call(x, t, condition)
            eps_u = call(x, t, unconditional_condition)
            return eps_u + guidance_scale * (eps_c - eps_u)
        mt = schedule.model_time(t)
        grad = jax.grad(lambda xx: jnp.sum(classifier_fn(xx, mt, condition)))(x)
        return call(x, t, None) - guidance_scale * expand_to(schedule.sigma(t), x) * grad

    return eps_fn
