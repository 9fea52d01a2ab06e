"""The physics step (Jax2D ``PhysicsEngine.step``; paper Algorithm 1).

Order of one step of length ``dt``:

1. gravity ``v += g dt`` on every body with nonzero inverse mass;
2. contact manifolds from the positions before integration (warm-start keep rule);
3. motors (one angular impulse per revolute joint, from the motor actions);
4. thrusters (impulse ``power * base_thruster_power * u * dt`` from the thruster actions);
5. warm starting (polygon-polygon, circle-polygon, circle-circle contacts, then joints);
6. ``num_solver_iterations`` x [joints in sequence, then polygon-polygon contacts (point 0 pass,
   point 1 pass), circle-polygon and circle-circle contacts in solver batches];
7. symplectic Euler ``x += v dt``, ``theta += w dt``, clipping of positions and velocities, and
   the thrusters' cached world positions.

Bodies are handled in one unified [P + C] array (global index order) inside the step, which
keeps every update in the same order as Jax2D's separate polygon and circle arrays.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.core.compile import jit
from jaxlab.physics.collision import compute_manifolds, pair_indices
from jaxlab.physics.contact import (
    BodyConstants,
    active_batches,
    batch_membership,
    batch_order,
    contact_rows,
    solve_contacts,
    solve_contacts_active,
    solve_contacts_masked,
    warm_start_impulses,
)
from jaxlab.physics.geometry import concat_bodies, cross, rotate
from jaxlab.physics.joints import (
    joint_frame,
    joint_warm_start_impulse,
    motor_impulse,
    pack_frame,
    resolve_joint,
    resolve_joint_dynamic,
    unpack_frame,
)
from jaxlab.physics.solver_lanes import solve_iterations
from jaxlab.physics.state import (
    CollisionManifold,
    RigidBody,
    SimParams,
    SimState,
    StaticSimParams,
)

Manifolds = tuple[CollisionManifold, CollisionManifold, CollisionManifold]


def _split(x, num_polygons):
    return x[:num_polygons], x[num_polygons:]


def _scatter_add(x, i_a, d_a, i_b, d_b):
    return x.at[i_a].add(d_a).at[i_b].add(d_b)


def apply_thrusters(
    state: SimState,
    bodies: RigidBody,
    velocity,
    angular_velocity,
    thruster_actions: Float[Array, " t"],
    params: SimParams,
):
    """Thruster impulses ``F = power * base_thruster_power * u * dt`` along
    ``theta_thruster + theta_parent``, with torque ``I^-1 (R r) x d F``."""
    th = state.thruster
    idx = th.object_index
    parent_rot = bodies.rotation[idx]
    arm = rotate(parent_rot, th.relative_position)
    angle = th.rotation + parent_rot
    direction = jnp.stack([jnp.cos(angle), jnp.sin(angle)], -1)
    force = th.power * th.active * params.base_thruster_power * thruster_actions * params.dt
    dw = bodies.inverse_inertia[idx] * cross(arm, direction) * force
    dv = bodies.inverse_mass[idx][:, None] * direction * force[:, None]
    return velocity.at[idx].add(dv), angular_velocity.at[idx].add(dw)


def _check_step_args(sp: StaticSimParams, actions: Array, solver: str) -> None:
    """Raises ValueError unless ``actions`` has one entry per joint and thruster, and a known solver."""
    if actions.shape != (sp.num_joints + sp.num_thrusters,):
        raise ValueError(
            f"actions has shape {actions.shape}; expected ({sp.num_joints + sp.num_thrusters},) "
            "= num_joints + num_thrusters"
        )
    if solver not in _SOLVERS:
        raise ValueError(f"solver={solver!r}; expected one of {_SOLVERS}")


def _warm_start(rows, manifolds, pairs, bodies, joints, pos, vel, ang, J):
    """Step 5: applies last step's accumulated contact and joint impulses to (vel, ang)."""
    (rows_rr, rows_cr, rows_cc), (m_rr, m_cr, m_cc), (g_rr, g_cr, g_cc) = rows, manifolds, pairs
    w0 = warm_start_impulses(
        rows_rr[0], m_rr.acc_impulse_normal[:, 0], m_rr.acc_impulse_tangent[:, 0], pos
    )
    w1 = warm_start_impulses(
        rows_rr[1], m_rr.acc_impulse_normal[:, 1], m_rr.acc_impulse_tangent[:, 1], pos
    )
    dva, dvb, dwa_, dwb_ = jax.tree.map(jnp.add, w0, w1)
    vel = _scatter_add(vel, g_rr[0], dva, g_rr[1], dvb)
    ang = _scatter_add(ang, g_rr[0], dwa_, g_rr[1], dwb_)
    for rows, m, g in ((rows_cr, m_cr, g_cr), (rows_cc, m_cc, g_cc)):
        dva, dvb, dwa_, dwb_ = warm_start_impulses(
            rows, m.acc_impulse_normal, m.acc_impulse_tangent, pos
        )
        vel = _scatter_add(vel, g[0], dva, g[1], dvb)
        ang = _scatter_add(ang, g[0], dwa_, g[1], dwb_)

    def joint_ws(j):
        jt = jax.tree.map(lambda x: x[j], joints)
        a = _view(bodies, jt.a_index, pos, vel, ang)
        b = _view(bodies, jt.b_index, pos, vel, ang)
        return joint_warm_start_impulse(a, b, jt)

    dva, dvb, dwa_, dwb_ = jax.vmap(joint_ws)(jnp.arange(J))
    vel = _scatter_add(vel, joints.a_index, dva, joints.b_index, dvb)
    ang = _scatter_add(ang, joints.a_index, dwa_, joints.b_index, dwb_)
    return vel, ang


def _integrate(state, bodies, pos, vel, ang, params, P):
    """Step 7: symplectic Euler, clipping, and the bodies and thruster positions written back."""
    pos = pos + vel * params.dt
    rot = bodies.rotation + ang * params.dt
    pos = jnp.clip(pos, -params.clip_position, params.clip_position)
    vel = jnp.clip(vel, -params.clip_velocity, params.clip_velocity)
    ang = jnp.clip(ang, -params.clip_angular_velocity, params.clip_angular_velocity)
    (pp, cp), (pr, cr_), (pv, cv), (pa, ca) = (
        _split(pos, P),
        _split(rot, P),
        _split(vel, P),
        _split(ang, P),
    )
    state = state.replace(
        polygon=state.polygon.replace(position=pp, rotation=pr, velocity=pv, angular_velocity=pa),
        circle=state.circle.replace(position=cp, rotation=cr_, velocity=cv, angular_velocity=ca),
    )
    th = state.thruster
    th_idx = th.object_index
    state = state.replace(
        thruster=th.replace(global_position=pos[th_idx] + rotate(rot[th_idx], th.relative_position))
    )
    return state


def step(
    state: SimState,
    params: SimParams,
    static_params: StaticSimParams,
    actions: Float[Array, " a"],
    *,
    solver: str = "fast",
) -> tuple[SimState, Manifolds]:
    """Advance the scene by ``params.dt``.

    Args:
        state: current state.
        params: numerical parameters (traced).
        static_params: capacities and solver sizes (static under ``jit``).
        actions: [num_joints + num_thrusters]: motor actions of the joint slots, then thruster
            actions.
        solver: ``"fast"`` (default) or ``"reference"``. Both run the same updates in the same
            order; ``"reference"`` mirrors Jax2D's array layout (scans, gathers, scatters) and
            matches it to float32 round-off; ``"fast"`` solves each contact batch over all its
            pair slots with non-members masked, with the scenes of a ``vmap`` on the minor axis
            (``solver_lanes``; sizes with at most two batches per pair type, else a
            scene-major layout solving each batch over its active manifolds only,
            ``contact.solve_contacts_active``), and may differ by round-off (its trajectories stay
            within the original's own one-extra-iteration sensitivity, see
            ``tests/physics/test_fidelity.py``).

    Returns:
        ``(new_state, (rr, cr, cc))``: the solved manifolds of this step, polygon-polygon ones
        reduced to their first contact point (Jax2D's return value, used for rewards).
    """
    # Kept whole: Jax2D's step (Kinetix, ICLR 2025); split, its fixed stage order 1-7 would scatter.
    sp = static_params
    P, J = sp.num_polygons, sp.num_joints
    _check_step_args(sp, actions, solver)
    motor_actions = actions[:J]
    thruster_actions = actions[J:]
    cc, cr, rr = pair_indices(sp)
    bs = sp.solver_batch_size

    # 1. Gravity.
    def gravity(body: RigidBody) -> RigidBody:
        g = state.gravity[None, :] * params.dt * (body.inverse_mass != 0)[:, None]
        return body.replace(velocity=body.velocity + g)

    state = state.replace(polygon=gravity(state.polygon), circle=gravity(state.circle))

    # 2. Manifolds.
    m_rr, m_cr, m_cc = compute_manifolds(
        state.polygon,
        state.circle,
        (state.acc_rr_manifolds, state.acc_cr_manifolds, state.acc_cc_manifolds),
        (cc, cr, rr),
    )

    bodies = concat_bodies(state)
    vel, ang, pos = bodies.velocity, bodies.angular_velocity, bodies.position
    joints = state.joint

    # 3. Motors.
    def motor(j, u):
        jt = jax.tree.map(lambda x: x[j], joints)
        a = _view(bodies, jt.a_index, pos, vel, ang)
        b = _view(bodies, jt.b_index, pos, vel, ang)
        return motor_impulse(a, b, jt, u, params)

    dwa, dwb = jax.vmap(motor)(jnp.arange(J), motor_actions)
    ang = _scatter_add(ang, joints.a_index, dwa, joints.b_index, dwb)

    # 4. Thrusters.
    vel, ang = apply_thrusters(state, bodies, vel, ang, thruster_actions, params)

    # 5. Warm starting.
    consts = BodyConstants(
        inverse_mass=bodies.inverse_mass,
        inverse_inertia=bodies.inverse_inertia,
        friction=bodies.friction,
        active=bodies.active,
    )
    cm = state.collision_matrix
    g_rr = (jnp.asarray(rr[:, 0]), jnp.asarray(rr[:, 1]))
    g_cr = (jnp.asarray(cr[:, 0] + P), jnp.asarray(cr[:, 1]))
    g_cc = (jnp.asarray(cc[:, 0] + P), jnp.asarray(cc[:, 1] + P))
    rows_rr = [contact_rows(_point(m_rr, k), *g_rr, consts, cm, params) for k in range(2)]
    rows_cr = contact_rows(m_cr, *g_cr, consts, cm, params)
    rows_cc = contact_rows(m_cc, *g_cc, consts, cm, params)

    if sp.do_warm_starting:
        vel, ang = _warm_start(
            (rows_rr, rows_cr, rows_cc),
            (m_rr, m_cr, m_cc),
            (g_rr, g_cr, g_cc),
            bodies,
            joints,
            pos,
            vel,
            ang,
            J,
        )

    # 6. Solver iterations.
    rr_active = m_rr.active[:, 0] | m_rr.active[:, 1]
    acc0 = (
        m_rr.acc_impulse_normal,
        m_rr.acc_impulse_tangent,
        m_cr.acc_impulse_normal,
        m_cr.acc_impulse_tangent,
        m_cc.acc_impulse_normal,
        m_cc.acc_impulse_tangent,
    )
    jstate0 = (joints.global_position, joints.acc_impulse, joints.acc_r_impulse)
    if solver == "reference":
        b_rr = batch_order(rr_active, bs)
        b_cr = batch_order(m_cr.active, bs)
        b_cc = batch_order(m_cc.active, bs)
        contacts = ((rows_rr[0], rows_rr[1], b_rr), (rows_cr, b_cr), (rows_cc, b_cc))
        pos, vel, ang, jstate, acc = _solve_reference(
            pos, vel, ang, jstate0, acc0, bodies, joints, contacts, params, sp
        )
    elif _lanes_pays(sp):
        member_rr = batch_membership(rr_active, bs)
        passes = (
            (rows_rr[0], member_rr, (rr[:, 0], rr[:, 1])),
            (rows_rr[1], member_rr, (rr[:, 0], rr[:, 1])),
            (rows_cr, batch_membership(m_cr.active, bs), (cr[:, 0] + P, cr[:, 1])),
            (rows_cc, batch_membership(m_cc.active, bs), (cc[:, 0] + P, cc[:, 1] + P)),
        )
        accs = _per_pass(acc0)
        frames = _joint_frames(bodies, joints, params, J)
        pos, vel, ang, jstate, accs = solve_iterations(
            pos,
            vel,
            ang,
            jstate0,
            accs,
            frames,
            joints.a_index,
            joints.b_index,
            passes,
            params,
            sp,
        )
        acc = _per_manifold(accs)
    else:
        contacts = (
            (rows_rr[0], rows_rr[1], rr_active),
            (rows_cr, m_cr.active),
            (rows_cc, m_cc.active),
        )
        pos, vel, ang, jstate, acc = _solve_packed(
            pos, vel, ang, jstate0, acc0, bodies, joints, contacts, params, sp
        )
    m_rr = m_rr.replace(acc_impulse_normal=acc[0], acc_impulse_tangent=acc[1])
    m_cr = m_cr.replace(acc_impulse_normal=acc[2], acc_impulse_tangent=acc[3])
    m_cc = m_cc.replace(acc_impulse_normal=acc[4], acc_impulse_tangent=acc[5])
    state = state.replace(
        joint=joints.replace(
            global_position=jstate[0], acc_impulse=jstate[1], acc_r_impulse=jstate[2]
        )
    )
    if sp.do_warm_starting:
        state = state.replace(acc_rr_manifolds=m_rr, acc_cr_manifolds=m_cr, acc_cc_manifolds=m_cc)

    # 7. Symplectic Euler, clipping, thruster positions.
    state = _integrate(state, bodies, pos, vel, ang, params, P)
    return state, (jax.tree.map(lambda x: x[:, 0], m_rr), m_cr, m_cc)


_SOLVERS = ("fast", "reference")

# The lanes layout solves every batch of a pair type over all its pair slots (non-members
# masked); with more batches than this per pair type, solving each batch over its active
# manifolds in the scene-major layout is faster (L sizes: 4 polygon-polygon and 3 circle-polygon
# batches, of which a real L scene fills a handful of rows).
_LANES_MAX_BATCHES = 2

# Rows per loop step of ``solve_contacts_active``: a real L scene's batch mostly holds 0-2 active
# manifolds (``python -m benchmarks.bench_physics --sizes l``); 2 was faster than 1 and 4 over 256
# and 4096 scenes together.
_ACTIVE_CHUNK = 2


def _lanes_pays(sp: StaticSimParams) -> bool:
    """Whether the fast solver runs in the lanes-last layout (``solver_lanes``) for ``sp``."""
    cc, cr, rr = pair_indices(sp)
    n_batches = max(-(-len(x) // sp.solver_batch_size) for x in (cc, cr, rr))
    return n_batches <= _LANES_MAX_BATCHES


def _per_pass(acc):
    """Accumulated impulses ``(rr_n [R, 2], rr_t [R, 2], cr_n, cr_t, cc_n, cc_t)`` as one
    ``(normal, tangent)`` [m, 2] array per solver pass (rr point 0, rr point 1, cr, cc)."""
    rrn, rrt, crn, crt, ccn, cct = acc
    return (
        jnp.stack([rrn[:, 0], rrt[:, 0]], -1),
        jnp.stack([rrn[:, 1], rrt[:, 1]], -1),
        jnp.stack([crn, crt], -1),
        jnp.stack([ccn, cct], -1),
    )


def _per_manifold(accs):
    """Inverse of ``_per_pass``."""
    return (
        jnp.stack([accs[0][:, 0], accs[1][:, 0]], -1),
        jnp.stack([accs[0][:, 1], accs[1][:, 1]], -1),
        accs[2][:, 0],
        accs[2][:, 1],
        accs[3][:, 0],
        accs[3][:, 1],
    )


def _joint_frames(bodies, joints, params, num_joints):
    """Packed per-joint frames [J, 14] (the joint quantities fixed during the iterations)."""

    def frame(j):
        jt = jax.tree.map(lambda x: x[j], joints)
        a = jax.tree.map(lambda x: x[jt.a_index], bodies)
        b = jax.tree.map(lambda x: x[jt.b_index], bodies)
        return joint_frame(a, b, jt, params)

    return pack_frame(jax.vmap(frame)(jnp.arange(num_joints)))


def _view(bodies: RigidBody, i, position, velocity, angular_velocity) -> RigidBody:
    body = jax.tree.map(lambda x: x[i], bodies)
    return body.replace(
        position=position[i], velocity=velocity[i], angular_velocity=angular_velocity[i]
    )


def _solve_reference(pos, vel, ang, jstate, acc, bodies, joints, contacts, params, sp):
    """Solver iterations laid out exactly like Jax2D: scans over joints and contact batches with
    gathers and scatters by index."""
    (rows_rr0, rows_rr1, b_rr), (rows_cr, b_cr), (rows_cc, b_cc) = contacts

    def solve_joints(pos, vel, ang, jstate):
        def one(carry, j):
            pos, vel, ang, gpos, acc, acc_r = carry
            jt = jax.tree.map(lambda x: x[j], joints).replace(
                acc_impulse=acc[j], acc_r_impulse=acc_r[j]
            )
            a = _view(bodies, jt.a_index, pos, vel, ang)
            b = _view(bodies, jt.b_index, pos, vel, ang)
            dva, dvb, dwa, dwb, dxa, dxb, jp, imp, r_imp = resolve_joint(a, b, jt, params)
            gpos = gpos.at[j].set(jp)
            acc = acc.at[j].set(imp)
            acc_r = acc_r.at[j].set(r_imp)
            vel = _scatter_add(vel, jt.a_index, dva, jt.b_index, dvb)
            ang = _scatter_add(ang, jt.a_index, dwa, jt.b_index, dwb)
            pos = _scatter_add(pos, jt.a_index, dxa, jt.b_index, dxb)
            return (pos, vel, ang, gpos, acc, acc_r), None

        (pos, vel, ang, *jstate), _ = jax.lax.scan(
            one, (pos, vel, ang, *jstate), jnp.arange(sp.num_joints)
        )
        return pos, vel, ang, tuple(jstate)

    def iteration(carry, _):
        pos, vel, ang, jstate, acc = carry
        pos, vel, ang, jstate = solve_joints(pos, vel, ang, jstate)
        rrn, rrt, crn, crt, ccn, cct = acc
        for k, rows in enumerate((rows_rr0, rows_rr1)):
            n_k, t_k, vel, ang = solve_contacts(rows, rrn[:, k], rrt[:, k], vel, ang, pos, b_rr)
            rrn = rrn.at[:, k].set(n_k)
            rrt = rrt.at[:, k].set(t_k)
        crn, crt, vel, ang = solve_contacts(rows_cr, crn, crt, vel, ang, pos, b_cr)
        ccn, cct, vel, ang = solve_contacts(rows_cc, ccn, cct, vel, ang, pos, b_cc)
        return (pos, vel, ang, jstate, (rrn, rrt, crn, crt, ccn, cct)), None

    (pos, vel, ang, jstate, acc), _ = jax.lax.scan(
        iteration, (pos, vel, ang, jstate, acc), None, length=sp.num_solver_iterations
    )
    return pos, vel, ang, jstate, acc


def _solve_packed(pos, vel, ang, jstate, acc, bodies, joints, contacts, params, sp):
    """Solver iterations in the scene-major layout, for sizes whose pair types span several
    solver batches (see ``_LANES_MAX_BATCHES``); same updates in the same order as
    ``_solve_reference``.

    Body state is packed as ``(x, y, v_x, v_y, w)`` [N, 5]; per-joint quantities that only
    depend on rotations and masses are computed and packed once per step. A pair type that fits
    in one solver batch is solved over its manifolds in natural order (static pair indices, no
    permutation); with several batches each batch is solved over its active manifolds only
    (``contact.solve_contacts_active``). Sums of simultaneous impulses on one body may round
    differently from the reference layout.
    """
    J = sp.num_joints
    bs = sp.solver_batch_size
    (rows_rr0, rows_rr1, active_rr), (rows_cr, active_cr), (rows_cc, active_cc) = contacts
    accs = _per_pass(acc)

    # Batch layouts are fixed for the step: built once here, the two polygon-polygon passes
    # sharing theirs.
    def layout(active):
        if -(-active.shape[0] // bs) == 1:
            return batch_membership(active, bs), None
        return None, active_batches(active, bs, _ACTIVE_CHUNK)

    rr_layout = layout(active_rr)
    passes = (
        (rows_rr0, *rr_layout),
        (rows_rr1, *rr_layout),
        (rows_cr, *layout(active_cr)),
        (rows_cc, *layout(active_cc)),
    )

    frames = _joint_frames(bodies, joints, params, J)
    gpos, jacc, jacc_r = jstate
    jpacked = jnp.concatenate([gpos, jacc, jacc_r[:, None]], -1)
    body = jnp.concatenate([pos, vel, ang[:, None]], -1)

    def one_joint(carry, xs):
        body, jpacked = carry
        j, fpacked, ia, ib = xs
        sa, sb = body[ia], body[ib]
        js = jpacked[j]
        dva, dvb, dwa, dwb, dxa, dxb, jp, imp, r_imp = resolve_joint_dynamic(
            unpack_frame(fpacked),
            sa[:2],
            sb[:2],
            sa[2:4],
            sa[4],
            sb[2:4],
            sb[4],
            js[2:4],
            js[4],
            params,
        )
        jpacked = jpacked.at[j].set(jnp.concatenate([jp, imp, r_imp[None]]))
        body = body.at[ia].add(jnp.concatenate([dxa, dva, dwa[None]]))
        body = body.at[ib].add(jnp.concatenate([dxb, dvb, dwb[None]]))
        return (body, jpacked), None

    def iteration(carry, _):
        body, jpacked, accs = carry
        if J:
            (body, jpacked), _ = jax.lax.scan(
                one_joint,
                (body, jpacked),
                (jnp.arange(J), frames, joints.a_index, joints.b_index),
            )
        out = []
        for (rows, member, batches), a in zip(passes, accs, strict=True):
            if member is not None:
                a, body = solve_contacts_masked(rows, a, body, member, bs)
            else:
                # Several batches: each is solved over its active manifolds only.
                a, body = solve_contacts_active(rows, a, body, batches, _ACTIVE_CHUNK)
            out.append(a)
        return (body, jpacked, tuple(out)), None

    (body, jpacked, accs), _ = jax.lax.scan(
        iteration, (body, jpacked, accs), None, length=sp.num_solver_iterations
    )
    acc = _per_manifold(accs)
    jstate = (jpacked[:, :2], jpacked[:, 2:4], jpacked[:, 4])
    return body[:, :2], body[:, 2:4], body[:, 4], jstate, acc


def _point(m: CollisionManifold, k: int) -> CollisionManifold:
    return jax.tree.map(lambda x: x[:, k], m)


def make_step(static_params: StaticSimParams, *, solver: str = "fast"):
    """A jitted ``step(state, params, actions)`` closed over ``static_params`` (Jax2D's
    ``PhysicsEngine(static_params).step``)."""
    if not isinstance(static_params, StaticSimParams):
        raise ValueError(f"static_params={static_params!r}; expected a StaticSimParams")
    if solver not in _SOLVERS:
        raise ValueError(f"solver={solver!r}; expected one of {_SOLVERS}")

    @jit
    def _step(state: SimState, params: SimParams, actions):
        return step(state, params, static_params, actions, solver=solver)

    return _step


class PhysicsEngine:
    """Jax2D-style engine object: ``PhysicsEngine(static_params).step(state, params, actions)``."""

    def __init__(self, static_params: StaticSimParams, *, solver: str = "fast"):
        if solver not in _SOLVERS:
            raise ValueError(f"solver={solver!r}; expected one of {_SOLVERS}")
        self.static_sim_params = static_params
        self.solver = solver

    def step(self, state: SimState, params: SimParams, actions):
        """``step(state, params, static_params, actions)`` with the engine's static params."""
        return step(state, params, self.static_sim_params, actions, solver=self.solver)

    def __repr__(self) -> str:
        return f"PhysicsEngine({self.static_sim_params!r})"
