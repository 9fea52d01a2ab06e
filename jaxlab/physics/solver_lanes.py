"""The fast solver's iterations in a lanes-last layout (scenes on the minor axis).

``jax.vmap`` over scenes puts the scene axis first, so every array of the sequential-impulse
solver is ``[scenes, k]`` with ``k`` a handful of contacts, bodies or vector components: the
CPU's vector units then run over a few elements at a time, and gathers, scatters and the
``(x, y)`` reductions walk memory with tiny strides. This module solves the same iterations
with every quantity ``[..., B]``: components are separate arrays, bodies and contacts lead, and
the ``B`` scenes are the minor (contiguous) axis, so each update is one wide vector operation
over all scenes.

``solve_iterations`` is a ``jax.custom_batching.custom_vmap`` function: called on one scene it
runs with ``B = 1``; under ``vmap`` its rule moves the scene axis of every batched input to the
end (broadcasting unbatched ones), runs once over all lanes and moves the axis back. Nested
``vmap`` batches that rule normally.

The arithmetic is the per-scene solver's, term by term in the same order (``contact_impulse``
and ``resolve_joint_dynamic`` written over components). Batch ``j`` of a pair type solves, in
parallel, exactly the manifolds Jax2D puts in batch ``j`` (sorted position ``p`` with
``p mod n_batches == j``, ``contact.batch_membership``), evaluated over all the type's pair
slots with non-members masked, so no per-scene permutation or row gather is needed; members
that do not act get zero accumulators and the ``-1`` padding of a batch zeroes the last
manifold's accumulators, as in Jax2D. Scatter-adds of a contact pass use the static pair
indices; a joint's bodies (state, so traced per scene) are selected and updated through one-hot
masks, which add exact zeros elsewhere.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

from jaxlab.physics.contact import ContactRows
from jaxlab.physics.geometry import nonzero
from jaxlab.physics.joints import _FRAME_FIELDS

# Packed body state ``(x, y, v_x, v_y, w)`` on the leading axis: [5, N, B].
_X, _Y, _VX, _VY, _W = range(5)


def _impulse(r, arm, ga, gb, acc_n, acc_t, live):
    """``contact.contact_impulse`` over components; every array [m, B]."""
    r1x, r1y, r2x, r2y = arm
    vax, vay, wa = ga[_VX], ga[_VY], ga[_W]
    vbx, vby, wb = gb[_VX], gb[_VY], gb[_W]
    ima, imb, iia, iib = r.inv_mass_a, r.inv_mass_b, r.inv_inertia_a, r.inv_inertia_b
    nx, ny = r.normal[:, 0], r.normal[:, 1]
    dvx = (vbx + -wb * r2y) - (vax + -wa * r1y)
    dvy = (vby + wb * r2x) - (vay + wa * r1x)
    vn = dvx * nx + dvy * ny
    rn1 = r1x * nx + r1y * ny
    rn2 = r2x * nx + r2y * ny
    r1sq = r1x * r1x + r1y * r1y
    r2sq = r2x * r2x + r2y * r2y
    kn = ima + imb + iia * (r1sq - rn1 * rn1) + iib * (r2sq - rn2 * rn2)
    jn = (-vn + r.bias - r.v_rest) / nonzero(kn)
    new_n = jnp.maximum(acc_n + jn, 0.0)
    dn = new_n - acc_n
    pnx, pny = dn * nx, dn * ny
    dvax, dvay = -ima * pnx, -ima * pny
    dvbx, dvby = imb * pnx, imb * pny
    dwa = -iia * (r1x * pny - r1y * pnx)
    dwb = iib * (r2x * pny - r2y * pnx)

    tx, ty = r.tangent[:, 0], r.tangent[:, 1]
    wb2, wa2 = wb + dwb, wa + dwa
    dvx = (((vbx + dvbx) + -wb2 * r2y) - (vax + dvax)) - -wa2 * r1y
    dvy = (((vby + dvby) + wb2 * r2x) - (vay + dvay)) - wa2 * r1x
    vt = dvx * tx + dvy * ty
    rt1 = r1x * tx + r1y * ty
    rt2 = r2x * tx + r2y * ty
    kt = ima + imb + iia * (r1sq - rt1 * rt1) + iib * (r2sq - rt2 * rt2)
    jt = -vt / nonzero(kt)
    max_t = r.mu * new_n
    new_t = jnp.clip(acc_t + jt, -max_t, max_t)
    dt_ = new_t - acc_t
    ptx, pty = dt_ * tx, dt_ * ty
    dvax, dvay = dvax - ima * ptx, dvay - ima * pty
    dwa = dwa - iia * (r1x * pty - r1y * ptx)
    dvbx, dvby = dvbx + imb * ptx, dvby + imb * pty
    dwb = dwb + iib * (r2x * pty - r2y * ptx)
    zero = jnp.zeros_like(new_n)
    out = (dvax, dvay, dwa, dvbx, dvby, dwb, new_n, new_t)
    return tuple(jnp.where(live, x, zero) for x in out)


# The pair indices are static: gathers and scatter-adds are written with Python-int slices, so
# the traced solver holds no array constants (an enclosing transformation that batches every
# input of a ``custom_vmap`` call, e.g. ``vmap`` of ``lax.cond``, would batch those too).


def _gather(x, index):
    """``x[:, index]`` for a static tuple ``index``: [C, N, B] -> [C, m, B]."""
    return jnp.stack([x[:, i] for i in index], axis=1)


def _scatter_add(x, index_a, d_a, index_b, d_b):
    """``x.at[:, a].add(d_a).at[:, b].add(d_b)`` for static tuples, adding each body's
    contributions in slot order (all of ``a``'s, then ``b``'s)."""
    rows = []
    for n in range(x.shape[1]):
        row = x[:, n]
        for k, i in enumerate(index_a):
            if i == n:
                row = row + d_a[:, k]
        for k, i in enumerate(index_b):
            if i == n:
                row = row + d_b[:, k]
        rows.append(row)
    return jnp.stack(rows, axis=1)


def _flags(values):
    """A static tuple of booleans as a traced [len] array built from an iota (no constant)."""
    j = jax.lax.iota(jnp.int32, len(values))
    out = j < 0
    for i, v in enumerate(values):
        if v:
            out = out | (j == i)
    return out


def _contact_pass(rows: ContactRows, a, b, acc, body, member, zero_last):
    """One Gauss-Seidel pass over the batches of one pair type (module docstring).

    ``a``, ``b``: static [m] pair indices; ``acc`` [2, m, B]; ``body`` [5, N, B];
    ``member`` [nb, m, B]; ``zero_last`` [nb] static flags (the ``-1`` padding write).
    """
    nb, m = member.shape[0], member.shape[1]
    if nb == 0:
        return acc, body
    px_, py_ = rows.point[:, 0], rows.point[:, 1]
    ga, gb = _gather(body, a), _gather(body, b)
    arm = (px_ - ga[_X], py_ - ga[_Y], px_ - gb[_X], py_ - gb[_Y])

    def batch(carry, xs):
        acc, body = carry
        in_batch, zero = xs
        dvax, dvay, dwa, dvbx, dvby, dwb, new_n, new_t = _impulse(
            rows, arm, _gather(body, a), _gather(body, b), acc[0], acc[1], rows.mask & in_batch
        )
        acc = jnp.where(in_batch[None], jnp.stack([new_n, new_t]), acc)
        acc = acc.at[:, m - 1].set(jnp.where(zero, 0.0, acc[:, m - 1]))
        vel = _scatter_add(
            body[2:], a, jnp.stack([dvax, dvay, dwa]), b, jnp.stack([dvbx, dvby, dwb])
        )
        body = jnp.concatenate([body[:2], vel])
        return (acc, body), None

    (acc, body), _ = jax.lax.scan(batch, (acc, body), (member, zero_last))
    return acc, body


def _joint(f, sa, sb, acc_impulse, acc_r_impulse, params):
    """``joints.resolve_joint_dynamic`` over components; ``sa``, ``sb`` [5, B]."""
    xax, xay, vax, vay, wa = sa
    xbx, xby, vbx, vby, wb = sb
    ima, imb = f["inv_mass_a"], f["inv_mass_b"]
    iia, iib = f["inv_inertia_a"], f["inv_inertia_b"]
    rax, ray, rbx, rby = f["r_a"][0], f["r_a"][1], f["r_b"][0], f["r_b"][1]
    apx, apy = xax + rax, xay + ray
    bpx, bpy = xbx + rbx, xby + rby
    ia, ib = nonzero(ima), nonzero(imb)
    den = (1 / ia) + (1 / ib)
    mx = (apx / ia + bpx / ib) / den
    my = (apy / ia + bpy / ib) / den
    pxx = jnp.where(ima == 0, apx, jnp.where(imb == 0, bpx, mx))
    pxy = jnp.where(ima == 0, apy, jnp.where(imb == 0, bpy, my))
    qbx, qby, qax, qay = pxx - xbx, pxy - xby, pxx - xax, pxy - xay
    vrx = (vbx + -wb * qby) - (vax + -wa * qay)
    vry = (vby + wb * qbx) - (vay + wa * qax)
    norm = nonzero(jnp.sqrt(vrx * vrx + vry * vry))
    dx, dy = vrx / norm, vry / norm
    ex, ey = bpx - apx, bpy - apy
    beta_v = params.baumgarte_coefficient_joints_v
    ix, iy = vrx + beta_v * ex, vry + beta_v * ey
    den = nonzero(
        f["sum_inv_mass"]
        + (jnp.square(rax * dy - ray * dx) * iia + jnp.square(rbx * dy - rby * dx) * iib)
    )
    ix, iy = ix / den * params.joint_stiffness, iy / den * params.joint_stiffness

    dvax, dvay = ima * ix, ima * iy
    dwa = (rax * iy - ray * ix) * iia
    dvbx, dvby = -imb * ix, -imb * iy
    dwb = -(rbx * iy - rby * ix) * iib
    beta_p = params.baumgarte_coefficient_joints_p
    sx, sy = ex / f["sum_inv_mass"], ey / f["sum_inv_mass"]
    dxax, dxay = sx * ima * beta_p, sy * ima * beta_p
    dxbx, dxby = -sx * imb * beta_p, -sy * imb * beta_p

    raw_dw = wb + dwb - wa - dwa
    bias = f["angular_bias"]
    fixed = f["is_fixed"] > 0.5
    dw = jnp.where(fixed, raw_dw + bias, (jnp.sign(raw_dw) == jnp.sign(bias)) * (raw_dw + bias))
    r_imp = dw / f["sum_inv_inertia"] * (f["applies_angular"] > 0.5)
    dwa = dwa + r_imp * iia
    dwb = dwb - r_imp * iib
    acc_r = jnp.where(fixed, r_imp + acc_r_impulse, 0.0)
    out_a = jnp.stack([dxax, dxay, dvax, dvay, dwa])
    out_b = jnp.stack([dxbx, dxby, dvbx, dvby, dwb])
    jstate = jnp.stack([pxx, pxy, ix + acc_impulse[0], iy + acc_impulse[1], acc_r])
    acts = f["acts"] > 0.5
    return tuple(jnp.where(acts, x, jnp.zeros_like(x)) for x in (out_a, out_b, jstate))


def _frame_fields(frames):
    """Packed joint frames [J, 14, B] (``joints.pack_frame`` columns) as named [J, ..., B]."""
    out, start = {}, 0
    for name, width in _FRAME_FIELDS:
        out[name] = frames[:, start] if width == 1 else frames[:, start : start + width]
        start += width
    return out


def _solve_lanes(body, jstate, frames, onehot_a, onehot_b, accs, passes, params, static):
    """All solver iterations; every array carries the lanes axis last.

    ``body`` [5, N, B]; ``jstate`` [J, 5, B] (joint point, impulse, angular impulse);
    ``frames`` [J, 14, B]; ``onehot_a/b`` [J, N, B]; ``accs`` tuple of [2, m, B];
    ``passes`` tuple of ``(rows, member)`` per pass; ``static``: ``(iterations, pair indices
    per pass, zero_last flags per pass)``.
    """
    iterations, pair_index, zero_flags = static
    f = _frame_fields(frames)
    num_joints = frames.shape[0]

    def one_joint(body, xs):
        fj, oa, ob, js = xs
        sa = jnp.sum(jnp.where(oa[None], body, 0.0), axis=1)
        sb = jnp.sum(jnp.where(ob[None], body, 0.0), axis=1)
        da, db, out = _joint(fj, sa, sb, js[2:4], js[4], params)
        body = body + jnp.where(oa[None], da[:, None], 0.0)
        body = body + jnp.where(ob[None], db[:, None], 0.0)
        return body, out

    def iteration(carry, _):
        body, jstate, accs = carry
        if num_joints:
            body, jstate = jax.lax.scan(one_joint, body, (f, onehot_a, onehot_b, jstate))
        out = []
        for (rows, member), acc, (a, b), zero in zip(
            passes, accs, pair_index, zero_flags, strict=True
        ):
            acc, body = _contact_pass(rows, a, b, acc, body, member, _flags(zero))
            out.append(acc)
        return (body, jstate, tuple(out)), None

    (body, jstate, accs), _ = jax.lax.scan(
        iteration, (body, jstate, tuple(accs)), None, length=iterations
    )
    return body, jstate, accs


@functools.cache
def _core(static):
    """The ``custom_vmap`` solver for one static configuration (see the module docstring)."""

    @custom_vmap
    def core(args):
        lanes = jax.tree.map(lambda x: jnp.asarray(x)[..., None], args)
        out = _solve_lanes(*lanes, static=static)
        return jax.tree.map(lambda x: x[..., 0], out)

    @core.def_vmap
    def rule(axis_size, in_batched, args):
        (batched,) = in_batched

        def to_lanes(x, b):
            x = jnp.asarray(x)
            if b:
                return jnp.moveaxis(x, 0, -1)
            return jnp.broadcast_to(x[..., None], x.shape + (axis_size,))

        lanes = jax.tree.map(to_lanes, args, batched)
        out = _solve_lanes(*lanes, static=static)
        out = jax.tree.map(lambda x: jnp.moveaxis(x, -1, 0), out)
        return out, jax.tree.map(lambda _: True, out)

    return core


def solve_iterations(pos, vel, ang, jstate, acc, frames, joint_a, joint_b, passes, params, sp):
    """The fast solver's iterations for one scene (vmap it over scenes).

    Args:
        pos, vel: [N, 2] and ang: [N] unified body state after warm starting.
        jstate: ``(global_position [J, 2], acc_impulse [J, 2], acc_r_impulse [J])``.
        acc: ``(rr point 0 [R, 2], rr point 1 [R, 2], cr [C, 2], cc [K, 2])`` accumulated
            ``(normal, tangent)`` impulses per pass.
        frames: [J, 14] packed joint frames (``joints.pack_frame``).
        joint_a, joint_b: [J] body indices of the joints.
        passes: per pass ``(rows, member [nb, m], (a, b))`` with static numpy pair indices.
        params: ``SimParams``; sp: ``StaticSimParams``.

    Returns:
        ``(pos, vel, ang, jstate, acc)`` in the same layouts.
    """
    n = pos.shape[0]
    body = jnp.stack([pos[:, 0], pos[:, 1], vel[:, 0], vel[:, 1], ang])
    gpos, jacc, jacc_r = jstate
    js = jnp.concatenate([gpos, jacc, jacc_r[:, None]], -1)
    bodies = jnp.arange(n)
    onehot_a = joint_a[:, None] == bodies[None, :]
    onehot_b = joint_b[:, None] == bodies[None, :]
    zero_flags, pair_index, lanes_passes = [], [], []
    for rows, member, (a, b) in passes:
        nb, m = member.shape
        pad = {p % nb for p in range(m, nb * sp.solver_batch_size)} if nb else set()
        zero_flags.append(tuple(j in pad for j in range(nb)))
        pair_index.append((tuple(int(i) for i in a), tuple(int(i) for i in b)))
        lanes_passes.append((rows, member))
    static = (sp.num_solver_iterations, tuple(pair_index), tuple(zero_flags))
    accs = tuple(jnp.moveaxis(x, -1, 0) for x in acc)
    args = (body, js, frames, onehot_a, onehot_b, accs, tuple(lanes_passes), params)
    body, js, accs = _core(static)(args)
    jstate = (js[:, :2], js[:, 2:4], js[:, 4])
    acc = tuple(jnp.moveaxis(x, 0, -1) for x in accs)
    return body[:2].T, body[2:4].T, body[4], jstate, acc
