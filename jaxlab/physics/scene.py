"""Scene construction: the empty arena and adding shapes, joints and thrusters.

Every ``add_*`` function fills the first inactive slot (Jax2D ``argmin(active)``) and returns
``(new_state, index)``; shapes return ``(new_state, (local_index, global_index))`` like Jax2D, where
the global index counts polygons first, then circles.

Called with concrete values (outside ``jit``) the functions validate their input and raise
``ValueError`` naming the field, the value and what was expected; the indices come back as Python
ints. Called with traced values (inside ``jit``, e.g. a level generator) validation of values is
impossible, so they behave like Jax2D: a full capacity makes the call a no-op and indices are
arrays. The checked mode (:func:`capacity_checks`, or the environment variable
``JAXLAB_PHYSICS_CHECKS=1``) makes that case raise at run time instead, through
``equinox.error_if`` (under ``jit`` and ``vmap`` alike); it is read when a function is traced, so
enable it before the first call of the jitted function it should apply to.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int, Real

from jaxlab.physics.collision import calculate_collision_matrix, pair_counts
from jaxlab.physics.geometry import (
    circle_inverse_inertia,
    circle_inverse_mass,
    polygon_inverse_inertia,
    polygon_mass,
    recalculate_mass_and_inertia,
    validate_polygon_vertices,
)
from jaxlab.physics.state import (
    Joint,
    RigidBody,
    SimState,
    StaticSimParams,
    Thruster,
    empty_manifolds,
)

# ---------------------------------------------------------------------------------------------
# What the public ``add_*`` functions accept: concrete Python / NumPy values (validated here) or,
# inside ``jit``, traced JAX arrays (see the module docstring).

#: a [2] vector: an array (NumPy or JAX, possibly traced) or a sequence of two numbers
Vec2Like = Real[ArrayLike, " 2"] | Sequence[float]
#: [n, 2] polygon vertices: an array or a sequence of (x, y) pairs
VerticesLike = Real[ArrayLike, "n 2"] | Sequence[Sequence[float]]
#: a number: Python, NumPy or a (possibly traced) JAX scalar
ScalarLike = Float[ArrayLike, ""]
#: a flag: Python, NumPy or a (possibly traced) JAX bool
BoolLike = Bool[ArrayLike, ""]
#: a global shape index: Python, NumPy or a (possibly traced) JAX integer
IndexLike = Int[ArrayLike, ""]


# ---------------------------------------------------------------------------------------------
# Validation helpers (Python level, concrete values only)


def _is_concrete(*xs) -> bool:
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(xs))


def _scalar(name: str, value, *, low=None, high=None, low_open=False) -> float:
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != ():
        raise ValueError(f"{name}={value!r} has shape {arr.shape}; expected a scalar")
    v = float(arr)
    if not math.isfinite(v):
        raise ValueError(f"{name}={v} is not finite; expected a finite number")
    if low is not None and (v <= low if low_open else v < low):
        op = ">" if low_open else ">="
        raise ValueError(f"{name}={v}; expected {op} {low}")
    if high is not None and v > high:
        raise ValueError(f"{name}={v}; expected <= {high}")
    return v


def _vec2(name: str, value) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != (2,):
        raise ValueError(f"{name}={value!r} has shape {arr.shape}; expected shape (2,)")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}={arr.tolist()} is not finite; expected finite (x, y)")
    return arr.astype(np.float32)


def _check_static(state: SimState, static_params: StaticSimParams) -> None:
    if not isinstance(static_params, StaticSimParams):
        raise ValueError(
            f"static_params={static_params!r}; expected a StaticSimParams (is the argument order "
            "(state, static_params, ...)?)"
        )
    shapes = (
        state.polygon.active.shape[0],
        state.circle.active.shape[0],
        state.joint.active.shape[0],
        state.thruster.active.shape[0],
    )
    expected = (
        static_params.num_polygons,
        static_params.num_circles,
        static_params.num_joints,
        static_params.num_thrusters,
    )
    if shapes != expected:
        raise ValueError(
            f"state capacities (polygons, circles, joints, thrusters)={shapes} do not match "
            f"static_params {expected}"
        )


_CAPACITY_CHECKS = [os.environ.get("JAXLAB_PHYSICS_CHECKS", "0") not in ("", "0")]


@contextlib.contextmanager
def capacity_checks(enabled: bool = True) -> Iterator[None]:
    """Within the block, functions *traced* with ``add_*`` calls on a full scene raise (an
    ``equinox`` runtime error naming the capacity) instead of silently adding nothing."""
    old = _CAPACITY_CHECKS[0]
    _CAPACITY_CHECKS[0] = enabled
    try:
        yield
    finally:
        _CAPACITY_CHECKS[0] = old


def _free_slot(active, what: str, capacity_field: str, concrete: bool):
    if not concrete and _CAPACITY_CHECKS[0]:
        slot = eqx.error_if(
            jnp.argmin(active),
            jnp.all(active),
            f"{what} capacity is full: all {capacity_field} slots are active (checked mode); "
            f"raise StaticSimParams.{capacity_field}",
        )
        return slot, jnp.logical_not(jnp.all(active))
    if concrete:
        act = np.asarray(active)
        if act.all():
            raise ValueError(
                f"{what} capacity is full: {capacity_field}={act.shape[0]} slots are all active; "
                f"expected a free slot (raise StaticSimParams.{capacity_field})"
            )
        return int(np.argmin(act)), True
    return jnp.argmin(active), jnp.logical_not(jnp.all(active))


def _check_collision_mode(collision_mode) -> None:
    if collision_mode is not None and collision_mode not in (0, 1, 2):
        raise ValueError(f"collision_mode={collision_mode!r}; expected 0, 1 or 2")


def _check_shape_index(state: SimState, static_params: StaticSimParams, name: str, index) -> int:
    n = static_params.num_shapes
    if isinstance(index, bool) or not isinstance(index, int | np.integer | jax.Array | np.ndarray):
        raise ValueError(f"{name}={index!r}; expected an integer global shape index")
    idx_arr = np.asarray(index)
    if idx_arr.shape != () or not np.issubdtype(idx_arr.dtype, np.integer):
        raise ValueError(f"{name}={index!r}; expected an integer global shape index")
    idx = int(idx_arr)
    if not 0 <= idx < n:
        raise ValueError(
            f"{name}={idx} is out of range; expected a global shape index in [0, {n}) "
            f"(polygons 0..{static_params.num_polygons - 1}, then circles)"
        )
    if idx < static_params.num_polygons:
        active = bool(np.asarray(state.polygon.active)[idx])
        kind = f"polygon {idx}"
    else:
        active = bool(np.asarray(state.circle.active)[idx - static_params.num_polygons])
        kind = f"circle {idx - static_params.num_polygons}"
    if not active:
        raise ValueError(f"{name}={idx} refers to inactive {kind}; expected an active shape")
    return idx


@jax.jit
def _commit(collection, slot, can_add, values):
    """Write ``values`` (name -> value) into slot ``slot`` unless ``can_add`` is False."""
    new = collection.replace(
        **{
            k: getattr(collection, k).at[slot].set(v.astype(getattr(collection, k).dtype))
            for k, v in values.items()
        }
    )
    return jax.tree.map(lambda x, y: jnp.where(can_add, x, y), new, collection)


def _values(concrete: bool, **values):
    """Values as arrays with stable dtypes (bool, int32 or float32), NumPy when concrete."""
    conv = np.asarray if concrete else jnp.asarray
    out = {}
    for k, v in values.items():
        kind = np.dtype(getattr(v, "dtype", np.asarray(v).dtype if concrete else "f")).kind
        if isinstance(v, bool) or kind == "b":
            out[k] = conv(v, dtype=bool)
        elif isinstance(v, int) or kind in "iu":
            out[k] = conv(v, dtype=np.int32)
        else:
            out[k] = conv(v, dtype=np.float32)
    return out


@jax.jit
def _circle_props(radius, density, fixated):
    keep = jnp.logical_not(fixated)
    return circle_inverse_mass(radius, density) * keep, circle_inverse_inertia(
        radius, density
    ) * keep


@jax.jit
def _polygon_props(vertices, density, fixated):
    """Pad to 4 slots, re-centre on the vertex mean, and compute inverse mass and inertia."""
    n = vertices.shape[0]
    padded = jnp.zeros((4, 2), jnp.float32).at[:n].set(vertices.astype(jnp.float32))
    inv_mass, centroid = polygon_mass(padded, jnp.int32(n), density)
    padded = padded - centroid[None, :]
    inv_inertia = polygon_inverse_inertia(padded, jnp.int32(n), density)
    keep = jnp.logical_not(fixated)
    return padded, centroid, inv_mass * keep, inv_inertia * keep


_collision_matrix = jax.jit(calculate_collision_matrix, static_argnums=0)
_recalculate = jax.jit(recalculate_mass_and_inertia, static_argnums=1)


def _validate_body_common(
    velocity, rotation, angular_velocity, density, friction, restitution, collision_mode
):
    _vec2("velocity", velocity)
    _scalar("rotation", rotation)
    _scalar("angular_velocity", angular_velocity)
    _scalar("density", density, low=0.0, low_open=True)
    _scalar("friction", friction, low=0.0)
    _scalar("restitution", restitution, low=0.0)
    _check_collision_mode(collision_mode)


# ---------------------------------------------------------------------------------------------
# The empty scene


def _static_polygon_slots(
    P: int, V: int, s: float, f: float, add_floor: bool, add_walls_and_ceiling: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions (P, 2), vertices (P, V, 2) and active flags (P,) of floor, walls and ceiling."""
    pos = np.zeros((P, 2), np.float32)
    verts = np.zeros((P, V, 2), np.float32)
    active = np.zeros(P, bool)

    def put(slot, p, vs):
        pos[slot] = p
        verts[slot] = np.asarray(vs, np.float32)
        active[slot] = True

    if add_floor:
        put(
            0,
            [s / 2, -s + f],
            [[s / 2, s + f], [s / 2, -s - f], [-s / 2, -s - f], [-s / 2, s + f]],
        )
    if add_walls_and_ceiling:
        put(1, [0.0, 0.0], [[-s, s], [0.0, s], [0.0, 0.0], [-s, 0.0]])
        put(2, [0.0, 0.0], [[s, s], [2 * s, s], [2 * s, 0.0], [s, 0.0]])
        put(
            3,
            [s / 2, f + 2 * s],
            [[s, s + f], [s / 2, -s - f], [-s / 2, -s - f], [-s / 2, s + f]],
        )
    return pos, verts, active


def _empty_circles(C: int, V: int) -> RigidBody:
    """``C`` inactive circle slots (``V`` vertex rows kept for a shape shared with polygons)."""
    return RigidBody(
        position=jnp.zeros((C, 2), jnp.float32),
        rotation=jnp.zeros(C, jnp.float32),
        velocity=jnp.zeros((C, 2), jnp.float32),
        angular_velocity=jnp.zeros(C, jnp.float32),
        inverse_mass=jnp.zeros(C, jnp.float32),
        inverse_inertia=jnp.zeros(C, jnp.float32),
        friction=jnp.ones(C, jnp.float32),
        restitution=jnp.zeros(C, jnp.float32),
        collision_mode=jnp.ones(C, jnp.int32),
        active=jnp.zeros(C, bool),
        n_vertices=jnp.zeros(C, jnp.int32),
        vertices=jnp.zeros((C, V, 2), jnp.float32),
        radius=jnp.zeros(C, jnp.float32),
    )


def _empty_joints(J: int) -> Joint:
    """``J`` inactive joint slots, parked at Jax2D's global position (256, 256)."""
    return Joint(
        a_index=jnp.zeros(J, jnp.int32),
        b_index=jnp.zeros(J, jnp.int32),
        a_relative_pos=jnp.zeros((J, 2), jnp.float32),
        b_relative_pos=jnp.zeros((J, 2), jnp.float32),
        global_position=jnp.full((J, 2), 256.0, jnp.float32),
        active=jnp.zeros(J, bool),
        acc_impulse=jnp.zeros((J, 2), jnp.float32),
        acc_r_impulse=jnp.zeros(J, jnp.float32),
        motor_speed=jnp.zeros(J, jnp.float32),
        motor_power=jnp.zeros(J, jnp.float32),
        motor_on=jnp.zeros(J, bool),
        motor_has_joint_limits=jnp.zeros(J, bool),
        min_rotation=jnp.zeros(J, jnp.float32),
        max_rotation=jnp.zeros(J, jnp.float32),
        is_fixed_joint=jnp.zeros(J, bool),
        rotation=jnp.zeros(J, jnp.float32),
    )


def _empty_thrusters(T: int) -> Thruster:
    """``T`` inactive thruster slots."""
    return Thruster(
        object_index=jnp.zeros(T, jnp.int32),
        relative_position=jnp.zeros((T, 2), jnp.float32),
        rotation=jnp.zeros(T, jnp.float32),
        power=jnp.zeros(T, jnp.float32),
        global_position=jnp.zeros((T, 2), jnp.float32),
        active=jnp.zeros(T, bool),
    )


def create_empty_sim(
    static_params: StaticSimParams,
    add_floor: bool = True,
    add_walls_and_ceiling: bool = True,
    scene_size: float = 5.0,
    floor_offset: float = 0.2,
) -> SimState:
    """An empty scene laid out like Jax2D's ``create_empty_sim``.

    Polygon slot 0 is the floor (top at ``2 * floor_offset``, 0.4 by default), slots 1 and 2 the
    walls (``x < 0`` and ``x > scene_size``) and slot 3 the ceiling (from ``y = scene_size``); all
    static with ``collision_mode = 2``. The ceiling keeps Jax2D's vertex 0 at
    ``(scene_size, scene_size + floor_offset)``. The first ``num_static_fixated_polys`` polygon
    slots get ``collision_mode = 2`` even when empty; every polygon slot has ``n_vertices = 4``.

    Args:
        static_params: capacities.
        add_floor: add the floor in polygon slot 0.
        add_walls_and_ceiling: add walls and ceiling in polygon slots 1-3.
        scene_size: arena width (m).
        floor_offset: half the floor-top height (m).

    Returns:
        The empty ``SimState`` with gravity (0, -9.81).

    Raises:
        ValueError: if the polygon capacity cannot hold the requested static polygons.
    """
    if not isinstance(static_params, StaticSimParams):
        raise ValueError(f"static_params={static_params!r}; expected a StaticSimParams")
    sp = static_params
    needed = 4 if add_walls_and_ceiling else (1 if add_floor else 0)
    if sp.num_polygons < needed:
        raise ValueError(
            f"StaticSimParams.num_polygons={sp.num_polygons}; expected >= {needed} for "
            f"add_floor={add_floor}, add_walls_and_ceiling={add_walls_and_ceiling}"
        )
    s = _scalar("scene_size", scene_size, low=0.0, low_open=True)
    f = _scalar("floor_offset", floor_offset)
    P, C, J, T, V = (
        sp.num_polygons,
        sp.num_circles,
        sp.num_joints,
        sp.num_thrusters,
        sp.max_polygon_vertices,
    )
    pos, verts, active = _static_polygon_slots(P, V, s, f, add_floor, add_walls_and_ceiling)
    polygon = RigidBody(
        position=jnp.asarray(pos),
        rotation=jnp.zeros(P, jnp.float32),
        velocity=jnp.zeros((P, 2), jnp.float32),
        angular_velocity=jnp.zeros(P, jnp.float32),
        inverse_mass=jnp.zeros(P, jnp.float32),
        inverse_inertia=jnp.zeros(P, jnp.float32),
        friction=jnp.ones(P, jnp.float32),
        restitution=jnp.zeros(P, jnp.float32),
        collision_mode=jnp.ones(P, jnp.int32).at[: sp.num_static_fixated_polys].set(2),
        active=jnp.asarray(active),
        n_vertices=jnp.full((P,), V, jnp.int32),
        vertices=jnp.asarray(verts),
        radius=jnp.zeros(P, jnp.float32),
    )
    circle = _empty_circles(C, V)
    joint = _empty_joints(J)
    thruster = _empty_thrusters(T)
    n_cc, n_cr, n_rr = pair_counts(sp)
    state = SimState(
        polygon=polygon,
        circle=circle,
        joint=joint,
        thruster=thruster,
        collision_matrix=_collision_matrix(sp, joint),
        acc_rr_manifolds=empty_manifolds(n_rr, 2),
        acc_cr_manifolds=empty_manifolds(n_cr),
        acc_cc_manifolds=empty_manifolds(n_cc),
        gravity=jnp.array([0.0, -9.81], jnp.float32),
    )
    return _recalculate(state, sp, jnp.ones(P), jnp.ones(C))


# ---------------------------------------------------------------------------------------------
# Shapes


def add_circle(
    state: SimState,
    static_params: StaticSimParams,
    position: Vec2Like,
    radius: ScalarLike,
    rotation: ScalarLike = 0.0,
    velocity: Vec2Like = (0.0, 0.0),
    angular_velocity: ScalarLike = 0.0,
    density: ScalarLike = 1.0,
    friction: ScalarLike = 1.0,
    restitution: ScalarLike = 0.0,
    fixated: BoolLike = False,
    *,
    collision_mode: int | None = None,
) -> tuple[SimState, tuple]:
    """Add a circle; mass ``rho pi r^2``, inertia ``rho pi r^4 / 4``; fixated means both infinite.

    Args:
        state: scene to extend.
        static_params: capacities.
        position: [2] centre in world space.
        radius: radius (> 0).
        rotation, velocity, angular_velocity: initial pose and motion.
        density: area density (> 0).
        friction, restitution: material factors (>= 0).
        fixated: static body (zero inverse mass and inertia).
        collision_mode: 0, 1 or 2; ``None`` keeps the slot's value (Jax2D behaviour).

    Returns:
        ``(state, (circle_index, global_index))``.

    Raises:
        ValueError: on a full capacity or invalid values (concrete inputs only).
    """
    concrete = _is_concrete(
        state.circle.active,
        position,
        radius,
        rotation,
        velocity,
        angular_velocity,
        density,
        friction,
        restitution,
        fixated,
    )
    if concrete:
        _check_static(state, static_params)
        _vec2("position", position)
        _scalar("radius", radius, low=0.0, low_open=True)
        _validate_body_common(
            velocity, rotation, angular_velocity, density, friction, restitution, collision_mode
        )
    slot, can_add = _free_slot(state.circle.active, "circle", "num_circles", concrete)
    inv_mass, inv_inertia = _circle_props(
        jnp.asarray(radius, jnp.float32), jnp.asarray(density, jnp.float32), jnp.asarray(fixated)
    )
    values = _values(
        concrete,
        position=position,
        radius=radius,
        rotation=rotation,
        velocity=velocity,
        angular_velocity=angular_velocity,
        friction=friction,
        restitution=restitution,
        active=True,
    )
    values.update(inverse_mass=inv_mass, inverse_inertia=inv_inertia)
    if collision_mode is not None:
        values["collision_mode"] = np.int32(collision_mode)
    new = state.replace(circle=_commit(state.circle, slot, can_add, values))
    return new, (slot, slot + static_params.num_polygons)


def add_rectangle(
    state: SimState,
    static_params: StaticSimParams,
    position: Vec2Like,
    dimensions: Vec2Like,
    rotation: ScalarLike = 0.0,
    velocity: Vec2Like = (0.0, 0.0),
    angular_velocity: ScalarLike = 0.0,
    density: ScalarLike = 1.0,
    friction: ScalarLike = 1.0,
    restitution: ScalarLike = 0.0,
    fixated: BoolLike = False,
    *,
    collision_mode: int | None = None,
) -> tuple[SimState, tuple]:
    """Add a ``(width, height)`` rectangle centred at ``position`` (vertices clockwise from
    top-left). See ``add_polygon`` for the other arguments and the return value."""
    if _is_concrete(dimensions):
        dims = _vec2("dimensions", dimensions)
        if np.any(dims <= 0):
            raise ValueError(f"dimensions={dims.tolist()}; expected width > 0 and height > 0")
    hw, hh = (
        jnp.asarray(dimensions, jnp.float32)[0] / 2,
        jnp.asarray(dimensions, jnp.float32)[1] / 2,
    )
    vertices = jnp.stack(
        [jnp.stack([-hw, hh]), jnp.stack([hw, hh]), jnp.stack([hw, -hh]), jnp.stack([-hw, -hh])]
    )
    if _is_concrete(vertices):
        vertices = np.asarray(vertices)
    return add_polygon(
        state,
        static_params,
        position,
        vertices,
        rotation,
        velocity,
        angular_velocity,
        density,
        friction,
        restitution,
        fixated,
        collision_mode=collision_mode,
    )


def add_polygon(
    state: SimState,
    static_params: StaticSimParams,
    position: Vec2Like,
    vertices: VerticesLike,
    rotation: ScalarLike = 0.0,
    velocity: Vec2Like = (0.0, 0.0),
    angular_velocity: ScalarLike = 0.0,
    density: ScalarLike = 1.0,
    friction: ScalarLike = 1.0,
    restitution: ScalarLike = 0.0,
    fixated: BoolLike = False,
    *,
    collision_mode: int | None = None,
) -> tuple[SimState, tuple]:
    """Add a convex polygon given by clockwise local ``vertices`` around ``position``.

    As in Jax2D the body is re-centred on the vertex mean ``c``: ``position += c`` and every
    vertex slot (unused ones included) gets ``-c``. Mass and inertia follow ``geometry``.

    Args:
        state: scene to extend.
        static_params: capacities.
        position: [2] world position of the local origin.
        vertices: [n, 2] clockwise, strictly convex, ``3 <= n <= max_polygon_vertices``.
        rotation, velocity, angular_velocity: initial pose and motion.
        density: area density (> 0).
        friction, restitution: material factors (>= 0).
        fixated: static body (zero inverse mass and inertia).
        collision_mode: 0, 1 or 2; ``None`` keeps the slot's value (Jax2D behaviour).

    Returns:
        ``(state, (polygon_index, global_index))`` (both equal for polygons).

    Raises:
        ValueError: on a full capacity, too many or too few vertices, a non-convex or
            counter-clockwise outline, a dynamic polygon landing in one of the first
            ``num_static_fixated_polys`` slots (pairs among those are never collision-tested),
            or invalid values (concrete inputs only).
    """
    n = int(np.shape(vertices)[0])
    V = static_params.max_polygon_vertices if isinstance(static_params, StaticSimParams) else 0
    concrete = _is_concrete(
        state.polygon.active,
        position,
        vertices,
        rotation,
        velocity,
        angular_velocity,
        density,
        friction,
        restitution,
        fixated,
    )
    if concrete:
        _check_static(state, static_params)
        if not 3 <= n <= V:
            raise ValueError(
                f"vertices has {n} vertices; expected 3..max_polygon_vertices={V} "
                "(StaticSimParams.max_polygon_vertices)"
            )
        vertices = validate_polygon_vertices(vertices)
        _vec2("position", position)
        _validate_body_common(
            velocity, rotation, angular_velocity, density, friction, restitution, collision_mode
        )
    elif not 3 <= n <= V:
        raise ValueError(f"vertices has {n} vertices; expected 3..max_polygon_vertices={V}")
    slot, can_add = _free_slot(state.polygon.active, "polygon", "num_polygons", concrete)
    if concrete and slot < static_params.num_static_fixated_polys and not bool(fixated):
        raise ValueError(
            f"polygon slot {slot} < num_static_fixated_polys="
            f"{static_params.num_static_fixated_polys} is reserved for static polygons (pairs "
            "among these slots are never tested for collision); expected fixated=True, or fill "
            "those slots first (create_empty_sim adds floor, walls and ceiling there)"
        )
    padded, centroid, inv_mass, inv_inertia = _polygon_props(
        jnp.asarray(vertices, jnp.float32), jnp.asarray(density, jnp.float32), jnp.asarray(fixated)
    )
    values = _values(
        concrete,
        rotation=rotation,
        velocity=velocity,
        angular_velocity=angular_velocity,
        friction=friction,
        restitution=restitution,
        active=True,
        n_vertices=n,
    )
    values.update(
        position=jnp.asarray(position, jnp.float32) + centroid,
        vertices=padded,
        inverse_mass=inv_mass,
        inverse_inertia=inv_inertia,
    )
    if collision_mode is not None:
        values["collision_mode"] = np.int32(collision_mode)
    new = state.replace(polygon=_commit(state.polygon, slot, can_add, values))
    return new, (slot, slot)


# ---------------------------------------------------------------------------------------------
# Joints and thrusters


def _validate_joint(state, static_params, a_index, b_index, a_relative_pos, b_relative_pos):
    _check_static(state, static_params)
    a = _check_shape_index(state, static_params, "a_index", a_index)
    b = _check_shape_index(state, static_params, "b_index", b_index)
    if a == b:
        raise ValueError(f"a_index=b_index={a}; a joint must connect two different shapes")
    _vec2("a_relative_pos", a_relative_pos)
    _vec2("b_relative_pos", b_relative_pos)


def _add_joint(state, static_params, concrete, **values):
    slot, can_add = _free_slot(state.joint.active, "joint", "num_joints", concrete)
    joint = _commit(state.joint, slot, can_add, _values(concrete, active=True, **values))
    return state.replace(
        joint=joint, collision_matrix=_collision_matrix(static_params, joint)
    ), slot


def add_revolute_joint(
    state: SimState,
    static_params: StaticSimParams,
    a_index: IndexLike,
    b_index: IndexLike,
    a_relative_pos: Vec2Like,
    b_relative_pos: Vec2Like,
    motor_on: BoolLike = False,
    motor_speed: ScalarLike = 1.0,
    motor_power: ScalarLike = 1.0,
    has_joint_limits: BoolLike = False,
    min_rotation: ScalarLike = -np.pi,
    max_rotation: ScalarLike = np.pi,
    *,
    rotation: ScalarLike = 0.0,
) -> tuple[SimState, int | Int[Array, ""]]:
    """Pin ``a_relative_pos`` on shape ``a_index`` to ``b_relative_pos`` on shape ``b_index``.

    The two shapes (and everything joined to them) stop colliding with each other; the collision
    matrix is recomputed.

    Args:
        state: scene to extend.
        static_params: capacities.
        a_index, b_index: global indices of two different active shapes.
        a_relative_pos, b_relative_pos: [2] anchors in each body's local frame.
        motor_on: the motor responds to actions.
        motor_speed: target speed multiplier (of ``base_motor_speed``).
        motor_power: torque multiplier (of ``base_motor_power``).
        has_joint_limits: enforce ``min_rotation <= rot_b - rot_a - rotation <= max_rotation``.
        min_rotation, max_rotation: limits (radians).
        rotation: reference relative rotation (Jax2D leaves 0).

    Returns:
        ``(state, joint_index)``.

    Raises:
        ValueError: on a full capacity, an out-of-range or inactive shape, ``a == b`` or
            ``min_rotation > max_rotation`` (concrete inputs only).
    """
    concrete = _is_concrete(
        state.joint.active,
        a_index,
        b_index,
        a_relative_pos,
        b_relative_pos,
        motor_on,
        motor_speed,
        motor_power,
        has_joint_limits,
        min_rotation,
        max_rotation,
        rotation,
    )
    if concrete:
        _validate_joint(state, static_params, a_index, b_index, a_relative_pos, b_relative_pos)
        _scalar("motor_speed", motor_speed)
        _scalar("motor_power", motor_power, low=0.0)
        lo = _scalar("min_rotation", min_rotation)
        hi = _scalar("max_rotation", max_rotation)
        _scalar("rotation", rotation)
        if lo > hi:
            raise ValueError(f"min_rotation={lo} > max_rotation={hi}; expected min <= max")
    return _add_joint(
        state,
        static_params,
        concrete,
        a_index=a_index,
        b_index=b_index,
        a_relative_pos=a_relative_pos,
        b_relative_pos=b_relative_pos,
        is_fixed_joint=False,
        motor_on=motor_on,
        motor_speed=motor_speed,
        motor_power=motor_power,
        motor_has_joint_limits=has_joint_limits,
        min_rotation=min_rotation,
        max_rotation=max_rotation,
        rotation=rotation,
    )


def add_fixed_joint(
    state: SimState,
    static_params: StaticSimParams,
    a_index: IndexLike,
    b_index: IndexLike,
    a_relative_pos: Vec2Like,
    b_relative_pos: Vec2Like,
    *,
    rotation: ScalarLike = 0.0,
) -> tuple[SimState, int | Int[Array, ""]]:
    """Weld two shapes: the anchors coincide and ``rot_b - rot_a`` is held at ``rotation``.

    Args:
        state: scene to extend.
        static_params: capacities.
        a_index, b_index: global indices of two different active shapes.
        a_relative_pos, b_relative_pos: [2] anchors in each body's local frame.
        rotation: target relative rotation (Jax2D's ``add_fixed_joint_to_scene`` leaves 0).

    Returns:
        ``(state, joint_index)``.

    Raises:
        ValueError: as ``add_revolute_joint``.
    """
    concrete = _is_concrete(
        state.joint.active, a_index, b_index, a_relative_pos, b_relative_pos, rotation
    )
    if concrete:
        _validate_joint(state, static_params, a_index, b_index, a_relative_pos, b_relative_pos)
        _scalar("rotation", rotation)
    return _add_joint(
        state,
        static_params,
        concrete,
        a_index=a_index,
        b_index=b_index,
        a_relative_pos=a_relative_pos,
        b_relative_pos=b_relative_pos,
        is_fixed_joint=True,
        rotation=rotation,
    )


def add_thruster(
    state: SimState,
    static_params: StaticSimParams,
    object_index: IndexLike,
    relative_position: Vec2Like,
    rotation: ScalarLike,
    power: ScalarLike = 1.0,
) -> tuple[SimState, int | Int[Array, ""]]:
    """Attach a thruster to shape ``object_index``.

    The thrust of action ``u`` is ``power * base_thruster_power * u`` along
    ``rotation + rot_parent`` applied at ``relative_position`` (rotated into world space).

    Args:
        state: scene to extend.
        static_params: capacities.
        object_index: global index of an active shape.
        relative_position: [2] position in the parent's local frame.
        rotation: thrust direction relative to the parent (radians).
        power: thrust multiplier (>= 0).

    Returns:
        ``(state, thruster_index)``.

    Raises:
        ValueError: on a full capacity, an out-of-range or inactive parent, or invalid values.
    """
    concrete = _is_concrete(state.thruster.active, object_index, relative_position, rotation, power)
    if concrete:
        _check_static(state, static_params)
        _check_shape_index(state, static_params, "object_index", object_index)
        _vec2("relative_position", relative_position)
        _scalar("rotation", rotation)
        _scalar("power", power, low=0.0)
    slot, can_add = _free_slot(state.thruster.active, "thruster", "num_thrusters", concrete)
    values = _values(
        concrete,
        object_index=object_index,
        relative_position=relative_position,
        rotation=rotation,
        power=power,
        active=True,
    )
    return state.replace(thruster=_commit(state.thruster, slot, can_add, values)), slot
