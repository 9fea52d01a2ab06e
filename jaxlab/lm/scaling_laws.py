"""Precision-aware scaling laws ("Scaling Laws for Precision", Kumar et al., ICLR 2025).

The unified law (§5, eq. 6-8 of the paper):

    L(N, D, P_w, P_a, P_kv, P_post) = A N_eff^{-α} + B D^{-β} + E + δ_PTQ
    N_eff = N · Π_{x ∈ {w, a, kv}} (1 - e^{-P_x/γ_x + n_x})                    (training precision)
    δ_PTQ = C_T e^{-P_post/γ_post + b} · D^{γ_D} / N_eff^{γ_N} · Π_x [1 - e^{-C_x (P_x - P_post)}]

``n_x`` and ``b`` are the offsets of App. K (``0`` gives the offset-free form of the main text);
for a model trained in high precision (``P_x = ∞``) the PTQ term reduces to
``C_T e^{-P_post/γ_post + b} D^{γ_D} / N^{γ_N}``, which grows with the data ``D``: more
pre-training makes a model more fragile to post-training quantisation. A precision factor
``1 - e^{-P/γ + n}`` below zero (very low ``P`` with an offset) is clipped to ``1e-9``: the law
says such a run diverges.

Derived quantities:

* compute-optimal precision: with ``C ∝ N D P`` and ``P_w = P_a = P_kv = P``, minimising ``L`` over
  ``N`` at fixed ``C`` and ``P`` leaves ``L* ∝ (P / u(P))^{αβ/(α+β)} C^{-αβ/(α+β)}`` with
  ``u(P) = N_eff/N``, so the optimal ``P*`` minimises ``P / u(P)`` — independent of ``C``, ``α``
  and ``β``; it solves ``d ln u / dP = 1/P``. Table 2 gives 7.0 bits (3.47 without offsets).
* critical data size (eq. 9): ``dL/dD = 0`` of ``B D^{-β} + δ_PTQ`` at ``P_x = ∞``:
  ``D_crit = (β B N^{γ_N} e^{P_post/γ_post - b} / (γ_D C_T))^{1/(γ_D + β)}``; beyond it more data
  makes the post-quantised model worse.

The functions are written in ``jax.numpy`` (jit- and vmap-able); :func:`fit_law` runs
``scipy.optimize.least_squares`` in float64 with the exact Jacobian from ``jax.jacfwd`` from
several starts (the given law, its offset-free form and seeded perturbations of both), keeps the
best, gives standard errors and 95% confidence intervals from ``σ² (JᵀJ)⁻¹``, and reports a fit
whose R² stays below a threshold (a warning or an error carrying the R² reached).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize
import scipy.stats
from jaxtyping import Array, ArrayLike, Float

from jaxlab import media
from jaxlab.core.config import ConfigError

_FLOOR = 1e-9

#: a constant of the law: a Python float, or a traced scalar while :func:`fit_law` differentiates
#: the model with respect to the constants it fits
Constant = float | Float[Array, ""]


@dataclasses.dataclass(frozen=True)
class PrecisionLaw:
    """Constants of the precision-aware scaling law (see the module docstring).

    ``beta = None`` ties ``β = α`` (as the paper's Table 2 fit does). ``C_w, C_a, C_kv`` are the
    PTQ training-precision sensitivities (not in Table 2; ``inf`` makes their factor 1). A
    constant is a float, or a traced scalar inside :func:`fit_law` (:data:`Constant`).
    """

    A: Constant = 4.299e3
    alpha: Constant = 0.4965
    B: Constant = 1.806e4
    beta: Constant | None = None
    E: Constant = 2.7648
    gamma_w: Constant = 2.6745
    gamma_a: Constant = 2.2102
    gamma_kv: Constant = 0.9578
    n_w: Constant = 0.3037
    n_a: Constant = 1.4072
    n_kv: Constant = 2.4185
    C_T: Constant = 0.0598
    gamma_D: Constant = 0.5068
    gamma_N: Constant = 0.3439
    gamma_post: Constant = 0.5907
    b_post: Constant = 1.1277
    C_w: Constant = math.inf
    C_a: Constant = math.inf
    C_kv: Constant = math.inf

    @property
    def beta_(self) -> Constant:
        """``β`` (``α`` when tied)."""
        return self.alpha if self.beta is None else self.beta

    def without_offsets(self) -> PrecisionLaw:
        """The same law with ``n_w = n_a = n_kv = b_post = 0`` (the main text's form)."""
        return dataclasses.replace(self, n_w=0.0, n_a=0.0, n_kv=0.0, b_post=0.0)


TABLE2 = PrecisionLaw()
"""App. K Table 2 of the paper (integer training, OLMo-style models, Dolma; ``α = β`` tied)."""

FIELDS = tuple(f.name for f in dataclasses.fields(PrecisionLaw))
POSITIVE = frozenset(FIELDS) - {"E", "n_w", "n_a", "n_kv", "b_post"}


def precision_factor(p: Any, gamma: Any, offset: Any = 0.0) -> jax.Array:
    """``1 - e^{-P/γ + n}`` clipped below at 1e-9; ``P = inf`` gives 1.

    ``P`` is capped at 1000 bits so that ``P = inf`` has finite derivatives in ``γ`` and ``n``.
    """
    p = jnp.minimum(jnp.asarray(p, dtype=jnp.result_type(float)), 1000.0)
    return jnp.maximum(1.0 - jnp.exp(-p / gamma + offset), _FLOOR)


def effective_params(
    law: PrecisionLaw, n: Any, p_w: Any = math.inf, p_a: Any = math.inf, p_kv: Any = math.inf
) -> jax.Array:
    """``N_eff = N Π_x (1 - e^{-P_x/γ_x + n_x})`` (eq. 6). Any argument may be an array."""
    u = precision_factor(p_w, law.gamma_w, law.n_w)
    u = u * precision_factor(p_a, law.gamma_a, law.n_a)
    u = u * precision_factor(p_kv, law.gamma_kv, law.n_kv)
    return jnp.asarray(n) * u


def training_loss(
    law: PrecisionLaw,
    n: Any,
    d: Any,
    p_w: Any = math.inf,
    p_a: Any = math.inf,
    p_kv: Any = math.inf,
) -> jax.Array:
    """``A N_eff^{-α} + B D^{-β} + E`` (eq. 6): loss after training at ``(P_w, P_a, P_kv)``."""
    n_eff = effective_params(law, n, p_w, p_a, p_kv)
    return law.A * n_eff ** (-law.alpha) + law.B * jnp.asarray(d) ** (-law.beta_) + law.E


def ptq_degradation(
    law: PrecisionLaw,
    n: Any,
    d: Any,
    p_post: Any,
    p_w: Any = math.inf,
    p_a: Any = math.inf,
    p_kv: Any = math.inf,
) -> jax.Array:
    """``δ_PTQ`` (eq. 7-8): loss added by quantising the trained weights to ``P_post`` bits.

    ``C_T e^{-P_post/γ_post + b} D^{γ_D} / N_eff^{γ_N} Π_x [1 - e^{-C_x (P_x - P_post)}]``, each
    bracket clipped to ``[0, 1]`` and equal to 1 where ``P_x`` or ``C_x`` is infinite.
    """
    n_eff = effective_params(law, n, p_w, p_a, p_kv)
    p_post = jnp.asarray(p_post, dtype=jnp.result_type(float))
    delta = law.C_T * jnp.exp(-p_post / law.gamma_post + law.b_post)
    delta = delta * jnp.asarray(d) ** law.gamma_D / n_eff**law.gamma_N
    for p_x, c_x in ((p_w, law.C_w), (p_a, law.C_a), (p_kv, law.C_kv)):
        if math.isinf(c_x):
            continue
        gap = jnp.asarray(p_x, dtype=jnp.result_type(float)) - p_post
        factor = jnp.where(jnp.isinf(gap), 1.0, 1.0 - jnp.exp(-c_x * jnp.maximum(gap, 0.0)))
        delta = delta * factor
    return delta


def compute_optimal_precision(law: PrecisionLaw, *, lo: float = 1.0, hi: float = 32.0) -> float:
    """``P* = argmin_P P / u(P)`` with ``P_w = P_a = P_kv = P`` (independent of compute).

    Args:
        law: the constants.
        lo: lower end of the search interval in bits.
        hi: upper end.

    Returns:
        ``P*`` in bits.
    """

    def cost(p):
        p = np.asarray(p, np.float64)
        return np.log(p) - np.log(np.asarray(effective_params(law, 1.0, p, p, p), np.float64))

    with jax.enable_x64(True):
        grid = np.linspace(lo, hi, 2000)
        start = grid[int(np.argmin(cost(grid)))]
        step = (hi - lo) / 1999
        res = scipy.optimize.minimize_scalar(
            lambda p: float(cost(p)),
            bounds=(max(lo, start - step), min(hi, start + step)),
            method="bounded",
            options={"xatol": 1e-6},
        )
    return float(res.x)


def compute_optimal_allocation(
    law: PrecisionLaw, compute: float, *, flops_per_param_token_bit: float = 6.0 / 16.0
) -> dict[str, float]:
    """Jointly loss-optimal ``(N, D, P)`` at fixed compute ``C = (6/16) N D P`` (§4.3).

    ``D = C / (6/16 · N · P)``; at each ``P`` the loss-optimal ``N`` is closed-form
    (``N* = (α A u^{-α} / (β B (kP/C)^β))^{1/(α+β)}``), and ``P`` is searched on a grid then refined.

    Args:
        law: the constants.
        compute: ``C`` (FLOP-bits).
        flops_per_param_token_bit: the cost model's constant (the paper's 6/16).

    Returns:
        ``{"N", "D", "P", "loss"}``.
    """
    alpha, beta = law.alpha, law.beta_

    def at_precision(p):
        # at fixed P: L(N) = a N^-α + b N^β, minimised at N* = (α a / (β b))^{1/(α+β)}
        p = np.asarray(p, np.float64)
        u = np.asarray(effective_params(law, 1.0, p, p, p), np.float64)
        a = law.A * u ** (-alpha)
        b = law.B * (flops_per_param_token_bit * p / compute) ** beta
        n = (alpha * a / (beta * b)) ** (1.0 / (alpha + beta))
        d = compute / (flops_per_param_token_bit * n * p)
        return np.asarray(training_loss(law, n, d, p, p, p), np.float64), n

    with jax.enable_x64(True):
        grid = np.linspace(1.5, 32.0, 2000)
        best = int(np.argmin(at_precision(grid)[0]))
        res = scipy.optimize.minimize_scalar(
            lambda p: float(at_precision(p)[0]),
            bounds=(grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]),
            method="bounded",
            options={"xatol": 1e-6},
        )
        p = float(res.x)
        value, n = at_precision(p)
    n, value = float(n), float(value)
    d = compute / (flops_per_param_token_bit * n * p)
    return {"N": n, "D": d, "P": p, "loss": value}


def critical_data_size(law: PrecisionLaw, n: Any, p_post: Any) -> jax.Array:
    """``D_crit = (β B N^{γ_N} e^{P_post/γ_post - b} / (γ_D C_T))^{1/(γ_D + β)}`` (eq. 9).

    Beyond ``D_crit`` tokens, more pre-training *raises* the loss after PTQ to ``P_post`` bits
    (model trained in high precision).
    """
    beta = law.beta_
    num = beta * law.B * jnp.asarray(n) ** law.gamma_N
    num = num * jnp.exp(jnp.asarray(p_post, dtype=jnp.result_type(float)) / law.gamma_post)
    num = num * math.exp(-law.b_post)
    return (num / (law.gamma_D * law.C_T)) ** (1.0 / (law.gamma_D + beta))


# ----------------------------------------------------------------------------------------------
# Fitting
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FitResult:
    """A least-squares fit of some constants of a :class:`PrecisionLaw`.

    Attributes:
        law: the fitted law (fixed constants as given).
        free: names of the fitted constants.
        stderr: standard error of each fitted constant (delta method).
        ci95: 95% confidence interval of each fitted constant (Student t on the fit coordinate:
            log for positive constants, so the interval stays positive).
        r2: coefficient of determination of the target.
        rmse: root mean squared residual.
        n_points: number of data points.
        converged: whether ``r2`` reached the fit's ``min_r2``.
    """

    law: PrecisionLaw
    free: tuple[str, ...]
    stderr: dict[str, float]
    ci95: dict[str, tuple[float, float]]
    r2: float
    rmse: float
    n_points: int
    converged: bool = True

    def table(self) -> list[dict[str, Any]]:
        """One row per fitted constant: name, value, stderr, ci95."""
        return [
            {
                "name": k,
                "value": getattr(self.law, k),
                "stderr": self.stderr[k],
                "ci95": list(self.ci95[k]),
            }
            for k in self.free
        ]


#: columns of a data set (NumPy as measured, JAX inside :func:`fit_law`)
Columns = Mapping[str, ArrayLike]
LawFn = Callable[[PrecisionLaw, Columns], jax.Array]


def loss_model(law: PrecisionLaw, data: Columns) -> jax.Array:
    """:func:`training_loss` on columns ``N, D`` and optional ``P_w, P_a, P_kv`` (inf = none)."""
    inf = jnp.full_like(data["N"], jnp.inf)
    return training_loss(
        law,
        data["N"],
        data["D"],
        data.get("P_w", inf),
        data.get("P_a", inf),
        data.get("P_kv", inf),
    )


def ptq_model(law: PrecisionLaw, data: Columns) -> jax.Array:
    """:func:`ptq_degradation` on columns ``N, D, P_post`` and optional training precisions."""
    inf = jnp.full_like(data["N"], jnp.inf)
    return ptq_degradation(
        law,
        data["N"],
        data["D"],
        data["P_post"],
        data.get("P_w", inf),
        data.get("P_a", inf),
        data.get("P_kv", inf),
    )


class FitWarning(UserWarning):
    """A fit of the law ended below the R² it was asked to reach (``r2`` holds what it reached)."""

    def __init__(self, message: str, r2: float):
        super().__init__(message)
        self.r2 = r2


class FitError(ValueError):
    """A fit of the law ended below the required R² (``on_poor_fit="raise"``; ``r2``, ``fit``)."""

    def __init__(self, message: str, r2: float, fit: FitResult):
        super().__init__(message)
        self.r2, self.fit = r2, fit


def default_starts(init: PrecisionLaw, free: Sequence[str], *, n_random: int = 6) -> list:
    """Starting points of :func:`fit_law`: ``init``, ``init.without_offsets()`` (a law whose offset
    makes some data point diverge has zero gradient there; the offset-free form never does) and
    ``n_random`` seeded perturbations of each: positive constants scaled by ``e^{U(-1, 1)}``,
    the others shifted by ``U(-1, 1)`` (the offsets clipped at 0 below)."""
    rng = np.random.default_rng(0)
    bases = [init, init.without_offsets()]
    starts = list(bases)
    for i in range(n_random):
        base = bases[i % 2]
        changes = {}
        for f in free:
            v, u = getattr(base, f), rng.uniform(-1.0, 1.0)
            if v is None or (isinstance(v, float) and math.isinf(v)):
                continue
            changes[f] = v * math.exp(u) if f in POSITIVE else v + u
            if f in ("n_w", "n_a", "n_kv", "b_post"):
                changes[f] = max(changes[f], 0.0)
        starts.append(dataclasses.replace(base, **changes))
    return starts


def _predict(theta, cols, *, free, logged, init, model, log):
    """The model's prediction (its log with ``log``) at the free constants ``theta`` (positive
    ones as logs)."""
    values = {f: (jnp.exp(t) if lg else t) for f, t, lg in zip(free, theta, logged, strict=True)}
    pred = model(dataclasses.replace(init, **values), cols)
    return jnp.log(pred) if log else pred


_FIXED = ("free", "logged", "init", "model", "log")


@functools.partial(jax.jit, static_argnames=_FIXED)
def _residuals(theta, cols, y, **fixed):
    """Residuals of the fit; a trial step into a diverging region (u <= 0, overflow) gets a
    large finite residual. One compiled program per law form and data shape, shared by fits."""
    raw = _predict(theta, cols, **fixed) - y
    return jnp.nan_to_num(raw, nan=1e6, posinf=1e6, neginf=-1e6)


@functools.partial(jax.jit, static_argnames=_FIXED)
def _jacobian(theta, cols, y, **fixed):
    """The exact Jacobian of the residuals (float64 under ``enable_x64``), non-finite -> 0."""
    j = jax.jacfwd(lambda th: _predict(th, cols, **fixed) - y)(theta)
    return jnp.nan_to_num(j, nan=0.0, posinf=0.0, neginf=0.0)


def _best_start(starts, free, logged, resid, jac):
    """The least-squares result (trust region, ``scipy.optimize.least_squares``) of lowest cost
    over the ``starts`` whose free constants are finite."""
    best = None
    for start in starts:
        theta0 = _theta(start, free, logged)
        if not np.all(np.isfinite(theta0)):
            continue
        res = scipy.optimize.least_squares(
            lambda th: np.asarray(resid(jnp.asarray(th))),
            theta0,
            jac=lambda th: np.asarray(jac(jnp.asarray(th))),
            method="trf",
            x_scale="jac",
            max_nfev=2000,
        )
        if best is None or res.cost < best.cost:
            best = res
    if best is None:
        raise ConfigError("starts", len(starts), "a start with finite free constants")
    return best


def fit_law(
    data: Mapping[str, Sequence[float] | np.ndarray],
    target: Sequence[float] | np.ndarray,
    *,
    free: Sequence[str],
    init: PrecisionLaw = TABLE2,
    model: LawFn = loss_model,
    log_target: bool = False,
    starts: Sequence[PrecisionLaw] | None = None,
    min_r2: float = 0.99,
    on_poor_fit: Literal["warn", "raise"] = "warn",
) -> FitResult:
    """Least-squares fit of the constants ``free`` of ``model(law, data)`` to ``target``.

    Positive constants are fitted in log space (they stay positive). Residuals ``model - target``
    (or of their logs with ``log_target``, suited to ``δ_PTQ`` spanning decades) are minimised by
    ``scipy.optimize.least_squares`` (trust region, exact float64 Jacobian from ``jax.jacfwd``)
    from every start, and the lowest cost wins. A best fit whose R² is below ``min_r2`` is
    reported, never returned silently: a :class:`FitWarning` (``on_poor_fit="warn"``) or a
    :class:`FitError` (``"raise"``), each carrying the R² reached; ``FitResult.converged`` says
    which.

    Args:
        data: columns (e.g. ``N, D, P_w, P_a, P_kv`` or ``P_post``), equal lengths.
        target: measured values (loss or ``δ_PTQ``), one per row.
        free: names of :class:`PrecisionLaw` fields to fit (``"beta"`` unties ``β`` from ``α``).
        init: the values of all fixed constants, and the first start.
        model: :func:`loss_model`, :func:`ptq_model` or any ``(law, data) -> prediction``.
        log_target: fit ``log model`` to ``log target``.
        starts: starting laws (their ``free`` constants are used); default
            :func:`default_starts` of ``init``.
        min_r2: the R² below which the fit is reported as not converged.
        on_poor_fit: ``"warn"`` or ``"raise"``.

    Returns:
        :class:`FitResult` of the best start.

    Raises:
        ConfigError: unknown constant in ``free`` (field ``free``), fewer data points than
            fitted constants plus one (field ``points``), or a bad ``on_poor_fit``.
        FitError: R² below ``min_r2`` with ``on_poor_fit="raise"``.
    """
    free = tuple(free)
    bad = [f for f in free if f not in FIELDS]
    if bad or not free or len(set(free)) != len(free):
        raise ConfigError("free", free, f"distinct names from {FIELDS}")
    if on_poor_fit not in ("warn", "raise"):
        raise ConfigError("on_poor_fit", on_poor_fit, "'warn' or 'raise'")
    y = np.asarray(target, dtype=np.float64)
    n = y.shape[0]
    if n < len(free) + 1:
        raise ConfigError(
            "points", n, f"at least {len(free) + 1} data points to fit {len(free)} constants"
        )
    if "beta" in free and init.beta is None:
        init = dataclasses.replace(init, beta=init.alpha)
    starts = list(default_starts(init, free) if starts is None else starts)
    starts = [dataclasses.replace(s, beta=s.alpha) if s.beta is None else s for s in starts]
    logged = [f in POSITIVE for f in free]

    with jax.enable_x64(True):
        cols = {k: jnp.asarray(np.asarray(v, dtype=np.float64)) for k, v in data.items()}
        for k, v in cols.items():
            if v.shape != (n,):
                raise ConfigError(f"data.{k}", v.shape, f"a column of length {n} (len(target))")
        y_fit = np.log(y) if log_target else y

        fixed = dict(free=free, logged=tuple(logged), init=init, model=model, log=log_target)
        y_arg = jnp.asarray(y_fit)
        resid = lambda th: _residuals(th, cols, y_arg, **fixed)
        jac = lambda th: _jacobian(th, cols, y_arg, **fixed)
        predict = lambda th: _predict(th, cols, **fixed)
        best = _best_start(starts, free, logged, resid, jac)
        theta = best.x
        r = np.asarray(resid(jnp.asarray(theta)))
        j = np.asarray(jac(jnp.asarray(theta)))
        pred = np.asarray(predict(jnp.asarray(theta)))
    if log_target:
        pred = np.exp(pred)
    fit = _fit_result(init, free, logged, theta, r, j, pred, y, min_r2)
    if not fit.converged:
        msg = (
            f"fit_law: R² = {fit.r2:.4f} after {len(starts)} starts, below min_r2 = {min_r2} "
            f"(free: {', '.join(free)}); the law does not describe these data with these "
            "constants free"
        )
        if on_poor_fit == "raise":
            raise FitError(msg, fit.r2, fit)
        warnings.warn(FitWarning(msg, fit.r2), stacklevel=2)
    return fit


def _theta(law: PrecisionLaw, free: tuple[str, ...], logged: list[bool]) -> np.ndarray:
    """The fit coordinates of ``law``'s free constants (log for the positive ones)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.array(
            [
                np.log(getattr(law, f)) if lg else getattr(law, f)
                for f, lg in zip(free, logged, strict=True)
            ],
            np.float64,
        )


def _fit_result(
    init: PrecisionLaw,
    free: tuple[str, ...],
    logged: list[bool],
    theta: np.ndarray,
    r: np.ndarray,
    j: np.ndarray,
    pred: np.ndarray,
    y: np.ndarray,
    min_r2: float,
) -> FitResult:
    """The fitted law with standard errors and 95 % intervals from the Gauss-Newton covariance
    ``sigma^2 (J^T J)^+`` at the optimum (log-space constants mapped back), R^2 and RMSE."""
    n = y.shape[0]
    dof = max(n - len(free), 1)
    sigma2 = float(r @ r) / dof
    cov = sigma2 * np.linalg.pinv(j.T @ j)
    se_theta = np.sqrt(np.maximum(np.diag(cov), 0.0))
    t = float(scipy.stats.t.ppf(0.975, dof))
    values, stderr, ci = {}, {}, {}
    for f, th, se, lg in zip(free, theta, se_theta, logged, strict=True):
        val = float(np.exp(th)) if lg else float(th)
        values[f] = val
        stderr[f] = float(val * se) if lg else float(se)
        lo, hi = th - t * se, th + t * se
        with np.errstate(over="ignore"):  # a poorly determined constant: an interval to inf
            ci[f] = (float(np.exp(lo)), float(np.exp(hi))) if lg else (float(lo), float(hi))
    ss_res = float(np.sum((pred - y) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")
    return FitResult(
        law=dataclasses.replace(init, **values),
        free=free,
        stderr=stderr,
        ci95=ci,
        r2=r2,
        rmse=float(np.sqrt(ss_res / n)),
        n_points=n,
        converged=bool(r2 >= min_r2),
    )


# ----------------------------------------------------------------------------------------------
# Plots
# ----------------------------------------------------------------------------------------------


def plot_loss_vs_precision(
    law: PrecisionLaw,
    path: str | Path,
    *,
    sizes: Sequence[float],
    tokens: float,
    measured: Mapping[str, media.Series] | None = None,
    which: str = "w",
) -> Path:
    """PNG of loss vs training precision ``P_which`` (others full) for several ``N`` at ``D``.

    ``measured`` (columns ``N, P, loss``) adds the data points in the colour of their ``N``.
    """
    p = np.linspace(2.0, 16.0, 200)
    curves, points = {}, {}
    for n in sizes:
        name = f"N={n:.3g}"
        curves[name] = (p, np.asarray(training_loss(law, n, tokens, **{f"p_{which}": p})))
        if measured is not None:
            sel = np.asarray(measured["N"]) == n
            points[name] = (np.asarray(measured["P"])[sel], np.asarray(measured["loss"])[sel])
    return media.plot_curves(
        path,
        curves,
        points=points,
        xlabel=f"training precision P_{which} (bits)",
        ylabel="loss",
        title=f"D = {tokens:.3g} tokens",
    )


def plot_ptq_vs_data(
    law: PrecisionLaw,
    path: str | Path,
    *,
    size: float,
    tokens: Sequence[float],
    p_post: Sequence[int],
    measured: Mapping[str, media.Series] | None = None,
) -> Path:
    """PNG of ``δ_PTQ`` vs tokens seen (log-log) for several ``P_post`` at model size ``N``.

    ``measured`` (columns ``D, P_post, delta``) adds the data points.
    """
    d = np.geomspace(min(tokens), max(tokens), 100)
    curves, points = {}, {}
    for pp in p_post:
        name = f"{pp} bit"
        curves[name] = (d, np.asarray(ptq_degradation(law, size, d, pp)))
        if measured is not None:
            sel = np.asarray(measured["P_post"]) == pp
            points[name] = (np.asarray(measured["D"])[sel], np.asarray(measured["delta"])[sel])
    return media.plot_curves(
        path,
        curves,
        points=points,
        xlabel="tokens seen D",
        ylabel="δ_PTQ (nats)",
        title=f"N = {size:.3g}",
        logx=True,
        logy=True,
    )


def plot_fit(
    measured: media.Series, predicted: media.Series, path: str | Path, *, title: str
) -> Path:
    """PNG scatter of fitted vs measured values with the diagonal."""
    return media.plot_curves(
        path,
        {},
        points={"fit": (np.asarray(measured), np.asarray(predicted))},
        diagonal=True,
        xlabel="measured",
        ylabel="fitted law",
        title=title,
    )
