"""GCN / GPRGNN: NumPy reference forward passes, sparse == dense, normalisation semantics."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.graph.gnn import GCN, GPRGNN, gcn_normalize, ppr_coefficients
from jaxlab.graph.graph import DenseGraph, EdgeGraph, dense_to_edges, edges_to_dense
from tests.typecheck import unchecked

N, F, C = 9, 5, 3


def _weighted_graph(seed: int = 0) -> np.ndarray:
    """A non-symmetric weighted graph with two existing self-loops and an isolated node."""
    rng = np.random.default_rng(seed)
    a = (rng.random((N, N)) < 0.35) * rng.uniform(0.2, 2.0, (N, N))
    np.fill_diagonal(a, 0.0)
    a[2, 2] = 0.7
    a[5, 5] = 1.9
    a[8, :] = 0.0
    a[:, 8] = 0.0
    return a.astype(np.float32)


def _np_gcn_norm(a: np.ndarray) -> np.ndarray:
    """PyG gcn_norm in NumPy: remaining self-loops (weight 1), receiver degrees, D^-1/2 A D^-1/2."""
    a = a.astype(np.float64).copy()
    for i in range(a.shape[0]):
        if a[i, i] == 0:
            a[i, i] = 1.0
    deg = a.sum(axis=0)
    dinv = np.where(deg > 0, deg**-0.5, 0.0)
    return dinv[:, None] * a * dinv[None, :]


def _np_log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _np_gcn(params, x, a_hat):
    p = jax.tree.map(lambda v: np.asarray(v, np.float64), params)
    h = np.maximum(a_hat.T @ (x @ p["conv1"]["kernel"]) + p["conv1"]["bias"], 0.0)
    return _np_log_softmax(a_hat.T @ (h @ p["conv2"]["kernel"]) + p["conv2"]["bias"])


def _np_gprgnn(params, x, a_hat):
    p = jax.tree.map(lambda v: np.asarray(v, np.float64), params)
    h = np.maximum(x @ p["lin1"]["kernel"] + p["lin1"]["bias"], 0.0)
    z = h @ p["lin2"]["kernel"] + p["lin2"]["bias"]
    gamma = p["prop1"]["gamma"]
    out, hk = gamma[0] * z, z
    for g in gamma[1:]:
        hk = a_hat.T @ hk
        out = out + g * hk
    return _np_log_softmax(out)


@pytest.fixture(scope="module")
def problem():
    a = _weighted_graph()
    x = np.random.default_rng(1).normal(size=(N, F)).astype(np.float32)
    return a, x


def test_gcn_normalize_dense_matches_numpy(problem):
    a, _ = problem
    got = gcn_normalize(DenseGraph(jnp.asarray(a))).adjacency
    np.testing.assert_allclose(got, _np_gcn_norm(a), rtol=1e-5, atol=1e-6)
    # existing self-loops keep their weight (before normalisation), missing ones get 1
    assert a[2, 2] == pytest.approx(0.7) and a[0, 0] == 0.0


def test_gcn_normalize_edges_equals_dense(problem):
    a, _ = problem
    nnz = int(np.count_nonzero(a))
    edges = dense_to_edges(jnp.asarray(a), capacity=nnz + 7)  # 7 padding slots
    assert int(edges.mask.sum()) == nnz
    got = edges_to_dense(gcn_normalize(edges))
    np.testing.assert_allclose(got, _np_gcn_norm(a), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model_name", ["gcn", "gprgnn"])
def test_forward_matches_numpy_reference(problem, model_name):
    a, x = problem
    if model_name == "gcn":
        model, ref = GCN(hidden=7, num_classes=C), _np_gcn
    else:
        model, ref = GPRGNN(hidden=7, num_classes=C, k=4, alpha=0.2), _np_gprgnn
    graph = gcn_normalize(DenseGraph(jnp.asarray(a)))
    params = jax.jit(model.init)(jax.random.PRNGKey(0), jnp.asarray(x), graph)["params"]
    got = jax.jit(lambda p: model.apply({"params": p}, jnp.asarray(x), graph))(params)
    want = ref(params, x.astype(np.float64), _np_gcn_norm(a))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model_name", ["gcn", "gprgnn"])
def test_sparse_equals_dense(problem, model_name):
    a, x = problem
    model = GCN(hidden=6, num_classes=C) if model_name == "gcn" else GPRGNN(6, C, k=3)
    dense = gcn_normalize(DenseGraph(jnp.asarray(a)))
    edges = gcn_normalize(dense_to_edges(jnp.asarray(a), capacity=int(np.count_nonzero(a)) + 3))
    params = jax.jit(model.init)(jax.random.PRNGKey(3), jnp.asarray(x), dense)["params"]
    kw = {"deterministic": False, "rngs": {"dropout": jax.random.PRNGKey(4)}}

    @jax.jit
    def out_and_grad(p, g):
        def loss(p):
            out = model.apply({"params": p}, jnp.asarray(x), g, **kw)
            return out.sum(), out

        return jax.grad(loss, has_aux=True)(p)

    g_d, out_d = out_and_grad(params, dense)
    g_e, out_e = out_and_grad(params, edges)
    np.testing.assert_allclose(out_d, out_e, rtol=1e-5, atol=1e-5)
    for u, v in zip(jax.tree.leaves(g_d), jax.tree.leaves(g_e), strict=True):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-5)


def test_propagate_is_receiver_aggregation():
    # one directed edge 0 -> 1 of weight 2: node 1 receives 2 * h_0, node 0 receives nothing
    a = jnp.zeros((3, 3)).at[0, 1].set(2.0)
    h = jnp.array([[1.0], [10.0], [100.0]])
    want = np.array([[0.0], [2.0], [0.0]])
    np.testing.assert_allclose(DenseGraph(a).propagate(h), want)
    np.testing.assert_allclose(dense_to_edges(a, capacity=4).propagate(h), want)


def test_ppr_coefficients():
    g = np.asarray(ppr_coefficients(10, 0.1))
    assert g.shape == (11,)
    np.testing.assert_allclose(g[:10], 0.1 * 0.9 ** np.arange(10), rtol=1e-6)
    assert g[10] == pytest.approx(0.9**10)
    assert g.sum() == pytest.approx(1.0, abs=1e-6)


def test_bad_input():
    with pytest.raises(ValueError, match="capacity"):
        dense_to_edges(jnp.eye(3), capacity=0)
    with pytest.raises(ValueError, match="adjacency"):
        unchecked(dense_to_edges)(jnp.ones((2, 3)), capacity=2)  # its own validation
    with pytest.raises(ValueError, match="graph"):
        unchecked(gcn_normalize)(jnp.eye(3))
    assert isinstance(dense_to_edges(jnp.eye(3), capacity=3), EdgeGraph)
