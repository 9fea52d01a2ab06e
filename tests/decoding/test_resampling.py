"""Tests for jaxlab.decoding.resampling: unbiased counts, scheme invariants, ESS."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.decoding import resampling

N = 8
DRAWS = 20_000
WEIGHTS = np.asarray([0.31, 0.0, 0.02, 0.17, 0.13, 0.0, 0.3, 0.07])


@functools.partial(jax.jit, static_argnames="method")
def counts(k, log_weights, method):
    def one(k):
        idx = resampling.resample(k, log_weights, method)
        return jnp.zeros(N, jnp.int32).at[idx].add(1)

    return jax.vmap(one)(jax.random.split(k, DRAWS))


@pytest.mark.parametrize("method", resampling.METHODS)
def test_counts_are_unbiased_and_never_pick_zero_weights(method):
    log_w = jnp.log(jnp.asarray(WEIGHTS * 3.7, jnp.float32))  # unnormalised on purpose
    c = np.asarray(counts(jax.random.key(0, impl="rbg"), log_w, method))
    assert np.all(c.sum(1) == N)
    assert np.all(c[:, WEIGHTS == 0] == 0)
    mean = c.mean(0)
    stderr = c.std(0) / np.sqrt(DRAWS) + 1e-3
    assert np.all(np.abs(mean - N * WEIGHTS) < 5 * stderr), (method, mean, N * WEIGHTS)
    floor, ceil = np.floor(N * WEIGHTS), np.ceil(N * WEIGHTS)
    if method == "systematic":
        assert np.all((c >= floor) & (c <= ceil))
    if method == "residual":
        assert np.all(c >= floor)
    if method == "stratified":
        assert np.all((c >= floor - 1) & (c <= ceil + 1))
    if method == "multinomial":
        assert c.std(0)[0] > np.sqrt(N * 0.31 * 0.69) * 0.9  # genuinely multinomial spread


def test_ess_limits():
    assert float(resampling.ess(jnp.zeros(10))) == pytest.approx(10.0)
    assert float(resampling.ess(jnp.asarray([0.0, -jnp.inf, -jnp.inf]))) == pytest.approx(1.0)
    assert float(resampling.ess(jnp.full(4, -jnp.inf))) == 0.0
    w = np.asarray([0.5, 0.25, 0.25])
    assert float(resampling.ess(jnp.log(jnp.asarray(w)))) == pytest.approx(1 / np.sum(w**2))
    np.testing.assert_allclose(resampling.normalized_weights(jnp.full(4, -jnp.inf)), 0.25)


def test_unknown_method_raises():
    with pytest.raises(ValueError, match="method"):
        resampling.resample(jax.random.key(0), jnp.zeros(3), "best")
