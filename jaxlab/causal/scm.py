"""Structural causal models for the selection-then-intervention setting of Dai et al. (ICLR 2025):
linear-Gaussian and nonlinear additive-noise SCMs on a DAG, soft interventions with unknown
targets, and selection mechanisms applied *before* the intervention.

Generative story of one dataset (paper Sec. 2-3): draw exogenous noise ``E``; the unit's
pre-treatment values are ``X* = F(X*, E)``; the unit is enrolled iff every selection mechanism
``S_i = 1[g_i(X*_{pa(S_i)}) > 0]`` holds; the enrolled unit is then treated, so its observed
values are ``X = F_k(X, E)`` with the *same* noise and the targets' mechanisms changed (soft
intervention: ``X_j = f(pa_j) + E_j + delta_j`` with a random per-unit shift ``delta_j``). The
observational dataset is ``X = X*`` of enrolled units.

Mechanism (eq. of an additive-noise model): ``X_j = sum_i W_ij h(X_i) + E_j`` with ``h`` the
identity (linear) or a fixed nonlinearity; solved for a DAG by ``d`` fixed-point sweeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

NONLINEARITIES = ("linear", "tanh", "sin")


@dataclass(frozen=True)
class SCM:
    """An additive-noise SCM on a DAG.

    Attributes:
        weights: (d, d) edge weights, ``weights[i, j] != 0`` iff ``i -> j``.
        nonlinearity: ``h`` applied to the parents ("linear", "tanh", "sin").
        noise: "gaussian" (N(0, 1)) or "uniform" (U(-1, 1)).
    """

    weights: np.ndarray
    nonlinearity: str = "linear"
    noise: str = "gaussian"

    def __post_init__(self):
        if self.nonlinearity not in NONLINEARITIES:
            raise ValueError(
                f"nonlinearity={self.nonlinearity!r}: expected one of {NONLINEARITIES}"
            )
        if self.noise not in ("gaussian", "uniform"):
            raise ValueError(f"noise={self.noise!r}: expected 'gaussian' or 'uniform'")

    @property
    def d(self) -> int:
        return int(self.weights.shape[0])


def random_scm(
    key: PRNGKeyArray,
    adj: np.ndarray,
    *,
    low: float = 0.5,
    high: float = 1.5,
    nonlinearity: str = "linear",
    noise: str = "gaussian",
) -> SCM:
    """Weights ``+-U(low, high)`` on the edges of ``adj`` (random signs)."""
    k1, k2 = jax.random.split(key)
    d = np.asarray(adj).shape[0]
    mag = jax.random.uniform(k1, (d, d), minval=low, maxval=high)
    sign = jnp.where(jax.random.bernoulli(k2, 0.5, (d, d)), 1.0, -1.0)
    w = np.asarray(mag * sign) * np.asarray(adj, bool)
    return SCM(w.astype(np.float32), nonlinearity, noise)


def _h(x, nonlinearity: str):
    if nonlinearity == "tanh":
        return jnp.tanh(x)
    if nonlinearity == "sin":
        return jnp.sin(x)
    return x


@partial(jax.jit, static_argnames=("nonlinearity",))
def solve_mechanisms(
    noise: Float[Array, "n d"],
    weights: Float[Array, "d d"],
    shift: Float[Array, "n d"],
    *,
    nonlinearity: str,
) -> Float[Array, "n d"]:
    """Values of ``X_j = sum_i W_ij h(X_i) + E_j + shift_j`` on a DAG, by ``d`` sweeps of the
    fixed-point map (exact after ``d`` sweeps since the longest path has < d edges)."""
    d = weights.shape[0]

    def sweep(_, x):
        return _h(x, nonlinearity) @ weights + noise + shift

    return jax.lax.fori_loop(0, d, sweep, noise + shift)


@dataclass(frozen=True)
class Selection:
    """Selection mechanisms: unit enrolled iff ``sum_j a_ij X*_j > c_i`` for every mechanism i.

    Attributes:
        parents: one tuple of variable indices per mechanism.
        coefficients: per mechanism, one coefficient per parent.
        thresholds: per mechanism.
    """

    parents: tuple[tuple[int, ...], ...] = ()
    coefficients: tuple[tuple[float, ...], ...] = ()
    thresholds: tuple[float, ...] = ()

    def accept(self, x_star: np.ndarray) -> np.ndarray:
        keep = np.ones(x_star.shape[0], bool)
        for par, coef, c in zip(self.parents, self.coefficients, self.thresholds, strict=True):
            keep &= x_star[:, list(par)] @ np.asarray(coef) > c
        return keep


def random_selection(key: PRNGKeyArray, d: int, num: int, *, parents_per: int = 2) -> Selection:
    """``num`` mechanisms, each on ``parents_per`` distinct random variables with coefficients
    ``+-U(0.5, 1.5)`` and threshold 0 (about half the units pass each mechanism)."""
    pars, coefs = [], []
    for i in range(num):
        k = jax.random.fold_in(key, i)
        k1, k2, k3 = jax.random.split(k, 3)
        p = np.sort(np.asarray(jax.random.choice(k1, d, (parents_per,), replace=False)))
        mag = np.asarray(jax.random.uniform(k2, (parents_per,), minval=0.5, maxval=1.5))
        sign = np.where(np.asarray(jax.random.bernoulli(k3, 0.5, (parents_per,))), 1.0, -1.0)
        pars.append(tuple(int(v) for v in p))
        coefs.append(tuple(float(v) for v in mag * sign))
    return Selection(tuple(pars), tuple(coefs), tuple(0.0 for _ in range(num)))


def standardize_selection(
    key: PRNGKeyArray, selection: Selection, scm: SCM, n: int = 20000
) -> Selection:
    """The same mechanisms with each coefficient divided by its parent's standard deviation
    (from an unselected pilot sample), so every parent weighs in on a comparable scale instead of
    the highest-variance one deciding alone (downstream variables of a random linear SCM can have
    variances tens of times larger than roots')."""
    e = _noise(key, n, scm.d, scm.noise)
    x = np.asarray(
        solve_mechanisms(
            e, jnp.asarray(scm.weights), jnp.zeros_like(e), nonlinearity=scm.nonlinearity
        )
    )
    sd = x.std(0)
    coefs = tuple(
        tuple(float(c / sd[p]) for c, p in zip(co, par, strict=True))
        for co, par in zip(selection.coefficients, selection.parents, strict=True)
    )
    return Selection(selection.parents, coefs, selection.thresholds)


@dataclass(frozen=True)
class SoftIntervention:
    """A soft intervention on ``targets``: each treated unit's target mechanism gets an extra
    independent shift ``delta ~ U(shift_low, shift_high)`` (the original code's choice), keeping
    its dependence on the parents."""

    targets: tuple[int, ...]
    shift_low: float = 0.5
    shift_high: float = 1.0


def _noise(key, n, d, kind):
    if kind == "uniform":
        return jax.random.uniform(key, (n, d), minval=-1.0, maxval=1.0)
    return jax.random.normal(key, (n, d))


def sample_dataset(
    key: PRNGKeyArray,
    scm: SCM,
    n: int,
    *,
    selection: Selection = Selection(),
    intervention: SoftIntervention | None = None,
    max_rounds: int = 200,
) -> np.ndarray:
    """``n`` enrolled units, (n, d): selected on their pre-treatment values, then treated.

    Rejection sampling in chunks on the host (selection rates are data dependent); each chunk's
    mechanisms are one jitted call.
    """
    d = scm.d
    w = jnp.asarray(scm.weights, jnp.float32)
    out, have = [], 0
    chunk = 1 << max(10, (2 * n - 1).bit_length())  # powers of two: few compiled shapes
    for r in range(max_rounds):
        kr = jax.random.fold_in(key, r)
        ke, ks = jax.random.split(kr)
        e = _noise(ke, chunk, d, scm.noise)
        x_star = np.asarray(
            solve_mechanisms(e, w, jnp.zeros_like(e), nonlinearity=scm.nonlinearity)
        )
        keep = selection.accept(x_star)
        if intervention is None:
            x = x_star
        else:
            mask = np.zeros(d, np.float32)
            mask[list(intervention.targets)] = 1.0
            delta = jax.random.uniform(
                ks, (chunk, d), minval=intervention.shift_low, maxval=intervention.shift_high
            )
            x = np.asarray(
                solve_mechanisms(e, w, delta * mask[None, :], nonlinearity=scm.nonlinearity)
            )
        out.append(x[keep])
        have += int(keep.sum())
        if have >= n:
            return np.concatenate(out)[:n].astype(np.float64)
    raise RuntimeError(f"selection accepted {have} of the {n} units wanted in {max_rounds} rounds")


def sample_datasets(
    key: PRNGKeyArray,
    scm: SCM,
    n: int,
    *,
    selection: Selection = Selection(),
    interventions: tuple[SoftIntervention, ...] = (),
) -> list[np.ndarray]:
    """The observational dataset followed by one dataset per intervention (fresh units each)."""
    keys = jax.random.split(key, 1 + len(interventions))
    data = [sample_dataset(keys[0], scm, n, selection=selection)]
    for k, iv in zip(keys[1:], interventions, strict=True):
        data.append(sample_dataset(k, scm, n, selection=selection, intervention=iv))
    return data


def pool_with_indicator(
    observational: np.ndarray, interventional: np.ndarray
) -> Float[Array, "n d1"] | np.ndarray:
    """Stack observational and interventional rows and append the indicator ``zeta`` (0 / 1) as
    the last column: the pooled data of CDIS's per-dataset CI tests."""
    z0 = np.zeros((observational.shape[0], 1))
    z1 = np.ones((interventional.shape[0], 1))
    return np.vstack([np.hstack([observational, z0]), np.hstack([interventional, z1])])
