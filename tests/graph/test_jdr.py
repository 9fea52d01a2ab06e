"""JDR: NumPy reference parity, alignment rises on cSBM, solver agreement, sparsification."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.graph.csbm import CSBMParams, sample_csbm
from jaxlab.graph.jdr import JDRParams, JDRStatic, alignment, jdr
from jaxlab.graph.sparsify import threshold, top_k_per_column
from tests.typecheck import unchecked


def _np_jdr(a, x, *, iterations, l_x, l_a, eta_x, eta_a, eta_final, top_k, abs_ordering, offset):
    """JDR as written in the paper's dense code: full decompositions, a loop over vectors, and
    full reconstructions ``U S W^T`` and ``V Λ V^T`` (float64)."""
    a0, x0 = a.astype(np.float64), x.astype(np.float64)
    a_t, x_t = a0.copy(), x0.copy()
    n = a.shape[0]
    order = None
    for _ in range(iterations):
        u, s, wt = np.linalg.svd(x_t, full_matrices=False)
        lam, v = np.linalg.eigh(a_t)
        if abs_ordering:
            if order is None:
                order = np.argsort(np.abs(lam), kind="stable")
            v, lam = v[:, order], lam[order]
        # leading window, best first
        win = [n - 1 - offset - j for j in range(max(l_x, l_a))]
        u_new = u.copy()
        for i in range(l_x):
            ov = np.array([u[:, i] @ v[:, w] for w in win[:l_x]])
            j = int(np.argmax(np.abs(ov)))
            u_new[:, i] = (1 - eta_x) * u[:, i] + eta_x * np.sign(ov[j]) * v[:, win[j]]
        x_next = u_new @ np.diag(s) @ wt
        v_new = v.copy()
        for w in win[:l_a]:
            ov = np.array([v[:, w] @ u[:, i] for i in range(l_a)])
            j = int(np.argmax(np.abs(ov)))
            v_new[:, w] = (1 - eta_a) * v[:, w] + eta_a * np.sign(ov[j]) * u[:, j]
        a_t = v_new @ np.diag(lam) @ v_new.T
        x_t = x_next
    out_a = a_t.copy()
    for c in range(n):
        col = out_a[:, c]
        drop = np.argsort(-col, kind="stable")[top_k:]
        col[drop] = 0.0
    return out_a, (1 - eta_final) * x0 + eta_final * x_t


@pytest.fixture(scope="module")
def small_csbm():
    def make(phi):
        s = sample_csbm(jax.random.PRNGKey(7), CSBMParams(phi=phi), n=60, p=24)
        return np.asarray(s.adjacency), np.asarray(s.features)

    return make


@pytest.mark.parametrize(
    "phi, abs_ordering, offset", [(0.5, False, 0), (-0.5, True, 0), (0.25, False, 1)]
)
def test_matches_numpy_reference(small_csbm, phi, abs_ordering, offset):
    a, x = small_csbm(phi)
    kw = dict(iterations=3, l_x=3, l_a=4, top_k=8, abs_ordering=abs_ordering, offset=offset)
    rates = dict(eta_x=0.3, eta_a=0.6, eta_final=0.7)
    want_a, want_x = _np_jdr(a, x, **kw, **rates)
    got = jdr(jnp.asarray(a), jnp.asarray(x), JDRParams(**rates), static=JDRStatic(**kw))
    np.testing.assert_allclose(got.features, want_x, atol=2e-4)
    # the kept entries can differ only where two entries of a column tie at the k-th place
    np.testing.assert_allclose(got.adjacency, want_a, atol=2e-4)


def test_zero_rates_only_sparsify(small_csbm):
    a, x = small_csbm(0.5)
    out = jdr(
        jnp.asarray(a),
        jnp.asarray(x),
        JDRParams(eta_x=0.0, eta_a=0.0, eta_final=0.5),
        static=JDRStatic(iterations=2, l_x=3, l_a=3, top_k=60),
    )
    np.testing.assert_allclose(out.adjacency, a, atol=1e-4)
    np.testing.assert_allclose(out.features, x, atol=1e-4)


def test_flags_keep_inputs(small_csbm):
    a, x = small_csbm(0.5)
    st = JDRStatic(iterations=2, l_x=3, l_a=3, top_k=5, denoise_a=False)
    out = jdr(jnp.asarray(a), jnp.asarray(x), JDRParams(eta_x=0.5, eta_a=0.5), static=st)
    np.testing.assert_array_equal(out.adjacency, a)
    assert not np.allclose(out.features, x)
    out = jdr(
        jnp.asarray(a),
        jnp.asarray(x),
        JDRParams(eta_x=0.5, eta_a=0.5),
        static=dataclasses.replace(st, denoise_a=True, denoise_x=False),
    )
    np.testing.assert_array_equal(out.features, x)
    assert np.all((out.adjacency != 0).sum(axis=0) <= 5)


@pytest.fixture(scope="module")
def csbm_200():
    def make(phi):
        s = sample_csbm(jax.random.PRNGKey(3), CSBMParams(phi=phi), n=200, p=80)
        return s.adjacency, s.features

    return make


@pytest.mark.parametrize("phi", [-0.5, 0.25, 0.5])
def test_alignment_increases_on_csbm(csbm_200, phi):
    """JDR raises the spectral resonance ||U_2^T V_2||_2 of the graph it returns (paper, Sec. 3)."""
    a, x = csbm_200(phi)
    abs_ord = phi < 0
    st = JDRStatic(iterations=4, l_x=4, l_a=4, top_k=24, abs_ordering=abs_ord)
    out = jdr(a, x, JDRParams(eta_x=0.2, eta_a=0.5, eta_final=0.5), static=st)
    before = float(alignment(a, x, num_vectors=2, abs_ordering=abs_ord))
    after = float(alignment(out.adjacency, out.features, num_vectors=2, abs_ordering=abs_ord))
    assert after > before + 0.2, (before, after)
    assert after > 0.6


def test_lobpcg_solver_matches_dense(csbm_200):
    a, x = csbm_200(0.5)
    params = JDRParams(eta_x=0.2, eta_a=0.5, eta_final=0.5)
    st = JDRStatic(iterations=3, l_x=2, l_a=2, top_k=200, lobpcg_iterations=60)
    dense = jdr(a, x, params, static=st)
    lob = jdr(a, x, params, static=dataclasses.replace(st, solver="lobpcg"))
    scale = float(jnp.abs(dense.adjacency - a).max())
    assert scale > 0.01
    np.testing.assert_allclose(lob.adjacency, dense.adjacency, atol=0.05 * scale)
    np.testing.assert_allclose(lob.features, dense.features, atol=0.05 * float(jnp.abs(x).max()))


def test_top_k_per_column_and_threshold():
    a = jax.random.normal(jax.random.PRNGKey(0), (7, 7))
    kept = np.asarray(top_k_per_column(a, 3))
    assert np.all((kept != 0).sum(axis=0) == 3)
    for c in range(7):
        np.testing.assert_allclose(np.sort(kept[kept[:, c] != 0, c]), np.sort(a[:, c])[-3:])
    np.testing.assert_array_equal(top_k_per_column(a, 9), a)
    t = np.asarray(threshold(a, 0.5))
    assert np.all((t == 0) | (t >= 0.5))
    np.testing.assert_array_equal(t[np.asarray(a) >= 0.5], np.asarray(a)[np.asarray(a) >= 0.5])


@pytest.mark.parametrize(
    "static, field",
    [
        (JDRStatic(l_x=30), "l_x"),
        (JDRStatic(l_x=2, l_a=25), "l_a"),
        (JDRStatic(l_x=2, l_a=2, offset=-1), "offset"),
        (JDRStatic(l_x=2, l_a=2, iterations=0), "iterations"),
        (JDRStatic(l_x=5, l_a=5, solver="lobpcg"), "max"),
    ],
)
def test_bad_settings(small_csbm, static, field):
    a, x = small_csbm(0.5)
    with pytest.raises(ValueError, match=field):
        jdr(jnp.asarray(a), jnp.asarray(x), static=static)


def test_bad_shapes():
    with pytest.raises(ValueError, match="adjacency"):
        unchecked(jdr)(jnp.ones((3, 4)), jnp.ones((3, 2)))  # its own validation
    with pytest.raises(ValueError, match="features"):
        unchecked(jdr)(jnp.ones((3, 3)), jnp.ones((4, 2)))
