"""Batched CI tests: Fisher-z against a per-test NumPy/SciPy reference, null uniformity (KS),
the random-feature kernel test's level and power, chi-square, G^2 and exact KCI against causal-learn,
the oracle, capacity errors, non-finite p-values."""

from functools import partial

import jax
import numpy as np
import pytest
from scipy import stats

from jaxlab.causal.ci_tests import (
    ChiSquare,
    FisherZ,
    GSquare,
    KernelCI,
    NonFiniteTestError,
    OracleCI,
    RandomFeatureCI,
)
from jaxlab.causal.graphs import selection_graph
from jaxlab.causal.kernel_ci import rcit_pvalue


def _fisher_z_reference(data, x, y, s):
    corr = np.corrcoef(data.T)
    idx = [x, y, *s]
    prec = np.linalg.inv(corr[np.ix_(idx, idx)])
    r = -prec[0, 1] / np.sqrt(prec[0, 0] * prec[1, 1])
    z = np.sqrt(data.shape[0] - len(s) - 3) * abs(np.arctanh(r))
    return 2 * (1 - stats.norm.cdf(z))


def test_fisher_z_equals_numpy_reference_per_test():
    rng = np.random.default_rng(0)
    data = rng.normal(size=(500, 7))
    data[:, 1] += 0.3 * data[:, 0]
    data[:, 2] += 0.2 * data[:, 1] - 0.1 * data[:, 3]
    triples = []
    for _ in range(120):
        perm = rng.permutation(7)
        triples.append(
            (int(perm[0]), int(perm[1]), tuple(int(v) for v in perm[2 : 2 + rng.integers(0, 6)]))
        )
    p = FisherZ(data).pvalues(*zip(*triples, strict=True))
    ref = np.array([_fisher_z_reference(data, *t) for t in triples])
    assert ref.min() < 0.05 and ref.max() > 0.5
    np.testing.assert_allclose(p, ref, atol=2e-5)  # float32 round-off


def test_fisher_z_uniform_under_null():
    rng = np.random.default_rng(1)
    data = rng.normal(size=(300, 12))  # all independent: every test is a null
    triples = [
        (
            i,
            j,
            tuple(
                int(v)
                for v in rng.choice([k for k in range(12) if k not in (i, j)], 2, replace=False)
            ),
        )
        for i in range(12)
        for j in range(i + 1, 12)
    ]
    triples += [(i, j, ()) for i in range(12) for j in range(i + 1, 12)]
    p = FisherZ(data).pvalues(*zip(*triples, strict=True))
    # overlapping triples are weakly dependent; the KS level is loose accordingly
    assert stats.kstest(p, "uniform").pvalue > 0.01


def test_random_feature_test_level_and_power_on_nonlinear_data():
    rng = np.random.default_rng(2)
    n = 600
    z = rng.normal(size=n)
    x = np.tanh(z) + 0.3 * rng.normal(size=n)
    y = z**2 + 0.3 * rng.normal(size=n)  # x _||_ y | z, dependent marginally
    w = x**2 + 0.3 * rng.normal(size=n)  # non-monotone: uncorrelated with x, but dependent
    noise = rng.normal(size=(n, 6))
    data = np.column_stack([x, y, z, w, noise])
    t = RandomFeatureCI(jax.random.PRNGKey(0), data, rows=100)  # bandwidths: a cheaper sort
    p = t.pvalues([0, 0, 0], [1, 1, 3], [(), (2,), ()])
    assert p[0] < 0.01 and p[2] < 0.01 and p[1] > 0.01
    assert FisherZ(data).pvalue(0, 3) > 0.01  # the linear test misses the x -> x^2 relation
    nulls = [
        (4 + a, 4 + b, (4 + c,))
        for a, b, c in [(0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 5), (0, 5, 1)]
    ]
    nulls += [(4 + a, 4 + b, ()) for a in range(6) for b in range(a + 1, 6)]
    pn = t.pvalues(*zip(*nulls, strict=True))
    assert (pn < 0.05).mean() <= 0.2


def test_random_feature_batch_grouped_by_set_equals_one_query_at_a_time():
    """The batch shares each conditioning set's part among its queries (more queries of the
    empty set and of {2} than fit in one row, a set of each size, a repeated query): every
    p-value equals :func:`rcit_pvalue` on that query alone, to round-off."""
    rng = np.random.default_rng(4)
    data = rng.normal(size=(120, 6))
    data[:, 1] += np.sin(2 * data[:, 0])
    t = RandomFeatureCI(jax.random.PRNGKey(3), data, num_z=10, rows=50)
    pairs = [(a, b) for a in range(6) for b in range(a + 1, 6)]
    triples = [(a, b, ()) for a, b in pairs]
    triples += [(a, b, (2,)) for a, b in pairs if 2 not in (a, b)]
    triples += [(0, 1, (2, 3)), (0, 1, (3, 4, 5)), (4, 5, (0, 1, 2)), (1, 0, (2,))]
    p = t.pvalues(*zip(*triples, strict=True))
    one = partial(rcit_pvalue, num_z=10, rows=50)
    with jax.enable_x64(True):
        for (a, b, s), got in zip(triples, p, strict=True):
            a, b = min(a, b), max(a, b)
            z = np.zeros((120, 4))
            z[:, : len(s)] = t.data[:, list(s)]
            mask = np.arange(4) < len(s)
            want = one(t.key, t.data[:, a], t.data[:, b], z, mask)
            np.testing.assert_allclose(got, float(want), rtol=1e-9, atol=1e-12)


def test_oracle_and_capacity_errors():
    adj = np.zeros((3, 3), bool)
    adj[0, 1] = adj[1, 2] = True
    t = OracleCI(selection_graph(adj, []))
    np.testing.assert_array_equal(t.pvalues([0, 0], [2, 2], [(), (1,)]), [0.0, 1.0])
    t_sel = OracleCI(selection_graph(np.zeros((2, 2), bool), [(0, 1)]))
    assert t_sel.pvalue(0, 1) == 0.0  # selection on a common child makes them dependent
    small = FisherZ(np.random.default_rng(0).normal(size=(6, 5)))
    with pytest.raises(ValueError, match="capacity"):
        small.pvalue(0, 1, (2, 3, 4))
    with pytest.raises(ValueError, match="out of range"):
        small.pvalue(0, 7)


def test_discrete_tests_equal_causallearn():
    cit = pytest.importorskip("causallearn.utils.cit").CIT
    rng = np.random.default_rng(3)
    n = 400
    z, w = rng.integers(0, 3, n), rng.integers(0, 2, n)
    x = (z + rng.integers(0, 2, n)) % 3
    y = (z + (rng.random(n) < 0.3)) % 2
    v = x + rng.integers(0, 2, n)
    data = np.column_stack([x, y, z, w, v]).astype(float) * 2.0 + 1.0  # codes from values
    triples = [(0, 1, ()), (0, 1, (2,)), (0, 1, (2, 3)), (0, 4, (2, 3)), (1, 4, (0, 2, 3))]
    for cls, method in ((ChiSquare, "chisq"), (GSquare, "gsq")):
        p = cls(data).pvalues(*zip(*triples, strict=True))
        ref = cit(data, method)
        np.testing.assert_allclose(p, [ref(a, b, list(s)) for a, b, s in triples], atol=2e-5)


def test_exact_kci_equals_causallearn_conditional_kci():
    kci_cind = pytest.importorskip("causallearn.utils.KCI.KCI").KCI_CInd
    rng = np.random.default_rng(4)
    z = rng.normal(size=80)
    x = np.sin(1.5 * z) + 0.3 * rng.normal(size=80)
    y = z**2 + 0.3 * rng.normal(size=80)
    data = np.column_stack([x, y, z, y + x])
    p = KernelCI(data).pvalues([0, 0], [1, 3], [(2,), (2,)])
    ref = [
        kci_cind(est_width="median").compute_pvalue(x[:, None], data[:, j : j + 1], z[:, None])[0]
        for j in (1, 3)
    ]
    np.testing.assert_allclose(p, ref, rtol=1e-3, atol=1e-9)
    assert p[0] > 0.05 and p[1] < 1e-3


def test_non_finite_pvalue_is_an_error_naming_the_variables():
    data = np.random.default_rng(5).normal(size=(50, 3))
    data[:, 2] = 1.0
    t = FisherZ(data)
    t.names, t.label = ["a", "b", "c"], "context ctx=0"
    with pytest.raises(NonFiniteTestError, match="'a' and 'c' given {'b'} in context ctx=0"):
        t.pvalue(0, 2, (1,))
