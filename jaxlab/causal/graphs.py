"""Causal graphs: DAGs, partial ancestral graphs (PAGs) with edge marks, d-separation, the
interventional twin graph of Dai et al. (ICLR 2025, Sec. 3), and random DAG generators.

Representations (all small, host-side numpy except where batched in JAX):

* a DAG over ``d`` nodes is a boolean matrix ``adj`` with ``adj[i, j]`` true iff ``i -> j``;
* a mixed graph / PAG is an int8 matrix ``marks`` with ``marks[i, j]`` the mark *at j* on the
  edge between ``i`` and ``j`` (``NONE`` = no edge, ``TAIL``, ``ARROW``, ``CIRCLE``), so
  ``i -> j`` is ``marks[i, j] = ARROW, marks[j, i] = TAIL``; ``i o-o j`` is two circles.

d-separation is computed with the ancestral moral graph criterion (Lauritzen et al. 1990):
``X _||_ Y | Z`` in a DAG iff X and Y are disconnected in the moral graph of the ancestral set
``An(X u Y u Z)`` after removing ``Z``. It is written as boolean matrix products so that thousands
of queries on one graph run in one jitted, vmapped call (the oracle CI test of CDIS).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, PRNGKeyArray

NONE, TAIL, ARROW, CIRCLE = 0, 1, 2, 3
MARK_NAMES = {TAIL: "tail", ARROW: "arrow", CIRCLE: "circle"}


# ---------------------------------------------------------------------------------------------
# DAG helpers
# ---------------------------------------------------------------------------------------------


def is_dag(adj: np.ndarray) -> bool:
    """Whether ``adj`` (d, d) has no directed cycle (Kahn's algorithm)."""
    adj = np.asarray(adj, bool)
    indeg = adj.sum(0).astype(int)
    stack = [i for i in range(adj.shape[0]) if indeg[i] == 0]
    seen = 0
    while stack:
        i = stack.pop()
        seen += 1
        for j in np.flatnonzero(adj[i]):
            indeg[j] -= 1
            if indeg[j] == 0:
                stack.append(int(j))
    return seen == adj.shape[0]


def topological_order(adj: np.ndarray) -> list[int]:
    """A topological order of a DAG ``adj`` (raises ``ValueError`` on a cycle)."""
    adj = np.asarray(adj, bool)
    indeg = adj.sum(0).astype(int)
    queue = [i for i in range(adj.shape[0]) if indeg[i] == 0]
    order = []
    while queue:
        i = queue.pop(0)
        order.append(i)
        for j in np.flatnonzero(adj[i]):
            indeg[j] -= 1
            if indeg[j] == 0:
                queue.append(int(j))
    if len(order) != adj.shape[0]:
        raise ValueError("graph has a directed cycle")
    return order


def descendants(adj: np.ndarray, nodes) -> set[int]:
    """Nodes reachable from ``nodes`` by directed paths, the nodes themselves included."""
    adj = np.asarray(adj, bool)
    out, stack = set(int(n) for n in nodes), [int(n) for n in nodes]
    while stack:
        i = stack.pop()
        for j in np.flatnonzero(adj[i]):
            if int(j) not in out:
                out.add(int(j))
                stack.append(int(j))
    return out


def ancestors(adj: np.ndarray, nodes) -> set[int]:
    """Nodes with a directed path into ``nodes``, the nodes themselves included."""
    return descendants(np.asarray(adj, bool).T, nodes)


# ---------------------------------------------------------------------------------------------
# d-separation, batched in JAX
# ---------------------------------------------------------------------------------------------


def _closure_steps(v: int) -> int:
    return max(1, int(np.ceil(np.log2(max(v, 2)))))


@jax.jit
def d_separated(
    adj: Bool[Array, "v v"],
    x: Bool[Array, "q v"],
    y: Bool[Array, "q v"],
    z: Bool[Array, "q v"],
) -> Bool[Array, " q"]:
    """``X _||_ Y | Z`` in the DAG ``adj`` for a batch of ``q`` queries given as node masks.

    Moral-graph criterion: with ``A = An(X u Y u Z)``, moralize ``adj`` restricted to ``A``
    (link parents of a common child, drop directions), remove ``Z``; X and Y are d-separated iff
    no path joins them. Every step is a boolean matrix product, so the whole batch is one
    program; cost per query is O(v^3 log v). Sets may overlap only trivially: a node in both X and
    Z is treated as conditioned on (X and Y then separated only through other nodes).
    """
    v = adj.shape[0]
    a = adj.astype(jnp.float32)
    steps = _closure_steps(v)

    # reflexive-transitive closure R[i, j] = i reaches j by a directed path (or i == j).
    r = jnp.minimum(a + jnp.eye(v, dtype=jnp.float32), 1.0)

    def square(_, m):
        return jnp.minimum(m @ m, 1.0)

    reach = jax.lax.fori_loop(0, steps, square, r)

    def one(xq, yq, zq):
        seed = (xq | yq | zq).astype(jnp.float32)
        anc = (reach @ seed) > 0  # i is an ancestor of some seed node
        af = anc.astype(jnp.float32)
        sub = a * af[:, None] * af[None, :]
        # moral graph: skeleton of sub plus co-parents of a common child in A
        moral = (sub + sub.T + (sub @ sub.T)) > 0
        keep = (anc & ~zq).astype(jnp.float32)
        m = moral.astype(jnp.float32) * keep[:, None] * keep[None, :]
        m = jnp.maximum(m, jnp.diag(keep))
        conn = jax.lax.fori_loop(0, steps, square, m)
        start = (xq & ~zq).astype(jnp.float32)
        reached = (start @ conn) > 0
        return ~jnp.any(reached & yq & ~zq)

    return jax.vmap(one)(x, y, z)


def d_separated_sets(adj: np.ndarray, queries: list[tuple[set, set, set]]) -> np.ndarray:
    """Convenience host wrapper: ``queries`` as ``(X, Y, Z)`` node-index sets -> (q,) bool."""
    v = np.asarray(adj).shape[0]
    q = len(queries)
    masks = np.zeros((3, q, v), bool)
    for k, sets in enumerate(queries):
        for s, nodes in enumerate(sets):
            masks[s, k, list(nodes)] = True
    return np.asarray(d_separated(jnp.asarray(adj, bool), *map(jnp.asarray, masks)))


# ---------------------------------------------------------------------------------------------
# Selection and the interventional twin graph
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AugmentedGraph:
    """A DAG over named nodes, with the observed ones and the selection nodes marked.

    Attributes:
        adj: (v, v) bool, ``adj[i, j]`` iff ``i -> j``.
        names: the v node names (``"0"``.. for observed X, ``"X*j"``, ``"Ej"``, ``"S*i"``,
            ``"zeta"``).
        observed: indices (into ``names``) of the observed variables, in variable order; for a
            twin graph the last one is the indicator ``zeta``.
        selection: indices of the selection nodes (always conditioned on).
    """

    adj: np.ndarray
    names: tuple[str, ...]
    observed: tuple[int, ...]
    selection: tuple[int, ...]


def selection_graph(adj: np.ndarray, selection_parents) -> AugmentedGraph:
    """The DAG plus one selection node ``S*i`` per mechanism, child of ``selection_parents[i]``."""
    adj = np.asarray(adj, bool)
    d, s = adj.shape[0], len(selection_parents)
    big = np.zeros((d + s, d + s), bool)
    big[:d, :d] = adj
    for i, parents in enumerate(selection_parents):
        for j in parents:
            big[j, d + i] = True
    names = tuple(str(i) for i in range(d)) + tuple(f"S*{i}" for i in range(s))
    return AugmentedGraph(big, names, tuple(range(d)), tuple(range(d, d + s)))


def twin_graph(adj: np.ndarray, targets, selection_parents) -> AugmentedGraph:
    """The interventional twin graph (Dai et al. 2025, Def. 3.1) for one interventional dataset.

    Nodes: observed ``X_j`` (post-intervention values), counterfactual copies ``X*_j`` for every
    descendant ``j`` of the targets (the values the unit would have had without intervention;
    selection acts on them, since units are selected before they are treated), shared exogenous
    noises ``E_j -> {X_j, X*_j}`` for those j, the selection nodes ``S*_i`` and the intervention
    indicator ``zeta -> targets``. For ``i -> j`` in the DAG: ``X_i -> X_j`` always, and
    ``X*_i -> X*_j`` when i is affected (then j is too), ``X_i -> X*_j`` when only j is affected.
    Selection parents that are affected hang off their ``X*`` copy. Theorem 3.2 (Markov property):
    d-separation given ``S*`` implies CI in the pooled (observational + this dataset) data with
    ``zeta`` as the dataset indicator.
    """
    adj = np.asarray(adj, bool)
    d = adj.shape[0]
    changed = sorted(descendants(adj, set().union(*[set(t) for t in [targets]])))
    names = [str(i) for i in range(d)]
    star = {j: len(names) + k for k, j in enumerate(changed)}
    names += [f"X*{j}" for j in changed]
    sel = list(range(len(names), len(names) + len(selection_parents)))
    names += [f"S*{i}" for i in range(len(selection_parents))]
    noise = {j: len(names) + k for k, j in enumerate(changed)}
    names += [f"E{j}" for j in changed]
    zeta = len(names)
    names.append("zeta")
    big = np.zeros((len(names), len(names)), bool)
    for i, j in zip(*np.nonzero(adj), strict=True):
        big[i, j] = True
        if i in star:
            big[star[i], star[j]] = True
        elif j in star:
            big[i, star[j]] = True
    for s_i, parents in enumerate(selection_parents):
        for j in parents:
            big[star.get(j, j), sel[s_i]] = True
    for j in changed:
        big[noise[j], star[j]] = True
        big[noise[j], j] = True
    for t in targets:
        big[zeta, t] = True
    return AugmentedGraph(big, tuple(names), tuple(range(d)) + (zeta,), tuple(sel))


def mag_skeleton(graph: AugmentedGraph, max_cond: int | None = None) -> np.ndarray:
    """Adjacencies of the MAG over ``graph.observed`` given selection: ``i, j`` adjacent iff no
    subset of the other observed nodes d-separates them given the selection nodes (brute force,
    batched; for tests on small graphs)."""
    from itertools import combinations

    obs = list(graph.observed)
    d = len(obs)
    max_cond = d - 2 if max_cond is None else max_cond
    queries, owners = [], []
    for a, b in combinations(range(d), 2):
        rest = [obs[k] for k in range(d) if k not in (a, b)]
        for size in range(max_cond + 1):
            for s in combinations(rest, size):
                queries.append(({obs[a]}, {obs[b]}, set(s) | set(graph.selection)))
                owners.append((a, b))
    sep = d_separated_sets(graph.adj, queries)
    skel = np.ones((d, d), bool)
    np.fill_diagonal(skel, False)
    for (a, b), s in zip(owners, sep, strict=True):
        if s:
            skel[a, b] = skel[b, a] = False
    return skel


# ---------------------------------------------------------------------------------------------
# PAG helpers
# ---------------------------------------------------------------------------------------------

EDGE_KINDS = ("->", "<->", "--", "o--", "o->", "o-o")
_END = {TAIL: "-", ARROW: ">", CIRCLE: "o"}
_START = {TAIL: "-", ARROW: "<", CIRCLE: "o"}


def edge_string(marks: np.ndarray, i: int, j: int) -> str:
    """``"i o-> j"`` style string of the edge between i and j."""
    return f"{i} {_START[int(marks[j, i])]}-{_END[int(marks[i, j])]} {j}"


def pag_edges(marks: np.ndarray) -> dict[str, set[tuple[int, int]]]:
    """Group a PAG's edges by kind, in the original CDIS code's format: ``->``, ``o->``, ``o--``
    hold ordered pairs ``(i, j)``; symmetric kinds (``<->``, ``--``, ``o-o``) hold both orders."""
    out: dict[str, set[tuple[int, int]]] = {k: set() for k in EDGE_KINDS}
    m = np.asarray(marks)
    for i, j in zip(*np.nonzero(m), strict=True):
        i, j = int(i), int(j)
        a, b = int(m[j, i]), int(m[i, j])  # mark at i, mark at j
        key = {
            (TAIL, ARROW): "->",
            (ARROW, ARROW): "<->",
            (TAIL, TAIL): "--",
            (CIRCLE, TAIL): "o--",
            (CIRCLE, ARROW): "o->",
            (CIRCLE, CIRCLE): "o-o",
        }.get((a, b))
        if key is not None:
            out[key].add((i, j))
    return out


def edge_meaning(mark_i: int, mark_j: int, i: str = "i", j: str = "j") -> str:
    """What an edge ``i ?-? j`` says under CDIS's semantics (Sec. 5 of the paper)."""
    if (mark_i, mark_j) == (TAIL, ARROW):
        return f"cause: {i} is a direct cause of {j}, and {j} is not involved in selection"
    if (mark_i, mark_j) == (ARROW, TAIL):
        return f"cause: {j} is a direct cause of {i}, and {i} is not involved in selection"
    if (mark_i, mark_j) == (TAIL, TAIL):
        return f"selection: {i} and {j} are jointly involved in a selection mechanism"
    if (mark_i, mark_j) == (ARROW, ARROW):
        return "confounded: a latent common cause (not expected under causal sufficiency)"
    return "unknown: a circle mark could be either a tail or an arrowhead"


def dag_to_marks(adj: np.ndarray) -> np.ndarray:
    """The DAG as a marks matrix (every edge ``i -> j``)."""
    adj = np.asarray(adj, bool)
    m = np.zeros(adj.shape, np.int8)
    m[adj] = ARROW
    m[adj.T] = TAIL
    return m


# ---------------------------------------------------------------------------------------------
# Random DAGs
# ---------------------------------------------------------------------------------------------


@partial(jax.jit, static_argnames=("d",))
def random_dag_er(key: PRNGKeyArray, d: int, expected_degree: float | Array) -> Bool[Array, "d d"]:
    """Erdős–Rényi DAG: each pair is an edge with probability ``expected_degree / (d - 1)``,
    oriented along a uniformly random node order."""
    k1, k2 = jax.random.split(key)
    p = jnp.clip(expected_degree / max(d - 1, 1), 0.0, 1.0)
    upper = jnp.triu(jax.random.bernoulli(k1, p, (d, d)), k=1)
    perm = jax.random.permutation(k2, d)
    return upper[perm][:, perm]


@partial(jax.jit, static_argnames=("d", "m"))
def random_dag_scale_free(key: PRNGKeyArray, d: int, m: int) -> Bool[Array, "d d"]:
    """Scale-free DAG by preferential attachment (Barabási–Albert): node ``t`` picks
    ``min(m, t)`` distinct parents among the earlier nodes with probability proportional to
    their degree + 1 (Gumbel top-k), then the node order is shuffled."""
    kp, kperm = jax.random.split(key)
    ar = jnp.arange(d)

    def add(carry, t):
        adj, deg = carry
        g = jax.random.gumbel(jax.random.fold_in(kp, t), (d,))
        score = jnp.where(ar < t, jnp.log(deg + 1.0) + g, -jnp.inf)
        rank = jnp.argsort(jnp.argsort(-score))
        pick = (rank < jnp.minimum(m, t)) & (ar < t)
        adj = adj.at[:, t].set(pick)
        deg = deg + pick + (ar == t) * pick.sum()
        return (adj, deg), None

    (adj, _), _ = jax.lax.scan(add, (jnp.zeros((d, d), bool), jnp.zeros(d)), ar)
    perm = jax.random.permutation(kperm, d)
    return adj[perm][:, perm]
