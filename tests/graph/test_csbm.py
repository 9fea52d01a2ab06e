"""cSBM: parameterisation, degree, homophily vs the sign of phi, feature signal, jit/vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.graph.csbm import CSBMParams, check_csbm_args, edge_homophily, lambda_mu, sample_csbm

N, P, D, EPS = 1000, 400, 5.0, 3.25
PHIS = (-0.5, 0.0, 0.5)


@pytest.fixture(scope="module")
def samples():
    """Three graphs per phi, drawn in one vmap over (phi, key)."""
    phis = jnp.repeat(jnp.asarray(PHIS), 3)
    keys = jax.random.split(jax.random.PRNGKey(0), phis.shape[0])
    params = CSBMParams(d=jnp.full_like(phis, D), epsilon=jnp.full_like(phis, EPS), phi=phis)
    out = jax.vmap(lambda k, p: sample_csbm(k, p, n=N, p=P))(keys, params)
    return np.asarray(phis), jax.device_get(out)


@pytest.mark.parametrize("phi", [-1.0, -0.375, 0.0, 0.25, 1.0])
def test_lambda_mu_on_ellipse(phi):
    lam, mu = lambda_mu(phi, n=N, p=P, epsilon=EPS)
    assert float(lam**2 + mu**2 * P / N) == pytest.approx(1 + EPS, rel=1e-5)
    assert np.sign(float(lam)) == np.sign(phi)
    assert float(mu) >= 0


def test_structure(samples):
    _, s = samples
    a = s.adjacency
    assert a.shape == (len(PHIS) * 3, N, N)
    np.testing.assert_array_equal(a, np.swapaxes(a, 1, 2))
    assert np.all(np.diagonal(a, axis1=1, axis2=2) == 0)
    assert set(np.unique(a)) <= {0.0, 1.0}
    np.testing.assert_array_equal(s.labels.sum(axis=1), N // 2)


def test_mean_degree_is_d(samples):
    _, s = samples
    mean_degree = s.adjacency.sum(axis=(1, 2)) / N
    # the mean degree of one graph has std sqrt(2 d / n) = 0.1
    np.testing.assert_allclose(mean_degree, D, atol=0.4)
    assert abs(mean_degree.mean() - D) < 0.15


def test_homophily_follows_sign_of_phi(samples):
    phis, s = samples
    for phi, a, y in zip(phis, s.adjacency, s.labels, strict=True):
        lam, _ = lambda_mu(float(phi), n=N, p=P, epsilon=EPS)
        expected = 0.5 + float(lam) / (2 * np.sqrt(D))  # c_in / (c_in + c_out)
        h = float(edge_homophily(jnp.asarray(a), jnp.asarray(y)))
        assert h == pytest.approx(expected, abs=0.05)
        if phi > 0:
            assert h > 0.65
        elif phi < 0:
            assert h < 0.35


def test_feature_signal_strength(samples):
    """n/4 ||mean_+ x - mean_- x||^2 - 1 estimates mu (the noise part contributes 1)."""
    phis, s = samples
    for phi in PHIS:
        sel = phis == phi
        est = []
        for x, y in zip(s.features[sel], s.labels[sel], strict=True):
            diff = x[y == 1].mean(0) - x[y == 0].mean(0)
            est.append(N / 4 * np.sum(diff**2) - 1.0)
        _, mu = lambda_mu(phi, n=N, p=P, epsilon=EPS)
        assert np.mean(est) == pytest.approx(float(mu), abs=0.35 + 0.15 * float(mu))


@pytest.mark.parametrize("phi", [-1.0, 1.0])
def test_extreme_phi_is_finite(phi):
    s = sample_csbm(jax.random.PRNGKey(0), CSBMParams(phi=phi), n=50, p=10)
    assert np.all(np.isfinite(s.features))


def test_deterministic_and_keys_matter():
    params = CSBMParams(phi=0.3)
    a = sample_csbm(jax.random.PRNGKey(1), params, n=40, p=8)
    b = sample_csbm(jax.random.PRNGKey(1), params, n=40, p=8)
    np.testing.assert_array_equal(a.adjacency, b.adjacency)
    np.testing.assert_array_equal(a.features, b.features)
    c = sample_csbm(jax.random.PRNGKey(2), params, n=40, p=8)
    assert not np.array_equal(a.adjacency, c.adjacency)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(n=100, p=10, d=5.0, epsilon=3.25, phi=1.5), "phi"),
        (dict(n=2, p=10, d=1.0, epsilon=3.25, phi=0.0), "n"),
        (dict(n=100, p=0, d=5.0, epsilon=3.25, phi=0.0), "p"),
        (dict(n=100, p=10, d=5.0, epsilon=-1.0, phi=0.0), "epsilon"),
        (dict(n=10, p=10, d=9.0, epsilon=3.25, phi=0.0), "d"),
    ],
)
def test_bad_args(kwargs, field):
    with pytest.raises(ValueError, match=field):
        check_csbm_args(**kwargs)
    n, p = kwargs.pop("n"), kwargs.pop("p")
    with pytest.raises(ValueError, match=field):  # the sampler checks concrete arguments
        sample_csbm(jax.random.PRNGKey(0), CSBMParams(**kwargs), n=n, p=p)
