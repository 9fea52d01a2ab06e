"""Windowed classifier guidance and the samplers' correction hook on the mixture oracle."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.diffusion import samplers as sm
from jaxlab.diffusion import schedules as sc
from jaxlab.diffusion.gmm import GaussianMixture, gmm_eps_fn
from jaxlab.diffusion.guidance import windowed_guidance
from jaxlab.diffusion.model_wrapper import data_from_noise

SCH = sc.VPLinear()
GMM = GaussianMixture.create(
    np.array([[1.0, 0.0, 0.5], [-1.0, 0.5, 0.0]]), np.array([0.3, 0.4]), np.array([0.5, 0.5])
)
EPS = gmm_eps_fn(GMM, SCH)
TARGET = jnp.array([0.0, 2.0, 0.0])
TS = sc.logsnr_uniform_steps(SCH, 10)
X = jax.random.normal(jax.random.PRNGKey(0), (64, 3))


def energy(x0, t):
    return 0.5 * jnp.sum((x0 - TARGET[None]) ** 2, -1)


@jax.jit
def guided_sample(w):
    return sm.dpm_solver_pp(windowed_guidance(EPS, energy, SCH, weight=w), X, TS, schedule=SCH)


def test_guidance_formula_inside_and_outside_the_window():
    """Inside the window eps_g - eps = w sigma_t grad E(x0_est) = w sigma_t (x0_hat - target);
    outside it the prediction is untouched (bit-equal)."""
    g = windowed_guidance(EPS, energy, SCH, weight=0.7, t_window=(0.005, 0.1))
    for t, inside in ((0.05, True), (0.5, False)):
        tb = jnp.full((64,), t)
        plain = EPS(X, tb)
        got = jax.jit(g)(X, tb)
        if inside:
            want = plain + 0.7 * SCH.sigma(jnp.float32(t)) * (
                data_from_noise(plain, X, tb, SCH) - TARGET[None]
            )
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_allclose(got, jax.jit(EPS)(X, tb), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="t_window"):
        windowed_guidance(EPS, energy, SCH, weight=1.0, t_window=(0.2, 0.1))


def test_limit_fn_receives_and_sets_the_data_prediction_shift():
    """``limit_fn`` sees the push's data-prediction shift -(sigma / alpha) w sigma grad E and
    the push applied is the one its returned shift implies (here: halved)."""
    g = windowed_guidance(EPS, energy, SCH, weight=0.7, t_window=(0.005, 0.1))
    half = windowed_guidance(
        EPS, energy, SCH, weight=0.7, t_window=(0.005, 0.1), limit_fn=lambda d: 0.5 * d
    )
    tb = jnp.full((64,), 0.05)
    plain, free, got = (jax.jit(f)(X, tb) for f in (EPS, g, half))
    x0 = [data_from_noise(e, X, tb, SCH) for e in (plain, free, got)]
    want = -0.7 * SCH.sigma(0.05) ** 2 / SCH.alpha(0.05) * (x0[0] - TARGET[None])
    np.testing.assert_allclose(x0[1] - x0[0], want, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(x0[2] - x0[0], 0.5 * want, rtol=1e-3, atol=1e-5)


def test_weight_zero_is_bit_equal_and_guidance_lowers_the_energy():
    """Static weight 0: the unguided program, bit-equal; traced weight 0: equal to 1e-5."""
    plain = jax.jit(lambda x: sm.dpm_solver_pp(EPS, x, TS, schedule=SCH))(X)
    g0 = windowed_guidance(EPS, energy, SCH, weight=0.0)
    np.testing.assert_array_equal(
        jax.jit(lambda x: sm.dpm_solver_pp(g0, x, TS, schedule=SCH))(X), plain
    )
    np.testing.assert_allclose(guided_sample(0.0), plain, rtol=0, atol=1e-5)
    e0 = float(jnp.mean(energy(plain, None)))
    e1 = float(jnp.mean(energy(guided_sample(20.0), None)))
    assert e1 < 0.9 * e0, (e0, e1)


@pytest.mark.parametrize("name", ["dpm_solver++", "uni_pc", "heun"])
def test_correct_fn_pins_entries_and_identity_is_bit_equal(name):
    """A correction that re-imposes coordinate 0 leaves it exactly at its value after every step
    (checked on the final state and on every state the hook sees); an identity correction runs
    bit-equal to no correction. (One sampler per code path: the shared linear multistep scan of
    DDIM / iPNDM / DPM-Solver++, UniPC's predictor-corrector, the Euler / Heun scans.)"""
    spec = sm.SamplerSpec(name=name, order=2 if name != "ipndm" else 3)
    ts = sc.logsnr_uniform_steps(SCH, 6)
    seen = []

    def pin(x, t):
        return x.at[:, 0].set(0.25)

    @jax.jit
    def run(x):
        plain = sm.sample(spec, EPS, x, ts, schedule=SCH)
        ident = sm.sample(spec, EPS, x, ts, schedule=SCH, correct_fn=lambda x, t: x)
        pinned = sm.sample(spec, EPS, x, ts, schedule=SCH, correct_fn=pin)
        return plain, ident, pinned

    plain, ident, pinned = run(X)
    np.testing.assert_array_equal(plain, ident)
    assert bool(jnp.all(pinned[:, 0] == 0.25))
    assert float(jnp.max(jnp.abs(pinned[:, 1:] - plain[:, 1:]))) > 1e-4

    def record(x, t):
        jax.debug.callback(lambda v, tt: seen.append((np.asarray(v), float(tt))), x[:, 0], t)
        return pin(x, t)

    if name != "dpm_solver++":
        return
    sm.sample(spec, EPS, X[:4], ts, schedule=SCH, correct_fn=record)
    jax.effects_barrier()
    ts_np = np.asarray(ts)
    assert {round(t, 6) for _, t in seen} <= {round(float(t), 6) for t in ts_np[1:]}
    assert any(abs(t - float(ts_np[-1])) < 1e-6 for _, t in seen)
