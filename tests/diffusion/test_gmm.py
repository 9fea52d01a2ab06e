"""The Gaussian-mixture oracle (Tweedie's formula, tilting) and the sliced Wasserstein distance."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.diffusion.gmm import GaussianMixture
from jaxlab.diffusion.sliced_wasserstein import sliced_wasserstein


def _mix():
    return GaussianMixture.create(
        [[1.0, 0.0], [-0.5, 0.8], [-0.3, -1.0]], [0.3, 0.5, 0.4], [0.5, 0.3, 0.2]
    )


def test_posterior_mean_is_tweedie():
    """E[x0 | x_t] = (x_t + sigma^2 grad log p_t(x_t)) / alpha (Tweedie), with autodiff of log p_t;
    a single Gaussian matches its closed form."""
    g = _mix()
    x = jax.random.normal(jax.random.PRNGKey(0), (32, 2))

    @jax.jit
    def both(alpha, sigma):
        a, s = jnp.full((32,), alpha), jnp.full((32,), sigma)
        score = jax.grad(lambda xx: jnp.sum(g.marginal_log_prob(xx, a, s)))(x)
        return g.denoise(x, a, s), g.eps(x, a, s), score

    for alpha, sigma in [(0.9, 0.4), (0.2, 0.98), (1.0, 3.0)]:
        den, eps, score = both(alpha, sigma)
        np.testing.assert_allclose(den, (x + sigma**2 * score) / alpha, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(eps, -sigma * score, rtol=1e-4, atol=1e-5)
    one = GaussianMixture.create([[2.0, -1.0]], 0.5)
    x1 = jnp.array([[0.3, 0.1]])
    expected = one.means + 0.8 * 0.25 * (x1 - 0.8 * one.means) / (0.64 * 0.25 + 0.36)
    np.testing.assert_allclose(
        one.denoise(x1, jnp.array([0.8]), jnp.array([0.6])), expected, rtol=1e-6
    )


def test_sampling_and_tilt_match_moments():
    """Sample mean == mixture mean; the tilted mixture p_0 e^{a.x/tau} has the mean of the
    self-normalised importance-weighted samples and log-density log p_0 + a.x/tau + const."""
    g = _mix()
    a, tau = jnp.array([1.5, -0.5]), 0.7
    target = g.tilt(a, tau)

    @jax.jit
    def stats(key):
        xs = g.sample(key, 100_000)
        w = jax.nn.softmax(xs @ a / tau)
        return xs.mean(0), jnp.sum(w[:, None] * xs, 0), target.log_prob(xs[:5]) - g.log_prob(xs[:5])

    mean, weighted, dlog = stats(jax.random.PRNGKey(2))
    np.testing.assert_allclose(mean, jnp.sum(g.weights[:, None] * g.means, 0), atol=0.015)
    np.testing.assert_allclose(
        weighted, jnp.sum(target.weights[:, None] * target.means, 0), atol=0.02
    )
    xs5 = jax.jit(lambda k: g.sample(k, 100_000)[:5])(jax.random.PRNGKey(2))
    const = dlog - xs5 @ a / tau
    np.testing.assert_allclose(const, jnp.full(5, const[0]), atol=1e-4)


def test_sliced_wasserstein_properties():
    sw = jax.jit(sliced_wasserstein, static_argnames=("num_projections", "p"))
    key = jax.random.PRNGKey(3)
    x = jax.random.normal(jax.random.PRNGKey(4), (1000, 2))
    assert float(sw(key, x, x)) < 1e-6
    # a rigid shift v: every 1-D projection shifts by theta.v, so SW_2^2 = E (theta.v)^2 = |v|^2 / d
    v = jnp.array([0.3, -0.4])
    np.testing.assert_allclose(
        sw(key, x, x + v[None], num_projections=2048), 0.5 / np.sqrt(2.0), rtol=0.03
    )
    # symmetric, and it separates different distributions well beyond the sampling noise
    y = jax.random.normal(jax.random.PRNGKey(5), (1000, 2))
    z = 1.5 * jax.random.normal(jax.random.PRNGKey(6), (1000, 2))
    assert float(sw(key, x, y)) < 0.3 * float(sw(key, x, z))
    np.testing.assert_allclose(sw(key, x, z), sw(key, z, x), rtol=1e-5)
    # unequal sizes compare quantiles
    assert float(sw(key, x, y[:300])) < 0.4 * float(sw(key, x, z[:300]))
