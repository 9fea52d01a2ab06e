"""Conditional-independence tests batched in JAX: many ``(x, y, S)`` triples in one jitted call.

Every test here answers a batch of queries ``x _||_ y | S`` over the columns of one dataset
(pooled data with a domain indicator column ``zeta`` for CDIS). Conditioning sets are padded to a
fixed width ``m`` with a boolean mask, and the batch is padded to a power of two, so one compiled
program serves a whole depth of a skeleton search.

* :class:`FisherZ` - Fisher's z on the partial correlation (Fisher 1924; the test of the paper):
  ``r = -P_01 / sqrt(P_00 P_11)`` with ``P`` the inverse of the correlation sub-matrix over
  ``(x, y, S)``, ``z = sqrt(n - |S| - 3) atanh(r)``, ``p = 2 (1 - Phi(|z|))``. Padded members of
  ``S`` are replaced by identity rows and columns of the sub-matrix, which leaves ``P_{01}``,
  ``P_00`` and ``P_11`` unchanged.
* :class:`RandomFeatureCI` (``"rcit"``) - RCIT, the random-feature approximation of KCI
  (Strobl et al. 2019), and :class:`KernelCI` (``"kci"``) - exact KCI (Zhang et al. 2011) for
  small n; both in float64, see :mod:`jaxlab.causal.kernel_ci`.
* :class:`ChiSquare` (``"chisq"``) and :class:`GSquare` (``"gsq"``) - discrete tests on integer
  codes, see :mod:`jaxlab.causal.discrete_ci`.
* :class:`OracleCI` - d-separation in a known graph (p = 1 if separated, else 0), the oracle mode.

All return p-values through the same host API, ``pvalues(x, y, conds)``; a result cache makes
repeated queries free (CDIS asks the same questions across rounds). A non-finite p-value raises
:class:`NonFiniteTestError` naming the variables (a NaN is never read as dependence).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from jaxlab.causal import discrete_ci, kernel_ci
from jaxlab.causal.graphs import AugmentedGraph, d_separated


def _bucket(n: int, minimum: int, factor: int = 2) -> int:
    b = minimum
    while b < n:
        b *= factor
    return b


class NonFiniteTestError(ValueError):
    """A CI test returned a NaN or infinite p-value (never read as "dependent")."""


class CITest:
    """Host API shared by the tests: padding, caching, capacity checks, non-finite p-values.

    Subclasses set ``num_vars``, ``max_cond`` (the largest conditioning set the test supports)
    and implement ``_batch(x, y, cond, mask) -> p`` on padded arrays. ``names`` (variable names)
    and ``label`` (which dataset) only serve error messages.
    """

    num_vars: int
    max_cond: int
    name: str = "ci"
    names: Sequence[str] | None = None
    label: str = ""

    def __init__(self):
        self._cache: dict[tuple[int, int, frozenset], float] = {}
        self.calls = 0  # number of batched kernel calls
        self.tests = 0  # number of distinct triples evaluated

    def pvalues(self, x: Sequence[int], y: Sequence[int], conds: Sequence[Collection[int]]):
        """p-values of ``x[i] _||_ y[i] | conds[i]`` for every i, as a (q,) numpy array."""
        keys = [
            (min(a, b), max(a, b), frozenset(int(s) for s in c))
            for a, b, c in zip(x, y, conds, strict=True)
        ]
        todo = [k for k in dict.fromkeys(keys) if k not in self._cache]
        if todo:
            m_needed = max(len(k[2]) for k in todo)
            if m_needed > self.max_cond:
                raise ValueError(
                    f"conditioning set of size {m_needed} exceeds the {self.name} test's capacity "
                    f"({self.max_cond})"
                )
            for k in todo:
                for v in (k[0], k[1], *k[2]):
                    if not 0 <= v < self.num_vars:
                        raise ValueError(f"variable index {v} out of range [0, {self.num_vars})")
            q = _bucket(len(todo), self.min_batch, 4)  # few distinct shapes: few compiles
            m = self._width(m_needed)
            xa = np.zeros(q, np.int32)
            ya = np.zeros(q, np.int32)
            ya[:] = 1 if self.num_vars > 1 else 0
            ca = np.zeros((q, max(m, 1)), np.int32)
            ma = np.zeros((q, max(m, 1)), bool)
            for i, (a, b, s) in enumerate(todo):
                xa[i], ya[i] = a, b
                s = sorted(s)
                ca[i, : len(s)] = s
                ma[i, : len(s)] = True
            p = np.asarray(
                self._batch(jnp.asarray(xa), jnp.asarray(ya), jnp.asarray(ca), jnp.asarray(ma))
            )
            self.calls += 1
            self.tests += len(todo)
            bad = [k for k, v in zip(todo, p[: len(todo)], strict=True) if not np.isfinite(v)]
            if bad:
                raise NonFiniteTestError(self._describe_nonfinite(bad))
            for k, v in zip(todo, p[: len(todo)], strict=True):
                self._cache[k] = float(v)
        return np.array([self._cache[k] for k in keys], np.float64)

    min_batch = 64

    def _var(self, i: int) -> str:
        return f"'{self.names[i]}'" if self.names is not None else f"variable {i}"

    def _describe_nonfinite(self, bad: list) -> str:
        a, b, s = bad[0]
        given = f" given {{{', '.join(self._var(v) for v in sorted(s))}}}" if s else ""
        where = f" in {self.label}" if self.label else ""
        return (
            f"the {self.name} test of {self._var(a)} and {self._var(b)}{given}{where} gave a "
            f"non-finite p-value ({len(bad)} such test(s)); a column may be (near-)constant or "
            "collinear there"
        )

    def _width(self, m_needed: int) -> int:
        """Padded conditioning width (powers of 4: one compiled program per bucket)."""
        return 0 if m_needed == 0 else _bucket(m_needed, 1, 4)

    def pvalue(self, x: int, y: int, cond: Sequence[int] = ()) -> float:
        return float(self.pvalues([x], [y], [tuple(cond)])[0])

    def _batch(self, x, y, cond, mask):  # pragma: no cover
        raise NotImplementedError  # abstract: each test class defines its batched p-values


# ---------------------------------------------------------------------------------------------
# Fisher-z
# ---------------------------------------------------------------------------------------------


@jax.jit
def fisher_z_pvalues(
    corr: Float[Array, "d d"],
    n: Float[Array, ""] | float,
    x: Int[Array, " q"],
    y: Int[Array, " q"],
    cond: Int[Array, "q m"],
    mask: Bool[Array, "q m"],
) -> Float[Array, " q"]:
    """Fisher-z p-values for a batch of ``q`` triples, conditioning sets padded to width ``m``.

    ``corr`` is the (d, d) correlation matrix of data with ``n`` rows. Padded entries of the
    (m + 2)-square sub-matrix are replaced by the identity, so they are independent unit-variance
    dummies that leave the partial correlation of x and y given the real members unchanged.
    """
    q = x.shape[0]
    idx = jnp.concatenate([x[:, None], y[:, None], cond], axis=1)
    valid = jnp.concatenate([jnp.ones((q, 2), bool), mask], axis=1)
    sub = corr[idx[:, :, None], idx[:, None, :]]
    both = valid[:, :, None] & valid[:, None, :]
    eye = jnp.eye(idx.shape[1], dtype=corr.dtype)
    sub = jnp.where(both, sub, eye[None])
    prec = jnp.linalg.inv(sub)
    r = -prec[:, 0, 1] / jnp.sqrt(jnp.abs(prec[:, 0, 0] * prec[:, 1, 1]))
    eps = jnp.finfo(corr.dtype).eps
    r = jnp.clip(r, -1.0 + eps, 1.0 - eps)
    k = mask.sum(axis=1).astype(corr.dtype)
    z = jnp.sqrt(jnp.maximum(n - k - 3.0, 0.0)) * jnp.abs(jnp.arctanh(r))
    return jax.scipy.special.erfc(z / jnp.sqrt(2.0).astype(corr.dtype))


class FisherZ(CITest):
    """Fisher-z test on the columns of ``data`` (n, d); ``corr`` computed once."""

    name = "fisherz"

    def __init__(self, data: np.ndarray):
        super().__init__()
        data = np.asarray(data, np.float64)
        n, d = data.shape
        self.num_vars = d
        self.n = n
        # |S| <= n - 4 keeps sqrt(n - |S| - 3) positive; a CI test needs at least one dof.
        self.max_cond = max(0, min(d - 2, n - 4))
        dtype = jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32
        # padded to a multiple of 16 with identity rows (never indexed): datasets with d and
        # d + 1 (pooled, with zeta) columns share compiled programs
        v = -(-d // 16) * 16
        corr = np.eye(v)
        # a constant column gives NaN correlations: every test on it is then refused by name
        # (NonFiniteTestError), not warned about here
        with np.errstate(invalid="ignore", divide="ignore"):
            corr[:d, :d] = np.corrcoef(data.T)
        self.corr = jnp.asarray(corr, dtype)

    def _batch(self, x, y, cond, mask):
        return fisher_z_pvalues(self.corr, float(self.n), x, y, cond, mask)


# ---------------------------------------------------------------------------------------------
# Kernel tests (RCIT, exact KCI) and discrete tests (chi-square, G^2)
# ---------------------------------------------------------------------------------------------


@partial(jax.jit, static_argnames=("kind", "chunk", "kw"))
def _gather_map(kind: str, chunk: int, kw: tuple, args: tuple, data, x, y, cond, mask):
    """p-values of a padded batch of triples on the columns of ``data``: one kernel/discrete
    query function (``kind``) mapped over the batch, ``chunk`` queries at a time."""

    def one(q):
        xi, yi, ci, mi = q
        xv, yv, zv = data[:, xi], data[:, yi], data[:, ci]
        if kind == "kci":
            return kernel_ci.kci_pvalue(xv, yv, zv, mi, **dict(kw))
        zv = jnp.where(mi[None, :], zv, 0)
        return discrete_ci.discrete_pvalue(xv, yv, zv, mi, args[0][ci], **dict(kw))

    return jax.lax.map(one, (x, y, cond, mask), batch_size=chunk)


def _standardised(data: np.ndarray) -> np.ndarray:
    data = np.asarray(data, np.float64)
    std = data.std(0)
    std[std == 0] = 1.0
    return (data - data.mean(0)) / std


class RandomFeatureCI(CITest):
    """RCIT (:func:`jaxlab.causal.kernel_ci.rcit_pvalue`) on the columns of ``data`` (n, d), in
    float64; ``num_xy`` / ``num_z`` random features of x, y / of the conditioning set, bandwidths
    from the first ``rows`` rows.

    A batch is grouped by conditioning set (:func:`jaxlab.causal.kernel_ci.rcit_pvalues_by_set`):
    each distinct set's part is computed once for up to ``SLOTS`` of its queries, and the x/y
    features once per column, so a depth of a skeleton search, where many pairs share a set,
    costs about one set part per set instead of one per query.
    """

    name = "rcit"
    SLOTS = 8  # queries per row of a grouped batch

    def __init__(
        self,
        key: PRNGKeyArray,
        data: np.ndarray,
        *,
        num_xy: int = 5,
        num_z: int = 100,
        rows: int = 500,
    ):
        super().__init__()
        n, d = np.shape(data)
        self.num_vars, self.n = d, n
        self.max_cond = max(0, min(d - 2, 16))
        self.data = _standardised(data)
        self.key = key
        self.num_xy, self.num_z, self.rows = num_xy, num_z, rows
        self._features = None  # (data, fx, fy) on the device, made by the first batch

    def _batch(self, x, y, cond, mask):
        queries = np.column_stack(
            [np.asarray(x), np.asarray(y), np.asarray(cond), np.asarray(mask)]
        )
        uniq, inverse = np.unique(queries, axis=0, return_inverse=True)
        m = (uniq.shape[1] - 2) // 2
        layout = _rows_by_set(uniq, m, self.SLOTS)
        with jax.enable_x64(True):
            if self._features is None:
                data = jnp.asarray(self.data)
                fx, fy = kernel_ci.rcit_column_features(
                    self.key, data, num_xy=self.num_xy, rows=self.rows
                )
                self._features = (data, fx, fy)
            p = kernel_ci.rcit_pvalues_by_set(
                self.key,
                *self._features,
                *(jnp.asarray(a) for a in layout[:-1]),
                num_z=self.num_z,
                rows=self.rows,
            )
            p = np.asarray(p).reshape(-1)
        slot = layout[-1]
        return p[slot][inverse.reshape(-1)]


def _rows_by_set(uniq: np.ndarray, m: int, slots: int):
    """Distinct queries (rows ``[x, y, cond (m), mask (m)]``) laid out by conditioning set:
    ``(sets, smask, valid, qx, qy)`` with up to ``slots`` queries of one set per row (rows padded
    to a power of 4, slots with the pair (0, 1)), and each query's flat slot index."""
    key = uniq[:, 2:]
    sets_u, set_of = np.unique(key, axis=0, return_inverse=True)
    set_of = set_of.reshape(-1)
    chunks = []  # (set index, query indices)
    for s in range(sets_u.shape[0]):
        members = np.flatnonzero(set_of == s)
        chunks += [(s, members[i : i + slots]) for i in range(0, members.size, slots)]
    r = _bucket(len(chunks), 4, 4)
    sets = np.zeros((r, m), np.int32)
    smask = np.zeros((r, m), bool)
    valid = np.zeros(r, bool)
    qx = np.zeros((r, slots), np.int32)
    qy = np.ones((r, slots), np.int32)
    slot = np.empty(uniq.shape[0], np.int64)
    for i, (s, members) in enumerate(chunks):
        sets[i], smask[i], valid[i] = sets_u[s, :m], sets_u[s, m:].astype(bool), True
        qx[i, : members.size] = uniq[members, 0]
        qy[i, : members.size] = uniq[members, 1]
        slot[members] = i * slots + np.arange(members.size)
    return sets, smask, valid, qx, qy, slot


class KernelCI(CITest):
    """Exact KCI (:func:`jaxlab.causal.kernel_ci.kci_pvalue`) on the columns of ``data`` (n, d),
    in float64; O(n^3) per query, so at most ``MAX_ROWS`` rows (use :class:`RandomFeatureCI`
    beyond)."""

    name = "kci"
    MAX_ROWS = 2000

    def __init__(self, data: np.ndarray):
        super().__init__()
        n, d = np.shape(data)
        if n > self.MAX_ROWS:
            raise ValueError(
                f"the exact KCI test takes at most {self.MAX_ROWS} rows ({n} given): O(n^3) per "
                "test; use the random-feature test (rcit) for larger data"
            )
        self.num_vars, self.n = d, n
        self.max_cond = max(0, min(d - 2, 16))
        self.data = _standardised(data)

    def _batch(self, x, y, cond, mask):
        with jax.enable_x64(True):
            p = _gather_map("kci", 1, (), (), jnp.asarray(self.data), x, y, cond, mask)
            return np.asarray(p)


def discrete_codes(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-column codes ``0..card-1`` (sorted distinct values) and cardinalities of ``data``."""
    data = np.asarray(data)
    codes = np.empty(data.shape, np.int32)
    card = np.empty(data.shape[1], np.int32)
    for j in range(data.shape[1]):
        values, codes[:, j] = np.unique(data[:, j], return_inverse=True)
        card[j] = values.size
    return codes, card


class ChiSquare(CITest):
    """Pearson's chi-square test (:func:`jaxlab.causal.discrete_ci.discrete_pvalue`) on the
    discrete columns of ``data`` (n, d), each coded by its sorted distinct values."""

    name = "chisq"
    g_squared = False

    def __init__(self, data: np.ndarray):
        super().__init__()
        codes, card = discrete_codes(data)
        self.n, self.num_vars = codes.shape
        self.max_cond = max(0, min(self.num_vars - 2, 16))
        self.codes, self.card = jnp.asarray(codes), jnp.asarray(card)
        self.kw = (("kmax", int(card.max())), ("g_squared", self.g_squared))

    def _batch(self, x, y, cond, mask):
        return _gather_map("discrete", 16, self.kw, (self.card,), self.codes, x, y, cond, mask)


class GSquare(ChiSquare):
    """The likelihood-ratio G^2 test; otherwise :class:`ChiSquare`."""

    name = "gsq"
    g_squared = True


# ---------------------------------------------------------------------------------------------
# Oracle
# ---------------------------------------------------------------------------------------------


class OracleCI(CITest):
    """d-separation in ``graph`` given its selection nodes: p = 1 if separated, else 0.

    Variable ``i`` of the tests is node ``graph.observed[i]``.
    """

    name = "oracle"

    def __init__(self, graph: AugmentedGraph):
        super().__init__()
        self.graph = graph
        self.num_vars = len(graph.observed)
        self.max_cond = max(0, self.num_vars - 2)
        v = -(-graph.adj.shape[0] // 32) * 32  # isolated padding nodes change no d-separation
        adj = np.zeros((v, v), bool)
        adj[: graph.adj.shape[0], : graph.adj.shape[0]] = graph.adj
        self._adj = jnp.asarray(adj)
        self._obs = jnp.asarray(np.asarray(graph.observed, np.int32))
        sel = np.zeros(v, bool)
        sel[list(graph.selection)] = True
        self._sel = jnp.asarray(sel)

    min_batch = 256

    def _width(self, m_needed: int) -> int:
        # one width per graph size: the width costs only a one-hot, compiles cost seconds
        return _bucket(max(self.max_cond, 1), 4, 4)

    def _batch(self, x, y, cond, mask):
        v = self._adj.shape[0]
        xo, yo = self._obs[x], self._obs[y]
        co = self._obs[cond]
        xm = jax.nn.one_hot(xo, v, dtype=bool)
        ym = jax.nn.one_hot(yo, v, dtype=bool)
        zm = (
            jnp.any(jax.nn.one_hot(co, v, dtype=bool) & mask[:, :, None], axis=1)
            | self._sel[None, :]
        )
        return d_separated(self._adj, xm, ym, zm).astype(jnp.float32)


TESTS = ("fisherz", "rcit", "kci", "chisq", "gsq")
DISCRETE_TESTS = ("chisq", "gsq")


def make_test(kind: str, data: np.ndarray, *, key: PRNGKeyArray | None = None) -> CITest:
    """The ``kind`` test (one of :data:`TESTS`) on ``data``."""
    if kind == "fisherz":
        return FisherZ(data)
    if kind == "rcit":
        return RandomFeatureCI(jax.random.PRNGKey(0) if key is None else key, data)
    if kind == "kci":
        return KernelCI(data)
    if kind == "chisq":
        return ChiSquare(data)
    if kind == "gsq":
        return GSquare(data)
    raise ValueError(f"test={kind!r}: expected one of {', '.join(TESTS)}")
