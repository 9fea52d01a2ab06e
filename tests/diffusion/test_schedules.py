"""Schedules: closed forms, lambda round trips, SDE coefficients, step-selection baselines."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.diffusion import schedules as sc

SCHEDULES = {
    "vp_linear": sc.VPLinear(),
    "vp_cosine": sc.VPCosine(),
    "vp_discrete": sc.VPDiscrete.linear(),
    "ve": sc.VE(),
    "edm": sc.EDM(),
}


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_lambda_inverse_round_trip_and_monotone(name):
    s = SCHEDULES[name]
    with jax.enable_x64(True):
        t = jnp.linspace(s.t_min, s.t_max, 257)
        lam = s.lambda_t(t)
        assert bool(jnp.all(jnp.diff(lam) < 0)), "lambda must decrease in t"
        np.testing.assert_allclose(s.inverse_lambda(lam), t, rtol=1e-5, atol=1e-6 * s.t_max)
        np.testing.assert_allclose(
            lam, jnp.log(s.alpha(t)) - jnp.log(s.sigma(t)), rtol=1e-6, atol=1e-6
        )
        if name.startswith("vp"):
            np.testing.assert_allclose(s.alpha(t) ** 2 + s.sigma(t) ** 2, 1.0, atol=1e-6)
        else:
            np.testing.assert_allclose(s.alpha(t), 1.0)


def test_closed_forms():
    with jax.enable_x64(True):
        t = jnp.asarray([0.1, 0.5, 1.0])
        lin = sc.VPLinear()
        np.testing.assert_allclose(lin.log_alpha(t), -0.25 * t**2 * 19.9 - 0.05 * t)
        edm = sc.EDM()
        np.testing.assert_allclose(edm.sigma(t), t)
        np.testing.assert_allclose(edm.lambda_t(t), -jnp.log(t))
        ve = sc.VE()
        np.testing.assert_allclose(ve.sigma(t), 0.01 * 5000.0**t)
        # the discrete schedule interpolates DDPM's cumulative product at t_n = (n + 1) / N
        betas = np.linspace(1e-4, 2e-2, 1000)
        d = sc.VPDiscrete.from_betas(betas)
        n = np.array([0, 10, 500, 999])
        np.testing.assert_allclose(
            d.alpha(jnp.asarray((n + 1) / 1000.0)) ** 2, np.cumprod(1 - betas)[n], rtol=1e-5
        )
        np.testing.assert_allclose(d.model_time(jnp.asarray((n + 1) / 1000.0)), n, atol=1e-3)


@pytest.mark.parametrize("name", ["vp_linear", "vp_cosine", "ve", "edm"])
def test_drift_and_diffusion_match_finite_differences(name):
    """f = d log alpha / dt and g^2 = d sigma^2/dt - 2 f sigma^2 against central differences."""
    s = SCHEDULES[name]
    with jax.enable_x64(True):
        t = jnp.linspace(s.t_min + 0.01 * s.t_max, 0.99 * s.t_max, 7)
        h = 1e-6 * s.t_max
        fd_f = (s.log_alpha(t + h) - s.log_alpha(t - h)) / (2 * h)
        fd_s2 = (s.sigma(t + h) ** 2 - s.sigma(t - h) ** 2) / (2 * h)
        np.testing.assert_allclose(s.drift(t), fd_f, rtol=1e-5, atol=1e-8)
        np.testing.assert_allclose(
            s.diffusion2(t), fd_s2 - 2 * fd_f * s.sigma(t) ** 2, rtol=1e-5, atol=1e-8
        )
        if name == "vp_linear":  # g^2 = beta(t) for VP
            np.testing.assert_allclose(s.diffusion2(t), 0.1 + t * 19.9, rtol=1e-8)


@pytest.mark.parametrize("kind", sc.STEP_KINDS)
@pytest.mark.parametrize("name", list(SCHEDULES))
def test_step_baselines_are_decreasing_with_fixed_endpoints(name, kind):
    s = SCHEDULES[name]
    ts = sc.get_time_steps(s, 6, kind)
    assert ts.shape == (7,)
    assert bool(jnp.all(jnp.diff(ts) < 0))
    np.testing.assert_allclose([ts[0], ts[-1]], [s.t_max, s.t_min], rtol=1e-6)


def test_step_baselines_closed_forms():
    edm = sc.EDM()
    n, rho = 5, 7.0
    i = np.arange(n + 1)
    karras = (80 ** (1 / rho) + i / n * (0.002 ** (1 / rho) - 80 ** (1 / rho))) ** rho
    np.testing.assert_allclose(sc.edm_steps(edm, n), karras, rtol=1e-5)
    lam = np.asarray(edm.lambda_t(sc.logsnr_uniform_steps(edm, n)))
    np.testing.assert_allclose(np.diff(lam), np.full(n, np.diff(lam)[0]), rtol=1e-4)
    vp = sc.VPLinear()
    np.testing.assert_allclose(
        sc.time_uniform_steps(vp, n), np.linspace(1.0, 1e-3, n + 1), rtol=1e-6
    )
    q = np.linspace(1.0, np.sqrt(1e-3), n + 1) ** 2
    np.testing.assert_allclose(sc.time_quadratic_steps(vp, n), q, rtol=1e-6)


def test_schedules_are_pytrees_usable_under_jit_and_vmap():
    scheds = jax.tree.map(
        lambda *a: jnp.stack(a), sc.VPLinear(beta_1=10.0), sc.VPLinear(beta_1=20.0)
    )
    lam = jax.jit(jax.vmap(lambda s: s.lambda_t(jnp.asarray(0.5))))(scheds)
    np.testing.assert_allclose(lam[1], sc.VPLinear().lambda_t(0.5), rtol=1e-6)
    assert lam[0] > lam[1]


def test_bad_inputs():
    with pytest.raises(ValueError, match="kind"):
        sc.get_time_steps(sc.EDM(), 4, "karras")
    with pytest.raises(ValueError, match="n"):
        sc.time_uniform_steps(sc.EDM(), 0)
    with pytest.raises(ValueError, match="schedule"):
        sc.make_schedule("sub_vp")
    with pytest.raises(ValueError, match="betas"):
        sc.VPDiscrete.from_betas([0.5, 1.5])
