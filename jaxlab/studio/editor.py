"""Level edits: pure functions ``Level -> Level`` on the host, each validated by the level reader.

An edit is a JSON object ``{"op": NAME, ...}`` (the list is ``OPS``); :func:`apply_edit` applies
it to NumPy copies of the level's arrays, writes the result as Kinetix JSON and reads it back with
``level_from_json``. So every level the studio holds passed the reader's checks (convex clockwise
polygons, positive densities, joints between two different active shapes, ...), an invalid edit
raises the reader's ``LevelFormatError`` and the caller's level is untouched, and saving is the
library's lossless writer.

Coordinates are world metres (y up, the env's frame); shapes are named by their global index
(polygons ``0..P-1``, then circles ``P..P+C-1``). Masses and inertias follow the physics engine's
formulas (``jaxlab.physics.geometry``); a fixed shape has zero inverse mass and inertia.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.envs.kinetix.levels import Level, level_from_json, level_to_json, static_sizes_of
from jaxlab.envs.kinetix.state import EnvState, StaticEnvParams, create_empty_env
from jaxlab.physics.geometry import polygon_inverse_inertia, polygon_mass


class EditError(ValueError):
    """An edit that names no known operation, a missing field or a missing entity."""


def _host(level: Level) -> EnvState:
    """A writable NumPy copy of the level's state."""
    return jax.tree.map(lambda x: np.array(x), jax.device_get(level.state))


def _rot(angle: float, v) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    v = np.asarray(v, np.float64)
    return np.array([c * v[0] - s * v[1], s * v[0] + c * v[1]])


def _vec2(op: dict, key: str) -> np.ndarray:
    v = op.get(key)
    if not isinstance(v, list | tuple) or len(v) != 2:
        raise EditError(f"{op.get('op')}: {key}={v!r}; expected [x, y]")
    try:
        return np.asarray([float(v[0]), float(v[1])], np.float64)
    except (TypeError, ValueError):
        raise EditError(f"{op.get('op')}: {key}={v!r}; expected two numbers") from None


def _num(op: dict, key: str, default: Any = None) -> float:
    v = op.get(key, default)
    if v is None:
        raise EditError(f"{op.get('op')}: missing {key}")
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise EditError(f"{op.get('op')}: {key}={v!r}; expected a number")
    return float(v)


def _int(op: dict, key: str, default: Any = None) -> int:
    v = op.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise EditError(f"{op.get('op')}: {key}={v!r}; expected an integer")
    return v


def _shape(s: EnvState, op: dict, key: str = "shape") -> tuple[str, int]:
    """``("polygon"|"circle", local index)`` of the active shape ``op[key]`` (global index)."""
    g = _int(op, key)
    P, C = s.sim.polygon.active.shape[0], s.sim.circle.active.shape[0]
    if 0 <= g < P and s.sim.polygon.active[g]:
        return "polygon", g
    if P <= g < P + C and s.sim.circle.active[g - P]:
        return "circle", g - P
    raise EditError(f"{op.get('op')}: {key}={g} is not an active shape (0..{P + C - 1})")


def _body(s: EnvState, kind: str):
    return s.sim.polygon if kind == "polygon" else s.sim.circle


def _densities(s: EnvState, kind: str) -> np.ndarray:
    return s.polygon_densities if kind == "polygon" else s.circle_densities


def _roles(s: EnvState, kind: str) -> np.ndarray:
    return s.polygon_shape_roles if kind == "polygon" else s.circle_shape_roles


def _update_mass(s: EnvState, kind: str, i: int, fixed: bool) -> None:
    """Inverse mass and inertia of shape ``i`` from its geometry and density (0 when fixed)."""
    b, d = _body(s, kind), float(_densities(s, kind)[i])
    if fixed:
        b.inverse_mass[i] = b.inverse_inertia[i] = 0.0
        return
    if kind == "circle":
        r = float(b.radius[i])
        area, inertia = math.pi * r * r * d, math.pi * r**4 / 4 * d
        b.inverse_mass[i] = 1.0 / area if area > 0 else 0.0
        b.inverse_inertia[i] = 1.0 / inertia if inertia > 0 else 0.0
        return
    v, n, rho = jnp.asarray(b.vertices[i]), jnp.int32(b.n_vertices[i]), jnp.float32(d)
    inv_m, _ = polygon_mass(v, n, rho)
    b.inverse_mass[i] = float(inv_m)
    b.inverse_inertia[i] = float(polygon_inverse_inertia(v, n, rho))


def _is_fixed(s: EnvState, kind: str, i: int) -> bool:
    return float(_body(s, kind).inverse_mass[i]) == 0.0


def _free_slot(active: np.ndarray, start: int, what: str) -> int:
    free = [i for i in range(start, active.shape[0]) if not active[i]]
    if not free:
        raise EditError(f"no free {what} slot: the level's size holds {active.shape[0] - start}")
    return free[0]


def _empty(s: EnvState) -> EnvState:
    """The empty arena at the capacities of ``s`` (the values of a free slot)."""
    sizes = dict(zip(("num_polygons", "num_circles", "num_joints", "num_thrusters"),
                     static_sizes_of(s), strict=True))  # fmt: skip
    return jax.tree.map(np.asarray, create_empty_env(StaticEnvParams(**sizes)))


def _clear(tree, template, i: int) -> None:
    """Reset slot ``i`` of every leaf of ``tree`` to the empty level's values."""
    for x, t in zip(jax.tree.leaves(tree), jax.tree.leaves(template), strict=True):
        x[i] = t[i]


def _material(s: EnvState, kind: str, i: int, op: dict) -> None:
    b = _body(s, kind)
    for key in ("friction", "restitution"):
        if key in op:
            getattr(b, key)[i] = _num(op, key)
    if "density" in op:
        _densities(s, kind)[i] = _num(op, "density")
    if "role" in op:
        _roles(s, kind)[i] = _int(op, "role")


def add_circle(s: EnvState, op: dict) -> None:
    i = _free_slot(s.sim.circle.active, 0, "circle")
    b = s.sim.circle
    b.position[i] = _vec2(op, "position")
    b.radius[i] = _num(op, "radius")
    b.rotation[i] = _num(op, "rotation", 0.0)
    b.active[i], b.collision_mode[i], b.friction[i] = True, 1, 1.0
    s.circle_densities[i] = 1.0
    _material(s, "circle", i, op)
    _update_mass(s, "circle", i, bool(op.get("fixed", False)))


def add_polygon(s: EnvState, op: dict) -> None:
    """World ``vertices`` [n, 2] (3 or 4, clockwise); the body sits at their mean."""
    verts = op.get("vertices")
    if not isinstance(verts, list) or not all(isinstance(v, list) for v in verts):
        raise EditError(f"add_polygon: vertices={verts!r}; expected [[x, y], ...]")
    w = np.asarray([_vec2({"op": "add_polygon", "v": v}, "v") for v in verts], np.float64)
    if not 3 <= len(w) <= 4:
        raise EditError(f"add_polygon: {len(w)} vertices; expected 3 or 4")
    S = 4  # the arena's floor, walls and ceiling hold the first polygon slots
    i = _free_slot(s.sim.polygon.active, S, "polygon")
    b = s.sim.polygon
    centre = w.mean(axis=0)
    b.position[i] = centre
    b.vertices[i] = 0.0
    b.vertices[i, : len(w)] = w - centre
    b.n_vertices[i], b.rotation[i] = len(w), 0.0
    b.active[i], b.collision_mode[i], b.friction[i] = True, 1, 1.0
    s.polygon_densities[i] = 1.0
    _material(s, "polygon", i, op)
    _update_mass(s, "polygon", i, bool(op.get("fixed", False)))


def move(s: EnvState, op: dict) -> None:
    kind, i = _shape(s, op)
    _body(s, kind).position[i] = _vec2(op, "position")


def rotate(s: EnvState, op: dict) -> None:
    kind, i = _shape(s, op)
    _body(s, kind).rotation[i] = _num(op, "rotation")


def resize(s: EnvState, op: dict) -> None:
    """A circle takes ``radius``; a polygon's vertices scale by ``scale`` about its centre."""
    kind, i = _shape(s, op)
    b = _body(s, kind)
    if kind == "circle":
        b.radius[i] = _num(op, "radius")
    else:
        b.vertices[i] = b.vertices[i] * _num(op, "scale")
    _update_mass(s, kind, i, _is_fixed(s, kind, i))


def set_props(s: EnvState, op: dict) -> None:
    """Any of ``fixed``, ``density``, ``friction``, ``restitution``, ``role`` of a shape."""
    kind, i = _shape(s, op)
    _material(s, kind, i, op)
    fixed = bool(op["fixed"]) if "fixed" in op else _is_fixed(s, kind, i)
    _update_mass(s, kind, i, fixed)


def delete(s: EnvState, op: dict) -> None:
    """Remove a shape with the joints and thrusters attached to it."""
    kind, i = _shape(s, op)
    g = _int(op, "shape")
    empty = _empty(s)
    _clear(_body(s, kind), _body(empty, kind), i)
    _densities(s, kind)[i], _roles(s, kind)[i] = 1.0, 0
    j = s.sim.joint
    for k in np.nonzero(j.active & ((j.a_index == g) | (j.b_index == g)))[0]:
        _clear(j, empty.sim.joint, int(k))
    t = s.sim.thruster
    for k in np.nonzero(t.active & (t.object_index == g))[0]:
        _clear(t, empty.sim.thruster, int(k))


def _pose(s: EnvState, g: int) -> tuple[np.ndarray, float]:
    P = s.sim.polygon.active.shape[0]
    b, i = (s.sim.polygon, g) if g < P else (s.sim.circle, g - P)
    return np.asarray(b.position[i], np.float64), float(b.rotation[i])


def _joint_fields(s: EnvState, k: int, op: dict) -> None:
    j = s.sim.joint
    for key in ("motor_speed", "motor_power", "min_rotation", "max_rotation"):
        if key in op:
            getattr(j, key)[k] = _num(op, key)
    if "motor_on" in op:
        j.motor_on[k] = bool(op["motor_on"])
    if "has_limits" in op:
        j.motor_has_joint_limits[k] = bool(op["has_limits"])
    if "motor_binding" in op:
        s.motor_bindings[k] = _int(op, "motor_binding")
    if "motor_auto" in op:
        s.motor_auto[k] = bool(op["motor_auto"])


def add_joint(s: EnvState, op: dict) -> None:
    """A ``revolute`` (default) or ``fixed`` joint between shapes ``a`` and ``b`` at the world
    point ``position``; motor fields as in ``set_joint``."""
    a, b = _int(op, "a"), _int(op, "b")
    for key in ("a", "b"):
        _shape(s, op, key)
    kind = op.get("kind", "revolute")
    if kind not in ("revolute", "fixed"):
        raise EditError(f"add_joint: kind={kind!r}; expected revolute or fixed")
    k = _free_slot(s.sim.joint.active, 0, "joint")
    p = _vec2(op, "position")
    (pa, ra), (pb, rb) = _pose(s, a), _pose(s, b)
    j = s.sim.joint
    j.a_index[k], j.b_index[k] = a, b
    j.a_relative_pos[k] = _rot(-ra, p - pa)
    j.b_relative_pos[k] = _rot(-rb, p - pb)
    j.global_position[k] = p
    j.active[k], j.is_fixed_joint[k] = True, kind == "fixed"
    j.rotation[k] = rb - ra
    j.motor_speed[k], j.motor_power[k] = 1.0, 1.0
    j.min_rotation[k], j.max_rotation[k] = -math.pi, math.pi
    _joint_fields(s, k, op)


def _joint_index(s: EnvState, op: dict) -> int:
    k = _int(op, "joint")
    if not (0 <= k < s.sim.joint.active.shape[0] and s.sim.joint.active[k]):
        raise EditError(f"{op.get('op')}: joint={k} is not an active joint")
    return k


def set_joint(s: EnvState, op: dict) -> None:
    """Any of ``motor_on``, ``motor_speed``, ``motor_power``, ``motor_binding``, ``motor_auto``,
    ``has_limits``, ``min_rotation``, ``max_rotation`` of a joint."""
    _joint_fields(s, _joint_index(s, op), op)


def remove_joint(s: EnvState, op: dict) -> None:
    empty = _empty(s)
    k = _joint_index(s, op)
    _clear(s.sim.joint, empty.sim.joint, k)
    s.motor_bindings[k], s.motor_auto[k] = 0, False


def add_thruster(s: EnvState, op: dict) -> None:
    """A thruster on ``shape`` at the world point ``position`` pushing along ``rotation``
    (radians, relative to the shape), with ``power`` and ``binding``."""
    g = _int(op, "shape")
    _shape(s, op)
    k = _free_slot(s.sim.thruster.active, 0, "thruster")
    p = _vec2(op, "position")
    pos, rot = _pose(s, g)
    t = s.sim.thruster
    t.object_index[k], t.active[k] = g, True
    t.relative_position[k] = _rot(-rot, p - pos)
    t.global_position[k] = p
    t.rotation[k] = _num(op, "rotation", 0.0)
    t.power[k] = _num(op, "power", 1.0)
    s.thruster_bindings[k] = _int(op, "binding", 0)


def remove_thruster(s: EnvState, op: dict) -> None:
    k = _int(op, "thruster")
    t = s.sim.thruster
    if not (0 <= k < t.active.shape[0] and t.active[k]):
        raise EditError(f"remove_thruster: thruster={k} is not an active thruster")
    empty = _empty(s)
    _clear(t, empty.sim.thruster, k)
    s.thruster_bindings[k] = 0


def gravity(s: EnvState, op: dict) -> None:
    s.sim.gravity[:] = _vec2(op, "gravity")


#: Edit operations by name: each mutates a NumPy state in place.
OPS: dict[str, Callable[[EnvState, dict], None]] = {
    "add_circle": add_circle,
    "add_polygon": add_polygon,
    "move": move,
    "rotate": rotate,
    "resize": resize,
    "set": set_props,
    "delete": delete,
    "add_joint": add_joint,
    "set_joint": set_joint,
    "remove_joint": remove_joint,
    "add_thruster": add_thruster,
    "remove_thruster": remove_thruster,
    "gravity": gravity,
}


def apply_edit(level: Level, op: dict) -> Level:
    """``level`` with the edit ``op`` applied, read back through the level reader.

    Raises:
        EditError: an unknown operation, a missing or mistyped field, or a missing entity.
        LevelFormatError: the edited level fails the reader's checks (source ``edit``).
    """
    if not isinstance(op, dict) or op.get("op") not in OPS:
        name = op.get("op") if isinstance(op, dict) else op
        raise EditError(f"unknown edit {name!r}; expected one of {sorted(OPS)}")
    s = _host(level)
    OPS[op["op"]](s, op)
    s = s.replace(timestep=np.int32(0), last_distance=np.float32(-1.0))
    data = level_to_json(s, level.static_params, level.params)
    return level_from_json(data, f"edit {op['op']}")
