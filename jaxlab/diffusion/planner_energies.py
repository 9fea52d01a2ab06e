"""Guidance energies of Diffusion Planner: differentiable costs of the x_0-estimate (lower = better).

Each energy maps de-normalised joint trajectories x (B, A, 1 + T, 4) (ego first; (x, y, cos, sin)
in the ego frame, index 0 the current state) and the scene tokens to per-scene costs (B,). They
are composed by weights, E = sum_k w_k E_k, and used through
:func:`jaxlab.diffusion.guidance.windowed_guidance` (eps <- eps + sigma_t grad E inside the window).

- ``collision`` (after the original's ``collision.py``): the separating-axis separation d of the ego
  box and every valid neighbour (same step) or parked car, with 1 m inflation:
  sum_{t, j} relu(1 - d_tj). The original also clips the penalty at 1 m; clipping zeroes the
  gradient of deep overlaps, which the x_0-estimates of early steps are full of, so ``clip`` is
  off (None) by default here. As in the original, only the ego plan is steered: the neighbours'
  predicted states, the parked cars and the ego's heading enter through ``stop_gradient`` (without
  it the gradient mostly moves the predicted neighbours out of the ego's way, which changes
  nothing the ego does). Not implemented: the original's Gaussian smoothing of the gradient along
  time and its projection on the lateral axis (it zeroes the longitudinal part, so it cannot brake
  behind a slow leader, the main collision of the straight-road scenes here).
- ``drivable``: distance of the ego's position beyond half a lane width (1.75 m) from the nearest
  valid lane-token segment, sum_t relu(dist_t - 1.75)^2.
- ``target_speed``: mean_t (v_t - v_target)^2 / 10 with v_t = |p_t - p_{t-1}| / dt.
- ``comfort``: nuPlan's comfort bounds (longitudinal acceleration in [-4.05, 2.40], |lateral
  acceleration| <= 4.89, |jerk| <= 4.13 m/s^2 or m/s^3): mean of the squared violations.

The paper uses collision, drivable-area, target-speed and comfort guidance but only the collision
energy is released; the other three forms here are our own **[interp]**.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.core.config import ConfigError

ENERGY_NAMES: tuple[str, ...] = ("collision", "drivable", "target_speed", "comfort")
CAR = (4.5, 2.0)
HALF_LANE = 1.75


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


def collision_energy(x, scene, cfg, inflation: float = 1.0, clip: float | None = None):
    ego = x[:, 0, 1:]  # (B, T, 4)
    nb = jax.lax.stop_gradient(x[:, 1:, 1:])  # (B, N, T, 4): predictions are not steered
    car = jnp.asarray(CAR, x.dtype)
    pe, ue = ego[:, None, :, :2], jax.lax.stop_gradient(_unit(ego[:, None, :, 2:]))
    sep_nb = box_separation(
        pe, ue, car[None, None, None], nb[..., :2], _unit(nb[..., 2:]), car[None, None, None]
    )
    pen_nb = jnp.maximum(inflation - sep_nb, 0.0)
    pen_nb = jnp.where(scene["neighbour_valid"][:, :, None], pen_nb, 0.0)
    st = scene["static"]  # (B, S, 6): x, y, cos, sin, length, width
    sep_st = box_separation(
        pe,
        ue,
        car[None, None, None],
        st[:, :, None, :2],
        _unit(st[:, :, None, 2:4]),
        st[:, :, None, 4:6],
    )
    pen_st = jnp.maximum(inflation - sep_st, 0.0)
    if clip is not None:
        pen_nb, pen_st = jnp.minimum(pen_nb, clip), jnp.minimum(pen_st, clip)
    pen_st = jnp.where(scene["static_valid"][:, :, None], pen_st, 0.0)
    return jnp.sum(pen_nb, (1, 2)) + jnp.sum(pen_st, (1, 2))


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
    p = x[:, 0, :, :2]
    step = p[:, 1:] - p[:, :-1]
    return jnp.sqrt(jnp.sum(step * step, -1) + 1e-6) / dt  # (B, T)


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
    "drivable": drivable_energy,
    "target_speed": target_speed_energy,
    "comfort": comfort_energy,
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
