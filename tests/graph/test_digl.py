"""DIGL: exact PPR against a NumPy inverse and a power series; top-k per column; alpha = 1."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.graph.digl import digl, ppr_diffusion
from tests.typecheck import unchecked


@pytest.fixture(scope="module")
def graph():
    rng = np.random.default_rng(0)
    a = np.triu(rng.random((12, 12)) < 0.3, 1).astype(np.float32)
    a = a + a.T
    a[11, :] = a[:, 11] = 0.0  # an isolated node
    return a


def _np_ppr(a, alpha):
    deg = a.sum(0)
    dinv = np.where(deg > 0, 1 / np.sqrt(np.where(deg > 0, deg, 1)), 0)
    t = dinv[:, None] * a * dinv[None, :]
    return alpha * np.linalg.inv(np.eye(len(a)) - (1 - alpha) * t)


@pytest.mark.parametrize("alpha", [0.1, 0.5])
def test_ppr_matches_numpy_and_series(graph, alpha):
    s = np.asarray(ppr_diffusion(jnp.asarray(graph), alpha))
    np.testing.assert_allclose(s, _np_ppr(graph.astype(np.float64), alpha), rtol=1e-4, atol=1e-5)
    # S = alpha sum_k (1 - alpha)^k T^k
    deg = graph.sum(0)
    dinv = np.where(deg > 0, 1 / np.sqrt(np.where(deg > 0, deg, 1)), 0)
    t = dinv[:, None] * graph * dinv[None, :]
    series, term = np.zeros_like(t, dtype=np.float64), np.eye(len(t))
    for _ in range(400):
        series += alpha * term
        term = (1 - alpha) * term @ t
    np.testing.assert_allclose(s, series, rtol=1e-3, atol=1e-4)
    assert s[11, 11] == pytest.approx(alpha)  # isolated node: only the restart mass


def test_alpha_one_is_identity(graph):
    np.testing.assert_allclose(digl(jnp.asarray(graph), 1.0, top_k=3), np.eye(12), atol=1e-6)


def test_top_k_columns(graph):
    out = np.asarray(digl(jnp.asarray(graph), 0.15, top_k=4))
    s = _np_ppr(graph.astype(np.float64), 0.15)
    nnz = (out != 0).sum(axis=0)
    assert np.all(nnz[:11] == 4) and nnz[11] == 1  # the isolated node keeps only itself
    for c in range(12):
        np.testing.assert_allclose(np.sort(out[:, c])[-4:], np.sort(s[:, c])[-4:], rtol=1e-4)


def test_jit_vmap_over_alpha(graph):
    alphas = jnp.array([0.1, 0.3])
    batched = jax.vmap(lambda al: ppr_diffusion(jnp.asarray(graph), al))(alphas)
    for i, al in enumerate([0.1, 0.3]):
        np.testing.assert_allclose(batched[i], _np_ppr(graph, al), rtol=1e-4, atol=1e-5)


def test_bad_input(graph):
    with pytest.raises(ValueError, match="alpha"):
        digl(jnp.asarray(graph), 0.0)
    with pytest.raises(ValueError, match="top_k"):
        digl(jnp.asarray(graph), 0.1, top_k=0)
    with pytest.raises(ValueError, match="adjacency"):
        unchecked(digl)(jnp.ones((2, 3)), 0.1)  # its own validation
