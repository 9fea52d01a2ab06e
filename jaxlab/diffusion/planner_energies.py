"""Guidance energies of Diffusion Planner: differentiable costs of the x_0-estimate (lower = better).

Each energy maps de-normalised joint trajectories x (B, A, 1 + T, 4) (ego first; (x, y, cos, sin)
in the ego frame, index 0 the current state) and the scene tokens to per-scene costs (B,). They
are composed by weights, E = sum_k w_k E_k, and used through
:func:`jaxlab.diffusion.guidance.windowed_guidance` (eps <- eps + sigma_t grad E inside the window).
Every energy steers only the ego's future positions, and its gradient there is smoothed along
time (:func:`smoothing_matrix`), so a guided plan moves as a whole, never point by point.

- ``collision`` (the original's ``collision.py``): penalties relu(1 - d_tj) of the separating-axis
  separation d of the ego box and every valid neighbour (same step) or parked car, all boxes
  inflated by 1 m; the cost exp(mean over overlapping pairs + mean over near pairs)
  (:func:`exp_mean_cost`). Its gradient is projected on the ego's lateral axis at each step and
  smoothed along time with the original's unnormalised Gaussian kernel, times 3. The neighbours'
  predicted states, the parked cars and the ego's heading enter through ``stop_gradient``. The
  lateral projection means it steers round, never brakes: a slow leader on a straight road is
  not avoided by this energy.
- ``drivable``: distance of the ego's position beyond half a lane width (1.75 m) from the nearest
  valid lane-token segment, sum_t relu(dist_t - 1.75)^2.
- ``target_speed``: mean_t (v_t - v_target)^2 / 10 with v_t the signed progress per step along
  the heading, / dt.
- ``comfort``: nuPlan's comfort bounds (longitudinal acceleration in [-4.05, 2.40], |lateral
  acceleration| <= 4.89, |jerk| <= 4.13 m/s^2 or m/s^3) on the signed speeds: mean of the squared
  violations.

The paper uses collision, drivable-area, target-speed and comfort guidance but only the collision
energy is released; the other three forms (their gradients smoothed by the normalised kernel)
are our own **[interp]**.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxlab.core.config import ConfigError

ENERGY_NAMES: tuple[str, ...] = ("collision", "drivable", "target_speed", "comfort")
CAR = (4.5, 2.0)
HALF_LANE = 1.75
INFLATION = 1.0  # m added to every box's length and width (the original's)
COLLISION_GAIN = 3.0  # the original's factor on the smoothed lateral push


def box_separation(
    pa: Float[Array, "... 2"],
    ua: Float[Array, "... 2"],
    sa: Float[Array, "... 2"],
    pb: Float[Array, "... 2"],
    ub: Float[Array, "... 2"],
    sb: Float[Array, "... 2"],
) -> Float[Array, "..."]:
    """Separating-axis separation of oriented boxes given centres p, unit headings u and
    (length, width) s: max over the 4 axes of |d.n| - r_a(n) - r_b(n) (negative: overlap)."""
    la = jnp.stack([-ua[..., 1], ua[..., 0]], -1)
    lb = jnp.stack([-ub[..., 1], ub[..., 0]], -1)
    d = pb - pa
    out = []
    for n in (ua, la, ub, lb):
        ra = 0.5 * (
            sa[..., 0] * jnp.abs(jnp.sum(ua * n, -1)) + sa[..., 1] * jnp.abs(jnp.sum(la * n, -1))
        )
        rb = 0.5 * (
            sb[..., 0] * jnp.abs(jnp.sum(ub * n, -1)) + sb[..., 1] * jnp.abs(jnp.sum(lb * n, -1))
        )
        out.append(jnp.abs(jnp.sum(d * n, -1)) - ra - rb)
    return jnp.max(jnp.stack(out, -1), -1)


def _unit(cs: Float[Array, "... 2"]) -> Float[Array, "... 2"]:
    return cs / jnp.sqrt(jnp.sum(cs * cs, -1, keepdims=True) + 1e-6)


#: the original's smoothing kernel along time: 21 taps exp(-s^2 / 4), s in [-2, 2] (0.2 per
#: step: a Gaussian of 7 steps' standard deviation, 0.7 s at 10 Hz), unnormalised (sum 15.29)
SMOOTH_TAPS = np.exp(-(np.linspace(-2.0, 2.0, 21) ** 2) / 4.0)


def smoothing_matrix(horizon: int, *, normalised: bool = False) -> np.ndarray:
    """(T, T) matrix S of the kernel :data:`SMOOTH_TAPS` along time with the ends repeated
    (the original's ``F.pad(..., mode="replicate")`` then ``conv1d``): (S g)_t =
    sum_k w_k g_clip(t + k - 10, 0, T - 1). ``normalised`` divides by the kernel's sum."""
    half = len(SMOOTH_TAPS) // 2
    s = np.zeros((horizon, horizon))
    for t in range(horizon):
        for k, w in enumerate(SMOOTH_TAPS):
            s[t, min(max(t + k - half, 0), horizon - 1)] += w
    return s / SMOOTH_TAPS.sum() if normalised else s


def smoothed_push(
    value: Float[Array, " B"],
    p: Float[Array, "B T 2"],
    push: Float[Array, "B T 2"],
) -> Float[Array, " B"]:
    """The energy whose value is ``value`` and whose gradient in the ego positions ``p`` is
    ``push`` (the original's surrogate ``sum(push.detach() * x)``): value + sum push (p - p)."""
    push = jax.lax.stop_gradient(push)
    return jax.lax.stop_gradient(value) + jnp.sum(push * (p - jax.lax.stop_gradient(p)), (1, 2))


def collision_penalties(x, scene, inflation: float = INFLATION, clip_distance: float = 1.0):
    """Penalties relu(1 - d / clip_distance) (B, N + S, T) of the separation d between the ego box
    and each valid neighbour (same step) or parked car, both inflated by ``inflation`` metres in
    length and width (the original's ``INFLATION``); invalid entries 0. > 1 means the inflated
    boxes overlap."""
    ego = x[:, 0, 1:]  # (B, T, 4)
    nb = jax.lax.stop_gradient(x[:, 1:, 1:])  # (B, N, T, 4): predictions are not steered
    car = jnp.asarray(CAR, x.dtype) + inflation
    pe, ue = ego[:, None, :, :2], jax.lax.stop_gradient(_unit(ego[:, None, :, 2:]))
    sep_nb = box_separation(
        pe, ue, car[None, None, None], nb[..., :2], _unit(nb[..., 2:]), car[None, None, None]
    )
    st = scene["static"]  # (B, S, 6): x, y, cos, sin, length, width
    sep_st = box_separation(
        pe,
        ue,
        car[None, None, None],
        st[:, :, None, :2],
        _unit(st[:, :, None, 2:4]),
        st[:, :, None, 4:6] + inflation,
    )
    pen_nb = jnp.maximum(1.0 - sep_nb / clip_distance, 0.0)
    pen_st = jnp.maximum(1.0 - sep_st / clip_distance, 0.0)
    pen_nb = jnp.where(scene["neighbour_valid"][:, :, None], pen_nb, 0.0)
    pen_st = jnp.where(scene["static_valid"][:, :, None], pen_st, 0.0)
    return jnp.concatenate([pen_nb, pen_st], 1)


def exp_mean_cost(pen: Float[Array, "B K T"]) -> Float[Array, " B"]:
    """The original's collision cost exp(mean_{pen > 1} pen + mean_{0 < pen <= 1} pen): the means
    over the positive entries only (an entry's count does not depend on how many scene entries
    are far away), overlapping and near pairs averaged apart; 1 with no penalty (zero gradient)."""
    deep = pen > 1.0
    near = (pen > 0.0) & ~deep
    n = lambda m: jnp.sum(m, (1, 2)).astype(pen.dtype) + 1e-5  # noqa: E731
    mean = jnp.sum(jnp.where(deep, pen, 0.0), (1, 2)) / n(deep)
    mean += jnp.sum(jnp.where(near, pen, 0.0), (1, 2)) / n(near)
    return jnp.exp(mean)


def collision_energy(x, scene, cfg, inflation: float = INFLATION, clip_distance: float = 1.0):
    """The original's collision guidance: cost ``exp_mean_cost`` of ``collision_penalties``; its
    gradient in the ego positions g_t is replaced by its lateral part (on the ego's lateral axis
    n_t = (-sin h_t, cos h_t)) smoothed along time, push_t = 3 (S (g . n))_t n_t with the
    unnormalised :func:`smoothing_matrix` S. The longitudinal part is dropped, so the guidance
    steers round an obstacle and never moves a point along the path (no zig-zag, no backward
    step). Weight 1 is the original's."""
    p = x[:, 0, 1:, :2]  # (B, T, 2)
    u = jax.lax.stop_gradient(_unit(x[:, 0, 1:, 2:]))
    n = jnp.stack([-u[..., 1], u[..., 0]], -1)  # lateral axis (B, T, 2)
    x_sg = jax.lax.stop_gradient(x)

    def cost_of(pos):
        return jnp.sum(
            exp_mean_cost(
                collision_penalties(x_sg.at[:, 0, 1:, :2].set(pos), scene, inflation, clip_distance)
            )
        )

    value = exp_mean_cost(collision_penalties(x_sg, scene, inflation, clip_distance))
    g = jax.grad(cost_of)(x_sg[:, 0, 1:, :2])
    lat = jnp.einsum("ts,bs->bt", smoothing_matrix(p.shape[1]).astype(x.dtype), jnp.sum(g * n, -1))
    return smoothed_push(value, p, COLLISION_GAIN * lat[..., None] * n)


def time_smoothed(energy_fn: Callable) -> Callable:
    """``energy_fn`` with its gradient in the ego positions smoothed along time by the normalised
    :func:`smoothing_matrix` (a push at one step becomes a smooth bump over about +-1 s, the same
    total), and no gradient in anything else; the value is unchanged."""

    def smoothed(x, scene, cfg):
        x_sg = jax.lax.stop_gradient(x)
        p = x[:, 0, 1:, :2]

        def cost_of(pos):
            return jnp.sum(energy_fn(x_sg.at[:, 0, 1:, :2].set(pos), scene, cfg))

        value = energy_fn(x_sg, scene, cfg)
        g = jax.grad(cost_of)(x_sg[:, 0, 1:, :2])
        s = smoothing_matrix(p.shape[1], normalised=True).astype(x.dtype)
        return smoothed_push(value, p, jnp.einsum("ts,bsc->btc", s, g))

    return smoothed


def _segment_distance(p: Float[Array, "B T 2"], lanes: Float[Array, "B L P 4"], valid):
    a = lanes[:, :, :-1, :2]  # (B, L, P-1, 2)
    ab = lanes[:, :, 1:, :2] - a
    q = p[:, :, None, None, :]  # (B, T, 1, 1, 2)
    a_, ab_ = a[:, None], ab[:, None]
    w = jnp.clip(jnp.sum((q - a_) * ab_, -1) / jnp.maximum(jnp.sum(ab_ * ab_, -1), 1e-6), 0.0, 1.0)
    diff = a_ + w[..., None] * ab_ - q
    d = jnp.sqrt(jnp.sum(diff * diff, -1) + 1e-6)  # (B, T, L, P-1)
    d = jnp.where(valid[:, None, :, None], d, 1e3)
    return jnp.min(d, (2, 3))


def drivable_energy(x, scene, cfg):
    d = _segment_distance(x[:, 0, 1:, :2], scene["lanes"], scene["lane_valid"])
    return jnp.sum(jnp.maximum(d - HALF_LANE, 0.0) ** 2, -1)


def _speeds(x, dt):
    """Signed speeds (B, T): each step's progress along the heading it starts from,
    (p_t - p_{t-1}) . u_{t-1} / dt, so a point placed behind the previous one is a negative
    speed, never a fast one (as the driving world's tracker reads a plan)."""
    p = x[:, 0, :, :2]
    u = _unit(x[:, 0, :-1, 2:])
    return jnp.sum((p[:, 1:] - p[:, :-1]) * u, -1) / dt  # (B, T)


def target_speed_energy(x, scene, cfg):
    v = _speeds(x, cfg.dt)
    return jnp.mean((v - cfg.target_speed) ** 2, -1) / 10.0


def comfort_energy(x, scene, cfg):
    dt = cfg.dt
    v = _speeds(x, dt)
    acc = (v[:, 1:] - v[:, :-1]) / dt
    jerk = (acc[:, 1:] - acc[:, :-1]) / dt
    u = _unit(x[:, 0, :, 2:])
    cross = u[:, :-1, 0] * u[:, 1:, 1] - u[:, :-1, 1] * u[:, 1:, 0]
    yaw_rate = cross / dt  # small-angle heading change per second
    lat = v * yaw_rate
    viol = (
        jnp.mean(jnp.maximum(acc - 2.40, 0.0) ** 2 + jnp.maximum(-4.05 - acc, 0.0) ** 2, -1)
        + jnp.mean(jnp.maximum(jnp.abs(lat) - 4.89, 0.0) ** 2, -1)
        + jnp.mean(jnp.maximum(jnp.abs(jerk) - 4.13, 0.0) ** 2, -1)
    )
    return viol


ENERGIES: dict[str, Callable] = {
    "collision": collision_energy,
    "drivable": time_smoothed(drivable_energy),
    "target_speed": time_smoothed(target_speed_energy),
    "comfort": time_smoothed(comfort_energy),
}


def make_energy(
    guidance, scene: Mapping[str, Array], cfg, *, check_only: bool = False
) -> Callable[[Float[Array, "B A T1 4"]], Float[Array, " B"]] | None:
    """Compose ``guidance`` = ((name, weight), ...) into one energy of x (or None when every weight
    is 0, so sampling runs the unguided program). Unknown names and negative or non-finite weights
    raise ``ConfigError`` naming the entry."""
    terms = []
    for i, item in enumerate(guidance):
        try:
            name, weight = item
            weight = float(weight)
        except (TypeError, ValueError):
            raise ConfigError(f"guidance[{i}]", item, "a (name, weight) pair") from None
        if name not in ENERGIES:
            raise ConfigError(f"guidance[{i}].name", name, f"one of {ENERGY_NAMES}")
        if not (math.isfinite(weight) and weight >= 0):
            raise ConfigError(f"guidance[{i}].weight", weight, "a finite float >= 0")
        if weight != 0:
            terms.append((ENERGIES[name], weight))
    if check_only or not terms:
        return None

    def energy(x):
        return sum(w * fn(x, scene, cfg) for fn, w in terms)

    return energy
