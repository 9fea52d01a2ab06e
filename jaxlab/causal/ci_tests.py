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
* :class:`RandomFeatureCI` - a kernel CI test with random Fourier features (RCIT, Strobl et al.
  2019, the random-feature approximation of KCI, Zhang et al. 2011): features of x, y and S,
  x- and y-features residualized on S-features by ridge regression, statistic
  ``n ||C_{xy|S}||_F^2`` with a gamma approximation (matched mean ``tr Sigma`` and variance
  ``2 ||Sigma||_F^2``) of its weighted chi-square null.
* :class:`OracleCI` - d-separation in a known graph (p = 1 if separated, else 0), the oracle mode.

All return p-values through the same host API, ``pvalues(x, y, conds)``; a result cache makes
repeated queries free (CDIS asks the same questions across rounds).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from jaxlab.causal.graphs import AugmentedGraph, d_separated


def _bucket(n: int, minimum: int, factor: int = 2) -> int:
    b = minimum
    while b < n:
        b *= factor
    return b


class CITest:
    """Host API shared by the tests: padding, caching, capacity checks.

    Subclasses set ``num_vars``, ``max_cond`` (the largest conditioning set the test supports)
    and implement ``_batch(x, y, cond, mask) -> p`` on padded arrays.
    """

    num_vars: int
    max_cond: int
    name: str = "ci"

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
            for k, v in zip(todo, p[: len(todo)], strict=True):
                self._cache[k] = float(v)
        return np.array([self._cache[k] for k in keys], np.float64)

    min_batch = 64

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
        corr[:d, :d] = np.corrcoef(data.T)
        self.corr = jnp.asarray(corr, dtype)

    def _batch(self, x, y, cond, mask):
        return fisher_z_pvalues(self.corr, float(self.n), x, y, cond, mask)


# ---------------------------------------------------------------------------------------------
# Random-feature kernel CI test (RCIT)
# ---------------------------------------------------------------------------------------------


def median_distances(data: np.ndarray, rows: int = 200) -> np.ndarray:
    """Per-column median pairwise distance over the first ``rows`` rows (the RCIT bandwidth)."""
    v = np.asarray(data[:rows], np.float64)
    diff = np.abs(v[:, None, :] - v[None, :, :])
    iu = np.triu_indices(v.shape[0], k=1)
    med = np.median(diff[iu], axis=0)
    return np.where(med > 1e-6, med, 1.0)


def _rff(key, v, num, sigma):
    kw, kb = jax.random.split(key)
    w = jax.random.normal(kw, (v.shape[1], num))
    b = jax.random.uniform(kb, (num,), maxval=2 * jnp.pi)
    f = jnp.sqrt(2.0 / num) * jnp.cos(v @ w / sigma + b[None, :])
    return f - f.mean(0)[None, :]


@partial(jax.jit, static_argnames=("num_xy", "num_z", "chunk"))
def rcit_pvalues(
    key: PRNGKeyArray,
    data: Float[Array, "n d"],
    bandwidth: Float[Array, " d"],
    x: Int[Array, " q"],
    y: Int[Array, " q"],
    cond: Int[Array, "q m"],
    mask: Bool[Array, "q m"],
    *,
    num_xy: int = 5,
    num_z: int = 50,
    ridge: float = 1e-3,
    chunk: int = 16,
) -> Float[Array, " q"]:
    """RCIT p-values for a batch of triples on standardized ``data``.

    For one triple: ``f_x``, ``f_y`` (``num_xy`` random Fourier features each, bandwidth the
    per-column median distance ``bandwidth``) and ``f_S`` (``num_z`` features of the masked
    conditioning vector, bandwidth ``sqrt(sum_{s in S} bandwidth_s^2)``); ``r_x = f_x - f_S beta_x`` with ridge ``beta``; ``C = r_x^T r_y
    / n``; statistic ``n ||C||_F^2``; null ``Gamma(k, theta)`` with ``k theta = tr Sigma``,
    ``k theta^2 = 2 ||Sigma||_F^2`` where ``Sigma`` is the covariance of ``vec(r_x,i r_y,i^T)``.
    Processed ``chunk`` triples at a time (``lax.map``) to bound memory at large n.
    """
    n = data.shape[0]
    kx, ky, kz = jax.random.split(key, 3)

    def one(args):
        xi, yi, ci, mi = args
        xv = data[:, xi][:, None]
        yv = data[:, yi][:, None]
        zv = data[:, ci] * mi[None, :]
        sz = jnp.sqrt(jnp.maximum(jnp.sum(jnp.where(mi, bandwidth[ci] ** 2, 0.0)), 1e-12))
        fx = _rff(kx, xv, num_xy, bandwidth[xi])
        fy = _rff(ky, yv, num_xy, bandwidth[yi])
        fz = _rff(kz, zv, num_z, sz) * jnp.any(mi)
        gram = fz.T @ fz / n + ridge * jnp.eye(num_z)
        fxy = jnp.concatenate([fx, fy], axis=1)
        beta = jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(gram), fz.T @ fxy / n)
        rxy = fxy - fz @ beta
        rx, ry = rxy[:, :num_xy], rxy[:, num_xy:]
        c = rx.T @ ry / n
        stat = n * jnp.sum(c * c)
        prod = (rx[:, :, None] * ry[:, None, :]).reshape(n, -1)
        prod = prod - prod.mean(0)[None, :]
        sigma = prod.T @ prod / n
        mean = jnp.trace(sigma)
        var = 2.0 * jnp.sum(sigma * sigma)
        shape = mean * mean / var
        scale = var / mean
        return jax.scipy.special.gammaincc(shape, stat / scale)

    return jax.lax.map(one, (x, y, cond, mask), batch_size=chunk)


class RandomFeatureCI(CITest):
    """RCIT (random-feature KCI) on the columns of ``data`` (n, d), standardized once."""

    name = "kci"

    def __init__(self, key: PRNGKeyArray, data: np.ndarray, *, num_xy: int = 5, num_z: int = 50):
        super().__init__()
        data = np.asarray(data, np.float64)
        n, d = data.shape
        self.num_vars, self.n = d, n
        self.max_cond = max(0, min(d - 2, 16))
        std = data.std(0)
        std[std == 0] = 1.0
        z = (data - data.mean(0)) / std
        self.data = jnp.asarray(z, jnp.float32)
        self.bandwidth = jnp.asarray(median_distances(z), jnp.float32)
        self.key = key
        self.num_xy, self.num_z = num_xy, num_z

    def _batch(self, x, y, cond, mask):
        return rcit_pvalues(
            self.key,
            self.data,
            self.bandwidth,
            x,
            y,
            cond,
            mask,
            num_xy=self.num_xy,
            num_z=self.num_z,
        )


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


def make_test(kind: str, data: np.ndarray, *, key: PRNGKeyArray | None = None) -> CITest:
    """``"fisherz"`` or ``"kci"`` test on ``data``."""
    if kind == "fisherz":
        return FisherZ(data)
    if kind == "kci":
        return RandomFeatureCI(jax.random.PRNGKey(0) if key is None else key, data)
    raise ValueError(f"test={kind!r}: expected 'fisherz' or 'kci'")
