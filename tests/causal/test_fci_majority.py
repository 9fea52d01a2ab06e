"""The majority separating-set rule's ambiguous triples through R0-R10, on hand-built CI facts."""

import numpy as np

from jaxlab.causal.cdis import cdis_core
from jaxlab.causal.ci_tests import OracleCI
from jaxlab.causal.cli import ambiguous_triples
from jaxlab.causal.fci import fci
from jaxlab.causal.graphs import ARROW, CIRCLE


class _TableFacts(OracleCI):
    """CI facts from a table: ``indep`` maps a pair ``(i, j)``, ``i < j``, to the conditioning
    sets that separate it; every other query is dependent."""

    def __init__(self, d, indep):
        self.num_vars, self.max_cond, self._cache = d, 2, {}
        self.calls = self.tests = 0
        self.indep = indep

    def _batch(self, x, y, cond, mask):
        out = []
        for a, b, c, m in zip(*map(np.asarray, (x, y, cond, mask)), strict=True):
            s = frozenset(int(v) for v, k in zip(c, m, strict=True) if k)
            out.append(float(s in self.indep.get((min(a, b), max(a, b)), ())))
        return np.array(out)


def test_majority_ambiguous_triples_are_neither_colliders_nor_non_colliders():
    """0 - 1 - 2 and 3 - 1 - 2 with 1 in one of the two separating sets of (0, 2) and of (2, 3):
    both triples are ambiguous, so R0 makes no collider at 1 with 2 and R1 does not read them
    as non-colliders to orient 1 --> 2 off the collider 0 *-> 1 <-* 3."""
    e, one = frozenset(), frozenset({1})
    facts = _TableFacts(4, {(0, 3): {e}, (0, 2): {e, one}, (2, 3): {e, one}})
    res = fci(facts, alpha=0.5, sepset_rule="majority", refine=False)
    assert res.skeleton.ambiguous == {(0, 1, 2), (2, 1, 3)}
    m = res.marks
    assert m[0, 1] == ARROW and m[3, 1] == ARROW  # the collider the majority supports
    assert m[1, 2] == CIRCLE and m[2, 1] == CIRCLE  # 1 o-o 2: neither collider nor R1
    union = fci(_TableFacts(4, facts.indep), alpha=0.5, sepset_rule="union", refine=False).marks
    assert union[2, 1] == ARROW  # the union rule (set {} at depth 0) makes 2 *-> 1


def test_cdis_reports_every_searchs_ambiguous_triples_by_column_name():
    """Ties in the observational search (4 variables) and in the pooled one, where the context
    indicator 4 is in one of the two separating sets of (0, 2): CDIS's result keeps each
    search's ambiguous triples, and the command names them once each, in header order, the
    indicator by the context column."""
    e, one, zeta = frozenset(), frozenset({1}), frozenset({4})
    obs = {(0, 3): {e}, (0, 2): {e, one}, (2, 3): {e, one}}
    pooled = {(0, 3): {e}, (0, 2): {e, zeta}, (2, 3): {e, one}}
    tests = [_TableFacts(4, obs), _TableFacts(5, pooled)]
    res = cdis_core(tests, alpha=0.5, max_cond=2, sepset_rule="majority")
    assert res.ambiguous == [{(0, 1, 2), (2, 1, 3)}, {(0, 4, 2), (2, 1, 3)}]
    names = ["a", "b", "c", "d"]
    assert ambiguous_triples(res, names, "ctx") == [
        ["a", "b", "c"],
        ["a", "ctx", "c"],
        ["c", "b", "d"],
    ]
    union = cdis_core([_TableFacts(4, obs), _TableFacts(5, pooled)], alpha=0.5, max_cond=2)
    assert ambiguous_triples(union, names, "ctx") == []
