"""The Kinetix random level distribution (``kinetix/environment/ued/distributions.py`` of the
original, ``sample_kinetix_level``), jit-able, vmap-able and quick to compile.

A level is built in this order (paper Sec. 3 / Appendix; probabilities in ``GeneratorParams``):

1. Floor role: default / green / blue / red with ``floor_prob_*`` (0.9 / 0 / 0.02 / 0.08).
2. A green and a blue shape (free shapes, roles drawn by ``role_weights``); a fair coin decides
   which of the two may not be fixated, so they are never both static.
3. Forced control, uniform over {motor, thruster, both}: a motor adds a shape connected by a
   revolute joint (a free shape otherwise), a thruster is attached to a dynamic shape.
4. ``P + C - 7`` more attempts, each a connected shape (0.35), a free shape (0.35) or nothing (0.3).
5. ``T - 1`` more thrusters, each with probability 0.3.
6. Green and blue swap with probability 0.5 (only when the floor is a default shape).
7. The non-static polygon, circle, joint and thruster slots are shuffled (indices remapped).

Every shape addition draws ``K`` independent proposals and keeps the one with the fewest contact
points against the shapes already there (``K = 8``; the original uses ``K = 1`` for levels with at
most 7 shapes, its S size, which ``small_level_n_proposals`` reproduces). A connected proposal
whose two shapes could hide inside each other gets ``connect_no_visibility_bias`` extra contacts.

Compile-time design: the original vmaps a whole-state mutation over the proposals, recomputes all
contact manifolds of each proposed state and branches with ``lax.cond``/``lax.switch`` around
every step, which takes 43 s (S) to 94 s (L) to compile on a CPU. Here a proposal is a handful of
scalars (``_Proposal``); its contacts are tested only against the ``P + C`` existing shapes; free
and connected proposals share one traced code path selected with ``where``; and all shape steps
run in one ``lax.scan`` whose per-step kind is data, so the proposal code is traced once.

Differences from the original (kept small and deliberate):

* The joint of the forced motor always has its motor on (``force_motor_on``; the original draws
  ``motor_on`` with 0.8 there too, so about 7 % of its levels lack the control they were forced
  to have).
* Polygons store radius 0 and circles zero vertices (the original leaves the unused size fields
  of the sampler there; no dynamics or observation reads them).
* If no connection target is allowed at all (only circles that all have a joint), the original's
  ``choice`` gets an all-zero probability vector; here the addition is skipped.
* Random numbers are drawn differently (one batch of uniforms per proposal instead of a key split
  per decision), so a key gives a different level than in the original; the distribution is the
  same.

Kept on purpose (they shape the original's distribution): revolute joints have reference angle
0, so limits act on ``rot_b - rot_a`` of two randomly rotated shapes; a target polygon with two
joints is still chosen when no other target is left (falling back to every active polygon, the
static arena included); the arena margin of a shape uses the sampler's unused size fields. Set
``small_level_n_proposals=8`` to apply the overlap rejection at size S as well.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxtyping import Array, Bool, Float, Int, Key, PRNGKeyArray, UInt32

from jaxlab.core.compile import jit
from jaxlab.envs.kinetix.state import EnvParams, EnvState, StaticEnvParams, create_empty_env
from jaxlab.physics.collision import (
    calculate_collision_matrix,
    manifold_circle_circle,
    manifold_circle_polygon,
    manifold_polygon_polygon,
)
from jaxlab.physics.geometry import (
    circle_inverse_inertia,
    circle_inverse_mass,
    polygon_inverse_inertia,
    polygon_mass,
    recalculate_mass_and_inertia,
    rotate,
)
from jaxlab.physics.state import CollisionManifold, RigidBody

# Shape-step kinds of the generator scan.
CONNECTED, FREE, NOTHING = 0, 1, 2

# Clockwise rectangle corners (top-right first), times the half dimensions.
_RECT_SIGNS = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, -1.0], [-1.0, 1.0]], np.float32)


def _static(default):
    return struct.field(pytree_node=False, default=default)


@struct.dataclass
class GeneratorParams:
    """Parameters of the level distribution (the original's ``UEDParams``, same defaults).

    Numbers are traced (vmap over them to sweep a distribution); the two proposal counts fix array
    shapes and are static.

    Attributes:
        max_shape_size: largest extent of a sampled shape (m).
        goal_body_opposide_side_chance: chance that a green (blue) free shape is placed in the
            left (right) half of the arena (name kept from the original).
        goal_body_size_factor: size multiplier of green and blue free shapes.
        min_rjoints_bias: connected shapes use a revolute joint while fewer than this many
            revolute joints exist.
        rjoint_chance: otherwise a revolute (not fixed) joint with this chance.
        large_rect_dim_chance, large_rect_dim_scale: one side of a shape is scaled up.
        generate_triangles: polygons are triangles with chance 0.5 (off in the original).
        thruster_power_multiplier: thruster power is ``mass * multiplier * U[0.5, 2]``.
        thruster_align_com_prob: thrusters point through the centre of mass with this chance.
        motor_on_chance, motor_min/max_speed, motor_min/max_power, wheel_max_power: motors;
            joints touching a circle use ``U[motor_min_power, wheel_max_power]``.
        joint_limit_chance, joint_limit_max: polygon-polygon revolute joints get limits
            ``U[-max, 0]``, ``U[0, max]`` with this chance.
        fixate_chance_min/max/scale: a free shape is fixated with ``min + scale * mass``
            (clipped to ``max``).
        fixate_shape_bottom_bias, fixate_shape_bottom_bias_special_role: a fixated shape in the
            top half moves down by half the arena with this chance (default / coloured roles).
        circle_max_size_coeff: circle radii are at most ``coeff * max_shape_size / 2``.
        connect_to_fixated_prob_coeff: weight of fixated shapes as connection targets.
        connect_visibility_min, connect_no_visibility_bias: visibility test of connected shapes
            and the contact-count penalty of proposals failing it.
        add_shape_chance, add_connected_shape_chance, add_no_shape_chance: fill-step choice.
        add_thruster_chance: chance of each extra thruster.
        floor_prob_normal/green/blue/red: floor role probabilities.
        force_motor_on: the forced motor's joint has its motor on (see module doc).
        add_shape_n_proposals: proposals per shape addition (static).
        small_level_n_proposals: proposals when ``P + C <= 7`` (static; the original's 1).
    """

    max_shape_size: float = 1.0
    goal_body_opposide_side_chance: float = 0.5
    goal_body_size_factor: float = 1.0
    min_rjoints_bias: int = 2
    rjoint_chance: float = 0.5
    large_rect_dim_chance: float = 0.3
    large_rect_dim_scale: float = 2.0
    generate_triangles: bool = False
    thruster_power_multiplier: float = 2.0
    thruster_align_com_prob: float = 0.8
    motor_on_chance: float = 0.8
    motor_min_speed: float = 0.4
    motor_max_speed: float = 3.0
    motor_min_power: float = 1.0
    motor_max_power: float = 3.0
    wheel_max_power: float = 1.0
    joint_limit_chance: float = 0.4
    joint_limit_max: float = math.pi
    fixate_chance_min: float = 0.02
    fixate_chance_max: float = 1.0
    fixate_chance_scale: float = 4.0
    fixate_shape_bottom_bias: float = 0.0
    fixate_shape_bottom_bias_special_role: float = 0.6
    circle_max_size_coeff: float = 0.8
    connect_to_fixated_prob_coeff: float = 0.05
    connect_visibility_min: float = 0.05
    connect_no_visibility_bias: float = 10.0
    add_shape_chance: float = 0.35
    add_connected_shape_chance: float = 0.35
    add_no_shape_chance: float = 0.3
    add_thruster_chance: float = 0.3
    floor_prob_normal: float = 0.9
    floor_prob_green: float = 0.0
    floor_prob_blue: float = 0.02
    floor_prob_red: float = 0.08
    force_motor_on: bool = True
    add_shape_n_proposals: int = _static(8)
    small_level_n_proposals: int = _static(1)

    def __post_init__(self):
        for name in ("add_shape_n_proposals", "small_level_n_proposals"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"GeneratorParams.{name}={v!r}; expected a Python int >= 1")

    def n_proposals(self, static_params: StaticEnvParams) -> int:
        """Proposals per shape addition at these sizes (the original's small-level rule)."""
        small = static_params.num_polygons + static_params.num_circles <= 7
        return self.small_level_n_proposals if small else self.add_shape_n_proposals


@struct.dataclass
class _Proposal:
    """One proposed shape addition (with its joint when connected); all leaves are scalars or
    small fixed arrays, so K proposals vmap cheaply."""

    possible: Bool[Array, ""]
    is_rect: Bool[Array, ""]
    position: Float[Array, " 2"]
    rotation: Float[Array, ""]
    vertices: Float[Array, "4 2"]
    n_vertices: Int[Array, ""]
    radius: Float[Array, ""]
    inverse_mass: Float[Array, ""]
    inverse_inertia: Float[Array, ""]
    role: Int[Array, ""]
    has_joint: Bool[Array, ""]
    valid: Bool[Array, ""]
    a_index: Int[Array, ""]
    b_index: Int[Array, ""]
    a_relative_pos: Float[Array, " 2"]
    b_relative_pos: Float[Array, " 2"]
    global_position: Float[Array, " 2"]
    is_fixed_joint: Bool[Array, ""]
    motor_on: Bool[Array, ""]
    motor_speed: Float[Array, ""]
    motor_power: Float[Array, ""]
    motor_has_joint_limits: Bool[Array, ""]
    min_rotation: Float[Array, ""]
    max_rotation: Float[Array, ""]
    joint_rotation: Float[Array, ""]
    motor_binding: Int[Array, ""]


# ---------------------------------------------------------------------------------------------
# Small samplers


def choice(u: Float[Array, ""], weights: Float[Array, " n"]) -> Int[Array, ""]:
    """Index ``i`` with probability ``w_i / sum(w)`` given ``u ~ U[0, 1)`` (inverse CDF:
    ``i = #{k : W_k <= u W}`` with ``W_k`` the cumulative weights; the last index if all are 0).

    Uniforms are drawn in one batch per proposal (one threefry call), which keeps the traced
    program, and so the compile time, small.
    """
    cdf = jnp.cumsum(weights)
    i = jnp.sum(cdf <= u * cdf[-1])
    return jnp.minimum(i, weights.shape[0] - 1).astype(jnp.int32)


def randint(u: Float[Array, ""], n: int) -> Int[Array, ""]:
    """``floor(u n)``, uniform over ``0..n-1`` for ``u ~ U[0, 1)``."""
    return jnp.minimum(jnp.floor(u * n), n - 1).astype(jnp.int32)


def count_roles(state: EnvState, role: int | Array, *, num_static: int = 0) -> Int[Array, ""]:
    """Active shapes with ``role`` (static polygons excluded when ``num_static > 0``)."""
    p_active = state.sim.polygon.active.at[:num_static].set(False)
    return jnp.sum((state.polygon_shape_roles == role) & p_active) + jnp.sum(
        (state.circle_shape_roles == role) & state.sim.circle.active
    )


def role_weights(state: EnvState, initial: Float[Array, " 4"] | None = None) -> Float[Array, " 4"]:
    """Unnormalised role probabilities of a new shape (the original's ``get_role``).

    ``w = initial * [has_green & has_blue, no_green, no_blue, has_green & has_blue & no_red / 3]``:
    the green and the blue shape come first and stay unique, at most one red shape is added.
    """
    initial = jnp.ones(4) if initial is None else initial
    need_green = count_roles(state, 1) == 0
    need_blue = count_roles(state, 2) == 0
    need_red = count_roles(state, 3) == 0
    other = (~need_green) & (~need_blue)
    return (
        initial
        * jnp.stack([other, need_green, need_blue, other & need_red]).astype(jnp.float32)
        * jnp.array([1.0, 1.0, 1.0, 1.0 / 3.0])
    )


def sample_dimensions(
    u: Float[Array, " 5"], is_rect: Bool[Array, ""], max_shape_size, params: GeneratorParams
) -> tuple[Float[Array, "4 2"], Float[Array, " 2"], Float[Array, ""]]:
    """Rectangle vertices, half dimensions and circle radius (``ued/util.sample_dimensions``).

    Half sides ``U[0.05, s / (2 sqrt 2)]`` with one side scaled by ``large_rect_dim_scale`` with
    chance ``large_rect_dim_chance``; radius ``U[0.1, coeff s / 2]``. Unused values (half sides of
    a circle, radius of a rectangle) are the minima, as in the original, and only enter the
    placement margin. ``u`` holds 5 uniforms.
    """
    cap_rect = max_shape_size / 2.0 / math.sqrt(2.0)
    cap_circ = max_shape_size / 2.0 * params.circle_max_size_coeff
    half = jnp.where(is_rect, u[0:2], 0.0) * (cap_rect - 0.05) + 0.05
    big = u[3] < params.large_rect_dim_chance
    scale = jnp.where((jnp.arange(2) == randint(u[2], 2)) & big, params.large_rect_dim_scale, 1.0)
    half = half * scale
    vertices = jnp.asarray(_RECT_SIGNS) * half[None, :]
    radius = jnp.where(is_rect, 0.0, u[4]) * (cap_circ - 0.1) + 0.1
    return vertices, half, radius


def random_position_on_polygon(
    u: Float[Array, " 2"], vertices: Float[Array, "4 2"], n_vertices: Int[Array, ""]
) -> Float[Array, " 2"]:
    """A random local point from 2 uniforms: uniform in the bounding box of a quadrilateral's
    vertices, or the original's triangle formula ``v0 + sqrt(f1) (v1 - v0 + f2 (v2 - v1))``."""
    lo, hi = jnp.min(vertices, axis=0), jnp.max(vertices, axis=0)
    in_box = lo + u * (hi - lo)
    v = vertices
    in_tri = v[0] + jnp.sqrt(u[0]) * (v[1] - v[0] + u[1] * (v[2] - v[1]))
    return jnp.where(n_vertices <= 3, in_tri, in_box)


def random_position_on_circle(u: Float[Array, " 2"], radius) -> Float[Array, " 2"]:
    """``r u1 (cos t, sin t)`` with ``t = 2 pi u0`` (the original's off-centre case)."""
    theta = u[0] * 2 * math.pi
    r = u[1] * radius
    return jnp.stack([r * jnp.cos(theta), r * jnp.sin(theta)])


def _rect_dists(vertices, local):
    """(min distance from ``local`` to the bounding box's sides, distance to its far corner)."""
    half_w = (jnp.max(vertices[:, 0]) - jnp.min(vertices[:, 0])) / 2.0
    half_h = (jnp.max(vertices[:, 1]) - jnp.min(vertices[:, 1])) / 2.0
    near = jnp.minimum(half_w - jnp.abs(local[0]), half_h - jnp.abs(local[1]))
    fx = jnp.maximum(jnp.abs(half_w - local[0]), jnp.abs(-half_w - local[0]))
    fy = jnp.maximum(jnp.abs(half_h - local[1]), jnp.abs(-half_h - local[1]))
    return near, jnp.sqrt(fx * fx + fy * fy)


def _shows(small_rect, small_verts, small_r, small_local, big_rect, big_verts, big_r, big_local, m):
    """Whether the smaller-role shape can stick out of the other while turning about the joint
    (the original's ``_is_small_shape_showing``; circle-circle never counts as showing)."""
    big_near, _ = _rect_dists(big_verts, big_local)
    _, small_far = _rect_dists(small_verts, small_local)
    cr = big_near + m < small_r
    rc = small_far > big_r + m
    rr = small_far > big_near + m
    return jnp.where(small_rect, jnp.where(big_rect, rr, rc), jnp.where(big_rect, cr, False))


def _both_show(new, target, m):
    """Whether each of two jointed ``(is_rect, verts, radius, anchor)`` can stick out of the other."""
    return _shows(*new, *target, m) & _shows(*target, *new, m)


def _arena(static_params: StaticEnvParams, env_params: EnvParams):
    w = static_params.screen_dim[0] / env_params.pixels_per_unit
    h = static_params.screen_dim[1] / env_params.pixels_per_unit
    return w, h


# ---------------------------------------------------------------------------------------------
# Shape proposals

_N_UNIFORMS = 29  # uniforms one proposal consumes


def _connection_target(u, state: EnvState, gp: GeneratorParams, P: int, space_rect, nonstatic_poly):
    """The shape a connected proposal joins (``u[0:5]``): its pose, geometry, anchor and roles."""
    poly, circ, joint = state.sim.polygon, state.sim.circle, state.sim.joint
    n_all = P + circ.active.shape[0]
    conn = jnp.zeros(n_all).at[joint.a_index].add(joint.active.astype(jnp.float32))
    conn = conn.at[joint.b_index].add(joint.active.astype(jnp.float32))
    fix_w = lambda inv_m: jnp.where(inv_m == 0, gp.connect_to_fixated_prob_coeff, 1.0)
    p_rect = nonstatic_poly * fix_w(poly.inverse_mass) * jnp.maximum((2.0 - conn[:P]) / 2.0, 0.0)
    p_circ = circ.active * fix_w(circ.inverse_mass) * (conn[P:] == 0)
    target_rect_w = jnp.stack(
        [jnp.any(nonstatic_poly), jnp.any(circ.active) & (jnp.sum(p_circ) > 0)]
    ).astype(jnp.float32)
    any_target = jnp.sum(target_rect_w) > 0
    is_target_rect = (choice(u[0], target_rect_w) == 0) | ~space_rect
    p_rect = jnp.where(jnp.sum(p_rect) == 0, poly.active.astype(jnp.float32), p_rect)
    p_circ = jnp.where(jnp.sum(p_circ) == 0, circ.active.astype(jnp.float32), p_circ)
    t_local = jnp.where(is_target_rect, choice(u[1], p_rect), choice(u[2], p_circ))
    target = jnp.where(is_target_rect, t_local, t_local + P)
    bodies = jax.tree.map(lambda p, c: jnp.concatenate([p, c]), poly, circ)
    t_pos, t_rot = bodies.position[target], bodies.rotation[target]
    t_verts, t_nv, t_r = bodies.vertices[target], bodies.n_vertices[target], bodies.radius[target]
    t_anchor = jnp.where(
        is_target_rect, random_position_on_polygon(u[3:5], t_verts, t_nv), jnp.zeros(2)
    )
    roles = jnp.concatenate([state.polygon_shape_roles, state.circle_shape_roles])
    t_role = roles[target]
    conn_initial = jnp.where(
        t_role == 0,
        jnp.ones(4),
        jnp.where(
            t_role <= 2,
            jnp.ones(4).at[3 - t_role].set(0.0).at[3].set(0.0),
            jnp.array([1.0, 0.0, 0.0, 1.0]),
        ),
    )
    return any_target, is_target_rect, target, t_pos, t_rot, t_verts, t_r, t_anchor, conn_initial


def _shape_and_role(
    u,
    state: EnvState,
    gp: GeneratorParams,
    connected,
    is_target_rect,
    space_rect,
    space_circle,
    conn_initial,
):
    """The new shape's type, role, dimensions and unit-density mass (``u[5:13]``)."""
    type_w = jnp.stack([space_rect, space_circle]).astype(jnp.float32)
    is_rect = choice(u[5], type_w) == 0
    is_rect = jnp.where(connected, is_rect | (~is_target_rect & space_rect), is_rect)
    role_w = role_weights(state, jnp.where(connected, conn_initial, jnp.ones(4)))
    role = jnp.where(jnp.sum(role_w) > 0, choice(u[6], role_w), 0)
    size_factor = jnp.where((role == 1) | (role == 2), gp.goal_body_size_factor, 1.0)
    max_size = gp.max_shape_size * jnp.where(connected, 1.0, size_factor)
    rect_verts, half, radius = sample_dimensions(u[7:12], is_rect, max_size, gp)
    n_vertices = jnp.where(gp.generate_triangles & (u[12] < 0.5), 3, 4).astype(jnp.int32)
    inv_mass_r, centroid = polygon_mass(rect_verts, n_vertices, jnp.float32(1.0))
    verts = rect_verts - centroid[None, :]
    inv_inertia_r = polygon_inverse_inertia(verts, n_vertices, jnp.float32(1.0))
    inv_mass = jnp.where(is_rect, inv_mass_r, circle_inverse_mass(radius, jnp.float32(1.0)))
    inv_inertia = jnp.where(
        is_rect, inv_inertia_r, circle_inverse_inertia(radius, jnp.float32(1.0))
    )
    return (
        is_rect,
        role,
        rect_verts,
        half,
        radius,
        n_vertices,
        centroid,
        verts,
        inv_mass,
        inv_inertia,
    )


def _free_position(
    u,
    sp: StaticEnvParams,
    env_params: EnvParams,
    gp: GeneratorParams,
    half,
    radius,
    role,
    inv_mass,
    force_no_fixate,
    connected,
):
    """A free proposal's position in the arena and whether it is fixated (``u[14:19]``)."""
    w, h = _arena(sp, env_params)
    largest = jnp.maximum(jnp.max(half) * math.sqrt(2.0), radius)
    lo = jnp.stack([largest, largest + 0.4])
    hi = jnp.stack([w - largest, h - largest])
    opposite = u[14] < gp.goal_body_opposide_side_chance
    lo = lo.at[0].add(jnp.where(opposite & (role == 2), w / 2, 0.0))
    hi = hi.at[0].add(jnp.where(opposite & (role == 1), -w / 2, 0.0))
    free_pos = u[15:17] * (hi - lo) + lo
    fix_p = jnp.minimum(
        gp.fixate_chance_min + gp.fixate_chance_scale / inv_mass, gp.fixate_chance_max
    )
    fixated = (u[17] < fix_p) & ~force_no_fixate & ~connected
    bottom_p = gp.fixate_shape_bottom_bias + gp.fixate_shape_bottom_bias_special_role * (role != 0)
    to_bottom = fixated & (u[18] < bottom_p) & (free_pos[1] >= h / 2)
    free_pos = free_pos.at[1].add(jnp.where(to_bottom, -h / 2, 0.0))
    return free_pos, fixated


def _joint_settings(
    u,
    sp: StaticEnvParams,
    gp: GeneratorParams,
    joint,
    is_rect,
    is_target_rect,
    force_rjoint,
    force_motor_on,
):
    """Revolute or fixed, and the motor and limit fields of the new joint (``u[21:29]``)."""
    n_rjoints = jnp.sum(joint.active & ~joint.is_fixed_joint)
    is_rjoint = (u[21] < gp.rjoint_chance) | force_rjoint | (n_rjoints < gp.min_rjoints_bias)
    both_rect = is_rect & is_target_rect
    motor_on = (u[22] < gp.motor_on_chance) | force_motor_on
    speed = gp.motor_min_speed + u[23] * (gp.motor_max_speed - gp.motor_min_speed)
    max_power = jnp.where(both_rect, gp.motor_max_power, gp.wheel_max_power)
    power = gp.motor_min_power + u[24] * (max_power - gp.motor_min_power)
    limits = (u[25] < gp.joint_limit_chance) & both_rect
    lim_lo = -gp.joint_limit_max * u[26] * limits
    lim_hi = gp.joint_limit_max * u[27] * limits
    binding = randint(u[28], sp.num_motor_bindings)
    return is_rjoint, dict(
        is_fixed_joint=~is_rjoint,
        motor_on=motor_on & is_rjoint,
        motor_speed=jnp.where(is_rjoint, speed, 0.0),
        motor_power=jnp.where(is_rjoint, power, 0.0),
        motor_has_joint_limits=limits & is_rjoint,
        min_rotation=jnp.where(is_rjoint, lim_lo, 0.0),
        max_rotation=jnp.where(is_rjoint, lim_hi, 0.0),
        motor_binding=binding.astype(jnp.int32),
    )


def propose_shape(
    key: PRNGKeyArray,
    state: EnvState,
    connected: Bool[Array, ""],
    force_no_fixate: Bool[Array, ""],
    force_rjoint: Bool[Array, ""],
    force_motor_on: Bool[Array, ""],
    static_params: StaticEnvParams,
    params: GeneratorParams,
    env_params: EnvParams,
) -> _Proposal:
    """Propose one free (``mutate_add_shape``) or connected (``mutate_add_connected_shape``) shape.

    Free: rectangle or circle (50/50 while both have room), role from ``role_weights`` (green and
    blue get ``goal_body_size_factor``), position uniform in the arena shrunk by the shape's
    extent (green left / blue right half with ``goal_body_opposide_side_chance``), rotation
    ``U[0, 2 pi]``, fixated with ``min(0.02 + 4 m, 1)`` unless ``force_no_fixate``.

    Connected: a target among the active non-static shapes (weights: 0.05 if fixated, polygons
    ``(2 - joints) / 2``, circles only without joints), an anchor uniform in a polygon's bounding
    box or a circle's centre on both shapes, the new shape placed so the anchors meet; revolute
    joint (motor on 0.8, speed ``U[0.4, 3]``, power ``U[1, 3]`` or ``U[1, 1]`` next to a circle,
    limits with 0.4 between polygons) unless it becomes a fixed joint (0.5 once
    ``min_rjoints_bias`` revolute joints exist). Roles never join green to blue or red to either.

    Returns:
        The proposal; ``possible`` is False when the level has no room for it.
    """
    sp, gp = static_params, params
    P, S = sp.num_polygons, sp.num_static_fixated_polys
    u = jax.random.uniform(key, (_N_UNIFORMS,))
    poly, circ, joint = state.sim.polygon, state.sim.circle, state.sim.joint
    space_rect = ~jnp.all(poly.active)
    space_circle = ~jnp.all(circ.active)
    space_shape = space_rect | space_circle
    nonstatic_poly = poly.active.at[:S].set(False)
    shapes_present = jnp.any(nonstatic_poly) | jnp.any(circ.active)
    space_joint = ~jnp.all(joint.active)

    any_target, is_target_rect, target, t_pos, t_rot, t_verts, t_r, t_anchor, conn_initial = (
        _connection_target(u, state, gp, P, space_rect, nonstatic_poly)
    )
    is_rect, role, rect_verts, half, radius, n_vertices, centroid, verts, inv_mass, inv_inertia = (
        _shape_and_role(
            u, state, gp, connected, is_target_rect, space_rect, space_circle, conn_initial
        )
    )
    rotation = u[13] * 2 * math.pi
    free_pos, fixated = _free_position(
        u, sp, env_params, gp, half, radius, role, inv_mass, force_no_fixate, connected
    )

    # --- connected placement and joint
    local_anchor = jnp.where(
        is_rect, random_position_on_polygon(u[19:21], rect_verts, n_vertices), jnp.zeros(2)
    )
    global_anchor = t_pos + rotate(t_rot, t_anchor)
    conn_pos = global_anchor - rotate(rotation, local_anchor)
    local_anchor = jnp.where(is_rect, local_anchor - centroid, local_anchor)
    position = jnp.where(connected, conn_pos, free_pos) + jnp.where(is_rect, centroid, 0.0)

    slot = jnp.where(is_rect, jnp.argmin(poly.active), jnp.argmin(circ.active) + P)
    swap = slot > target
    a_index, b_index = jnp.where(swap, target, slot), jnp.where(swap, slot, target)
    a_rel = jnp.where(swap, t_anchor, local_anchor)
    b_rel = jnp.where(swap, local_anchor, t_anchor)
    a_rot, b_rot = jnp.where(swap, t_rot, rotation), jnp.where(swap, rotation, t_rot)
    is_rjoint, joint_fields = _joint_settings(
        u, sp, gp, joint, is_rect, is_target_rect, force_rjoint, force_motor_on
    )

    new = (is_rect, jnp.where(is_rect, verts, 0.0), radius, local_anchor)
    valid = _both_show(new, (is_target_rect, t_verts, t_r, t_anchor), gp.connect_visibility_min)

    possible = jnp.where(
        connected, space_shape & shapes_present & space_joint & any_target, space_shape
    )
    return _Proposal(
        possible=possible,
        is_rect=is_rect,
        position=position,
        rotation=rotation,
        vertices=jnp.where(is_rect, verts, 0.0),
        n_vertices=jnp.where(is_rect, n_vertices, 0),
        radius=jnp.where(is_rect, 0.0, radius),
        inverse_mass=jnp.where(fixated, 0.0, inv_mass),
        inverse_inertia=jnp.where(fixated, 0.0, inv_inertia),
        role=role,
        has_joint=connected,
        valid=jnp.where(connected, valid, True),
        a_index=a_index.astype(jnp.int32),
        b_index=b_index.astype(jnp.int32),
        a_relative_pos=a_rel,
        b_relative_pos=b_rel,
        global_position=global_anchor,
        joint_rotation=jnp.where(is_rjoint, 0.0, b_rot - a_rot),
        **joint_fields,
    )


def _candidate_body(prop: _Proposal, as_rect: bool) -> RigidBody:
    f = jnp.float32
    return RigidBody(
        position=prop.position,
        rotation=prop.rotation,
        velocity=jnp.zeros(2, f),
        angular_velocity=f(0.0),
        inverse_mass=prop.inverse_mass,
        inverse_inertia=prop.inverse_inertia,
        friction=f(1.0),
        restitution=f(0.0),
        collision_mode=jnp.int32(1),
        active=jnp.asarray(True),
        n_vertices=prop.n_vertices if as_rect else jnp.int32(0),
        vertices=prop.vertices,
        radius=prop.radius,
    )


def _zero_manifold(points: int | None = None) -> CollisionManifold:
    lead = () if points is None else (points,)
    z = jnp.zeros(lead, jnp.float32)
    return CollisionManifold(
        normal=jnp.zeros(lead + (2,), jnp.float32),
        penetration=z,
        collision_point=jnp.zeros(lead + (2,), jnp.float32),
        active=jnp.zeros(lead, bool),
        acc_impulse_normal=z,
        acc_impulse_tangent=z,
        restitution_velocity_target=z,
    )


def contact_count(prop: _Proposal, state: EnvState, static_params: StaticEnvParams):
    """Contact points between the proposed shape and every active shape of ``state``.

    The same count as the original's "all active manifolds of the proposed state" up to a
    constant shared by all proposals of one step (contacts among the existing shapes): a
    polygon-polygon pair counts its (up to 2) points, joints are ignored as in Jax2D's manifold
    generation, and pairs are ordered by slot index as in the engine's pair lists.
    """
    P = static_params.num_polygons
    poly, circ = state.sim.polygon, state.sim.circle
    slot_p = jnp.argmin(poly.active)
    new_p = _candidate_body(prop, True)
    new_c = _candidate_body(prop, False)
    bcast = lambda b, n: jax.tree.map(lambda x: jnp.broadcast_to(x, (n,) + jnp.shape(x)), b)
    # New polygon: against polygons (ordered by slot) and circles.
    lower = jnp.arange(P) < slot_p
    a = jax.tree.map(
        lambda o, n: jnp.where(lower.reshape((P,) + (1,) * (o.ndim - 1)), o, n),
        poly,
        bcast(new_p, P),
    )
    b = jax.tree.map(
        lambda o, n: jnp.where(lower.reshape((P,) + (1,) * (o.ndim - 1)), n, o),
        poly,
        bcast(new_p, P),
    )
    rr = jax.vmap(manifold_polygon_polygon, in_axes=(0, 0, None))(a, b, _zero_manifold(2))
    cr_p = jax.vmap(manifold_circle_polygon, in_axes=(0, None, None))(circ, new_p, _zero_manifold())
    n_poly = jnp.sum(rr.active) + jnp.sum(cr_p.active)
    # New circle: against polygons and circles.
    cr_c = jax.vmap(manifold_circle_polygon, in_axes=(None, 0, None))(new_c, poly, _zero_manifold())
    cc = jax.vmap(manifold_circle_circle, in_axes=(None, 0, None))(new_c, circ, _zero_manifold())
    n_circ = jnp.sum(cr_c.active) + jnp.sum(cc.active)
    return jnp.where(prop.is_rect, n_poly, n_circ).astype(jnp.int32)


def best_proposal(
    keys: Key[Array, " k"] | UInt32[Array, "k 2"],
    state: EnvState,
    connected,
    force_no_fixate,
    force_rjoint,
    force_motor_on,
    static_params: StaticEnvParams,
    params: GeneratorParams,
    env_params: EnvParams,
) -> _Proposal:
    """The proposal with the fewest contacts (plus the visibility penalty) among ``len(keys)``."""
    props = jax.vmap(propose_shape, in_axes=(0, None, None, None, None, None, None, None, None))(
        keys,
        state,
        connected,
        force_no_fixate,
        force_rjoint,
        force_motor_on,
        static_params,
        params,
        env_params,
    )
    if keys.shape[0] == 1:
        return jax.tree.map(lambda x: x[0], props)
    counts = jax.vmap(contact_count, in_axes=(0, None, None))(props, state, static_params)
    score = counts + jnp.where(props.valid, 0.0, params.connect_no_visibility_bias)
    best = jnp.argmin(score)
    return jax.tree.map(lambda x: x[best], props)


def _set(arr, index, value, do):
    """``arr.at[index].set(value)`` when ``do`` (a scalar bool), else ``arr``."""
    value = jnp.asarray(value, arr.dtype)
    return arr.at[index].set(jnp.where(do, value, arr[index]))


def commit_shape(
    state: EnvState, prop: _Proposal, do: Bool[Array, ""], static_params: StaticEnvParams
) -> EnvState:
    """Write ``prop`` (shape, role and joint) into the first free slots when ``do``.

    Inverse mass and inertia come with the proposal (unit density); the collision matrix is not
    updated (``finalize_level`` does it once).
    """
    do = do & prop.possible
    poly, circ, joint = state.sim.polygon, state.sim.circle, state.sim.joint
    body = _candidate_body(prop, True)

    def put(bodies, slot, do_b, n_vertices):
        b = body.replace(n_vertices=n_vertices)
        return jax.tree.map(lambda x, v: _set(x, slot, v, do_b), bodies, b)

    sp_, sc_ = jnp.argmin(poly.active), jnp.argmin(circ.active)
    do_p, do_c = do & prop.is_rect, do & ~prop.is_rect
    poly = put(poly, sp_, do_p, prop.n_vertices)
    circ = put(circ, sc_, do_c, jnp.int32(0))
    do_j = do & prop.has_joint
    sj = jnp.argmin(joint.active)
    f = jnp.float32
    new_joint = joint.replace(
        a_index=_set(joint.a_index, sj, prop.a_index, do_j),
        b_index=_set(joint.b_index, sj, prop.b_index, do_j),
        a_relative_pos=_set(joint.a_relative_pos, sj, prop.a_relative_pos, do_j),
        b_relative_pos=_set(joint.b_relative_pos, sj, prop.b_relative_pos, do_j),
        global_position=_set(joint.global_position, sj, prop.global_position, do_j),
        active=_set(joint.active, sj, True, do_j),
        acc_impulse=_set(joint.acc_impulse, sj, jnp.zeros(2, f), do_j),
        acc_r_impulse=_set(joint.acc_r_impulse, sj, 0.0, do_j),
        motor_speed=_set(joint.motor_speed, sj, prop.motor_speed, do_j),
        motor_power=_set(joint.motor_power, sj, prop.motor_power, do_j),
        motor_on=_set(joint.motor_on, sj, prop.motor_on, do_j),
        motor_has_joint_limits=_set(
            joint.motor_has_joint_limits, sj, prop.motor_has_joint_limits, do_j
        ),
        min_rotation=_set(joint.min_rotation, sj, prop.min_rotation, do_j),
        max_rotation=_set(joint.max_rotation, sj, prop.max_rotation, do_j),
        is_fixed_joint=_set(joint.is_fixed_joint, sj, prop.is_fixed_joint, do_j),
        rotation=_set(joint.rotation, sj, prop.joint_rotation, do_j),
    )
    return state.replace(
        sim=state.sim.replace(polygon=poly, circle=circ, joint=new_joint),
        polygon_shape_roles=_set(state.polygon_shape_roles, sp_, prop.role, do_p),
        circle_shape_roles=_set(state.circle_shape_roles, sc_, prop.role, do_c),
        polygon_densities=_set(state.polygon_densities, sp_, 1.0, do_p),
        circle_densities=_set(state.circle_densities, sc_, 1.0, do_c),
        motor_bindings=_set(state.motor_bindings, sj, prop.motor_binding, do_j),
        motor_auto=_set(state.motor_auto, sj, False, do_j),
    )


# ---------------------------------------------------------------------------------------------
# Thrusters


def add_random_thruster(
    key: PRNGKeyArray,
    state: EnvState,
    do: Bool[Array, ""],
    static_params: StaticEnvParams,
    params: GeneratorParams,
) -> EnvState:
    """Attach a thruster to a random active dynamic shape when ``do`` (``mutate_add_thruster``).

    Position uniform in a polygon's bounding box or a circle's disc; direction through the
    centre of mass (either way) with ``thruster_align_com_prob``, else ``U[0, 2 pi]``; power
    ``mass * thruster_power_multiplier * U[0.5, 2]``; binding uniform over thruster bindings.
    A no-op when no dynamic shape or no free thruster slot exists.
    """
    P = static_params.num_polygons
    u = jax.random.uniform(key, (9,))
    sim = state.sim
    bodies = jax.tree.map(lambda p, c: jnp.concatenate([p, c]), sim.polygon, sim.circle)
    can = bodies.active & (bodies.inverse_mass != 0)
    thr = sim.thruster
    do = do & jnp.any(can) & ~jnp.all(thr.active)
    idx = choice(u[0], can.astype(jnp.float32))
    is_poly = idx < P
    pos = jnp.where(
        is_poly,
        random_position_on_polygon(u[1:3], bodies.vertices[idx], bodies.n_vertices[idx]),
        random_position_on_circle(u[1:3], bodies.radius[idx]),
    )
    sign = jnp.where(u[3] > 0.5, 1.0, -1.0)
    direction = sign * pos
    direction = jnp.where(jnp.linalg.norm(direction) == 0.0, jnp.array([1.0, 0.0]), direction)
    angle = jnp.where(
        u[4] < params.thruster_align_com_prob,
        jnp.arctan2(direction[1], direction[0]),
        u[5] * 2 * jnp.pi,
    )
    inv_m = bodies.inverse_mass[idx]
    power = (
        1.0
        / jnp.where(inv_m == 0, 1.0, inv_m)
        * params.thruster_power_multiplier
        * (u[6] * 1.5 + 0.5)
    )
    binding = randint(u[7], static_params.num_thruster_bindings)
    t = jnp.argmin(thr.active)
    gpos = bodies.position[idx] + rotate(bodies.rotation[idx], pos)
    thr = thr.replace(
        object_index=_set(thr.object_index, t, idx, do),
        relative_position=_set(thr.relative_position, t, pos, do),
        rotation=_set(thr.rotation, t, angle, do),
        power=_set(thr.power, t, power, do),
        global_position=_set(thr.global_position, t, gpos, do),
        active=_set(thr.active, t, True, do),
    )
    return state.replace(
        sim=sim.replace(thruster=thr),
        thruster_bindings=_set(state.thruster_bindings, t, binding, do),
    )


# ---------------------------------------------------------------------------------------------
# Whole levels


def permute_entities(
    key: PRNGKeyArray, state: EnvState, static_params: StaticEnvParams
) -> EnvState:
    """Shuffle non-static polygon, circle, joint and thruster slots, remapping joint and thruster
    shape indices (the original's ``permute_state``)."""
    sp = static_params
    P, C, S = sp.num_polygons, sp.num_circles, sp.num_static_fixated_polys
    J, T = sp.num_joints, sp.num_thrusters
    u = jax.random.uniform(key, (P - S + C + J + T,))
    cuts = np.cumsum([P - S, C, J])
    perm_p = jnp.concatenate([jnp.arange(S), S + jnp.argsort(u[: cuts[0]])])
    perm_c = jnp.argsort(u[cuts[0] : cuts[1]])
    perm_j = jnp.argsort(u[cuts[1] : cuts[2]])
    perm_t = jnp.argsort(u[cuts[2] :])
    inverse = jnp.argsort(jnp.concatenate([perm_p, perm_c + P]))
    sim = state.sim
    joint = sim.joint.replace(
        a_index=inverse[sim.joint.a_index].astype(jnp.int32),
        b_index=inverse[sim.joint.b_index].astype(jnp.int32),
    )
    thruster = sim.thruster.replace(
        object_index=inverse[sim.thruster.object_index].astype(jnp.int32)
    )
    take = lambda tree, perm: jax.tree.map(lambda x: x[perm], tree)
    sim = sim.replace(
        polygon=take(sim.polygon, perm_p),
        circle=take(sim.circle, perm_c),
        joint=take(joint, perm_j),
        thruster=take(thruster, perm_t),
    )
    return state.replace(
        sim=sim,
        polygon_shape_roles=state.polygon_shape_roles[perm_p],
        circle_shape_roles=state.circle_shape_roles[perm_c],
        polygon_highlighted=state.polygon_highlighted[perm_p],
        circle_highlighted=state.circle_highlighted[perm_c],
        polygon_densities=state.polygon_densities[perm_p],
        circle_densities=state.circle_densities[perm_c],
        motor_bindings=state.motor_bindings[perm_j],
        motor_auto=state.motor_auto[perm_j],
        thruster_bindings=state.thruster_bindings[perm_t],
    )


def finalize_level(state: EnvState, static_params: StaticEnvParams) -> EnvState:
    """Recompute masses and inertias from the densities and the joint collision matrix."""
    sim = recalculate_mass_and_inertia(
        state.sim, static_params.sim, state.polygon_densities, state.circle_densities
    )
    sim = sim.replace(collision_matrix=calculate_collision_matrix(static_params.sim, sim.joint))
    return state.replace(sim=sim)


def _empty_level(static_params: StaticEnvParams) -> EnvState:
    return create_empty_env(static_params)


def sample_level(
    key: PRNGKeyArray,
    static_params: StaticEnvParams,
    params: GeneratorParams | None = None,
    env_params: EnvParams | None = None,
) -> EnvState:
    """Draw one random Kinetix level (module docstring for the recipe).

    Args:
        key: PRNG key.
        static_params: sizes (static under ``jit``); the arena's 4 static polygons included.
        params: the distribution (default ``GeneratorParams()``).
        env_params: env parameters (only ``pixels_per_unit`` is read: the arena size).

    Returns:
        An ``EnvState`` at ``timestep = 0`` with consistent masses and collision matrix.
    """
    if not isinstance(static_params, StaticEnvParams):
        raise ValueError(f"static_params={static_params!r}; expected a StaticEnvParams")
    sp = static_params
    gp = GeneratorParams() if params is None else params
    ep = EnvParams() if env_params is None else env_params
    if not isinstance(gp, GeneratorParams):
        raise ValueError(f"params={gp!r}; expected a GeneratorParams")
    K = gp.n_proposals(sp)
    small = sp.num_polygons + sp.num_circles <= 7
    n_rest = max(sp.num_polygons + sp.num_circles - 3 - sp.num_static_fixated_polys, 0)
    k_u, k_steps, k_thr, k_perm = jax.random.split(key, 4)
    u = jax.random.uniform(k_u, (4 + n_rest,))

    state = _empty_level(sp)
    floor_w = jnp.stack(
        [gp.floor_prob_normal, gp.floor_prob_green, gp.floor_prob_blue, gp.floor_prob_red]
    ).astype(jnp.float32)
    state = state.replace(
        polygon_shape_roles=state.polygon_shape_roles.at[0].set(choice(u[0], floor_w))
    )

    first_no_fix = (u[1] < 0.5) | (state.polygon_shape_roles[0] == 2)
    control = randint(u[2], 3)  # 0 motor, 1 thruster, 2 both
    force_motor, force_thruster = control != 1, control != 0
    fill_w = jnp.stack(
        [gp.add_connected_shape_chance, gp.add_shape_chance, gp.add_no_shape_chance]
    ).astype(jnp.float32)
    rest_kind = jax.vmap(choice, in_axes=(0, None))(u[4:], fill_w)
    kinds = jnp.concatenate(
        [
            jnp.array([FREE, FREE], jnp.int32),
            jnp.where(force_motor, CONNECTED, FREE)[None],
            rest_kind,
        ]
    )
    n_steps = 3 + n_rest
    false = jnp.zeros(n_steps, bool)
    no_fix = false.at[0].set(first_no_fix).at[1].set(~first_no_fix) | small
    force_rj = false.at[2].set(force_motor)
    force_on = false.at[2].set(force_motor & gp.force_motor_on)
    thruster_now = false.at[2].set(force_thruster)
    step_keys = jax.random.split(k_steps, n_steps)

    def shape_step(state, xs):
        k, kind, nf, frj, fon, thr = xs
        kp, kt = jax.random.split(k)
        prop = best_proposal(
            jax.random.split(kp, K), state, kind == CONNECTED, nf, frj, fon, sp, gp, ep
        )
        state = commit_shape(state, prop, kind != NOTHING, sp)
        state = add_random_thruster(kt, state, thr, sp, gp)
        return state, None

    state, _ = jax.lax.scan(
        shape_step, state, (step_keys, kinds, no_fix, force_rj, force_on, thruster_now)
    )

    n_thr = sp.num_thrusters - 1
    if n_thr > 0:

        def thruster_step(state, k):
            k1, k2 = jax.random.split(k)
            do = jax.random.uniform(k1) < gp.add_thruster_chance
            return add_random_thruster(k2, state, do, sp, gp), None

        state, _ = jax.lax.scan(thruster_step, state, jax.random.split(k_thr, n_thr))

    swap = (u[3] < 0.5) & (state.polygon_shape_roles[0] == 0)

    def swap_roles(roles):
        return jnp.where(swap, jnp.where(roles == 1, 2, jnp.where(roles == 2, 1, roles)), roles)

    state = state.replace(
        polygon_shape_roles=swap_roles(state.polygon_shape_roles),
        circle_shape_roles=swap_roles(state.circle_shape_roles),
    )
    state = permute_entities(k_perm, state, sp)
    return finalize_level(state, sp)


sample_level_jit = jit(sample_level, static_argnames=("static_params",))


def sample_levels(
    key: PRNGKeyArray,
    n: int,
    static_params: StaticEnvParams,
    params: GeneratorParams | None = None,
    env_params: EnvParams | None = None,
) -> EnvState:
    """``n`` levels stacked on a leading axis (``vmap`` of ``sample_level`` over split keys)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r}; expected a Python int >= 1")
    return _sample_levels_jit(key, n, static_params, params, env_params)


def _sample_levels(key, n, static_params, params, env_params):
    return jax.vmap(sample_level, in_axes=(0, None, None, None))(
        jax.random.split(key, n), static_params, params, env_params
    )


_sample_levels_jit = jit(_sample_levels, static_argnames=("n", "static_params"))


def make_sample_level(
    static_params: StaticEnvParams,
    params: GeneratorParams | None = None,
    env_params: EnvParams | None = None,
):
    """``reset_fn(key) -> EnvState`` drawing random levels (for ``KinetixEnv(reset_fn=...)``)."""
    if not isinstance(static_params, StaticEnvParams):
        raise ValueError(f"static_params={static_params!r}; expected a StaticEnvParams")
    gp = GeneratorParams() if params is None else params
    ep = EnvParams() if env_params is None else env_params

    def reset_fn(key: PRNGKeyArray) -> EnvState:
        return sample_level(key, static_params, gp, ep)

    return reset_fn


def has_control(state: EnvState) -> Bool[Array, ""]:
    """Whether the level has a control: an active thruster or an active revolute joint with its
    motor on (or on auto)."""
    j = state.sim.joint
    motor = j.active & ~j.is_fixed_joint & (j.motor_on | state.motor_auto)
    return jnp.any(state.sim.thruster.active) | jnp.any(motor)
