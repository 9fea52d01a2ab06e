"""State pytrees and parameters of the 2D rigid-body engine (a Jax2D reimplementation).

Field names and layouts match Jax2D (``jax2d/sim_state.py``) one to one, so Kinetix level files
and reference states map onto these classes without renaming.

Conventions:
    * All collections are struct-of-arrays with a fixed capacity and an ``active`` mask.
    * Shapes have a *global index*: polygons ``0..P-1`` first, then circles ``P..P+C-1``.
    * Polygon vertices are stored in body-local coordinates relative to the body position, in
      **clockwise** order, in 4 slots; an unused slot (triangles) holds minus the centroid
      shift applied when the polygon was added (Jax2D), and is ignored by the collision code.
    * ``inverse_mass == inverse_inertia == 0`` marks a static (fixated) body.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Bool, Float, Int


@struct.dataclass
class RigidBody:
    """A batch of rigid bodies (all polygons or all circles of a scene).

    Attributes:
        position: [n, 2] centroid in world space (m).
        rotation: [n] angle in radians (not wrapped).
        velocity: [n, 2] linear velocity (m/s).
        angular_velocity: [n] angular velocity (rad/s).
        inverse_mass: [n] 1/m; 0 means infinite mass.
        inverse_inertia: [n] 1/I; 0 means infinite inertia.
        friction: [n] friction factor; the pair coefficient is
            ``sqrt((f_a * base_friction)^2 + (f_b * base_friction)^2)``.
        restitution: [n] bounciness; the pair uses ``min(e_a, e_b)``.
        collision_mode: [n] 0 = ignores mode-1 shapes, 1 = normal, 2 = collides with everything.
        active: [n] whether the slot holds a shape.
        n_vertices: [n] number of polygon vertices (3..max_polygon_vertices); circles 0.
        vertices: [n, 4, 2] local clockwise polygon vertices.
        radius: [n] circle radius; 0 for polygons.
    """

    position: Float[Array, "n 2"]
    rotation: Float[Array, " n"]
    velocity: Float[Array, "n 2"]
    angular_velocity: Float[Array, " n"]
    inverse_mass: Float[Array, " n"]
    inverse_inertia: Float[Array, " n"]
    friction: Float[Array, " n"]
    restitution: Float[Array, " n"]
    collision_mode: Int[Array, " n"]
    active: Bool[Array, " n"]
    n_vertices: Int[Array, " n"]
    vertices: Float[Array, "n v 2"]
    radius: Float[Array, " n"]


@struct.dataclass
class CollisionManifold:
    """Contact manifolds of one pair type (one contact point per entry).

    Polygon-polygon manifolds carry an extra axis of size 2 (two contact points per pair).

    Attributes:
        normal: [m, 2] unit normal pointing from shape a to shape b.
        penetration: [m] penetration depth (positive when overlapping).
        collision_point: [m, 2] world-space contact point.
        active: [m] whether the pair is in contact.
        acc_impulse_normal: [m] accumulated normal impulse (warm starting).
        acc_impulse_tangent: [m] accumulated friction impulse (warm starting).
        restitution_velocity_target: [m] ``v_n * min(e_a, e_b)`` stored when the manifold is made.
    """

    normal: Float[Array, "m 2"]
    penetration: Float[Array, " m"]
    collision_point: Float[Array, "m 2"]
    active: Bool[Array, " m"]
    acc_impulse_normal: Float[Array, " m"]
    acc_impulse_tangent: Float[Array, " m"]
    restitution_velocity_target: Float[Array, " m"]


@struct.dataclass
class Joint:
    """Revolute and fixed joints between two shapes (global indices).

    Attributes:
        a_index, b_index: [j] global shape indices.
        a_relative_pos, b_relative_pos: [j, 2] anchor in each body's local frame.
        global_position: [j, 2] cached world-space anchor (written by the solver).
        active: [j] whether the slot holds a joint.
        acc_impulse: [j, 2] accumulated linear impulse (warm starting).
        acc_r_impulse: [j] accumulated angular impulse of fixed joints (warm starting).
        motor_speed, motor_power: [j] multipliers of ``base_motor_speed``/``base_motor_power``.
        motor_on: [j] whether the motor responds to actions.
        motor_has_joint_limits: [j] whether ``min_rotation <= rel <= max_rotation`` is enforced.
        min_rotation, max_rotation: [j] limits on ``rel = rot_b - rot_a - rotation``.
        is_fixed_joint: [j] weld joint (relative rotation held at ``rotation``).
        rotation: [j] reference relative rotation ``rot_b - rot_a``.
    """

    a_index: Int[Array, " j"]
    b_index: Int[Array, " j"]
    a_relative_pos: Float[Array, "j 2"]
    b_relative_pos: Float[Array, "j 2"]
    global_position: Float[Array, "j 2"]
    active: Bool[Array, " j"]
    acc_impulse: Float[Array, "j 2"]
    acc_r_impulse: Float[Array, " j"]
    motor_speed: Float[Array, " j"]
    motor_power: Float[Array, " j"]
    motor_on: Bool[Array, " j"]
    motor_has_joint_limits: Bool[Array, " j"]
    min_rotation: Float[Array, " j"]
    max_rotation: Float[Array, " j"]
    is_fixed_joint: Bool[Array, " j"]
    rotation: Float[Array, " j"]


@struct.dataclass
class Thruster:
    """Thrusters attached to shapes.

    Attributes:
        object_index: [t] global index of the parent shape.
        relative_position: [t, 2] position in the parent's local frame.
        rotation: [t] thrust direction relative to the parent's rotation.
        power: [t] multiplier of ``base_thruster_power``.
        global_position: [t, 2] cached world-space position (updated at the end of each step).
        active: [t] whether the slot holds a thruster.
    """

    object_index: Int[Array, " t"]
    relative_position: Float[Array, "t 2"]
    rotation: Float[Array, " t"]
    power: Float[Array, " t"]
    global_position: Float[Array, "t 2"]
    active: Bool[Array, " t"]


@struct.dataclass
class SimState:
    """Full simulation state.

    Attributes:
        polygon: P polygons.
        circle: C circles.
        joint: J joints.
        thruster: T thrusters.
        collision_matrix: [P+C, P+C] bool, False for pairs joined by a chain of joints.
        acc_rr_manifolds: polygon-polygon manifolds of the last step, leaves [nrr, 2, ...].
        acc_cr_manifolds: circle-polygon manifolds of the last step, leaves [C*P, ...].
        acc_cc_manifolds: circle-circle manifolds of the last step, leaves [C(C-1)/2, ...].
        gravity: [2] gravitational acceleration (m/s^2).
    """

    polygon: RigidBody
    circle: RigidBody
    joint: Joint
    thruster: Thruster
    collision_matrix: Bool[Array, "n n"]
    acc_rr_manifolds: CollisionManifold
    acc_cr_manifolds: CollisionManifold
    acc_cc_manifolds: CollisionManifold
    gravity: Float[Array, " 2"]


@struct.dataclass
class SimParams:
    """Numerical parameters (a traced pytree: vmap over it for domain randomisation).

    Defaults are Jax2D's.
    """

    dt: float = 1 / 60
    slop: float = 0.01
    baumgarte_coefficient_joints_v: float = 2.0
    baumgarte_coefficient_joints_p: float = 0.7
    baumgarte_coefficient_fjoint_av: float = 2.0
    baumgarte_coefficient_rjoint_limit_av: float = 5.0
    baumgarte_coefficient_collision: float = 0.2
    joint_stiffness: float = 0.6
    clip_position: float = 15
    clip_velocity: float = 100
    clip_angular_velocity: float = 50
    base_motor_speed: float = 6.0
    base_motor_power: float = 900.0
    base_thruster_power: float = 10.0
    motor_decay_coefficient: float = 0.1
    motor_joint_limit: float = 0.1
    base_friction: float = 0.4


def _static(default):
    return struct.field(pytree_node=False, default=default)


@struct.dataclass
class StaticSimParams:
    """Shape-fixing configuration (frozen, hashable; pass as a static argument).

    Attributes:
        num_polygons: polygon capacity P (includes the static floor, walls and ceiling).
        num_circles: circle capacity C.
        num_joints: joint capacity J.
        num_thrusters: thruster capacity T.
        max_polygon_vertices: vertex slots per polygon (must be 4, as in Jax2D).
        num_solver_iterations: sequential-impulse iterations per step.
        solver_batch_size: contacts solved in parallel per solver batch.
        do_warm_starting: whether accumulated impulses carry over between steps.
        num_static_fixated_polys: the first polygons that never move; pairs among them are skipped.
    """

    num_polygons: int = _static(12)
    num_circles: int = _static(12)
    num_joints: int = _static(12)
    num_thrusters: int = _static(12)
    max_polygon_vertices: int = _static(4)
    num_solver_iterations: int = _static(10)
    solver_batch_size: int = _static(16)
    do_warm_starting: bool = _static(True)
    num_static_fixated_polys: int = _static(4)

    def __post_init__(self):
        for name in _STATIC_FIELDS:
            value = getattr(self, name)
            if name == "do_warm_starting":
                if not isinstance(value, bool):
                    raise ValueError(f"StaticSimParams.do_warm_starting={value!r}; expected a bool")
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"StaticSimParams.{name}={value!r}; expected a Python int")
            if value < 0:
                raise ValueError(f"StaticSimParams.{name}={value}; expected >= 0")
        if self.max_polygon_vertices != 4:
            raise ValueError(
                f"StaticSimParams.max_polygon_vertices={self.max_polygon_vertices}; expected 4 "
                "(as in Jax2D, polygons are triangles or quadrilaterals stored in 4 vertex slots)"
            )
        if self.num_static_fixated_polys > self.num_polygons:
            raise ValueError(
                f"StaticSimParams.num_static_fixated_polys={self.num_static_fixated_polys}; expected "
                f"<= num_polygons={self.num_polygons}"
            )
        if self.num_solver_iterations < 1 or self.solver_batch_size < 1:
            raise ValueError(
                "StaticSimParams.num_solver_iterations and solver_batch_size must be >= 1, got "
                f"{self.num_solver_iterations} and {self.solver_batch_size}"
            )

    @property
    def num_shapes(self) -> int:
        """Total shape capacity P + C (the size of the global index space)."""
        return self.num_polygons + self.num_circles


_STATIC_FIELDS = tuple(f.name for f in dataclasses.fields(StaticSimParams))


def empty_manifolds(n: int, points: int | None = None) -> CollisionManifold:
    """Zeroed manifolds for ``n`` pairs (``points=2`` adds the polygon-polygon contact axis)."""
    lead = (n,) if points is None else (n, points)
    return CollisionManifold(
        normal=jnp.zeros(lead + (2,), jnp.float32),
        penetration=jnp.zeros(lead, jnp.float32),
        collision_point=jnp.zeros(lead + (2,), jnp.float32),
        active=jnp.zeros(lead, bool),
        acc_impulse_normal=jnp.zeros(lead, jnp.float32),
        acc_impulse_tangent=jnp.zeros(lead, jnp.float32),
        restitution_velocity_target=jnp.zeros(lead, jnp.float32),
    )
