"""CDIS: the original repository's three examples (oracle and 5,000 samples), and on random
10-node graphs in oracle mode a sound PAG whose identifiable edges are all recovered."""

import jax
import numpy as np
import pytest

from jaxlab.causal.cdis import cdis_from_data, cdis_oracle
from jaxlab.causal.graphs import (
    ARROW,
    CIRCLE,
    TAIL,
    ancestors,
    mag_skeleton,
    pag_edges,
    random_dag_er,
    selection_graph,
)


def _nonempty(marks):
    return {k: v for k, v in pag_edges(marks).items() if v}


O_O = {"o-o": {(0, 1), (1, 0)}}
EXAMPLES = {
    "eg1_not_identifiable": (O_O, O_O),
    "eg2_selection": (O_O, {"--": {(0, 1), (1, 0)}}),
    "eg3_chain": ({"o-o": {(0, 1), (1, 0), (1, 2), (2, 1)}}, {"->": {(0, 1), (1, 2)}}),
}


def _example_data(name, n=5000, seed=0):
    """The data of the original main.py: uniform noises, selection X0 + X1 > 0, soft
    interventions adding U(0.5, 1)."""
    rng = np.random.default_rng(seed)
    if name == "eg3_chain":
        e = rng.uniform(-1, 1, (n, 3))
        x0 = e[:, 0]
        d0 = np.column_stack([x0, 2 * x0 + e[:, 1], 4 * x0 + 2 * e[:, 1] + e[:, 2]])
        x0 = x0 + rng.uniform(0.5, 1, n)
        d1 = np.column_stack([x0, 2 * x0 + e[:, 1], 4 * x0 + 2 * e[:, 1] + e[:, 2]])
        return [d0, d1]
    x0, x1 = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    keep = x0 + x1 > 0
    x0, x1 = x0[keep], x1[keep]
    d0 = np.column_stack([x0, x1])
    d1 = np.column_stack([x0 + rng.uniform(0.5, 1, x0.size), x1])
    if name == "eg1_not_identifiable":
        return [d0, d1]
    return [d0, d1, np.column_stack([x0, x1 + rng.uniform(0.5, 1, x1.size)])]


ORACLE = {
    "eg1_not_identifiable": (np.zeros((2, 2), bool), [(0,)], [(0, 1)]),
    "eg2_selection": (np.zeros((2, 2), bool), [(0,), (1,)], [(0, 1)]),
    "eg3_chain": (np.array([[0, 1, 0], [0, 0, 1], [0, 0, 0]], bool), [(0,)], []),
}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_original_examples_oracle_and_data(name):
    obs_expected, final_expected = EXAMPLES[name]
    oracle = cdis_oracle(*ORACLE[name])
    assert _nonempty(oracle.observational) == obs_expected
    assert _nonempty(oracle.final) == final_expected
    # From data each null CI test errs with probability alpha: in 20 seeds examples 1 and 2 came
    # out right every time, the chain (about 5 null tests) 15 times; require the same majority.
    seeds = range(1) if name != "eg3_chain" else range(6)
    right = 0
    for seed in seeds:
        data = cdis_from_data(_example_data(name, seed=seed), test="fisherz", alpha=0.05)
        right += _nonempty(data.observational) == obs_expected and (
            _nonempty(data.final) == final_expected
        )
    assert right >= (1 if name != "eg3_chain" else 4)


def _check_sound(adj, sel_parents, marks):
    d = adj.shape[0]
    sg = selection_graph(adj, sel_parents)
    np.testing.assert_array_equal(marks != 0, mag_skeleton(sg))
    on_selection = ancestors(sg.adj, sg.selection) if sel_parents else set()
    for i in range(d):
        for j in range(d):
            if marks[i, j] == ARROW and marks[j, i] == TAIL:  # i -> j: cause, j not selected
                assert adj[i, j] and j not in on_selection, (i, j)
            if marks[i, j] == TAIL and marks[j, i] == TAIL:  # i -- j: both in selection
                assert i in on_selection and j in on_selection, (i, j)
            assert not (marks[i, j] == ARROW and marks[j, i] == ARROW)


@pytest.mark.parametrize("seed", range(3))
def test_oracle_random_10_nodes_no_selection_recovers_every_edge(seed):
    """Without selection and with every node targeted once, every DAG edge is identifiable
    (zeta_i -> i -> j with zeta_i, j non-adjacent orients it): all must come out as ->."""
    adj = np.asarray(random_dag_er(jax.random.PRNGKey(seed), 10, 2.0))
    res = cdis_oracle(adj, [(i,) for i in range(10)], [])
    _check_sound(adj, [], res.final)
    directed = (res.final == ARROW) & (res.final.T == TAIL)
    np.testing.assert_array_equal(directed, adj)


@pytest.mark.parametrize("seed", range(3))
def test_oracle_random_10_nodes_with_selection_is_sound(seed):
    key = jax.random.PRNGKey(50 + seed)
    adj = np.asarray(random_dag_er(key, 10, 1.5))
    rng = np.random.default_rng(seed)
    sel = [tuple(sorted(int(v) for v in rng.choice(10, 2, replace=False)))]
    res = cdis_oracle(adj, [(i,) for i in range(10)], sel)
    _check_sound(adj, sel, res.final)
    # edges out of non-selected nodes into non-selected nodes are identifiable and recovered
    on_sel = ancestors(selection_graph(adj, sel).adj, selection_graph(adj, sel).selection)
    for i, j in zip(*np.nonzero(adj), strict=True):
        if i not in on_sel and j not in on_sel:
            assert res.final[i, j] == ARROW and res.final[j, i] == TAIL, (i, j)
    assert (res.final == CIRCLE).sum() <= (res.observational == CIRCLE).sum()
