"""Contact solver: warm starting and batched sequential impulses (Jax2D ``collision.py`` and
``engine.make_impulse_resolver_fn``).

Contacts of one pair type are solved in *batches*: the manifolds are sorted by ``active``
(stable, inactive first), padded with ``-1`` to ``n_batches * batch_size`` and reshaped to
``(batch_size, n_batches)^T`` so the active contacts spread over the batches. Batches run in
sequence (Gauss-Seidel); the contacts inside a batch are solved in parallel from the same
velocities and their impulses are summed (Jacobi). Padding entries write zero accumulated
impulses to the last manifold slot, exactly like Jax2D's ``.at[-1]`` scatter.

Per contact, with ``r_i = p - x_i`` and unit normal ``n`` from body a to body b:

* normal impulse ``j_n = (-v_n + beta/dt max(0, pen - slop) - v_rest) / k_n``, accumulated and
  clamped to ``>= 0``, with ``k_n = m_a^-1 + m_b^-1 + I_a^-1 (r_a^2 - (r_a.n)^2) + (same for b)``;
* friction ``j_t = -v_t / k_t``, accumulated and clamped to ``|acc_t| <= mu acc_n`` with
  ``mu = sqrt((f_a f_0)^2 + (f_b f_0)^2)``, ``f_0 = base_friction``.

There is no positional correction for contacts (as in the Jax2D code).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Bool, Float, Int

from jaxlab.physics.geometry import cross, cross_sv, nonzero, perp
from jaxlab.physics.state import CollisionManifold, SimParams


@struct.dataclass
class ContactRows:
    """Per-contact data that stays fixed during one step's solver iterations.

    Attributes:
        a, b: [m] global body indices.
        normal, tangent, point: [m, 2].
        bias: [m] Baumgarte velocity bias ``beta/dt * max(0, pen - slop)``.
        v_rest: [m] restitution velocity target.
        mu: [m] friction coefficient.
        mask: [m] whether the contact is solved at all.
        inv_mass_a, inv_mass_b, inv_inertia_a, inv_inertia_b: [m].
    """

    a: Int[Array, " m"]
    b: Int[Array, " m"]
    normal: Float[Array, "m 2"]
    tangent: Float[Array, "m 2"]
    point: Float[Array, "m 2"]
    bias: Float[Array, " m"]
    v_rest: Float[Array, " m"]
    mu: Float[Array, " m"]
    mask: Bool[Array, " m"]
    inv_mass_a: Float[Array, " m"]
    inv_mass_b: Float[Array, " m"]
    inv_inertia_a: Float[Array, " m"]
    inv_inertia_b: Float[Array, " m"]


@struct.dataclass
class BodyConstants:
    """Unified [N] body arrays that do not change during a step's solve."""

    inverse_mass: Float[Array, " n"]
    inverse_inertia: Float[Array, " n"]
    friction: Float[Array, " n"]
    active: Bool[Array, " n"]


def contact_rows(
    m: CollisionManifold,
    a: Int[Array, " m"],
    b: Int[Array, " m"],
    bodies: BodyConstants,
    collision_matrix: Bool[Array, "n n"],
    params: SimParams,
) -> ContactRows:
    """Gather the fixed per-contact data for manifolds ``m`` between bodies ``a`` and ``b``."""
    ima, imb = bodies.inverse_mass[a], bodies.inverse_mass[b]
    mask = (
        m.active
        & jnp.logical_not((ima == 0) & (imb == 0))
        & collision_matrix[a, b]
        & bodies.active[a]
        & bodies.active[b]
    )
    bias = (
        -params.baumgarte_coefficient_collision
        / params.dt
        * jnp.minimum(0.0, -m.penetration + params.slop)
    )
    mu = jnp.sqrt(
        jnp.square(bodies.friction[a] * params.base_friction)
        + jnp.square(bodies.friction[b] * params.base_friction)
    )
    return ContactRows(
        a=a,
        b=b,
        normal=m.normal,
        tangent=perp(m.normal),
        point=m.collision_point,
        bias=bias,
        v_rest=m.restitution_velocity_target,
        mu=mu,
        mask=mask,
        inv_mass_a=ima,
        inv_mass_b=imb,
        inv_inertia_a=bodies.inverse_inertia[a],
        inv_inertia_b=bodies.inverse_inertia[b],
    )


def warm_start_impulses(rows: ContactRows, acc_n, acc_t, position):
    """Velocity changes from re-applying accumulated impulses ``acc_n n + acc_t t``.

    Returns:
        ``(dv_a [m, 2], dv_b [m, 2], dw_a [m], dw_b [m])``, zero for masked contacts.
    """
    r1 = rows.point - position[rows.a]
    r2 = rows.point - position[rows.b]
    p = acc_n[:, None] * rows.normal + acc_t[:, None] * rows.tangent
    out = (
        -p * rows.inv_mass_a[:, None],
        p * rows.inv_mass_b[:, None],
        -rows.inv_inertia_a * cross(r1, p),
        rows.inv_inertia_b * cross(r2, p),
    )
    return jax.tree.map(lambda x: _where_rows(rows.mask, x), out)


def _where_rows(mask, x):
    return jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim)), x, jnp.zeros_like(x))


def contact_impulse(r: ContactRows, r1, r2, va, wa, vb, wb, acc_n, acc_t, live):
    """Normal then friction impulse of contacts solved in parallel (Jax2D ``resolve_collision``).

    Args:
        r: per-contact rows, leaves with leading axis [k].
        r1, r2: [k, 2] arms ``p - x_a`` and ``p - x_b``.
        va, vb: [k, 2] and wa, wb: [k] body velocities.
        acc_n, acc_t: [k] accumulated impulses.
        live: [k] contacts that act (others return zeros, also for the new accumulators).

    Returns:
        ``(dv_a, dv_b, dw_a, dw_b, new_acc_n, new_acc_t)``.
    """
    ima, imb, iia, iib = r.inv_mass_a, r.inv_mass_b, r.inv_inertia_a, r.inv_inertia_b
    n = r.normal
    dv = (vb + cross_sv(wb, r2)) - (va + cross_sv(wa, r1))
    vn = jnp.sum(dv * n, axis=-1)
    rn1 = jnp.sum(r1 * n, axis=-1)
    rn2 = jnp.sum(r2 * n, axis=-1)
    r1sq = jnp.sum(r1 * r1, axis=-1)
    r2sq = jnp.sum(r2 * r2, axis=-1)
    kn = ima + imb + iia * (r1sq - rn1 * rn1) + iib * (r2sq - rn2 * rn2)
    jn = (-vn + r.bias - r.v_rest) / nonzero(kn)
    new_n = jnp.maximum(acc_n + jn, 0.0)
    pn = (new_n - acc_n)[..., None] * n
    dva = -ima[..., None] * pn
    dvb = imb[..., None] * pn
    dwa = -iia * cross(r1, pn)
    dwb = iib * cross(r2, pn)

    t = r.tangent
    dv = (vb + dvb) + cross_sv(wb + dwb, r2) - (va + dva) - cross_sv(wa + dwa, r1)
    vt = jnp.sum(dv * t, axis=-1)
    rt1 = jnp.sum(r1 * t, axis=-1)
    rt2 = jnp.sum(r2 * t, axis=-1)
    kt = ima + imb + iia * (r1sq - rt1 * rt1) + iib * (r2sq - rt2 * rt2)
    jt = -vt / nonzero(kt)
    max_t = r.mu * new_n
    new_t = jnp.clip(acc_t + jt, -max_t, max_t)
    pt = (new_t - acc_t)[..., None] * t
    dva = dva - ima[..., None] * pt
    dwa = dwa - iia * cross(r1, pt)
    dvb = dvb + imb[..., None] * pt
    dwb = dwb + iib * cross(r2, pt)
    return jax.tree.map(lambda x: _where_rows(live, x), (dva, dvb, dwa, dwb, new_n, new_t))


def solve_contacts(
    rows: ContactRows,
    acc_n: Float[Array, " m"],
    acc_t: Float[Array, " m"],
    velocity: Float[Array, "n 2"],
    angular_velocity: Float[Array, " n"],
    position: Float[Array, "n 2"],
    batches: Int[Array, "nb bs"],
):
    """One Gauss-Seidel pass over the contact batches of one pair type (reference layout).

    Mirrors Jax2D's data flow: a ``lax.scan`` over batches gathering rows by manifold index and
    scatter-adding impulses, with the ``-1`` padding scatter-setting the last manifold's
    accumulators.

    Args:
        rows: fixed per-contact data.
        acc_n, acc_t: [m] accumulated impulses.
        velocity, angular_velocity: [N] unified body velocities.
        position: [N] unified body positions (fixed during the pass).
        batches: [n_batches, batch_size] manifold indices, ``-1`` for padding.

    Returns:
        ``(acc_n, acc_t, velocity, angular_velocity)`` after the pass.
    """
    if batches.shape[0] == 0:
        return acc_n, acc_t, velocity, angular_velocity

    def batch(carry, idx):
        acc_n, acc_t, vel, ang = carry
        r = jax.tree.map(lambda x: x[idx], rows)
        r1 = r.point - position[r.a]
        r2 = r.point - position[r.b]
        dva, dvb, dwa, dwb, new_n, new_t = contact_impulse(
            r,
            r1,
            r2,
            vel[r.a],
            ang[r.a],
            vel[r.b],
            ang[r.b],
            acc_n[idx],
            acc_t[idx],
            r.mask & (idx != -1),
        )
        acc_n = acc_n.at[idx].set(new_n)
        acc_t = acc_t.at[idx].set(new_t)
        vel = vel.at[r.a].add(dva).at[r.b].add(dvb)
        ang = ang.at[r.a].add(dwa).at[r.b].add(dwb)
        return (acc_n, acc_t, vel, ang), None

    (acc_n, acc_t, velocity, angular_velocity), _ = jax.lax.scan(
        batch, (acc_n, acc_t, velocity, angular_velocity), batches
    )
    return acc_n, acc_t, velocity, angular_velocity


def solve_contacts_masked(
    rows: ContactRows,
    acc: Float[Array, "m 2"],
    body: Float[Array, "n 5"],
    member: Bool[Array, "nb m"],
    batch_size: int,
):
    """One pass over the batches of one pair type, in natural manifold order (fast solver).

    Batch ``j`` solves, in parallel, exactly the manifolds Jax2D puts in batch ``j`` (those at
    sorted position ``p`` with ``p mod n_batches == j``, see ``batch_membership``); every lane is
    evaluated and non-members are masked, so no per-batch permutation or row gather is needed
    and the body gathers/scatters use the static pair indices. Members that do not act get zero
    accumulators, as in Jax2D, and the ``-1`` padding writes zero the last manifold's
    accumulators after every batch holding padding.

    Args:
        rows: fixed per-contact data in manifold order.
        acc: [m, 2] accumulated ``(normal, tangent)`` impulses.
        body: [N, 5] packed ``(x, y, v_x, v_y, w)``.
        member: [n_batches, m] batch membership.
        batch_size: solver batch size (static; locates Jax2D's padding lanes).

    Returns:
        ``(acc, body)``.
    """
    nb, m = member.shape
    if nb == 0:
        return acc, body
    pad_batches = {p % nb for p in range(m, nb * batch_size)}
    a, b = rows.a, rows.b
    arm_a = rows.point - body[a, :2]
    arm_b = rows.point - body[b, :2]
    # An inactive last manifold already has zero accumulators, so the write is unconditional.
    zero_last = jnp.asarray([j in pad_batches for j in range(nb)])

    def batch(carry, xs):
        acc, body = carry
        in_batch, zero = xs
        ga, gb = body[a], body[b]
        dva, dvb, dwa, dwb, new_n, new_t = contact_impulse(
            rows,
            arm_a,
            arm_b,
            ga[:, 2:4],
            ga[:, 4],
            gb[:, 2:4],
            gb[:, 4],
            acc[:, 0],
            acc[:, 1],
            rows.mask & in_batch,
        )
        acc = jnp.where(in_batch[:, None], jnp.stack([new_n, new_t], -1), acc)
        acc = acc.at[m - 1].set(jnp.where(zero, 0.0, acc[m - 1]))
        zeros = jnp.zeros_like(dva)
        body = body.at[a].add(jnp.concatenate([zeros, dva, dwa[:, None]], -1))
        body = body.at[b].add(jnp.concatenate([zeros, dvb, dwb[:, None]], -1))
        return (acc, body), None

    (acc, body), _ = jax.lax.scan(batch, (acc, body), (member, zero_last))
    return acc, body


def _sorted_rank(active: Bool[Array, " m"]) -> Int[Array, " m"]:
    """Position of each manifold in a stable sort by ``active`` (inactive first)."""
    active = active.astype(jnp.int32)
    n_inactive = active.shape[0] - jnp.sum(active)
    return jnp.where(active == 1, n_inactive + jnp.cumsum(active) - 1, jnp.cumsum(1 - active) - 1)


def batch_order(active: Bool[Array, " m"], batch_size: int) -> Int[Array, "nb bs"]:
    """Jax2D's batch layout: stable sort by ``active``, pad with -1, reshape to
    ``(batch_size, n_batches)`` and transpose, so batch ``j`` holds sorted positions
    ``j, j + n_batches, ...``."""
    m = active.shape[0]
    n_batches = math.ceil(m / batch_size)
    rank = _sorted_rank(active)
    order = jnp.zeros((m,), jnp.int32).at[rank].set(jnp.arange(m, dtype=jnp.int32))
    flat = jnp.full((n_batches * batch_size,), -1, jnp.int32).at[:m].set(order)
    return flat.reshape(batch_size, n_batches).T


def batch_membership(active: Bool[Array, " m"], batch_size: int) -> Bool[Array, "nb m"]:
    """``member[j, i]``: manifold ``i`` is in batch ``j`` of ``batch_order`` (no permutation)."""
    m = active.shape[0]
    n_batches = math.ceil(m / batch_size)
    rank = _sorted_rank(active)
    return (rank[None, :] % n_batches) == jnp.arange(n_batches)[:, None]


def active_batches(active: Bool[Array, " m"], batch_size: int, chunk: int):
    """The layout ``solve_contacts_active`` walks, fixed for a whole step (computed once, outside
    the solver iterations): ``(order [nb, bs + chunk], first active q [nb], active count [nb],
    padding flags [nb])``. Batch ``j``'s active manifolds are ``order[j, q_lo : q_lo + count]``."""
    m = active.shape[0]
    nb = math.ceil(m / batch_size)
    order = batch_order(active, batch_size)
    order = jnp.concatenate([order, jnp.full((nb, chunk), -1, jnp.int32)], axis=1)
    first = m - jnp.sum(active.astype(jnp.int32))  # sorted position of the first active one
    q_lo = jnp.maximum(0, (first - jnp.arange(nb) + nb - 1) // nb)
    q_end = jnp.asarray([(m - i + nb - 1) // nb for i in range(nb)])
    count = jnp.maximum(0, q_end - q_lo)
    pad_batches = {p % nb for p in range(m, nb * batch_size)}
    zero_last = jnp.asarray([i in pad_batches for i in range(nb)])
    return order, q_lo, count, zero_last


def solve_contacts_active(
    rows: ContactRows,
    acc: Float[Array, "m 2"],
    body: Float[Array, "n 5"],
    batches,
    chunk: int,
):
    """One pass over the batches of one pair type, visiting only active manifolds (fast solver,
    pair types spanning several solver batches).

    Same updates as ``solve_contacts``: batch ``j`` solves, in parallel from the velocities
    before it, the manifolds at sorted positions ``p = j + n_batches q`` of ``batch_order``.
    Inactive manifolds sort first and never act (their accumulators are already zero), so batch
    ``j`` is solved over its active positions only, ``chunk`` at a time, in a loop whose trip
    count is the batch's active count (under ``vmap``, the largest over scenes): an L scene
    with a handful of contacts evaluates a handful of rows per batch instead of
    ``batch_size``. The ``-1`` padding writes zero the last manifold's accumulators after every
    batch holding padding, as in Jax2D.

    Args:
        rows: fixed per-contact data in manifold order.
        acc: [m, 2] accumulated ``(normal, tangent)`` impulses.
        body: [N, 5] packed ``(x, y, v_x, v_y, w)``.
        batches: ``active_batches(active, batch_size, chunk)`` of the manifolds' active flags
            (Jax2D's sort key).
        chunk: rows evaluated per loop step (static, as given to ``active_batches``).

    Returns:
        ``(acc, body)``.
    """
    m = acc.shape[0]

    def batch(carry, xs):
        acc, body = carry
        row, lo, cnt, zero = xs
        before = body  # a batch is solved in parallel from the velocities before it

        def rows_step(c, carry):
            acc, body = carry
            idx = jax.lax.dynamic_slice(row, (lo + c * chunk,), (chunk,))
            live = c * chunk + jnp.arange(chunk) < cnt
            slot = jnp.where(live, idx, 0)
            r = jax.tree.map(lambda x: x[slot], rows)
            ga, gb = before[r.a], before[r.b]
            dva, dvb, dwa, dwb, new_n, new_t = contact_impulse(
                r,
                r.point - ga[:, :2],
                r.point - gb[:, :2],
                ga[:, 2:4],
                ga[:, 4],
                gb[:, 2:4],
                gb[:, 4],
                acc[slot, 0],
                acc[slot, 1],
                r.mask & live,
            )
            acc = acc.at[jnp.where(live, slot, m)].set(jnp.stack([new_n, new_t], -1), mode="drop")
            zeros = jnp.zeros_like(dva)
            body = body.at[r.a].add(jnp.concatenate([zeros, dva, dwa[:, None]], -1))
            body = body.at[r.b].add(jnp.concatenate([zeros, dvb, dwb[:, None]], -1))
            return acc, body

        acc, body = jax.lax.fori_loop(0, (cnt + chunk - 1) // chunk, rows_step, (acc, body))
        acc = acc.at[m - 1].set(jnp.where(zero, 0.0, acc[m - 1]))
        return (acc, body), None

    (acc, body), _ = jax.lax.scan(batch, (acc, body), batches)
    return acc, body
