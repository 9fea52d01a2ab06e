"""Noise schedules of Gaussian diffusion and the baseline choices of sampling time steps.

Every schedule describes the forward marginal q(x_t | x_0) = N(alpha_t x_0, sigma_t^2 I) on a time
interval [t_min, t_max] and exposes, as pure jnp functions of a time array t,

- ``log_alpha(t)``, ``alpha(t)``, ``sigma(t)``;
- ``lambda_t(t)`` = log alpha_t - log sigma_t, the half log-SNR of DPM-Solver (Lu et al. 2022, eq. 3.3),
  strictly decreasing in t, and its inverse ``inverse_lambda(lam)``;
- ``drift(t)`` = f(t) = d log alpha_t / dt and ``diffusion2(t)`` = g(t)^2 = d sigma_t^2 / dt
  - 2 f(t) sigma_t^2, the coefficients of the forward SDE dx = f x dt + g dW (Song et al. 2021);
- ``prior_std`` = the standard deviation of the initial noise x_T that samplers start from
  (1 for VP schedules, sigma_max for VE and EDM, as in DPM-Solver and LD3's ``prior_transformation``);
- ``model_time(t)`` = the time value a network trained on this schedule is conditioned on.

The schedules follow ``LuChengTHU/dpm-solver`` (``NoiseScheduleVP``: discrete, linear, cosine) and
``vinhsuhi/LD3`` (``NoiseScheduleVE``: EDM). They are ``flax.struct`` pytrees: numbers are traced leaves,
so a schedule can be passed through ``jit``/``vmap``; the kind of schedule is the Python class.

The step-selection baselines return decreasing time steps t_0 = t_max > ... > t_N = t_min:
time-uniform, time-quadratic, logSNR-uniform and EDM (rho = 7).
"""

from __future__ import annotations

import math
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxtyping import Array, ArrayLike, Float

StepKind = Literal["time_uniform", "time_quadratic", "logsnr", "edm"]
STEP_KINDS: tuple[str, ...] = ("time_uniform", "time_quadratic", "logsnr", "edm")


class _ScheduleMethods:
    """Methods shared by all schedules, written in terms of ``log_alpha``, ``sigma`` and ``lambda_t``."""

    def alpha(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        """alpha_t = exp(log alpha_t)."""
        return jnp.exp(self.log_alpha(t))

    def sigma_edm(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        """The EDM noise level of time t: sigma_t / alpha_t = exp(-lambda_t)."""
        return jnp.exp(-self.lambda_t(t))

    def drift(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        """f(t) = d log alpha_t / dt (exact, by forward-mode autodiff)."""
        t = jnp.asarray(t)
        return jax.jvp(self.log_alpha, (t,), (jnp.ones_like(t),))[1]

    def diffusion2(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        """g(t)^2 = d sigma_t^2 / dt - 2 f(t) sigma_t^2 (exact, by forward-mode autodiff)."""
        t = jnp.asarray(t)
        sig2 = lambda s: self.sigma(s) ** 2
        s2, ds2 = jax.jvp(sig2, (t,), (jnp.ones_like(t),))
        return ds2 - 2.0 * self.drift(t) * s2

    def pf_ode_velocity(
        self, x: Float[Array, "batch ..."], t: Float[Array, ""], eps: Float[Array, "batch ..."]
    ) -> Float[Array, "batch ..."]:
        """dx/dt of the probability-flow ODE, f(t) x + g(t)^2 / (2 sigma_t) eps (Song et al. 2021, eq. 13)."""
        return self.drift(t) * x + self.diffusion2(t) / (2.0 * self.sigma(t)) * eps

    @property
    def lambda_min(self) -> Float[Array, ""]:
        """lambda at t_max (the noisiest end)."""
        return self.lambda_t(jnp.asarray(self.t_max))

    @property
    def lambda_max(self) -> Float[Array, ""]:
        """lambda at t_min (the cleanest end)."""
        return self.lambda_t(jnp.asarray(self.t_min))

    def model_time(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        """The time a network is conditioned on; continuous schedules use t itself."""
        return jnp.asarray(t)


def _log_sigma_vp(log_alpha: Float[Array, "..."]) -> Float[Array, "..."]:
    """log sigma = 0.5 log(1 - alpha^2), computed with expm1 for accuracy near alpha = 1."""
    return 0.5 * jnp.log(-jnp.expm1(2.0 * log_alpha))


@struct.dataclass
class VPLinear(_ScheduleMethods):
    """Variance-preserving schedule with linear beta(t) = beta_0 + t (beta_1 - beta_0) (DDPM / score-SDE).

    log alpha_t = -(beta_1 - beta_0) t^2 / 4 - beta_0 t / 2, sigma_t = sqrt(1 - alpha_t^2).
    """

    beta_0: float = 0.1
    beta_1: float = 20.0
    t_min: float = 1e-3
    t_max: float = 1.0

    def log_alpha(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        t = jnp.asarray(t)
        return -0.25 * t**2 * (self.beta_1 - self.beta_0) - 0.5 * t * self.beta_0

    def sigma(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        return jnp.exp(_log_sigma_vp(self.log_alpha(t)))

    def lambda_t(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        la = self.log_alpha(t)
        return la - _log_sigma_vp(la)

    def inverse_lambda(self, lam: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        """Closed form of DPM-Solver: solve the quadratic log alpha_t = -0.5 log(1 + e^{-2 lambda})."""
        db = self.beta_1 - self.beta_0
        tmp = 2.0 * db * jnp.logaddexp(-2.0 * lam, 0.0)
        delta = self.beta_0**2 + tmp
        return tmp / (jnp.sqrt(delta) + self.beta_0) / db

    @property
    def prior_std(self) -> float:
        return 1.0


@struct.dataclass
class VPCosine(_ScheduleMethods):
    """Variance-preserving cosine schedule (Nichol & Dhariwal 2021), continuous as in DPM-Solver.

    log alpha_t = log cos((t + s) / (1 + s) * pi / 2) - log cos(s / (1 + s) * pi / 2), s = 0.008,
    t_max = 0.9946 (DPM-Solver's choice, which keeps lambda finite).
    """

    s: float = 0.008
    t_min: float = 1e-3
    t_max: float = 0.9946

    def _log_alpha_0(self):
        return jnp.log(jnp.cos(self.s / (1.0 + self.s) * math.pi / 2.0))

    def log_alpha(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        return jnp.log(jnp.cos((t + self.s) / (1.0 + self.s) * math.pi / 2.0)) - self._log_alpha_0()

    def sigma(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        return jnp.exp(_log_sigma_vp(self.log_alpha(t)))

    def lambda_t(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        la = self.log_alpha(t)
        return la - _log_sigma_vp(la)

    def inverse_lambda(self, lam: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        log_alpha = -0.5 * jnp.logaddexp(-2.0 * lam, 0.0)
        c = jnp.exp(log_alpha + self._log_alpha_0())
        return jnp.arccos(c) * 2.0 * (1.0 + self.s) / math.pi - self.s

    @property
    def prior_std(self) -> float:
        return 1.0


@struct.dataclass
class VPDiscrete(_ScheduleMethods):
    """Variance-preserving schedule given by a discrete beta sequence (DDPM), made continuous.

    As in DPM-Solver's ``NoiseScheduleVP('discrete')``: step n = 0..N-1 sits at t_n = (n + 1) / N with
    log alpha_n = 0.5 sum_{m <= n} log(1 - beta_m); log alpha_t is piecewise linear in t between them.
    A network trained on step indices is conditioned on ``model_time(t)`` = N (t - 1/N).
    Build with :meth:`from_betas` or :meth:`linear`.
    """

    t_array: Float[Array, " n"]
    log_alpha_array: Float[Array, " n"]
    t_min: float
    t_max: float
    total_n: int = struct.field(pytree_node=False, default=1000)

    @classmethod
    def from_betas(cls, betas, *, clip_lambda: float | None = None) -> VPDiscrete:
        """Schedule from a beta sequence of length N >= 2 (host-side constructor).

        Args:
            betas: the DDPM betas, each in (0, 1).
            clip_lambda: if given, drop the trailing steps whose lambda falls below it (DPM-Solver's
                ``numerical_clip_alpha``, -5.1 for cosine-beta models); t_max shrinks accordingly.
        """
        betas = np.asarray(betas, dtype=np.float64)
        if betas.ndim != 1 or betas.shape[0] < 2:
            raise ValueError(
                f"betas: got shape {betas.shape}, expected a 1-D sequence of length >= 2"
            )
        if not np.all((betas > 0) & (betas < 1)):
            raise ValueError("betas: expected every value in (0, 1)")
        log_alphas = 0.5 * np.cumsum(np.log1p(-betas))
        n = betas.shape[0]
        t_array = np.linspace(0.0, 1.0, n + 1)[1:]
        if clip_lambda is not None:
            lam = log_alphas - 0.5 * np.log(-np.expm1(2.0 * log_alphas))
            keep = int(np.sum(lam >= clip_lambda))
            log_alphas, t_array = log_alphas[:keep], t_array[:keep]
        return cls(
            t_array=jnp.asarray(t_array, jnp.float32),
            log_alpha_array=jnp.asarray(log_alphas, jnp.float32),
            t_min=1.0 / n,
            t_max=float(t_array[-1]),
            total_n=n,
        )

    @classmethod
    def linear(cls, n: int = 1000, beta_start: float = 1e-4, beta_end: float = 2e-2) -> VPDiscrete:
        """The DDPM linear-beta schedule with n steps."""
        return cls.from_betas(np.linspace(beta_start, beta_end, n))

    def log_alpha(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        return jnp.interp(t, self.t_array, self.log_alpha_array)

    def sigma(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        return jnp.exp(_log_sigma_vp(self.log_alpha(t)))

    def lambda_t(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        la = self.log_alpha(t)
        return la - _log_sigma_vp(la)

    def inverse_lambda(self, lam: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        log_alpha = -0.5 * jnp.logaddexp(-2.0 * lam, 0.0)
        return jnp.interp(log_alpha, self.log_alpha_array[::-1], self.t_array[::-1])

    def model_time(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        return (jnp.asarray(t) - self.t_min) * self.total_n

    @property
    def prior_std(self) -> float:
        return 1.0


@struct.dataclass
class VE(_ScheduleMethods):
    """Variance-exploding schedule of score-SDE: sigma_t = sigma_min (sigma_max / sigma_min)^t, alpha = 1."""

    sigma_min: float = 0.01
    sigma_max: float = 50.0
    t_min: float = 1e-5
    t_max: float = 1.0

    def log_alpha(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        return jnp.zeros_like(jnp.asarray(t, dtype=jnp.result_type(float)))

    def sigma(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        return self.sigma_min * (self.sigma_max / self.sigma_min) ** t

    def lambda_t(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        return -(jnp.log(self.sigma_min) + t * jnp.log(self.sigma_max / self.sigma_min))

    def inverse_lambda(self, lam: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        return (-lam - jnp.log(self.sigma_min)) / jnp.log(self.sigma_max / self.sigma_min)

    @property
    def prior_std(self) -> float:
        return self.sigma_max


@struct.dataclass
class EDM(_ScheduleMethods):
    """The EDM schedule of Karras et al. (2022): alpha_t = 1, sigma_t = t, t in [sigma_min, sigma_max].

    This is LD3's ``NoiseScheduleVE('edm')``: lambda_t = -log t, inverse_lambda = exp(-lambda).
    """

    t_min: float = 0.002
    t_max: float = 80.0

    def log_alpha(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        return jnp.zeros_like(jnp.asarray(t, dtype=jnp.result_type(float)))

    def sigma(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        return jnp.asarray(t, dtype=jnp.result_type(float))

    def lambda_t(self, t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        return -jnp.log(t)

    def inverse_lambda(self, lam: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        return jnp.exp(-lam)

    @property
    def prior_std(self) -> float:
        return self.t_max


Schedule = VPLinear | VPCosine | VPDiscrete | VE | EDM
SCHEDULES: dict[str, type] = {
    "vp_linear": VPLinear,
    "vp_cosine": VPCosine,
    "vp_discrete": VPDiscrete,
    "ve": VE,
    "edm": EDM,
}


def make_schedule(name: str) -> Schedule:
    """A schedule with its default parameters by name (``vp_discrete`` is DDPM linear with 1000 steps)."""
    if name not in SCHEDULES:
        raise ValueError(f"schedule: got {name!r}, expected one of {sorted(SCHEDULES)}")
    if name == "vp_discrete":
        return VPDiscrete.linear()
    return SCHEDULES[name]()


# ----------------------------------------------------------------------------------------------
# Step selection baselines. All return decreasing steps t_0 = t_max > ... > t_n = t_min.
# ----------------------------------------------------------------------------------------------


def _check_n(n: int) -> None:
    if not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"n: got {n!r}, expected a positive int (number of steps)")


def time_uniform_steps(schedule: Schedule, n: int) -> Float[Array, " n_plus_1"]:
    """t_i = t_max + i / n (t_min - t_max): uniform in time (DPM-Solver ``time_uniform``)."""
    _check_n(n)
    return jnp.linspace(schedule.t_max, schedule.t_min, n + 1)


def time_quadratic_steps(schedule: Schedule, n: int) -> Float[Array, " n_plus_1"]:
    """t_i = (sqrt(t_max) + i / n (sqrt(t_min) - sqrt(t_max)))^2 (DPM-Solver ``time_quadratic``).

    LD3's code has two variants; this is the one of DPM-Solver and of LD3's trainer baseline.
    """
    _check_n(n)
    return jnp.linspace(jnp.sqrt(schedule.t_max), jnp.sqrt(schedule.t_min), n + 1) ** 2


def logsnr_uniform_steps(schedule: Schedule, n: int) -> Float[Array, " n_plus_1"]:
    """t_i = lambda^{-1}(lambda_min + i / n (lambda_max - lambda_min)): uniform in half log-SNR."""
    _check_n(n)
    lam = jnp.linspace(schedule.lambda_min, schedule.lambda_max, n + 1)
    ts = schedule.inverse_lambda(lam)
    return ts.at[0].set(schedule.t_max).at[-1].set(schedule.t_min)


def edm_steps(schedule: Schedule, n: int, *, rho: float = 7.0) -> Float[Array, " n_plus_1"]:
    """EDM steps (Karras et al. 2022, eq. 5) in the EDM noise level s_t = sigma_t / alpha_t = e^{-lambda_t}.

    s_i = (s_max^{1/rho} + i / n (s_min^{1/rho} - s_max^{1/rho}))^rho, t_i = lambda^{-1}(-log s_i).
    For the EDM schedule (alpha = 1, sigma = t) this is exactly ``get_sigmas_karras``; for VP
    schedules it applies the same rule to sigma/alpha (LD3's code instead applies it to t directly).
    """
    _check_n(n)
    s_max = jnp.exp(-schedule.lambda_min)
    s_min = jnp.exp(-schedule.lambda_max)
    ramp = jnp.linspace(0.0, 1.0, n + 1)
    s = (s_max ** (1.0 / rho) + ramp * (s_min ** (1.0 / rho) - s_max ** (1.0 / rho))) ** rho
    ts = schedule.inverse_lambda(-jnp.log(s))
    return ts.at[0].set(schedule.t_max).at[-1].set(schedule.t_min)


def get_time_steps(
    schedule: Schedule, n: int, kind: str, *, rho: float = 7.0
) -> Float[Array, " n1"]:
    """Dispatch to a step-selection baseline by name (one of ``STEP_KINDS``)."""
    if kind == "time_uniform":
        return time_uniform_steps(schedule, n)
    if kind == "time_quadratic":
        return time_quadratic_steps(schedule, n)
    if kind == "logsnr":
        return logsnr_uniform_steps(schedule, n)
    if kind == "edm":
        return edm_steps(schedule, n, rho=rho)
    raise ValueError(f"kind: got {kind!r}, expected one of {STEP_KINDS}")
