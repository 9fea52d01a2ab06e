"""Joint physics: motors, warm starting and the sequential-impulse joint solver (Jax2D ``joint.py``).

Sign convention (Jax2D): a joint impulse ``P`` is applied as ``+P`` to body a and ``-P`` to body b.
All per-joint functions take scalar ``RigidBody`` views of the two bodies (one joint; vmap or scan
for many) and return zeros when the joint must not act (inactive joint or body, or both bodies
static).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Bool, Float

from jaxlab.physics.geometry import concat_bodies, cross, cross_sv, nonzero, rotate
from jaxlab.physics.state import Joint, RigidBody, SimParams, SimState, StaticSimParams


def _zero_unless(cond, values):
    return jax.tree.map(lambda x: jnp.where(cond, x, jnp.zeros_like(x)), values)


def _acts(a: RigidBody, b: RigidBody, joint: Joint):
    both_static = (a.inverse_mass == 0) & (b.inverse_mass == 0)
    return jnp.logical_not(both_static) & joint.active & a.active & b.active


def joint_anchor(a: RigidBody, b: RigidBody, joint: Joint):
    """World anchors of a joint.

    Returns:
        ``(joint_point, a_point, b_point, r_a, r_b)`` where ``r = R(theta) p_rel``,
        ``a_point = x_a + r_a`` (likewise b) and ``joint_point`` is the mass-weighted mean of the
        two anchors, snapped to the anchor of a static body.
    """
    r_a = rotate(a.rotation, joint.a_relative_pos)
    r_b = rotate(b.rotation, joint.b_relative_pos)
    a_point = a.position + r_a
    b_point = b.position + r_b
    ia, ib = nonzero(a.inverse_mass), nonzero(b.inverse_mass)
    mean = (a_point / ia + b_point / ib) / ((1 / ia) + (1 / ib))
    point = jnp.where(a.inverse_mass == 0, a_point, jnp.where(b.inverse_mass == 0, b_point, mean))
    return point, a_point, b_point, r_a, r_b


def motor_impulse(
    a: RigidBody, b: RigidBody, joint: Joint, action: Float[Array, ""], params: SimParams
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """Angular impulse of a revolute joint's motor (paper Alg. 1, "apply motors").

    ``L = base_power * power * dt / (I_a^-1 + I_b^-1) * tanh(k (w_b - w_a - speed * u * base_speed))``
    with ``k = motor_decay_coefficient``; within ``motor_joint_limit`` of a rotation limit the
    impulse fades linearly unless it drives away from the limit. Body a gets ``+L I_a^-1``,
    body b ``-L I_b^-1``.

    Returns:
        ``(dw_a, dw_b)``.
    """
    acts = (
        _acts(a, b, joint) & joint.motor_on & (action != 0) & jnp.logical_not(joint.is_fixed_joint)
    )
    axial_mass = 1.0 / nonzero(a.inverse_inertia + b.inverse_inertia)
    power = params.base_motor_power * joint.motor_power * params.dt * axial_mass
    w_error = (
        b.angular_velocity
        - a.angular_velocity
        - joint.motor_speed * action * params.base_motor_speed
    )
    direction = jnp.tanh(w_error * params.motor_decay_coefficient)
    rel = b.rotation - a.rotation - joint.rotation
    target = jnp.clip(
        rel,
        joint.min_rotation + params.motor_joint_limit,
        joint.max_rotation - params.motor_joint_limit,
    )
    over = rel - target
    fade = jnp.where(
        (over == 0) | jnp.logical_not(joint.motor_has_joint_limits),
        1.0,
        jnp.maximum(0.0, 1.0 - jnp.abs(over) / params.motor_joint_limit),
    )
    power = power * jnp.maximum(fade, (jnp.sign(over) != jnp.sign(action)).astype(fade.dtype))
    return _zero_unless(
        acts, (power * direction * a.inverse_inertia, -power * direction * b.inverse_inertia)
    )


def joint_warm_start_impulse(a: RigidBody, b: RigidBody, joint: Joint):
    """Re-apply the accumulated linear impulse and the fixed-joint angular impulse.

    Returns:
        ``(dv_a, dv_b, dw_a, dw_b)``.
    """
    p = joint.acc_impulse
    r_a = rotate(a.rotation, joint.a_relative_pos)
    r_b = rotate(b.rotation, joint.b_relative_pos)
    dw_a = a.inverse_inertia * cross(r_a, p) + joint.acc_r_impulse * a.inverse_inertia
    dw_b = -b.inverse_inertia * cross(r_b, p) - joint.acc_r_impulse * b.inverse_inertia
    return _zero_unless(_acts(a, b, joint), (p * a.inverse_mass, -p * b.inverse_mass, dw_a, dw_b))


@struct.dataclass
class JointFrame:
    """Per-joint quantities that stay fixed during one step's solver iterations (they depend on
    rotations and masses only). Leaves are scalars for one joint, [J] for many.

    Attributes:
        acts: whether the joint acts at all.
        inv_mass_a, inv_mass_b, inv_inertia_a, inv_inertia_b: body inverse masses and inertias.
        sum_inv_mass, sum_inv_inertia: guarded sums (zero replaced by one).
        r_a, r_b: [2] world-frame anchor arms ``R(theta) p_rel``.
        is_fixed: weld joint.
        angular_bias: ``beta_f rel`` for fixed joints, ``beta_l (rel - clip(rel))`` otherwise.
        applies_angular: whether an angular impulse is applied (fixed joint, or limit violated).
        acc_impulse, acc_r_impulse: accumulated impulses at the start of the solve.
    """

    acts: Bool[Array, "..."]
    inv_mass_a: Float[Array, "..."]
    inv_mass_b: Float[Array, "..."]
    inv_inertia_a: Float[Array, "..."]
    inv_inertia_b: Float[Array, "..."]
    sum_inv_mass: Float[Array, "..."]
    sum_inv_inertia: Float[Array, "..."]
    r_a: Float[Array, "... 2"]
    r_b: Float[Array, "... 2"]
    is_fixed: Bool[Array, "..."]
    angular_bias: Float[Array, "..."]
    applies_angular: Bool[Array, "..."]


_FRAME_FIELDS = (
    ("acts", 1),
    ("inv_mass_a", 1),
    ("inv_mass_b", 1),
    ("inv_inertia_a", 1),
    ("inv_inertia_b", 1),
    ("sum_inv_mass", 1),
    ("sum_inv_inertia", 1),
    ("r_a", 2),
    ("r_b", 2),
    ("is_fixed", 1),
    ("angular_bias", 1),
    ("applies_angular", 1),
)
_BOOL_FRAME_FIELDS = ("acts", "is_fixed", "applies_angular")


def pack_frame(f: JointFrame) -> Float[Array, "... 14"]:
    """All frame fields as one float array (booleans as 0/1) so one slice fetches a joint."""
    lead = f.inv_mass_a.shape
    cols = [
        jnp.asarray(getattr(f, name), jnp.float32).reshape(lead + (width,))
        for name, width in _FRAME_FIELDS
    ]
    return jnp.concatenate(cols, axis=-1)


def unpack_frame(packed: Float[Array, "... 14"]) -> JointFrame:
    """Inverse of ``pack_frame``."""
    out, start = {}, 0
    for name, width in _FRAME_FIELDS:
        col = packed[..., start : start + width]
        col = col if width > 1 else col[..., 0]
        out[name] = col > 0.5 if name in _BOOL_FRAME_FIELDS else col
        start += width
    return JointFrame(**out)


def joint_frame(a: RigidBody, b: RigidBody, joint: Joint, params: SimParams) -> JointFrame:
    """The fixed part of ``resolve_joint`` for one joint."""
    rel = b.rotation - a.rotation - joint.rotation
    clipped = jnp.clip(rel, joint.min_rotation, joint.max_rotation)
    limit_bias = (rel - clipped) * params.baumgarte_coefficient_rjoint_limit_av
    fixed_bias = rel * params.baumgarte_coefficient_fjoint_av
    return JointFrame(
        acts=_acts(a, b, joint),
        inv_mass_a=a.inverse_mass,
        inv_mass_b=b.inverse_mass,
        inv_inertia_a=a.inverse_inertia,
        inv_inertia_b=b.inverse_inertia,
        sum_inv_mass=nonzero(a.inverse_mass + b.inverse_mass),
        sum_inv_inertia=nonzero(a.inverse_inertia + b.inverse_inertia),
        r_a=rotate(a.rotation, joint.a_relative_pos),
        r_b=rotate(b.rotation, joint.b_relative_pos),
        is_fixed=joint.is_fixed_joint,
        angular_bias=jnp.where(joint.is_fixed_joint, fixed_bias, limit_bias),
        applies_angular=joint.is_fixed_joint | (joint.motor_has_joint_limits & (clipped != rel)),
    )


def resolve_joint_dynamic(
    f: JointFrame, xa, xb, va, wa, vb, wb, acc_impulse, acc_r_impulse, params: SimParams
):
    """One sequential-impulse update of one joint (paper Alg. 1, "resolve joints").

    Linear part (soft point constraint with Baumgarte velocity bias and a direct position shift):
    ``v_rel = v_b(p) - v_a(p)``, ``e = b_point - a_point``,
    ``P = s (v_rel + beta_v e) / (m_a^-1 + m_b^-1 + (r_a x d)^2 I_a^-1 + (r_b x d)^2 I_b^-1)``
    with ``d = v_rel/|v_rel|`` and ``s = joint_stiffness``; positions move by
    ``+-beta_p e m^-1 / (m_a^-1 + m_b^-1)``.

    Angular part: a fixed joint drives ``dw + beta_f (theta_b - theta_a - theta_ref)`` to zero; a
    revolute joint with limits applies ``dw + beta_l (rel - clip(rel))`` when outside its limits
    and when that does not fight the current relative spin.

    Args:
        f: the joint's fixed frame.
        xa, xb: [2] body positions; va, vb: [2] velocities; wa, wb: angular velocities.
        acc_impulse: [2] and acc_r_impulse: accumulated impulses.
        params: numerical parameters.

    Returns:
        ``(dv_a, dv_b, dw_a, dw_b, dx_a, dx_b, joint_point, acc_impulse, acc_r_impulse)``.
    """
    a_point = xa + f.r_a
    b_point = xb + f.r_b
    ia, ib = nonzero(f.inv_mass_a), nonzero(f.inv_mass_b)
    mean = (a_point / ia + b_point / ib) / ((1 / ia) + (1 / ib))
    point = jnp.where(f.inv_mass_a == 0, a_point, jnp.where(f.inv_mass_b == 0, b_point, mean))
    v_rel = (vb + cross_sv(wb, point - xb)) - (va + cross_sv(wa, point - xa))
    direction = v_rel / nonzero(jnp.linalg.norm(v_rel))
    error = b_point - a_point
    impulse = v_rel + params.baumgarte_coefficient_joints_v * error
    impulse = impulse / nonzero(
        f.sum_inv_mass
        + (
            jnp.square(cross(f.r_a, direction)) * f.inv_inertia_a
            + jnp.square(cross(f.r_b, direction)) * f.inv_inertia_b
        )
    )
    impulse = impulse * params.joint_stiffness

    dv_a = f.inv_mass_a * impulse
    dw_a = cross(f.r_a, impulse) * f.inv_inertia_a
    dv_b = -f.inv_mass_b * impulse
    dw_b = -cross(f.r_b, impulse) * f.inv_inertia_b

    shift = error / f.sum_inv_mass
    dx_a = shift * f.inv_mass_a * params.baumgarte_coefficient_joints_p
    dx_b = -shift * f.inv_mass_b * params.baumgarte_coefficient_joints_p

    raw_dw = wb + dw_b - wa - dw_a
    dw = jnp.where(
        f.is_fixed,
        raw_dw + f.angular_bias,
        (jnp.sign(raw_dw) == jnp.sign(f.angular_bias)) * (raw_dw + f.angular_bias),
    )
    r_impulse = dw / f.sum_inv_inertia * f.applies_angular
    dw_a = dw_a + r_impulse * f.inv_inertia_a
    dw_b = dw_b - r_impulse * f.inv_inertia_b
    acc_r = jnp.where(f.is_fixed, r_impulse + acc_r_impulse, 0.0)
    return _zero_unless(
        f.acts,
        (dv_a, dv_b, dw_a, dw_b, dx_a, dx_b, point, impulse + acc_impulse, acc_r),
    )


def resolve_joint(a: RigidBody, b: RigidBody, joint: Joint, params: SimParams):
    """``resolve_joint_dynamic`` for scalar body views (Jax2D ``joint.resolve_joint``)."""
    return resolve_joint_dynamic(
        joint_frame(a, b, joint, params),
        a.position,
        b.position,
        a.velocity,
        a.angular_velocity,
        b.velocity,
        b.angular_velocity,
        joint.acc_impulse,
        joint.acc_r_impulse,
        params,
    )


def recompute_global_joint_positions(state: SimState, static_params: StaticSimParams) -> SimState:
    """Refresh the cached world positions of joints (anchor on body a) and thrusters."""
    del static_params
    bodies = concat_bodies(state)

    def world(index, rel):
        return bodies.position[index] + rotate(bodies.rotation[index], rel)

    return state.replace(
        joint=state.joint.replace(
            global_position=world(state.joint.a_index, state.joint.a_relative_pos)
        ),
        thruster=state.thruster.replace(
            global_position=world(state.thruster.object_index, state.thruster.relative_position)
        ),
    )
