"""Probability-flow ODE samplers on an explicit array of time steps, each one ``lax.scan``, and
one stochastic sampler, :func:`ancestral` (the reverse SDE's DDPM steps; it also takes a key).

Every sampler has the signature ``sampler(eps_fn, x, timesteps, *, schedule, ...) -> x_end`` where

- ``eps_fn(x, t)`` is the noise-prediction model (x: (batch, ...), t: (batch,)); build it from any
  network parametrisation, with classifier or classifier-free guidance, with
  :func:`jaxlab.diffusion.model_wrapper.model_wrapper`;
- ``x`` (batch, ...) is the state at ``timesteps[0]`` (for generation: ``schedule.prior_std`` times
  standard normal noise);
- ``timesteps`` (n + 1,) is any strictly decreasing sequence t_0 > ... > t_n inside the schedule's
  range (the baselines of :mod:`jaxlab.diffusion.schedules` or LD3's learned steps);
- ``eval_timesteps`` (n + 1,), optional, are LD3's decoupled network-evaluation times: the model is
  called at eval_timesteps[i] where the integrator is at timesteps[i] (LD3 "v2"; equal by default).

- ``correct_fn(x, t)``, optional, is applied to the state after every solver step (at the step's
  target time t_{i+1}; UniPC also to its predicted point before the model sees it), as
  DPM-Solver's ``correcting_xt_fn``: e.g. Diffusion Planner re-imposes the current state with it.
  ``None`` (default) runs exactly the uncorrected program.

All samplers are pure and jit-able (jit a closure over ``eps_fn``), and differentiable with respect to
``x``, ``timesteps`` and ``eval_timesteps``: the step coefficients are jnp functions of the log-SNR
of the steps, computed before the scan, so the scan body is a model call plus a linear combination.

Network evaluations (NFE) for n steps: ``euler``, ``ddim``, ``dpm_solver++``, ``uni_pc`` and
``ipndm`` use n; ``heun`` uses 2n.

Orders: Euler and DDIM 1, Heun 2, DPM-Solver++(kM) k (Lu et al. 2022b, multistep, data prediction),
UniPC-p with the UniC corrector p + 1 (Zhao et al. 2023; variants B(h) = h "bh1" and e^h - 1 "bh2"),
iPNDM up to 4 (Zhang & Chen 2023, exponential Adams-Bashforth on the noise prediction).
Multistep methods warm up with lower orders; with ``lower_order_final`` and fewer than 10 steps the
final steps also lower their order (DPM-Solver / UniPC rule).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.core.config import ConfigError
from jaxlab.diffusion.model_wrapper import (  # noqa: F401  (re-exported: the sampler-facing API)
    GUIDANCE_TYPES,
    MODEL_TYPES,
    EpsFn,
    data_from_noise,
    expand_to,
    model_wrapper,
    to_noise_prediction,
)
from jaxlab.diffusion.schedules import Schedule

SAMPLER_NAMES: tuple[str, ...] = ("euler", "heun", "ddim", "dpm_solver++", "uni_pc", "ipndm")
_MAX_ORDER = {"euler": 1, "heun": 2, "ddim": 1, "dpm_solver++": 3, "uni_pc": 3, "ipndm": 4}


# ----------------------------------------------------------------------------------------------
# shared pieces
# ----------------------------------------------------------------------------------------------


def _check_inputs(x, timesteps, eval_timesteps) -> None:
    if x.ndim < 1:
        raise ValueError(f"x: got shape {x.shape}, expected (batch, ...)")
    if timesteps.ndim != 1 or timesteps.shape[0] < 2:
        raise ValueError(f"timesteps: got shape {timesteps.shape}, expected (n + 1,) with n >= 1")
    if eval_timesteps is not None and eval_timesteps.shape != timesteps.shape:
        raise ValueError(
            f"eval_timesteps: got shape {eval_timesteps.shape}, expected {timesteps.shape}"
        )


def step_orders(n: int, order: int, *, lower_order_final: bool = True) -> np.ndarray:
    """Static order of each of the n multistep updates: warm-up min(order, i + 1), and with
    ``lower_order_final`` and n < 10 also min(., n - i) (DPM-Solver / UniPC)."""
    i = np.arange(n)
    p = np.minimum(order, i + 1)
    if lower_order_final and n < 10:
        p = np.minimum(p, n - i)
    return p


def _padded_lambdas(lam: Float[Array, " n1"], k: int) -> Float[Array, " n1pk"]:
    """lam with k fictitious earlier values prepended at the first spacing (keeps unused
    higher-order branches of the warm-up steps finite, so their zero weight gives zero gradient)."""
    d = lam[1] - lam[0]
    pre = lam[0] - d * jnp.arange(k, 0, -1, dtype=lam.dtype)
    return jnp.concatenate([pre, lam])


def _select_by_order(orders: np.ndarray, branches: list) -> Float[Array, "n k"]:
    out = branches[0]
    for p in range(2, len(branches) + 1):
        out = jnp.where(jnp.asarray(orders == p)[:, None], branches[p - 1], out)
    return out


def _data_fn(eps_fn: EpsFn, schedule: Schedule) -> Callable:
    def fn(x, t):
        tb = jnp.broadcast_to(t, x.shape[:1])
        return data_from_noise(eps_fn(x, tb), x, tb, schedule)

    return fn


def _noise_fn(eps_fn: EpsFn) -> Callable:
    return lambda x, t: eps_fn(x, jnp.broadcast_to(t, x.shape[:1]))


def _correct(correct_fn, x, t):
    return x if correct_fn is None else correct_fn(x, t)


def _linear_multistep(model_fn, x, a, b, t_eval, *, remat: bool, t_next=None, correct_fn=None):
    """x_{i+1} = C(a_i x_i + sum_j b_ij m_{i-j}, t_{i+1}), with m_i = model_fn(x_i, t_eval_i) and
    C = correct_fn (identity when None); n model calls."""
    k = b.shape[1]
    hist0 = jnp.zeros((k,) + x.shape, x.dtype)
    if t_next is None:
        t_next = t_eval

    def body(carry, inp):
        x, hist = carry
        a_i, b_i, t_i, tn_i = inp
        m = model_fn(x, t_i)
        hist = jnp.concatenate([m[None], hist[:-1]], axis=0)
        x = a_i * x + jnp.tensordot(b_i.astype(x.dtype), hist, axes=1)
        return (_correct(correct_fn, x, tn_i), hist), None

    if remat:
        body = jax.checkpoint(body)
    (x, _), _ = jax.lax.scan(body, (x, hist0), (a.astype(x.dtype), b, t_eval, t_next))
    return x


# ----------------------------------------------------------------------------------------------
# first-order and Heun
# ----------------------------------------------------------------------------------------------


def euler(
    eps_fn: EpsFn,
    x: Float[Array, "batch ..."],
    timesteps: Float[Array, " n1"],
    *,
    schedule: Schedule,
    eval_timesteps: Float[Array, " n1"] | None = None,
    remat: bool = False,
    correct_fn: Callable | None = None,
) -> Float[Array, "batch ..."]:
    """Euler on the probability-flow ODE in t (LD3's ``Euler``), n NFE.

    x_{i+1} = x_i + (t_{i+1} - t_i) [f(t_i) x_i + g(t_i)^2 / (2 sigma_{t_i}) eps(x_i, t'_i)],
    with t' the evaluation times. For EDM (f = 0, g^2 = 2t) this is x += (t_{i+1} - t_i) eps.
    """
    _check_inputs(x, timesteps, eval_timesteps)
    t2 = timesteps if eval_timesteps is None else eval_timesteps
    noise = _noise_fn(eps_fn)

    def body(x, inp):
        t_cur, t_next, t_ev = inp
        d = schedule.pf_ode_velocity(x, t_cur, noise(x, t_ev))
        x = x + (t_next - t_cur).astype(x.dtype) * d.astype(x.dtype)
        return _correct(correct_fn, x, t_next), None

    if remat:
        body = jax.checkpoint(body)
    x, _ = jax.lax.scan(body, x, (timesteps[:-1], timesteps[1:], t2[:-1]))
    return x


def heun(
    eps_fn: EpsFn,
    x: Float[Array, "batch ..."],
    timesteps: Float[Array, " n1"],
    *,
    schedule: Schedule,
    eval_timesteps: Float[Array, " n1"] | None = None,
    remat: bool = False,
    correct_fn: Callable | None = None,
) -> Float[Array, "batch ..."]:
    """Heun's second-order method on the probability-flow ODE in t (EDM Alg. 1 without churn), 2n NFE.

    d_i = v(x_i, t_i); x~ = x_i + dt d_i; x_{i+1} = x_i + dt (d_i + v(x~, t_{i+1})) / 2.
    """
    _check_inputs(x, timesteps, eval_timesteps)
    t2 = timesteps if eval_timesteps is None else eval_timesteps
    noise = _noise_fn(eps_fn)

    def body(x, inp):
        t_cur, t_next, ev_cur, ev_next = inp
        dt = (t_next - t_cur).astype(x.dtype)
        d1 = schedule.pf_ode_velocity(x, t_cur, noise(x, ev_cur)).astype(x.dtype)
        x_e = x + dt * d1
        d2 = schedule.pf_ode_velocity(x_e, t_next, noise(x_e, ev_next)).astype(x.dtype)
        return _correct(correct_fn, x + 0.5 * dt * (d1 + d2), t_next), None

    if remat:
        body = jax.checkpoint(body)
    x, _ = jax.lax.scan(body, x, (timesteps[:-1], timesteps[1:], t2[:-1], t2[1:]))
    return x


# ----------------------------------------------------------------------------------------------
# exponential integrators on the noise prediction: DDIM, iPNDM
# ----------------------------------------------------------------------------------------------

_AB = {
    1: [1.0],
    2: [3 / 2, -1 / 2],
    3: [23 / 12, -16 / 12, 5 / 12],
    4: [55 / 24, -59 / 24, 37 / 24, -9 / 24],
}


def _ddim_coefficients(schedule: Schedule, ts: Float[Array, " n1"]):
    """a_i = alpha_{i+1} / alpha_i and c_i = -sigma_{i+1} (e^{h_i} - 1), h_i = lambda_{i+1} - lambda_i."""
    la = schedule.log_alpha(ts)
    h = schedule.lambda_t(ts[1:]) - schedule.lambda_t(ts[:-1])
    a = jnp.exp(la[1:] - la[:-1])
    c = -schedule.sigma(ts[1:]) * jnp.expm1(h)
    return a, c


def ddim(
    eps_fn: EpsFn,
    x: Float[Array, "batch ..."],
    timesteps: Float[Array, " n1"],
    *,
    schedule: Schedule,
    eval_timesteps: Float[Array, " n1"] | None = None,
    remat: bool = False,
    correct_fn: Callable | None = None,
) -> Float[Array, "batch ..."]:
    """Deterministic DDIM (Song et al. 2021a) = DPM-Solver-1 (Lu et al. 2022, eq. 3.7), n NFE.

    x_{i+1} = (alpha_{i+1} / alpha_i) x_i - sigma_{i+1} (e^{h_i} - 1) eps(x_i, t'_i).
    """
    _check_inputs(x, timesteps, eval_timesteps)
    t2 = timesteps if eval_timesteps is None else eval_timesteps
    a, c = _ddim_coefficients(schedule, timesteps)
    return _linear_multistep(
        _noise_fn(eps_fn),
        x,
        a,
        c[:, None],
        t2[:-1],
        remat=remat,
        t_next=timesteps[1:],
        correct_fn=correct_fn,
    )


def ipndm(
    eps_fn: EpsFn,
    x: Float[Array, "batch ..."],
    timesteps: Float[Array, " n1"],
    *,
    schedule: Schedule,
    order: int = 4,
    eval_timesteps: Float[Array, " n1"] | None = None,
    remat: bool = False,
    correct_fn: Callable | None = None,
) -> Float[Array, "batch ..."]:
    """iPNDM (Zhang & Chen 2023; LD3's ``iPNDM``), n NFE.

    The DDIM step with eps replaced by the constant-coefficient Adams-Bashforth combination of the
    last p_i = min(order, i + 1) noise predictions, e.g. for p = 4:
    (55 eps_i - 59 eps_{i-1} + 37 eps_{i-2} - 9 eps_{i-3}) / 24.
    """
    _check_inputs(x, timesteps, eval_timesteps)
    if order not in _AB:
        raise ValueError(f"order: got {order!r}, expected 1, 2, 3 or 4 for ipndm")
    t2 = timesteps if eval_timesteps is None else eval_timesteps
    n = timesteps.shape[0] - 1
    a, c = _ddim_coefficients(schedule, timesteps)
    p = step_orders(n, order, lower_order_final=False)
    ab = np.zeros((n, order))
    for i in range(n):
        ab[i, : p[i]] = _AB[int(p[i])]
    b = c[:, None] * jnp.asarray(ab, c.dtype)
    return _linear_multistep(
        _noise_fn(eps_fn),
        x,
        a,
        b,
        t2[:-1],
        remat=remat,
        t_next=timesteps[1:],
        correct_fn=correct_fn,
    )


# ----------------------------------------------------------------------------------------------
# DPM-Solver++ (multistep, data prediction)
# ----------------------------------------------------------------------------------------------


def dpm_solver_pp_coefficients(
    schedule: Schedule,
    ts: Float[Array, " n1"],
    orders: np.ndarray,
    *,
    third_order: str = "dpm_solver",
) -> tuple[Float[Array, " n"], Float[Array, "n 3"]]:
    """Coefficients of multistep DPM-Solver++ written as x_{i+1} = a_i x_i + sum_j b_ij D_{i-j}.

    With h = lambda_{i+1} - lambda_i, phi_1 = e^{-h} - 1, r_0 = h_{i-1} / h, r_1 = h_{i-2} / h and
    data predictions D (Lu et al. 2022b, Alg. 2 and the dpm-solver code):
      order 1: x_{i+1} = (sigma_{i+1}/sigma_i) x_i - alpha_{i+1} phi_1 D_i
      order 2: ... - 0.5 alpha_{i+1} phi_1 (D_i - D_{i-1}) / r_0
      order 3: ... + alpha_{i+1} phi_2 D1 - alpha_{i+1} phi_3 D2, phi_2 = phi_1/h + 1, phi_3 = phi_2/h - 1/2,
               D1 = D1_0 + r_0/(r_0 + r_1) (D1_0 - D1_1), D2 = (D1_0 - D1_1)/(r_0 + r_1),
               D1_0 = (D_i - D_{i-1})/r_0, D1_1 = (D_{i-1} - D_{i-2})/r_1.

    ``third_order="dpm_solver"`` is the coefficient of the DPM-Solver, k-diffusion, diffusers and LD3
    code. A Taylor expansion of D around lambda_i shows that this D2 estimates h^2 D''/2 while the
    phi_3 term of the exact solution needs h^2 D'', so that update is globally second order (we
    measure slope 2.0 on the mixture oracle, see tests); ``third_order="taylor"`` uses 2 D2 and is
    third order up to the lower-order warm-up.
    """
    if third_order not in ("dpm_solver", "taylor"):
        raise ValueError(f"third_order: got {third_order!r}, expected 'dpm_solver' or 'taylor'")
    n = ts.shape[0] - 1
    lam = schedule.lambda_t(ts)
    lp = _padded_lambdas(lam, 2)
    lam_s, lam_t = lam[:-1], lam[1:]
    lam_p1, lam_p2 = lp[1 : n + 1], lp[0:n]
    h = lam_t - lam_s
    alpha_t = schedule.alpha(ts[1:])
    a = schedule.sigma(ts[1:]) / schedule.sigma(ts[:-1])
    phi1 = jnp.expm1(-h)
    e = jnp.eye(3, dtype=lam.dtype)[:, None, :]  # e[j]: (1, 3)
    col = lambda v: v[:, None]
    base = -col(alpha_t * phi1) * e[0]
    r0 = (lam_s - lam_p1) / h
    r1 = (lam_p1 - lam_p2) / h
    d10 = (e[0] - e[1]) / col(r0)
    c2 = base - 0.5 * col(alpha_t * phi1) * d10
    d11 = (e[1] - e[2]) / col(r1)
    d1 = d10 + col(r0 / (r0 + r1)) * (d10 - d11)
    d2 = (d10 - d11) / col(r0 + r1) * (2.0 if third_order == "taylor" else 1.0)
    phi2 = phi1 / h + 1.0
    phi3 = phi2 / h - 0.5
    c3 = base + col(alpha_t * phi2) * d1 - col(alpha_t * phi3) * d2
    return a, _select_by_order(orders, [base, c2, c3])


def dpm_solver_pp(
    eps_fn: EpsFn,
    x: Float[Array, "batch ..."],
    timesteps: Float[Array, " n1"],
    *,
    schedule: Schedule,
    order: int = 2,
    lower_order_final: bool = True,
    eval_timesteps: Float[Array, " n1"] | None = None,
    remat: bool = False,
    third_order: str = "dpm_solver",
    correct_fn: Callable | None = None,
) -> Float[Array, "batch ..."]:
    """Multistep DPM-Solver++ (2M for order 2, 3M for order 3; Lu et al. 2022b), n NFE.

    See :func:`dpm_solver_pp_coefficients` for the update and for ``third_order``. The data
    prediction at step i is D_i = (x_i - sigma(t'_i) eps(x_i, t'_i)) / alpha(t'_i), t' the
    evaluation times.
    """
    _check_inputs(x, timesteps, eval_timesteps)
    if order not in (1, 2, 3):
        raise ValueError(f"order: got {order!r}, expected 1, 2 or 3 for dpm_solver++")
    t2 = timesteps if eval_timesteps is None else eval_timesteps
    n = timesteps.shape[0] - 1
    orders = step_orders(n, order, lower_order_final=lower_order_final)
    a, b = dpm_solver_pp_coefficients(schedule, timesteps, orders, third_order=third_order)
    return _linear_multistep(
        _data_fn(eps_fn, schedule),
        x,
        a,
        b[:, :order],
        t2[:-1],
        remat=remat,
        t_next=timesteps[1:],
        correct_fn=correct_fn,
    )


# ----------------------------------------------------------------------------------------------
# UniPC (B(h) variants, data prediction)
# ----------------------------------------------------------------------------------------------


def _solve_small(a: Float[Array, "n p p"], b: Float[Array, "n p"]) -> Float[Array, "n p"]:
    """Batched solve of p x p systems, p <= 3, by Cramer's rule (cheaper to compile than LAPACK)."""
    p = a.shape[-1]
    if p == 1:
        return b / a[:, 0]
    if p == 2:
        det = a[:, 0, 0] * a[:, 1, 1] - a[:, 0, 1] * a[:, 1, 0]
        x0 = b[:, 0] * a[:, 1, 1] - a[:, 0, 1] * b[:, 1]
        x1 = a[:, 0, 0] * b[:, 1] - b[:, 0] * a[:, 1, 0]
        return jnp.stack([x0, x1], -1) / det[:, None]
    if p == 3:
        det3 = lambda m: (  # noqa: E731
            m[:, 0, 0] * (m[:, 1, 1] * m[:, 2, 2] - m[:, 1, 2] * m[:, 2, 1])
            - m[:, 0, 1] * (m[:, 1, 0] * m[:, 2, 2] - m[:, 1, 2] * m[:, 2, 0])
            + m[:, 0, 2] * (m[:, 1, 0] * m[:, 2, 1] - m[:, 1, 1] * m[:, 2, 0])
        )
        det = det3(a)
        cols = [det3(a.at[:, :, j].set(b)) for j in range(3)]
        return jnp.stack(cols, -1) / det[:, None]
    return jnp.linalg.solve(a, b[..., None])[..., 0]


def unipc_coefficients(
    schedule: Schedule, ts: Float[Array, " n1"], orders: np.ndarray, *, variant: str, max_order: int
):
    """Coefficients of UniPC with data prediction (Zhao et al. 2023, Alg. 2/3 and the UniPC code).

    Step i (order p) from x_i with history D_i, ..., D_{i-p+1} to x_{i+1}:
      hh = -h, B(h) = hh (bh1) or e^{hh} - 1 (bh2), r_k = (lambda_{i-k} - lambda_i)/h,
      D1_k = (D_{i-k} - D_i)/r_k, R_{jk} = r_k^j, b_j = j! phi_{j+1}(hh) / B(h),
      x_base = (sigma_{i+1}/sigma_i) x_i - alpha_{i+1} (e^{hh} - 1) D_i,
      predictor (UniP-p):  x_pred = x_base - alpha_{i+1} B(h) sum_k rho^p_k D1_k, rho^p = R[:-1,:-1]^{-1} b[:-1]
                           (rho^p = 1/2 for p = 2),
      corrector (UniC-p):  x_corr = x_base - alpha_{i+1} B(h) (sum_k rho^c_k D1_k + rho^c_p (D(x_pred) - D_i)),
                           rho^c = R^{-1} b (rho^c = 1/2 for p = 1).
    Returns a (n,), predictor weights bp (n, K), corrector weights bc (n, K) on the history and the
    corrector weight c_new (n,) on the new model value D(x_pred), K = max_order.
    """
    n = ts.shape[0] - 1
    k_max = max_order
    lam = schedule.lambda_t(ts)
    lp = _padded_lambdas(lam, max(k_max - 1, 1))
    off = max(k_max - 1, 1)
    lam_s, lam_t = lam[:-1], lam[1:]
    h = lam_t - lam_s
    hh = -h
    alpha_t = schedule.alpha(ts[1:])
    a = schedule.sigma(ts[1:]) / schedule.sigma(ts[:-1])
    h_phi_1 = jnp.expm1(hh)
    if variant == "bh1":
        b_h = hh
    elif variant == "bh2":
        b_h = jnp.expm1(hh)
    else:
        raise ValueError(f"variant: got {variant!r}, expected 'bh1' or 'bh2'")
    e = jnp.eye(k_max, dtype=lam.dtype)[:, None, :]  # e[j]: (1, k_max)
    col = lambda v: v[:, None]
    # r_k for k = 1..k_max-1 (history index k); idx of lambda_{i-k} in lp is off + i - k
    idx = np.arange(n)
    rks = [(lp[off + idx - k] - lam_s) / h for k in range(1, k_max)]
    base = -col(alpha_t * h_phi_1) * e[0]
    # b_j, j = 1..k_max
    bvec = []
    hpk = h_phi_1 / hh - 1.0
    fact = 1.0
    for j in range(1, k_max + 1):
        bvec.append(hpk * fact / b_h)
        fact *= j + 1
        hpk = hpk / hh - 1.0 / fact
    bp_br, bc_br, cn_br = [], [], []
    for p in range(1, k_max + 1):
        r = rks[: p - 1] + [jnp.ones_like(h)]  # (p,) per step
        d1s = [(e[k] - e[0]) / col(rks[k - 1]) for k in range(1, p)]
        rmat = jnp.stack([jnp.stack([rk**j for rk in r], -1) for j in range(p)], -2)  # (n, p, p)
        bv = jnp.stack(bvec[:p], -1)  # (n, p)
        if p == 1:
            pred = base
        else:
            if p == 2:
                rho_p = jnp.full((n, 1), 0.5, lam.dtype)
            else:
                rho_p = _solve_small(rmat[:, :-1, :-1], bv[:, :-1])
            pred = base - col(alpha_t * b_h) * sum(col(rho_p[:, k]) * d1s[k] for k in range(p - 1))
        if p == 1:
            rho_c = jnp.full((n, 1), 0.5, lam.dtype)
        else:
            rho_c = _solve_small(rmat, bv)
        corr_hist = -col(rho_c[:, p - 1]) * e[0]
        if p > 1:
            corr_hist = corr_hist + sum(col(rho_c[:, k]) * d1s[k] for k in range(p - 1))
        bc_br.append(base - col(alpha_t * b_h) * corr_hist)
        bp_br.append(pred)
        cn_br.append(col(-alpha_t * b_h * rho_c[:, p - 1]))
    bp = _select_by_order(orders, bp_br)
    bc = _select_by_order(orders, bc_br)
    c_new = _select_by_order(orders, cn_br)[:, 0]
    return a, bp, bc, c_new


def uni_pc(
    eps_fn: EpsFn,
    x: Float[Array, "batch ..."],
    timesteps: Float[Array, " n1"],
    *,
    schedule: Schedule,
    order: int = 2,
    variant: str = "bh1",
    lower_order_final: bool = True,
    eval_timesteps: Float[Array, " n1"] | None = None,
    remat: bool = False,
    correct_fn: Callable | None = None,
) -> Float[Array, "batch ..."]:
    """UniPC multistep predictor-corrector (Zhao et al. 2023), n NFE, order ``order`` + 1.

    The model value at each predicted point serves both the corrector of that step and the next
    predictor; the final step has no corrector (so no extra evaluation), as in the UniPC code.
    See :func:`unipc_coefficients` for the updates.
    """
    _check_inputs(x, timesteps, eval_timesteps)
    if order not in (1, 2, 3):
        raise ValueError(f"order: got {order!r}, expected 1, 2 or 3 for uni_pc")
    t2 = timesteps if eval_timesteps is None else eval_timesteps
    n = timesteps.shape[0] - 1
    orders = step_orders(n, order, lower_order_final=lower_order_final)
    a, bp, bc, c_new = unipc_coefficients(
        schedule, timesteps, orders, variant=variant, max_order=order
    )
    dt = x.dtype
    a, bp, bc, c_new = a.astype(dt), bp.astype(dt), bc.astype(dt), c_new.astype(dt)
    data = _data_fn(eps_fn, schedule)
    hist = jnp.zeros((order,) + x.shape, dt).at[0].set(data(x, t2[0]))

    def body(carry, inp):
        x, hist = carry
        a_i, bp_i, bc_i, cn_i, t_ev, t_nx = inp
        x_pred = _correct(correct_fn, a_i * x + jnp.tensordot(bp_i, hist, axes=1), t_nx)
        m = data(x_pred, t_ev)
        x_corr = a_i * x + jnp.tensordot(bc_i, hist, axes=1) + cn_i * m
        hist = jnp.concatenate([m[None], hist[:-1]], axis=0)
        return (_correct(correct_fn, x_corr, t_nx), hist), None

    if remat:
        body = jax.checkpoint(body)
    (x, hist), _ = jax.lax.scan(
        body, (x, hist), (a[:-1], bp[:-1], bc[:-1], c_new[:-1], t2[1:-1], timesteps[1:-1])
    )
    return _correct(correct_fn, a[-1] * x + jnp.tensordot(bp[-1], hist, axes=1), timesteps[-1])


# ----------------------------------------------------------------------------------------------
# ancestral (stochastic) sampling
# ----------------------------------------------------------------------------------------------


def ancestral(
    eps_fn: EpsFn,
    x: Float[Array, "batch ..."],
    timesteps: Float[Array, " n1"],
    key: PRNGKeyArray,
    *,
    schedule: Schedule,
    eval_timesteps: Float[Array, " n1"] | None = None,
    remat: bool = False,
    correct_fn: Callable | None = None,
) -> Float[Array, "batch ..."]:
    """Ancestral sampling of the reverse SDE: each step draws from the forward process's posterior
    q(x_{i+1} | x_i, x_0) at the model's data prediction (DDPM, Ho et al. 2020, with its posterior
    variance; SDE-DPM-Solver++1 of Lu et al. 2022b), n NFE and n normal draws from ``key``.

    x_{i+1} = (sigma_{i+1} / sigma_i) e^{-h_i} x_i + alpha_{i+1} (1 - e^{-2 h_i}) x0(x_i, t'_i)
              + sigma_{i+1} sqrt(1 - e^{-2 h_i}) z_i,   h_i = lambda_{i+1} - lambda_i.

    Not part of :func:`sample` (the probability-flow ODE samplers take no key). Unlike those, it
    resamples noise at every step, so errors of the model that the ODE would carry along are
    re-weighed by the model at every level: a diagnostic for where a model's errors lie as much as
    a sampler.
    """
    _check_inputs(x, timesteps, eval_timesteps)
    t2 = timesteps if eval_timesteps is None else eval_timesteps
    h = schedule.lambda_t(timesteps[1:]) - schedule.lambda_t(timesteps[:-1])
    sig = schedule.sigma(timesteps)
    a = sig[1:] / sig[:-1] * jnp.exp(-h)
    b = schedule.alpha(timesteps[1:]) * -jnp.expm1(-2.0 * h)
    c = sig[1:] * jnp.sqrt(-jnp.expm1(-2.0 * h))
    data = _data_fn(eps_fn, schedule)
    keys = jax.random.split(key, a.shape[0])

    def body(x, inp):
        a_i, b_i, c_i, t_ev, t_next, k = inp
        z = jax.random.normal(k, x.shape, x.dtype)
        x = a_i.astype(x.dtype) * x + b_i.astype(x.dtype) * data(x, t_ev) + c_i.astype(x.dtype) * z
        return _correct(correct_fn, x, t_next), None

    if remat:
        body = jax.checkpoint(body)
    x, _ = jax.lax.scan(body, x, (a, b, c, t2[:-1], timesteps[1:], keys))
    return x


# ----------------------------------------------------------------------------------------------
# one entry point for all samplers
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SamplerSpec:
    """Static description of a sampler: its name, order and options (hashable, use as static arg).

    Attributes:
        name: one of ``SAMPLER_NAMES``.
        order: the multistep order (dpm_solver++ 1-3, uni_pc 1-3, ipndm 1-4; ignored otherwise).
        variant: UniPC's B(h), "bh1" or "bh2".
        lower_order_final: lower the order of the final steps when fewer than 10 are taken.
    """

    name: str = "dpm_solver++"
    order: int = 2
    variant: str = "bh1"
    lower_order_final: bool = True

    def __post_init__(self):
        if self.name not in SAMPLER_NAMES:
            raise ConfigError("name", self.name, f"one of {SAMPLER_NAMES}")
        if self.name in ("dpm_solver++", "uni_pc", "ipndm") and not (
            1 <= self.order <= _MAX_ORDER[self.name]
        ):
            raise ConfigError("order", self.order, f"1..{_MAX_ORDER[self.name]} for {self.name}")
        if self.variant not in ("bh1", "bh2"):
            raise ConfigError("variant", self.variant, "'bh1' or 'bh2'")

    @property
    def nfe_per_step(self) -> int:
        return 2 if self.name == "heun" else 1

    def steps_for_nfe(self, nfe: int) -> int:
        """Number of steps n that spends exactly ``nfe`` network evaluations."""
        if not isinstance(nfe, int) or nfe < self.nfe_per_step or nfe % self.nfe_per_step:
            raise ValueError(
                f"nfe: got {nfe!r}, expected a positive multiple of {self.nfe_per_step} "
                f"for {self.name}"
            )
        return nfe // self.nfe_per_step


def sample(
    spec: SamplerSpec,
    eps_fn: EpsFn,
    x: Float[Array, "batch ..."],
    timesteps: Float[Array, " n1"],
    *,
    schedule: Schedule,
    eval_timesteps: Float[Array, " n1"] | None = None,
    remat: bool = False,
    correct_fn: Callable | None = None,
) -> Float[Array, "batch ..."]:
    """Run the sampler described by ``spec`` (see the module docstring for the arguments)."""
    kw = dict(schedule=schedule, eval_timesteps=eval_timesteps, remat=remat, correct_fn=correct_fn)
    if spec.name == "euler":
        return euler(eps_fn, x, timesteps, **kw)
    if spec.name == "heun":
        return heun(eps_fn, x, timesteps, **kw)
    if spec.name == "ddim":
        return ddim(eps_fn, x, timesteps, **kw)
    if spec.name == "dpm_solver++":
        return dpm_solver_pp(
            eps_fn, x, timesteps, order=spec.order, lower_order_final=spec.lower_order_final, **kw
        )
    if spec.name == "uni_pc":
        return uni_pc(
            eps_fn,
            x,
            timesteps,
            order=spec.order,
            variant=spec.variant,
            lower_order_final=spec.lower_order_final,
            **kw,
        )
    return ipndm(eps_fn, x, timesteps, order=spec.order, **kw)
