"""The tanh-squashed Gaussian head against a numerical change of variables."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from scipy import integrate, stats

from jaxlab.rl.squashed_gaussian import (
    SquashedGaussianHead,
    sample_and_log_prob,
    squashed_gaussian,
)


def test_log_prob_matches_a_numerical_change_of_variables():
    rng = np.random.default_rng(0)
    mean = rng.normal(size=(5, 3)).astype(np.float32)
    log_std = rng.uniform(-1.0, 0.5, size=(5, 3)).astype(np.float32)
    dist = squashed_gaussian(jnp.asarray(mean), jnp.asarray(log_std))
    a, logp = sample_and_log_prob(dist, jax.random.key(0))
    a = np.asarray(a, np.float64)
    assert np.all(np.abs(a) < 1)
    u = np.arctanh(a)
    h = 1e-6
    dtanh = (np.tanh(u + h) - np.tanh(u - h)) / (2 * h)  # finite-difference Jacobian (diagonal)
    ref = stats.norm.logpdf(u, mean, np.exp(log_std)).sum(-1) - np.log(dtanh).sum(-1)
    np.testing.assert_allclose(np.asarray(logp), ref, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(
        np.asarray(dist.log_prob(jnp.asarray(a, jnp.float32))), ref, atol=2e-3
    )


def test_density_integrates_to_one_on_the_open_interval():
    dist = squashed_gaussian(jnp.array([0.3]), jnp.log(jnp.array([0.6])))
    pdf = jax.jit(lambda x: jnp.exp(dist.log_prob(x[None])))
    total, _ = integrate.quad(lambda x: float(pdf(jnp.float32(x))), -1 + 1e-6, 1 - 1e-6, limit=200)
    assert abs(total - 1.0) < 1e-3


def test_head_bounds_log_std_and_actions():
    head = SquashedGaussianHead(action_dim=2)
    h = jnp.ones((4, 8)) * 100.0
    params = head.init(jax.random.key(0), h)
    dist = head.apply(params, h)
    std = np.asarray(dist.distribution.stddev())
    assert np.all(std >= np.exp(-5.0) - 1e-6) and np.all(std <= np.exp(2.0) + 1e-4)
    a = np.asarray(sample_and_log_prob(dist, jax.random.key(1))[0])
    assert a.shape == (4, 2) and np.all(np.abs(a) <= 1)
