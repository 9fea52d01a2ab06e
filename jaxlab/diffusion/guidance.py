"""Classifier guidance by a differentiable energy of the x_0-estimate, active in a time window.

Diffusion Planner (``guidance_wrapper.py``) steers sampling without retraining: at time t the
noise prediction becomes

    eps_hat(x, t) <- eps_hat(x, t) + w sigma_t grad_x E(x0_est(x)),    t_lo < t < t_hi,
    x0_est(x) = x + stop_grad(D(x, t) - x),   D(x, t) = (x - sigma_t eps_hat(x, t)) / alpha_t,

so the energy (a cost, lower is better; the original writes the same with a reward and a minus
sign) is evaluated on the model's x_0-estimate while its gradient flows to x as if through the
identity (no backpropagation through the network). Outside the window (the original uses
t in (0.005, 0.1), about the last step of a 10-step DPM-Solver++) the plain prediction is
returned and the gradient is not computed at all (``lax.cond``; it costs one more network call
inside the window). A static weight of 0 (a Python number) returns ``eps_fn`` itself, so the
sampler runs the unguided program and its result is bit-equal to unguided sampling; a traced
weight of 0 adds an exact zero, equal to unguided up to XLA's fusion choices in the different
program (we measure at most 1 ulp).

``limit_fn`` bounds a push: it receives the shift the push makes to the data prediction,
Delta x0 = -(sigma_t / alpha_t) w sigma_t grad E, and returns the shift to apply (e.g. the same
shift scaled down so that no point moves more than a set distance); the push follows from it.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.diffusion.model_wrapper import EpsFn, data_from_noise, expand_to
from jaxlab.diffusion.schedules import Schedule

EnergyFn = Callable[[Float[Array, "batch ..."], Float[Array, " batch"]], Float[Array, " batch"]]


def windowed_guidance(
    eps_fn: EpsFn,
    energy_fn: EnergyFn,
    schedule: Schedule,
    *,
    weight: float | Float[Array, ""],
    t_window: tuple[float, float] = (0.005, 0.1),
    limit_fn: Callable[[Float[Array, "batch ..."]], Float[Array, "batch ..."]] | None = None,
) -> EpsFn:
    """Wrap ``eps_fn`` with the energy gradient of the module docstring.

    Args:
        eps_fn: the unguided noise prediction ``eps_fn(x, t)``, x (batch, ...), t (batch,).
        energy_fn: ``energy_fn(x0_est, t) -> (batch,)`` costs, differentiable in x0_est.
        schedule: the schedule of ``eps_fn``.
        weight: w (may be traced); 0 returns the unguided prediction exactly.
        t_window: (t_lo, t_hi), the open interval of t where guidance acts.
        limit_fn: ``limit_fn(shift) -> shift`` on the data-prediction shift of a push
            (module docstring), or None for an unbounded push.

    Returns:
        the guided ``eps_fn``.
    """
    lo, hi = (float(v) for v in t_window)
    if not lo < hi:
        raise ValueError(f"t_window: got {t_window!r}, expected (t_lo, t_hi) with t_lo < t_hi")
    if isinstance(weight, int | float) and weight == 0:
        return eps_fn

    def guided(
        x: Float[Array, "batch ..."], t: Float[Array, " batch"]
    ) -> Float[Array, "batch ..."]:
        tb = jnp.broadcast_to(t, x.shape[:1])
        active = (tb > lo) & (tb < hi)
        w = jnp.asarray(weight, x.dtype)
        eps = eps_fn(x, tb)

        def energy(x_in):
            x0 = data_from_noise(eps_fn(x_in, tb), x_in, tb, schedule)
            return jnp.sum(energy_fn(x_in + jax.lax.stop_gradient(x0 - x_in), tb))

        def push(x):
            sigma = expand_to(schedule.sigma(tb), x).astype(x.dtype)
            delta = w * sigma * jax.grad(energy)(x)
            if limit_fn is None:
                return delta
            ratio = sigma / expand_to(schedule.alpha(tb), x).astype(x.dtype)
            return -limit_fn(-ratio * delta) / ratio

        on = jnp.any(active) & (w != 0)
        delta = jax.lax.cond(on, push, jnp.zeros_like, x)
        mask = active.reshape(active.shape + (1,) * (x.ndim - 1)) & on
        return jnp.where(mask, eps + delta, eps)

    return guided
