"""FCI (Spirtes, Meek & Richardson 1995; Zhang 2008): skeleton search with batched CI tests,
the possible-d-sep refinement, and the orientation rules R0-R10 with background knowledge.

The graph search is combinatorial and runs on the host; its CI tests do not. The skeleton search is
the *stable* adjacency search (Colombo & Maathuis 2014): at depth ``l`` every adjacent pair ``i, j``
is tested against every size-``l`` subset of ``adj(i) \\ {j}`` and of ``adj(j) \\ {i}`` of the graph
at the start of the depth, so all tests of one depth are independent and go to the CI test as one
batch (one jitted call), and the result does not depend on the variable order.

Marks follow :mod:`jaxlab.causal.graphs`: ``m[i, j]`` is the mark at ``j`` on edge ``i - j``.
Orientation only ever replaces a circle (a conflicting later orientation is ignored, as in the
original CDIS code), and with ``no_latents`` an edge is never made bidirected.

Separating sets (``sepset_rule``): ``"first"``, ``"union"`` (default) or ``"majority"``, see
:func:`skeleton_search` and :func:`majority_sepsets`. The default is the rule whose PAGs agree
most often with causal-learn's FCI on seeded linear-Gaussian data
(``python -m experiments.fci_parity.fci_parity``, 30 seeds each; same PAG for first / union /
majority: 22 / 24 / 21 with d = 8, n = 2000; 20 / 22 / 19 with 2 of 10 variables latent,
n = 2000; 25 / 25 / 21 and 22 / 24 / 20 at n = 10000; each differing PAG is explained in
``experiments/fci_parity/README.md``).

Possible-D-Sep differs from causal-learn's (``getPossibleDsep``, after Tetrad). Here it is the
textbook set (Spirtes, Glymour & Scheines 2000): the nodes reached from x by a path on which every
interior node is a collider or the middle of a triangle, computed once per node, minus y. causal-
learn computes it per edge and never walks *through* y; it also keeps a reached node only if one
of its predecessors has a semi-directed path to x or to it, extends a path ``(a, b)`` by ``c`` by
queueing ``(a, c)``, and tests only sets of two or more nodes not inside ``adj(x)`` or ``adj(y)``,
one edge at a time, removing edges as it goes. Worked case (the oracle PAG after R0 of
``random_dag_er(PRNGKey(0), 7, 2.5)`` with its last 2 nodes latent, all marks circles): edges
X0-X1, X0-X3, X0-X4, X1-X3, X1-X4, X2-X3. For the edge X3 - X0, here Possible-D-Sep is
{X1, X2, X4}: X4 is reached by X3 o-o X1 o-o X0 o-o X4, X1 and X0 each the middle of a triangle
(X3, X1, X0 and X1, X0, X4); causal-learn's is {X1, X2}, as that path runs through X0. The set here
is a superset (at 7566 edge ends of oracle PAGs after R0 of 600 random graphs with latents, 3392
differ and none has a node only causal-learn's has), so the refinement may run more tests and
remove an edge causal-learn keeps; with d-separation facts the PAGs agree
(``tests/causal/test_fci.py``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from jaxlab.causal.ci_tests import CITest
from jaxlab.causal.graphs import ARROW, CIRCLE, NONE, TAIL

Pair = tuple[int, int]
SEPSET_RULES = ("first", "union", "majority")


@dataclass
class Skeleton:
    """Result of an adjacency search.

    Attributes:
        adj: (d, d) symmetric bool adjacency.
        sepsets: ``(i, j)`` with ``i < j`` -> the separating set found for a removed pair.
        dependencies: ``(i, j, S)`` with ``i < j`` for every test that found dependence (reused by
            later searches as known facts, as CDIS does).
        ambiguous: triples ``(a, b, c)`` with ``a < c`` whose middle node is in exactly half of
            the separating sets of ``a, c`` (the majority rule's ties): neither a collider nor a
            non-collider, see :func:`orient`.
    """

    adj: np.ndarray
    sepsets: dict[Pair, frozenset] = field(default_factory=dict)
    dependencies: set[tuple[int, int, frozenset]] = field(default_factory=set)
    ambiguous: frozenset = field(default_factory=frozenset)

    def sepset(self, i: int, j: int) -> frozenset | None:
        return self.sepsets.get((min(i, j), max(i, j)))


def _decide(test: CITest, queries, alpha: float):
    if not queries:
        return np.zeros(0, bool)
    p = test.pvalues([q[0] for q in queries], [q[1] for q in queries], [q[2] for q in queries])
    return p > alpha


def skeleton_search(
    test: CITest,
    *,
    alpha: float,
    sure_adjacent: np.ndarray | None = None,
    sure_dependent: set | None = None,
    max_cond: int | None = None,
    sepset_rule: str = "union",
) -> Skeleton:
    """Stable PC adjacency search over the test's variables, one CI batch per depth.

    ``sure_adjacent`` pairs are never tested (kept), ``sure_dependent`` triples ``(i, j, S)`` are
    taken as dependent without a test. ``sepset_rule``: ``"first"`` keeps the first separating
    set in enumeration order (subsets of ``adj(i)`` then of ``adj(j)``, lexicographic);
    ``"union"`` (and ``"majority"``, whose sets :func:`majority_sepsets` replaces later) keeps the
    union of all separating sets found at the removal depth (causal-learn's stable FAS).
    """
    if sepset_rule not in SEPSET_RULES:
        raise ValueError(f"sepset_rule={sepset_rule!r}: expected one of {SEPSET_RULES}")
    d = test.num_vars
    adj = ~np.eye(d, dtype=bool)
    sure = np.zeros((d, d), bool) if sure_adjacent is None else np.asarray(sure_adjacent, bool)
    deps = set(sure_dependent or ())
    sk = Skeleton(adj, {}, deps)
    limit = min(d - 2, test.max_cond) if max_cond is None else min(max_cond, test.max_cond)
    depth = 0
    while depth <= limit:
        queries, owner = [], []
        any_pair = False
        for i, j in combinations(range(d), 2):
            if not adj[i, j] or sure[i, j]:
                continue
            ni = [k for k in np.flatnonzero(adj[i]) if k != j]
            nj = [k for k in np.flatnonzero(adj[j]) if k != i]
            if len(ni) < depth and len(nj) < depth:
                continue
            any_pair = True
            seen = set()
            for nbrs in (ni, nj):
                for s in combinations(nbrs, depth):
                    s = frozenset(int(v) for v in s)
                    if s in seen or (i, j, s) in deps:
                        continue
                    seen.add(s)
                    queries.append((i, j, s))
                    owner.append((i, j))
        if not any_pair:
            break
        indep = _decide(test, queries, alpha)
        found: dict[Pair, list[frozenset]] = {}
        for (i, j, s), ind in zip(queries, indep, strict=True):
            if ind:
                found.setdefault((i, j), []).append(s)
            else:
                deps.add((i, j, s))
        for (i, j), sets in found.items():
            adj[i, j] = adj[j, i] = False
            sk.sepsets[(i, j)] = sets[0] if sepset_rule == "first" else frozenset().union(*sets)
        depth += 1
    return sk


def majority_sepsets(
    sk: Skeleton,
    test: CITest,
    *,
    alpha: float,
    max_cond: int | None = None,
    max_queries: int = 200_000,
) -> Skeleton:
    """The majority rule (Colombo & Maathuis 2014, as conservative FCI re-tests triples): for
    every non-adjacent pair ``a, c`` with a common neighbour in the final skeleton, every subset
    of ``adj(a) \\ {c}`` and of ``adj(c) \\ {a}`` (up to ``max_cond``) is tested in one batch; the
    pair's separating set becomes the nodes in more than half of the separating sets found, so
    a middle node ``b`` is a collider only when most separating sets leave it out. A node in
    exactly half makes ``(a, b, c)`` ambiguous (``Skeleton.ambiguous``): :func:`orient` neither
    orients it as a collider nor uses it as a non-collider (as pcalg's ``udag2pag`` treats its
    ``unfVect``). Pairs with no separating set among those keep their set."""
    d = sk.adj.shape[0]
    limit = test.max_cond if max_cond is None else min(max_cond, test.max_cond)
    queries = []
    for a, c in combinations(range(d), 2):
        if sk.adj[a, c] or not np.any(sk.adj[a] & sk.adj[c]):
            continue
        seen = set()
        for base in (np.flatnonzero(sk.adj[a]), np.flatnonzero(sk.adj[c])):
            base = [int(v) for v in base if v not in (a, c)]
            for size in range(0, min(limit, len(base)) + 1):
                for sub in combinations(base, size):
                    sub = frozenset(sub)
                    if sub not in seen and (a, c, sub) not in sk.dependencies:
                        seen.add(sub)
                        queries.append((a, c, sub))
        if len(queries) > max_queries:
            raise ValueError(
                f"the majority rule needs more than max_queries={max_queries} tests; "
                "pass a smaller max_cond"
            )
    indep = _decide(test, queries, alpha)
    found: dict[Pair, list[frozenset]] = {}
    for (a, c, sub), ind in zip(queries, indep, strict=True):
        if ind:
            found.setdefault((a, c), []).append(sub)
    sepsets = dict(sk.sepsets)
    ambiguous = set(sk.ambiguous)
    for (a, c), sets in found.items():
        votes = {v: 2 * sum(v in s for s in sets) for v in frozenset().union(*sets)}
        sepsets[(a, c)] = frozenset(v for v, k in votes.items() if k > len(sets))
        ambiguous |= {(a, v, c) for v, k in votes.items() if k == len(sets)}
    return Skeleton(sk.adj, sepsets, sk.dependencies, frozenset(ambiguous))


# ---------------------------------------------------------------------------------------------
# Orientation
# ---------------------------------------------------------------------------------------------


def _set(m: np.ndarray, i: int, j: int, at_i, at_j, no_latents: bool, no_selection: bool) -> bool:
    """Orient edge ``i - j``: mark at i := ``at_i``, at j := ``at_j`` (None leaves it). Only
    circles change; a change that would make ``<->`` (no latents) or ``--`` (no selection) is
    refused."""
    changed = False
    if at_i is not None and m[j, i] == CIRCLE:
        other = m[i, j]
        bad = (no_latents and at_i == ARROW and other == ARROW) or (
            no_selection and at_i == TAIL and other == TAIL
        )
        if not bad:
            m[j, i] = at_i
            changed = True
    if at_j is not None and m[i, j] == CIRCLE:
        other = m[j, i]
        bad = (no_latents and at_j == ARROW and other == ARROW) or (
            no_selection and at_j == TAIL and other == TAIL
        )
        if not bad:
            m[i, j] = at_j
            changed = True
    return changed


@dataclass(frozen=True)
class _Facts:
    """What the orientation rules read besides the marks: separating sets and ambiguous triples."""

    sepset: object  # (i, j) -> frozenset | None
    ambiguous: frozenset = frozenset()

    def amb(self, a, b, c) -> bool:
        """Whether the triple ``a, b, c`` (either direction) is ambiguous."""
        return (min(a, c), b, max(a, c)) in self.ambiguous

    def path_ok(self, path) -> bool:
        """No ambiguous triple among the consecutive triples of ``path``."""
        return not any(self.amb(*path[k : k + 3]) for k in range(len(path) - 2))


def _pd_edge(m, u, v) -> bool:
    """``u *-* v`` is potentially directed from u to v (no arrowhead at u, no tail at v)."""
    return bool(m[u, v] != NONE and m[v, u] != ARROW and m[u, v] != TAIL)


def _circ_edge(m, u, v) -> bool:
    return bool(m[u, v] == CIRCLE and m[v, u] == CIRCLE)


def _uncovered_path_exists(
    m, first: int, second: int, goal: int, edge_ok, facts=None, budget=20000
) -> bool:
    """Whether a simple uncovered path ``first, second, ..., goal`` exists whose every edge
    satisfies ``edge_ok(u, v)`` (the first edge is assumed checked) and, given ``facts``, none
    of whose triples is ambiguous. Depth-first over simple paths, with an expansion budget
    (exceeding it answers False, i.e. orients nothing)."""
    if second == goal:
        return True
    stack = [(first, second, (first, second))]
    steps = 0
    while stack:
        prev, cur, path = stack.pop()
        steps += 1
        if steps > budget:
            return False
        for nxt in np.flatnonzero(m[cur]):
            nxt = int(nxt)
            if nxt in path or m[prev, nxt] != NONE or not edge_ok(cur, nxt):
                continue
            if facts is not None and facts.amb(prev, cur, nxt):
                continue
            if nxt == goal:
                return True
            stack.append((cur, nxt, path + (nxt,)))
    return False


def _discriminating_theta(m, alpha_node: int, beta: int, gamma: int):
    """Search a discriminating path ``<theta, ..., alpha, beta, gamma>`` for beta (Zhang 2008):
    every vertex between theta and beta is a collider on the path and a parent of gamma, theta
    not adjacent to gamma. Breadth-first from ``alpha``; returns theta or None."""

    def parent_of_gamma(v):
        return m[v, gamma] == ARROW and m[gamma, v] == TAIL

    if not (m[beta, alpha_node] == ARROW and parent_of_gamma(alpha_node)):
        return None
    queue = deque([(alpha_node, beta)])
    seen = {alpha_node, beta, gamma}
    while queue:
        v, nxt = queue.popleft()
        for u in np.flatnonzero(m[:, v] == ARROW):  # u *-> v
            u = int(u)
            if u in seen:
                continue
            if m[u, gamma] == NONE:
                return u
            if m[v, u] == ARROW and parent_of_gamma(u):  # u is a collider parent of gamma
                seen.add(u)
                queue.append((u, v))
    return None


def _impose_background(adj: np.ndarray, background: np.ndarray, s) -> None:
    """Imposes every tail or arrowhead of ``background`` on the edges of ``adj``."""
    for i, j in zip(*np.nonzero(adj), strict=True):
        bi, bj = int(background[j, i]), int(background[i, j])
        s(
            int(i),
            int(j),
            bi if bi in (TAIL, ARROW) else None,
            bj if bj in (TAIL, ARROW) else None,
        )


def _r0(adj: np.ndarray, s, facts: _Facts) -> None:
    """R0: an unshielded triple ``a *-* b *-* c`` with ``b`` not in sepset(a, c) is a collider
    (an ambiguous triple is not)."""
    for b in range(adj.shape[0]):
        nb = np.flatnonzero(adj[b])
        for a, c in combinations(nb, 2):
            if adj[a, c]:
                continue
            sep = facts.sepset(int(a), int(c))
            if sep is not None and b not in sep and not facts.amb(int(a), b, int(c)):
                s(int(a), b, None, ARROW)
                s(int(c), b, None, ARROW)


def _r1(m: np.ndarray, s, facts: _Facts) -> bool:
    """R1: ``a *-> b o-* c`` with ``a, c`` not adjacent (the triple not ambiguous) orients
    ``b --> c``."""
    ch = False
    for a, b in zip(*np.nonzero(m == ARROW), strict=True):
        for c in np.flatnonzero(m[:, b] == CIRCLE):
            if c != a and m[a, c] == NONE and not facts.amb(int(a), int(b), int(c)):
                ch |= s(int(b), int(c), TAIL, ARROW)
    return ch


def _r2(m: np.ndarray, s, facts: _Facts) -> bool:
    """R2: ``a -> b *-> c`` or ``a *-> b -> c`` with ``a *-o c`` orients ``a *-> c``."""
    ch = False
    for a, c in zip(*np.nonzero(m == CIRCLE), strict=True):
        for b in np.flatnonzero((m[a] == ARROW) & (m[:, c] == ARROW)):
            if m[b, a] == TAIL or m[c, b] == TAIL:
                ch |= s(int(a), int(c), None, ARROW)
                break
    return ch


def _r3(m: np.ndarray, s, facts: _Facts) -> bool:
    """R3: ``a *-> b <-* c``, ``a *-o t o-* c``, ``a, c`` not adjacent, ``t *-o b``: ``t *-> b``
    (not when the triple ``a, t, c`` is ambiguous)."""
    ch = False
    for b in range(m.shape[0]):
        into = np.flatnonzero(m[:, b] == ARROW)
        for a, c in combinations(into, 2):
            if m[a, c] != NONE:
                continue
            for t in np.flatnonzero((m[a] == CIRCLE) & (m[c] == CIRCLE) & (m[:, b] == CIRCLE)):
                if t in (a, c) or facts.amb(int(a), int(t), int(c)):
                    continue
                ch |= s(int(t), b, None, ARROW)
    return ch


def _r4(m: np.ndarray, s, facts: _Facts) -> bool:
    """R4: a discriminating path for ``b`` to ``g`` orients ``b -> g`` or ``a <-> b <-> g`` (nothing
    when ``theta, b, g`` is ambiguous)."""
    ch = False
    for g, b in zip(*np.nonzero(m == CIRCLE), strict=True):
        b, g = int(b), int(g)  # edge b o-* g (the mark at b, m[g, b], is a circle)
        if m[g, b] != CIRCLE:
            continue
        for a in np.flatnonzero(m[b] == ARROW):
            theta = _discriminating_theta(m, int(a), b, g)
            if theta is None:
                continue
            sep = facts.sepset(theta, g)
            if facts.amb(theta, b, g):
                break
            if sep is not None and b in sep:
                ch |= s(b, g, TAIL, ARROW)
            else:
                ch |= s(int(a), b, ARROW, ARROW)
                ch |= s(b, g, ARROW, ARROW)
            break
    return ch


def _r5(m: np.ndarray, s, facts: _Facts) -> bool:
    """R5: ``a o-o b`` closing an uncovered circle path makes every edge on it ``--`` (only when no
    triple on the closed circle is ambiguous)."""
    ch = False
    for a, b in combinations(range(m.shape[0]), 2):
        if not _circ_edge(m, a, b):
            continue
        for g in np.flatnonzero(m[a] == CIRCLE):
            g = int(g)
            if g == b or not _circ_edge(m, a, g) or m[b, g] != NONE:
                continue
            # uncovered circle path a, g, ..., t, b with t not adjacent to a
            stack = [(a, g, (a, g))]
            done = False
            while stack and not done:
                prev, cur, path = stack.pop()
                for nxt in np.flatnonzero(m[cur] == CIRCLE):
                    nxt = int(nxt)
                    if nxt in path or not _circ_edge(m, cur, nxt) or m[prev, nxt] != NONE:
                        continue
                    if nxt == b:
                        full = (*path, b)
                        if cur != g and m[a, cur] == NONE and facts.path_ok((b, *full, a)):
                            ch |= s(a, b, TAIL, TAIL)
                            for u, v in zip(full[:-1], full[1:], strict=True):
                                ch |= s(u, v, TAIL, TAIL)
                            done = True
                            break
                        continue
                    stack.append((cur, nxt, (*path, nxt)))
            if done:
                break
    return ch


def _r6(m: np.ndarray, s, facts: _Facts) -> bool:
    """R6: ``a -- b o-* c`` orients ``b --* c``."""
    ch = False
    for a, b in zip(*np.nonzero((m == TAIL) & (m.T == TAIL)), strict=True):
        for c in np.flatnonzero(m[:, b] == CIRCLE):
            if c != a:
                ch |= s(int(b), int(c), TAIL, None)
    return ch


def _r7(m: np.ndarray, s, facts: _Facts) -> bool:
    """R7: ``a --o b o-* c`` with ``a, c`` not adjacent (not ambiguous) orients ``b --* c``."""
    ch = False
    for a, b in zip(*np.nonzero((m.T == TAIL) & (m == CIRCLE)), strict=True):
        # a -o b: mark at a tail (m[b, a]), at b circle (m[a, b])
        for c in np.flatnonzero(m[:, b] == CIRCLE):
            if c != a and m[a, c] == NONE and not facts.amb(int(a), int(b), int(c)):
                ch |= s(int(b), int(c), TAIL, None)
    return ch


def _r8(m: np.ndarray, s, facts: _Facts) -> bool:
    """R8: ``a -> b -> c`` or ``a --o b -> c`` with ``a o-> c`` orients ``a -> c``."""
    ch = False
    for a, c in zip(*np.nonzero((m == ARROW) & (m.T == CIRCLE)), strict=True):
        for b in np.flatnonzero((m.T[a] == TAIL) & ((m[a] == ARROW) | (m[a] == CIRCLE))):
            if m[b, c] == ARROW and m[c, b] == TAIL:
                ch |= s(int(a), int(c), TAIL, None)
                break
    return ch


def _r9(m: np.ndarray, s, facts: _Facts) -> bool:
    """R9: ``a o-> c`` with an uncovered p.d. path ``a, b, ..., c`` (b, c not adjacent; no
    ambiguous triple on it): ``a -> c``."""
    ch = False
    for a, c in zip(*np.nonzero((m == ARROW) & (m.T == CIRCLE)), strict=True):
        a, c = int(a), int(c)
        for b in np.flatnonzero(m[a] != NONE):
            b = int(b)
            if b == c or m[b, c] != NONE or not _pd_edge(m, a, b):
                continue
            if _uncovered_path_exists(m, a, b, c, lambda u, v: _pd_edge(m, u, v), facts):
                ch |= s(a, c, TAIL, None)
                break
    return ch


def _r10(m: np.ndarray, s, facts: _Facts) -> bool:
    """R10: ``a o-> c``, ``b -> c <- t``, uncovered p.d. paths ``a, mu, ..., b`` and
    ``a, om, ..., t`` (``mu, om`` not adjacent; ``mu, a, om`` and the paths' triples not
    ambiguous): ``a -> c``."""
    ch = False
    for a, c in zip(*np.nonzero((m == ARROW) & (m.T == CIRCLE)), strict=True):
        a, c = int(a), int(c)
        parents = [int(p) for p in np.flatnonzero((m[:, c] == ARROW) & (m[c] == TAIL)) if p != a]
        if len(parents) < 2:
            continue
        firsts = [int(u) for u in np.flatnonzero(m[a] != NONE) if u != c and _pd_edge(m, a, u)]
        done = False
        for bb, tt in combinations(parents, 2):
            for mu in firsts:
                if not _uncovered_path_exists(m, a, mu, bb, lambda u, v: _pd_edge(m, u, v), facts):
                    continue
                for om in firsts:
                    if om == mu or m[mu, om] != NONE or facts.amb(mu, a, om):
                        continue
                    if _uncovered_path_exists(m, a, om, tt, lambda u, v: _pd_edge(m, u, v), facts):
                        ch |= s(a, c, TAIL, None)
                        done = True
                        break
                if done:
                    break
            if done:
                break
    return ch


def _r_no_latents(m: np.ndarray, s, facts: _Facts) -> bool:
    """Causal sufficiency: ``a o-> c`` becomes ``a -> c``."""
    ch = False
    for a, c in zip(*np.nonzero((m == ARROW) & (m.T == CIRCLE)), strict=True):
        ch |= s(int(a), int(c), TAIL, None)
    return ch


def _r_no_selection(m: np.ndarray, s, facts: _Facts) -> bool:
    """No selection: ``a o-- c`` becomes ``a <-- c``."""
    ch = False
    for a, c in zip(*np.nonzero((m == TAIL) & (m.T == CIRCLE)), strict=True):
        ch |= s(int(a), int(c), ARROW, None)
    return ch


_RULES = {1: _r1, 2: _r2, 3: _r3, 4: _r4, 5: _r5, 6: _r6, 7: _r7, 8: _r8, 9: _r9, 10: _r10}


def orient(
    adj: np.ndarray,
    sepset,
    *,
    background: np.ndarray | None = None,
    no_latents: bool = False,
    no_selection: bool = False,
    rules: tuple[int, ...] = tuple(range(1, 11)),
    ambiguous=frozenset(),
) -> np.ndarray:
    """Orient a skeleton into a PAG: background knowledge, R0, then R1-R10 to a fixpoint.

    Args:
        adj: (d, d) symmetric skeleton.
        sepset: callable ``(i, j) -> frozenset | None``.
        ambiguous: triples ``(a, b, c)``, ``a < c`` (the majority rule's ties): never oriented
            as colliders (R0) nor read as non-colliders (R1, R3, R4, R5, R7, R9, R10 skip them).
        background: optional (d, d) marks; every non-circle mark on an edge of ``adj`` is
            imposed first (``background[i, j]`` is the mark at j).
        no_latents / no_selection: causal sufficiency / no selection: ``o->`` becomes ``->`` /
            ``o--`` becomes ``<--``, and ``<->`` / ``--`` are never created.
        rules: which of R1..R10 to use (R0 always runs).

    Returns:
        (d, d) int8 marks.
    """
    adj = np.asarray(adj, bool)
    m = np.where(adj, CIRCLE, NONE).astype(np.int8)
    nl, ns = no_latents, no_selection

    def s(i, j, a, b):
        return _set(m, i, j, a, b, nl, ns)

    if background is not None:
        _impose_background(adj, background, s)
    facts = _Facts(sepset, frozenset(ambiguous))
    _r0(adj, s, facts)

    active = [_RULES[r] for r in rules]
    if nl:
        active.append(_r_no_latents)
    if ns:
        active.append(_r_no_selection)
    while True:
        changed = False
        for rule in active:
            changed |= bool(rule(m, s, facts))
        if not changed:
            return m


def possible_dsep(m: np.ndarray, x: int) -> set[int]:
    """Possible-D-Sep(x) (Spirtes et al. 2000): nodes reachable from x by a path on which every
    interior vertex is a collider (arrowheads from both sides) or the middle of a triangle."""
    out = set()
    queue = deque()
    seen = set()
    for b in np.flatnonzero(m[x]):
        b = int(b)
        out.add(b)
        queue.append((x, b))
        seen.add((x, b))
    while queue:
        a, b = queue.popleft()
        for c in np.flatnonzero(m[b]):
            c = int(c)
            if c in (a, x) or (b, c) in seen:
                continue
            collider = m[a, b] == ARROW and m[c, b] == ARROW
            if collider or m[a, c] != NONE:
                out.add(c)
                seen.add((b, c))
                queue.append((b, c))
    out.discard(x)
    return out


def possible_dsep_refine(
    sk: Skeleton,
    test: CITest,
    *,
    alpha: float,
    sure_adjacent: np.ndarray | None = None,
    max_cond: int | None = None,
    max_queries: int = 200_000,
) -> Skeleton:
    """Remove adjacencies separated by a subset of Possible-D-Sep (the FCI refinement step).

    Colliders are first oriented by R0 on the current skeleton; for every remaining pair all
    subsets of ``pdsep(i) \\ {j}`` and ``pdsep(j) \\ {i}`` (size 1 to ``max_cond``, known
    dependencies skipped) are tested in one batch; a pair is removed with its first separating
    set (by size, then order). Raises ``ValueError`` when more than ``max_queries`` tests would be
    needed (pass a smaller ``max_cond``).
    """
    d = sk.adj.shape[0]
    sure = np.zeros((d, d), bool) if sure_adjacent is None else np.asarray(sure_adjacent, bool)
    marks = orient(sk.adj, sk.sepset, rules=())
    limit = test.max_cond if max_cond is None else min(max_cond, test.max_cond)
    pd = {i: possible_dsep(marks, i) for i in range(d)}
    queries = []
    for i, j in combinations(range(d), 2):
        if not sk.adj[i, j] or sure[i, j]:
            continue
        cands = []
        seen = set()
        for base in (sorted(pd[i] - {j}), sorted(pd[j] - {i})):
            for size in range(1, min(limit, len(base)) + 1):
                for sub in combinations(base, size):
                    sub = frozenset(sub)
                    if sub in seen or (i, j, sub) in sk.dependencies:
                        continue
                    seen.add(sub)
                    cands.append((len(sub), sub))
        cands.sort(key=lambda t: t[0])
        queries += [(i, j, sub) for _, sub in cands]
        if len(queries) > max_queries:
            raise ValueError(
                f"possible-d-sep refinement needs more than max_queries={max_queries} tests; "
                "pass a smaller max_cond"
            )
    indep = _decide(test, queries, alpha)
    adj = sk.adj.copy()
    sepsets = dict(sk.sepsets)
    deps = set(sk.dependencies)
    for (i, j, sub), ind in zip(queries, indep, strict=True):
        if ind:
            if adj[i, j]:
                adj[i, j] = adj[j, i] = False
                sepsets[(i, j)] = sub
        else:
            deps.add((i, j, sub))
    return Skeleton(adj, sepsets, deps)


@dataclass
class FCIResult:
    marks: np.ndarray
    skeleton: Skeleton


def fci(
    test: CITest,
    *,
    alpha: float = 0.05,
    background: np.ndarray | None = None,
    no_latents: bool = False,
    no_selection: bool = False,
    max_cond: int | None = None,
    refine: bool = True,
    sepset_rule: str = "union",
) -> FCIResult:
    """FCI: stable adjacency search, possible-d-sep refinement (``refine``), the separating-set
    rule (``"first"``, ``"union"`` or ``"majority"``, see :func:`skeleton_search` and
    :func:`majority_sepsets`), R0-R10."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha={alpha}: expected a value in (0, 1)")
    sk = skeleton_search(test, alpha=alpha, max_cond=max_cond, sepset_rule=sepset_rule)
    if refine:
        sk = possible_dsep_refine(sk, test, alpha=alpha, max_cond=max_cond)
    if sepset_rule == "majority":
        sk = majority_sepsets(sk, test, alpha=alpha, max_cond=max_cond)
    marks = orient(
        sk.adj,
        sk.sepset,
        background=background,
        no_latents=no_latents,
        no_selection=no_selection,
        ambiguous=sk.ambiguous,
    )
    return FCIResult(marks, sk)
