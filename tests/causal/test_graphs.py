"""d-separation against networkx, twin graph structure, random DAG generators, SCM sampling."""

import jax
import networkx as nx
import numpy as np
import pytest
from scipy import stats

from jaxlab.causal.graphs import (
    ARROW,
    TAIL,
    d_separated_sets,
    dag_to_marks,
    is_dag,
    pag_edges,
    random_dag_er,
    random_dag_scale_free,
    twin_graph,
)
from jaxlab.causal.scm import SoftIntervention, random_scm, random_selection, sample_dataset


def test_d_separation_equals_networkx_on_random_graphs():
    rng = np.random.default_rng(0)
    for seed in range(4):
        adj = np.asarray(random_dag_er(jax.random.PRNGKey(seed), 12, 2.5))
        g = nx.DiGraph()
        g.add_nodes_from(range(12))
        g.add_edges_from((int(i), int(j)) for i, j in zip(*np.nonzero(adj), strict=True))
        queries = []
        for _ in range(200):
            perm = rng.permutation(12)
            nx_, ny_, nz_ = rng.integers(1, 3), rng.integers(1, 3), rng.integers(0, 5)
            xs = {int(v) for v in perm[:nx_]}
            ys = {int(v) for v in perm[nx_ : nx_ + ny_]}
            zs = {int(v) for v in perm[nx_ + ny_ : nx_ + ny_ + nz_]}
            queries.append((xs, ys, zs))
        ours = d_separated_sets(adj, queries)
        ref = np.array([nx.is_d_separator(g, *q) for q in queries])
        assert 0.05 < ref.mean() < 0.95  # both answers occur
        np.testing.assert_array_equal(ours, ref)


def test_twin_graph_matches_definition():
    adj = np.zeros((3, 3), bool)
    adj[0, 1] = adj[1, 2] = True
    tg = twin_graph(adj, (1,), [(0, 2)])
    idx = {n: i for i, n in enumerate(tg.names)}
    # descendants of the target 1 get counterfactual copies and shared noises; 0 does not
    assert {"X*1", "X*2", "E1", "E2"} <= set(idx) and "X*0" not in idx
    edges = {(tg.names[i], tg.names[j]) for i, j in zip(*np.nonzero(tg.adj), strict=True)}
    assert {
        ("0", "1"),
        ("1", "2"),
        ("0", "X*1"),
        ("X*1", "X*2"),
        ("E1", "1"),
        ("E1", "X*1"),
    } <= edges
    assert ("zeta", "1") in edges and ("0", "S*0") in edges and ("X*2", "S*0") in edges
    assert ("2", "S*0") not in edges  # selection acts on the pre-treatment copy
    assert tg.observed == (0, 1, 2, idx["zeta"])


@pytest.mark.parametrize("gen", ["er", "sf"])
def test_random_dags_are_acyclic_with_expected_density(gen):
    d, sizes = 20, []
    for s in range(10):
        k = jax.random.PRNGKey(s)
        adj = np.asarray(
            random_dag_er(k, d, 2.0) if gen == "er" else random_dag_scale_free(k, d, 2)
        )
        assert is_dag(adj) and not adj.diagonal().any()
        sizes.append(adj.sum())
    expected = 2.0 * d / 2 if gen == "er" else 2 * (d - 1) - 1  # ER: d*deg/2; BA: m per node
    assert abs(np.mean(sizes) - expected) < 0.25 * expected


def test_scale_free_has_heavier_degree_tail_than_er():
    er = [np.asarray(random_dag_er(jax.random.PRNGKey(s), 40, 4.0)) for s in range(5)]
    sf = [np.asarray(random_dag_scale_free(jax.random.PRNGKey(s), 40, 2)) for s in range(5)]
    deg_max = lambda gs: np.mean([(g.sum(0) + g.sum(1)).max() for g in gs])
    assert deg_max(sf) > deg_max(er)


def test_linear_gaussian_sampler_covariance_and_selection_and_intervention():
    adj = np.zeros((3, 3), bool)
    adj[0, 1] = adj[1, 2] = True
    scm = random_scm(jax.random.PRNGKey(0), adj)
    w = scm.weights.astype(np.float64)
    x = sample_dataset(jax.random.PRNGKey(1), scm, 8000)
    inv = np.linalg.inv(np.eye(3) - w)
    np.testing.assert_allclose(np.cov(x.T), inv.T @ inv, atol=0.1 * np.abs(inv.T @ inv).max())
    # marginal of the root is N(0, 1): a distribution test
    assert stats.kstest(x[:, 0], "norm").pvalue > 1e-3
    sel = random_selection(jax.random.PRNGKey(2), 3, 1)
    xs = sample_dataset(jax.random.PRNGKey(3), scm, 4000, selection=sel)
    assert sel.accept(xs).all()
    # a soft intervention shifts the target by U(0.5, 1) (mean 0.75) on the same units' noise
    xi = sample_dataset(jax.random.PRNGKey(1), scm, 8000, intervention=SoftIntervention((0,)))
    assert abs((xi[:, 0] - x[:, 0]).mean() - 0.75) < 0.02


def test_pag_edges_format():
    adj = np.zeros((3, 3), bool)
    adj[0, 1] = True
    m = dag_to_marks(adj)
    m[1, 2] = m[2, 1] = TAIL
    e = pag_edges(m)
    assert e["->"] == {(0, 1)} and e["--"] == {(1, 2), (2, 1)}
    assert m[0, 1] == ARROW


def test_nonlinear_sampler_follows_its_mechanism():
    adj = np.zeros((2, 2), bool)
    adj[0, 1] = True
    scm = random_scm(jax.random.PRNGKey(4), adj, nonlinearity="tanh")
    x = sample_dataset(jax.random.PRNGKey(5), scm, 4000)
    resid = x[:, 1] - scm.weights[0, 1] * np.tanh(x[:, 0])
    assert abs(resid.mean()) < 0.05 and abs(resid.std() - 1.0) < 0.05
    assert abs(np.corrcoef(resid, np.tanh(x[:, 0]))[0, 1]) < 0.05  # noise independent of cause


def test_standardized_selection_weighs_parents_by_their_scale():
    from jaxlab.causal.scm import Selection, standardize_selection

    adj = np.zeros((2, 2), bool)
    adj[0, 1] = True
    scm = random_scm(jax.random.PRNGKey(0), adj, low=3.0, high=4.0)  # var(X1) >> var(X0)
    sel = standardize_selection(
        jax.random.PRNGKey(1), Selection(((0, 1),), ((1.0, 1.0),), (0.0,)), scm
    )
    sd1 = np.sqrt(1 + scm.weights[0, 1] ** 2)
    np.testing.assert_allclose(sel.coefficients[0], (1.0, 1 / sd1), rtol=0.03)
