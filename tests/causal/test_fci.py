"""FCI against causal-learn's FCI (the reference implementation): identical PAGs from
d-separation facts on random graphs with latent variables, and identical adjacency search
(skeleton and separating sets) from Fisher-z on seeded linear-Gaussian data."""

import contextlib
import io

import jax
import networkx as nx
import numpy as np
import pytest

from jaxlab.causal.ci_tests import FisherZ, OracleCI
from jaxlab.causal.fci import fci, skeleton_search
from jaxlab.causal.graphs import AugmentedGraph, random_dag_er
from jaxlab.causal.scm import random_scm, sample_dataset

cl_fci = pytest.importorskip("causallearn.search.ConstraintBased.FCI").fci
cl_fas = pytest.importorskip("causallearn.utils.FAS").fas
CIT = pytest.importorskip("causallearn.utils.cit").CIT
GraphNode = pytest.importorskip("causallearn.graph.GraphNode").GraphNode


def _marks_from_causallearn(g: np.ndarray) -> np.ndarray:
    """causal-learn's ``graph[i, j]`` is the mark at i (-1 tail, 1 arrow, 2 circle); ours is the
    mark at j."""
    lut = {0: 0, -1: 1, 1: 2, 2: 3}
    return np.vectorize(lut.get)(g.T).astype(np.int8)


@pytest.mark.parametrize("seed, rule", [(0, "union"), (1, "union"), (2, "first"), (3, "majority")])
def test_fci_oracle_with_latents_equals_causallearn(seed, rule):
    """With d-separation facts every separating-set rule gives the same collider decisions."""
    v, latents = 10, 2
    adj = np.asarray(random_dag_er(jax.random.PRNGKey(seed), v, 2.5))
    graph = AugmentedGraph(adj, tuple(map(str, range(v))), tuple(range(v - latents)), ())
    ours = fci(OracleCI(graph), alpha=0.5, sepset_rule=rule).marks
    dag = nx.DiGraph()
    dag.add_nodes_from(range(v))
    dag.add_edges_from((int(i), int(j)) for i, j in zip(*np.nonzero(adj), strict=True))
    with contextlib.redirect_stdout(io.StringIO()):  # causal-learn prints its edges
        ref, _ = cl_fci(
            np.zeros((v, v - latents)), "d_separation", 0.5, show_progress=False, true_dag=dag
        )
    np.testing.assert_array_equal(ours, _marks_from_causallearn(ref.graph))


@pytest.mark.parametrize("seed", range(4))
def test_adjacency_search_on_data_equals_causallearn_fas(seed):
    key = jax.random.PRNGKey(100 + seed)
    d = 8
    adj = np.asarray(random_dag_er(key, d, 2.0))
    x = sample_dataset(
        jax.random.fold_in(key, 2), random_scm(jax.random.fold_in(key, 1), adj), 2000
    )
    ours = skeleton_search(FisherZ(x), alpha=0.05, sepset_rule="union")
    nodes = [GraphNode(f"X{i + 1}") for i in range(d)]
    g, sepsets, _ = cl_fas(x, nodes, CIT(x, "fisherz"), 0.05, show_progress=False)
    np.testing.assert_array_equal(ours.adj, g.graph != 0)
    ref = {k: set(s) for k, s in sepsets.items() if k[0] < k[1]}
    assert {k: set(s) for k, s in ours.sepsets.items()} == ref


def test_fci_rejects_bad_alpha_and_rule():
    test = FisherZ(np.random.default_rng(0).normal(size=(50, 3)))
    with pytest.raises(ValueError, match="alpha"):
        fci(test, alpha=1.5)
    with pytest.raises(ValueError, match="sepset_rule='most'"):
        fci(test, sepset_rule="most")


def test_majority_rule_leaves_a_tie_unoriented():
    """a - b - c with one of two separating sets of (a, c) containing b: no collider at b under
    the majority rule; "first" (the set without b) makes one."""

    class Facts(OracleCI):
        def __init__(self):
            self.num_vars, self.max_cond, self._cache = 4, 2, {}
            self.calls = self.tests = 0

        def _batch(self, x, y, cond, mask):
            out = []
            x, y, cond, mask = map(np.asarray, (x, y, cond, mask))
            for a, b, c, m in zip(x, y, cond, mask, strict=True):
                s = {int(v) for v, k in zip(c, m, strict=True) if k}
                pair = {int(a), int(b)}
                indep = pair == {0, 2} and s in ({3}, {1, 3}) or pair == {1, 3} and s == {0}
                out.append(1.0 if indep else 0.0)
            return np.array(out)

    majority = fci(Facts(), alpha=0.5, sepset_rule="majority", refine=False).marks
    first = fci(Facts(), alpha=0.5, sepset_rule="first", refine=False).marks
    assert majority[0, 1] != 2 or majority[2, 1] != 2  # not a -> b <- c
    assert first[0, 1] == 2 and first[2, 1] == 2
