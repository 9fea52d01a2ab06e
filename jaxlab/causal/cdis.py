"""CDIS: causal discovery from interventional data under potential selection bias (Dai, Ng, Sun,
Tang, Luo, Dong, Spirtes & Zhang, ICLR 2025, Alg. 1), its oracle mode, and the
selection-ignoring interventional baseline.

Input: an observational dataset (index 0) and ``K`` interventional datasets with soft
interventions on unknown targets; every dataset's units were selected before being treated.

1. Adjacency search on the observational data (variables ``0..d-1``) with its separating sets
   and the dependencies it found; for each k, an adjacency search on the pooled data of dataset 0
   and dataset k with the indicator ``zeta = d``, where the observational adjacencies are kept and
   the observational dependencies (with or without ``zeta`` added) are known facts. The variables
   the k-th intervention changes are those marginally dependent on ``zeta``.
2. ``P0`` = the observational PAG (no latents). Repeat until ``P0`` stops changing:

   * orient every ``P_k`` by FCI with background knowledge: the directed edges of ``P0``, the
     ``zeta -> X`` edges, and what ``P_k`` already had;
   * transfer to ``P0`` (only circles change): ``i -- j`` in some ``P_k`` => ``i -- j``
     (selection); ``i -> j`` in ``P_k`` with i changed by intervention k => ``i -> j``;
     ``i -> j`` in one ``P_k`` and ``j -> i`` in another => ``i -- j``.

Differences from the original code (github.com/MarkDana/CDIS): the adjacency searches are the
stable PC variant, batched per depth (the original removes edges as it goes, so its data-mode
result depends on the variable order; oracle results agree); and the original's transfer has a
fourth condition, ``p0_type1 == CIRC and p0_type1 == DASH``, that can never hold, so it is left
out here.

Edge semantics of the result: ``i -> j``: i is a direct cause of j and j is not involved in
selection; ``i -- j``: i and j are jointly involved in a selection mechanism; a circle: not
identifiable. Oracle mode replaces every CI test by d-separation in the interventional twin
graph (:func:`jaxlab.causal.graphs.twin_graph`) given the selection nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import numpy as np

from jaxlab.causal.ci_tests import CITest, OracleCI, make_test
from jaxlab.causal.fci import (
    Skeleton,
    majority_sepsets,
    orient,
    possible_dsep_refine,
    skeleton_search,
)
from jaxlab.causal.graphs import ARROW, CIRCLE, TAIL, selection_graph, twin_graph
from jaxlab.causal.scm import pool_with_indicator


@dataclass
class CDISResult:
    """``final`` and ``observational`` are (d, d) marks (``m[i, j]`` = mark at j);
    ``interventional`` the K pooled PAGs over ``d + 1`` variables (``zeta`` last); ``changed[k]``
    the variables the k-th intervention changes; ``rounds`` the number of transfer rounds;
    ``ambiguous`` the ambiguous triples ``(a, b, c)``, ``a < c``, of each adjacency search
    (observational first, then each pooled one with ``zeta = d``; empty unless the separating-set
    rule is ``"majority"``)."""

    final: np.ndarray
    observational: np.ndarray
    interventional: list[np.ndarray]
    changed: list[set[int]]
    rounds: int
    ambiguous: list[frozenset] = field(default_factory=list)


def _outer_set(m: np.ndarray, i: int, j: int, at_i, at_j) -> None:
    """The transfer's edge update: only circles change, never into ``<->``."""
    cur_i, cur_j = m[j, i], m[i, j]
    if at_i is not None and cur_i == CIRCLE and not (at_i == ARROW and cur_j == ARROW):
        m[j, i] = cur_i = at_i
    if at_j is not None and cur_j == CIRCLE and not (at_j == ARROW and cur_i == ARROW):
        m[i, j] = at_j


def cdis_core(
    tests: list[CITest],
    *,
    alpha: float = 0.05,
    max_cond: int | None = None,
    refine: bool = False,
    max_rounds: int = 100,
    sepset_rule: str = "union",
) -> CDISResult:
    """CDIS on CI tests: ``tests[0]`` over ``d`` observational variables, ``tests[k]`` over the
    pooled data of datasets 0 and k with ``zeta = d`` as the last variable. ``refine`` runs the
    possible-d-sep refinement of every adjacency search (the oracle mode's default);
    ``sepset_rule`` is :func:`jaxlab.causal.fci.fci`'s."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha={alpha}: expected a value in (0, 1)")
    if len(tests) < 2:
        raise ValueError("CDIS needs an observational and at least one interventional dataset")
    d = tests[0].num_vars
    zeta = d
    for k, t in enumerate(tests[1:], 1):
        if t.num_vars != d + 1:
            raise ValueError(f"tests[{k}] has {t.num_vars} variables, expected {d + 1} (X + zeta)")

    sk0 = skeleton_search(tests[0], alpha=alpha, max_cond=max_cond, sepset_rule=sepset_rule)
    if refine:
        sk0 = possible_dsep_refine(sk0, tests[0], alpha=alpha, max_cond=max_cond)
    if sepset_rule == "majority":
        sk0 = majority_sepsets(sk0, tests[0], alpha=alpha, max_cond=max_cond)
    sks: list[Skeleton] = []
    changed: list[set[int]] = []
    for t in tests[1:]:
        sure = np.zeros((d + 1, d + 1), bool)
        sure[:d, :d] = sk0.adj
        deps = set(sk0.dependencies) | {(i, j, s | {zeta}) for i, j, s in sk0.dependencies}
        sk = skeleton_search(
            t,
            alpha=alpha,
            sure_adjacent=sure,
            sure_dependent=deps,
            max_cond=max_cond,
            sepset_rule=sepset_rule,
        )
        if refine:
            sk = possible_dsep_refine(sk, t, alpha=alpha, sure_adjacent=sure, max_cond=max_cond)
        if sepset_rule == "majority":
            sk = majority_sepsets(sk, t, alpha=alpha, max_cond=max_cond)
        sks.append(sk)
        p = t.pvalues(list(range(d)), [zeta] * d, [()] * d)
        changed.append({i for i in range(d) if p[i] <= alpha})

    p0 = orient(sk0.adj, sk0.sepset, no_latents=True, ambiguous=sk0.ambiguous)
    observational = p0.copy()
    pks = [np.zeros((d + 1, d + 1), np.int8) for _ in sks]
    for rounds in range(1, max_rounds + 1):
        directed = list(zip(*np.nonzero((p0 == ARROW) & (p0.T == TAIL)), strict=True))
        for k, sk in enumerate(sks):
            bk = np.where(sk.adj, CIRCLE, 0).astype(np.int8)
            bk[pks[k] != 0] = pks[k][pks[k] != 0]
            into = [(zeta, int(x)) for x in np.flatnonzero(sk.adj[zeta])]
            for x, y in [*directed, *into]:
                _outer_set(bk, int(x), int(y), TAIL, ARROW)
            pks[k] = orient(
                sk.adj, sk.sepset, background=bk, no_latents=True, ambiguous=sk.ambiguous
            )
        new = p0.copy()
        for n1, n2 in zip(*np.nonzero(p0), strict=True):
            n1, n2 = int(n1), int(n2)
            if p0[n2, n1] != CIRCLE and p0[n1, n2] != CIRCLE:
                continue
            for k, pk in enumerate(pks):
                t1, t2 = int(pk[n2, n1]), int(pk[n1, n2])
                if (t1, t2) == (TAIL, TAIL):
                    _outer_set(new, n1, n2, TAIL, TAIL)
                    break
                if (t1, t2) == (TAIL, ARROW) and n1 in changed[k]:
                    _outer_set(new, n1, n2, TAIL, ARROW)
                    break
            kinds = {(int(pk[n2, n1]), int(pk[n1, n2])) for pk in pks}
            if (TAIL, ARROW) in kinds and (ARROW, TAIL) in kinds:
                _outer_set(new, n1, n2, TAIL, TAIL)
        if np.array_equal(new, p0):
            ambiguous = [sk0.ambiguous, *(sk.ambiguous for sk in sks)]
            return CDISResult(p0, observational, pks, changed, rounds, ambiguous)
        p0 = new
    raise RuntimeError(f"CDIS did not reach a fixpoint in {max_rounds} rounds")


def cdis_oracle(
    adj: np.ndarray, targets: list[tuple[int, ...]], selection_parents: list[tuple[int, ...]]
) -> CDISResult:
    """CDIS with CI facts read off the graphs: d-separation given the selection nodes in the DAG
    with selection (dataset 0) and in each interventional twin graph (datasets 1..K)."""
    adj = np.asarray(adj, bool)
    tests: list[CITest] = [OracleCI(selection_graph(adj, selection_parents))]
    tests += [OracleCI(twin_graph(adj, tuple(t), selection_parents)) for t in targets]
    return cdis_core(tests, alpha=0.5, refine=True)


def cdis_from_data(
    datasets: list[np.ndarray],
    *,
    test: str = "fisherz",
    alpha: float = 0.05,
    max_cond: int | None = None,
    refine: bool = False,
    key=None,
    sepset_rule: str = "union",
    names: list[str] | None = None,
    labels: list[str] | None = None,
) -> CDISResult:
    """CDIS on an observational dataset followed by interventional ones (each (n_k, d)).
    ``names`` (of the d variables) and ``labels`` (one per test: the observational dataset, then
    each pooled one) only serve the tests' error messages."""
    tests = [make_test(test, datasets[0], key=key)]
    for k, data in enumerate(datasets[1:], 1):
        kk = None if key is None else jax.random.fold_in(key, k)
        tests.append(make_test(test, pool_with_indicator(datasets[0], data), key=kk))
    for k, t in enumerate(tests):
        if names is not None:
            t.names = list(names) + ([] if k == 0 else ["the context indicator"])
        if labels is not None:
            t.label = labels[k]
    return cdis_core(tests, alpha=alpha, max_cond=max_cond, refine=refine, sepset_rule=sepset_rule)


def interventional_fci_baseline(
    tests: list[CITest], *, alpha: float = 0.05, max_cond: int | None = None
) -> np.ndarray:
    """The selection-ignoring baseline: interventional FCI with indicators, assuming causal
    sufficiency and *no selection*. Each pooled dataset ``(X, zeta_k)`` is searched and oriented
    with ``zeta_k -> X`` as background knowledge, ``o--`` read as ``<--`` (no selection); the
    orientations of the K pooled PAGs and of the observational PAG are merged (first one wins).
    """
    d = tests[0].num_vars
    sk0 = skeleton_search(tests[0], alpha=alpha, max_cond=max_cond)
    out = orient(sk0.adj, sk0.sepset, no_latents=True, no_selection=True)
    for t in tests[1:]:
        sure = np.zeros((d + 1, d + 1), bool)
        sure[:d, :d] = sk0.adj
        sk = skeleton_search(t, alpha=alpha, sure_adjacent=sure, max_cond=max_cond)
        bk = np.where(sk.adj, CIRCLE, 0).astype(np.int8)
        for x in np.flatnonzero(sk.adj[d]):
            _outer_set(bk, d, int(x), TAIL, ARROW)
        pk = orient(sk.adj, sk.sepset, background=bk, no_latents=True, no_selection=True)
        for i, j in zip(*np.nonzero(out), strict=True):
            if pk[i, j] in (TAIL, ARROW) and out[i, j] == CIRCLE:
                _outer_set(out, int(i), int(j), None, int(pk[i, j]))
    return out
