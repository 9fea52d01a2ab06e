"""Joint physics: motors, warm starting and the sequential-impulse joint solver (Jax2D ``joint.py``).

Sign convention (Jax2D): a joint impulse ``P`` is applied as ``+P`` to body a and ``-P`` to body b.
All per-joint functions take scalar ``RigidBody`` views of the two bodies (one joint; vmap or scan
for many) and return zeros when the joint must not act (inactive joint or body, or both bodies
static).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

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


def resolve_joint(a: RigidBody, b: RigidBody, joint: Joint, params: SimParams):
    """One sequential-impulse update of one joint (paper Alg. 1, "resolve joints").

    Linear part (soft point constraint with Baumgarte velocity bias and a direct position shift):
    ``v_rel = v_b(p) - v_a(p)``, ``e = b_point - a_point``,
    ``P = s (v_rel + beta_v e) / (m_a^-1 + m_b^-1 + (r_a x d)^2 I_a^-1 + (r_b x d)^2 I_b^-1)``
    with ``d = v_rel/|v_rel|`` and ``s = joint_stiffness``; positions move by
    ``+-beta_p e m^-1 / (m_a^-1 + m_b^-1)``.

    Angular part: a fixed joint drives ``dw + beta_f (theta_b - theta_a - theta_ref)`` to zero; a
    revolute joint with limits applies ``dw + beta_l (rel - clip(rel))`` when outside its limits
    and when that does not fight the current relative spin.

    Returns:
        ``(dv_a, dv_b, dw_a, dw_b, dx_a, dx_b, joint_point, acc_impulse, acc_r_impulse)``.
    """
    sum_inv_mass = nonzero(a.inverse_mass + b.inverse_mass)
    sum_inv_inertia = nonzero(a.inverse_inertia + b.inverse_inertia)
    point, a_point, b_point, r_a, r_b = joint_anchor(a, b, joint)

    va = a.velocity + cross_sv(a.angular_velocity, point - a.position)
    vb = b.velocity + cross_sv(b.angular_velocity, point - b.position)
    v_rel = vb - va
    direction = v_rel / nonzero(jnp.linalg.norm(v_rel))
    error = b_point - a_point
    impulse = v_rel + params.baumgarte_coefficient_joints_v * error
    impulse = impulse / nonzero(
        sum_inv_mass
        + (
            jnp.square(cross(r_a, direction)) * a.inverse_inertia
            + jnp.square(cross(r_b, direction)) * b.inverse_inertia
        )
    )
    impulse = impulse * params.joint_stiffness

    dv_a = a.inverse_mass * impulse
    dw_a = cross(r_a, impulse) * a.inverse_inertia
    dv_b = -b.inverse_mass * impulse
    dw_b = -cross(r_b, impulse) * b.inverse_inertia

    shift = error / sum_inv_mass
    dx_a = shift * a.inverse_mass * params.baumgarte_coefficient_joints_p
    dx_b = -shift * b.inverse_mass * params.baumgarte_coefficient_joints_p

    rel = b.rotation - a.rotation - joint.rotation
    clipped = jnp.clip(rel, joint.min_rotation, joint.max_rotation)
    limit_bias = (rel - clipped) * params.baumgarte_coefficient_rjoint_limit_av
    fixed_bias = rel * params.baumgarte_coefficient_fjoint_av
    raw_dw = b.angular_velocity + dw_b - a.angular_velocity - dw_a
    dw = jnp.where(
        joint.is_fixed_joint,
        raw_dw + fixed_bias,
        (jnp.sign(raw_dw) == jnp.sign(limit_bias)) * (raw_dw + limit_bias),
    )
    applies = joint.is_fixed_joint | (joint.motor_has_joint_limits & (clipped != rel))
    r_impulse = dw / sum_inv_inertia * applies
    dw_a = dw_a + r_impulse * a.inverse_inertia
    dw_b = dw_b - r_impulse * b.inverse_inertia
    acc_r = jnp.where(joint.is_fixed_joint, r_impulse + joint.acc_r_impulse, 0.0)
    return _zero_unless(
        _acts(a, b, joint),
        (dv_a, dv_b, dw_a, dw_b, dx_a, dx_b, point, impulse + joint.acc_impulse, acc_r),
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
