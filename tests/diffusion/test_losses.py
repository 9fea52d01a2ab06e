"""The x_0-prediction loss: NumPy parity and masked entries carrying no gradient."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.diffusion import schedules as sc
from jaxlab.diffusion.losses import sample_noisy, x0_errors, x0_loss

SCH = sc.VPLinear()


def test_x0_loss_matches_reference_and_ignores_masked_entries():
    x0 = jax.random.normal(jax.random.PRNGKey(0), (4, 3, 2))
    w = jnp.ones((4, 3, 1)).at[:, 2].set(0.0)
    theta = jnp.array(0.3)

    def denoiser(th, x, t):
        return th * x + t[:, None, None]

    key = jax.random.PRNGKey(1)
    t, _, xt = sample_noisy(key, x0, SCH)
    err = (0.3 * np.asarray(xt) + np.asarray(t)[:, None, None] - np.asarray(x0)) ** 2
    want = err[:, :2].sum() / 16  # the weights broadcast to (4, 3, 2) sum to 16
    got = x0_loss(key, lambda x, t: denoiser(theta, x, t), x0, SCH, weights=w)
    np.testing.assert_allclose(got, want, rtol=1e-5)

    # gradient w.r.t. masked targets is exactly 0, also when the masked target is NaN
    x0_nan = x0.at[:, 2].set(jnp.nan)
    g = jax.grad(
        lambda y: x0_loss(key, lambda x, t: denoiser(theta, x, t) * 0 + y, x0_nan, SCH, weights=w)
    )(jnp.zeros_like(x0))
    assert bool(jnp.all(g[:, 2] == 0)) and bool(jnp.all(jnp.isfinite(g)))
    assert float(jnp.abs(g[:, :2]).sum()) > 0


def test_x0_errors_applies_the_correction():
    x0 = jnp.ones((2, 3))
    err = x0_errors(
        jax.random.PRNGKey(0),
        lambda x, t: x,
        x0,
        SCH,
        correct_fn=lambda x, t: x.at[:, 0].set(1.0),
    )
    assert bool(jnp.all(err[:, 0] == 0)) and float(err[:, 1:].sum()) > 0


def test_capped_snr_weight_scales_each_sample():
    """w(t) = clip(alpha^2 / sigma^2, 1, cap) from the schedule, applied per sample."""
    from jaxlab.diffusion.losses import capped_snr_weight

    t = jnp.array([0.02, 0.2, 0.5, 0.9])
    a, s = np.asarray(SCH.alpha(t)), np.asarray(SCH.sigma(t))
    want = np.clip(a**2 / s**2, 1.0, 5.0)
    np.testing.assert_allclose(capped_snr_weight(SCH, t, 5.0), want, rtol=1e-6)
    assert want[0] == 5.0 and want[-1] == 1.0 and 1.0 < want[1] < 5.0  # all three regimes

    x0 = jax.random.normal(jax.random.PRNGKey(2), (6, 3))
    key = jax.random.PRNGKey(3)
    den = lambda x, t: 0.5 * x
    plain = x0_errors(key, den, x0, SCH)
    weighted = x0_errors(key, den, x0, SCH, time_weight=lambda t: capped_snr_weight(SCH, t, 5.0))
    tk, _, _ = sample_noisy(key, x0, SCH)
    np.testing.assert_allclose(
        weighted,
        np.asarray(plain) * np.asarray(capped_snr_weight(SCH, tk, 5.0))[:, None],
        rtol=1e-6,
    )
    tw = lambda t: capped_snr_weight(SCH, t, 5.0)
    np.testing.assert_allclose(
        x0_loss(key, den, x0, SCH, time_weight=tw), np.mean(np.asarray(weighted)), rtol=1e-6
    )
