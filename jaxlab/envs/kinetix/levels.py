"""Kinetix level files: the original JSON format, read and written losslessly.

Format (``kinetix/util/saving.py`` of the original): one JSON object
``{"env_state": ..., "env_params": ..., "static_env_params": ...}``. Fixed-length arrays are
objects keyed ``"0", "1", ...``; entity collections are JSON lists in slot order:

* ``env_state.polygon[P]`` / ``circle[C]``: rigid-body fields (``position``, ``rotation``,
  ``velocity``, ``angular_velocity``, ``inverse_mass``, ``inverse_inertia``, ``friction``,
  ``restitution``, ``collision_mode``, ``active``, ``n_vertices``, ``vertices`` [4][2],
  ``radius``) plus ``role``, ``density``, ``highlighted``;
* ``joint[J]``: joint fields plus ``motor_binding``; ``thruster[T]``: thruster fields plus
  ``thruster_binding``;
* ``collision_matrix`` [N][N]; ``acc_rr_manifolds`` (two entries per polygon pair: contact points
  0 and 1), ``acc_cr_manifolds``, ``acc_cc_manifolds``; ``gravity`` [2];
* ``env_params``: the ``EnvParams`` fields plus ``num_shape_roles`` (always 4);
* ``static_env_params``: the ``StaticEnvParams`` fields (``screen_dim`` as ``{"0": w, "1": h}``).

``load_level`` -> ``Level(state, static_params, params)``; ``save_level`` writes the same bytes
the original's ``export_env_state_to_json`` writes (``json.dumps`` layout, float32 values as
Python floats), so read -> write reproduces every original file byte for byte.

Differences from the original loader, on purpose: the file's ``max_timesteps``, ``screen_dim``
and ``downscale`` are kept (the original resets them to defaults), ``highlighted`` is kept (the
original drops it) and the polygon-pair manifolds are read entry by entry (the original reads
entry ``i`` into pair ``i`` for both points). The collision matrix is recomputed from the joints,
as in the original (identical for every valid file).

Every problem with a file raises ``LevelFormatError`` (a ``ValueError``) naming the file, the
field path (``env_state.joint[0].motor_binding``) and what was expected.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PRNGKeyArray

from jaxlab.envs.kinetix.state import (
    NUM_SHAPE_ROLES,
    ROLE_NAMES,
    SIM_PARAM_FIELDS,
    EnvParams,
    EnvState,
    StaticEnvParams,
    from_sim_state,
)
from jaxlab.physics import (
    CollisionManifold,
    Joint,
    RigidBody,
    SimState,
    Thruster,
    pair_counts,
)
from jaxlab.physics.geometry import validate_polygon_vertices


class LevelFormatError(ValueError):
    """A level file (or level data) that is not valid Kinetix JSON; the message names the file,
    the field and the problem."""


class Level(NamedTuple):
    """A loaded level: ``(state, static_params, params)`` (unpacks like the original's tuple)."""

    state: EnvState
    static_params: StaticEnvParams
    params: EnvParams


# ---------------------------------------------------------------------------------------------
# Schema: (json key, kind, shape). kind: "f" float32, "i" int32, "b" bool.

_BODY = (
    ("position", "f", (2,)),
    ("rotation", "f", ()),
    ("velocity", "f", (2,)),
    ("angular_velocity", "f", ()),
    ("inverse_mass", "f", ()),
    ("inverse_inertia", "f", ()),
    ("friction", "f", ()),
    ("restitution", "f", ()),
    ("collision_mode", "i", ()),
    ("active", "b", ()),
    ("n_vertices", "i", ()),
    ("vertices", "f", (4, 2)),
    ("radius", "f", ()),
)
_BODY_EXTRA = (("role", "i", ()), ("density", "f", ()), ("highlighted", "b", ()))
_JOINT = (
    ("a_index", "i", ()),
    ("b_index", "i", ()),
    ("a_relative_pos", "f", (2,)),
    ("b_relative_pos", "f", (2,)),
    ("global_position", "f", (2,)),
    ("active", "b", ()),
    ("acc_impulse", "f", (2,)),
    ("acc_r_impulse", "f", ()),
    ("motor_speed", "f", ()),
    ("motor_power", "f", ()),
    ("motor_on", "b", ()),
    ("motor_has_joint_limits", "b", ()),
    ("min_rotation", "f", ()),
    ("max_rotation", "f", ()),
    ("is_fixed_joint", "b", ()),
    ("rotation", "f", ()),
)
_JOINT_EXTRA = (("motor_binding", "i", ()),)
_THRUSTER = (
    ("object_index", "i", ()),
    ("relative_position", "f", (2,)),
    ("rotation", "f", ()),
    ("power", "f", ()),
    ("global_position", "f", (2,)),
    ("active", "b", ()),
)
_THRUSTER_EXTRA = (("thruster_binding", "i", ()),)
_MANIFOLD = (
    ("normal", "f", (2,)),
    ("penetration", "f", ()),
    ("collision_point", "f", (2,)),
    ("active", "b", ()),
    ("acc_impulse_normal", "f", ()),
    ("acc_impulse_tangent", "f", ()),
    ("restitution_velocity_target", "f", ()),
)
_ENV_STATE_KEYS = (
    "polygon",
    "circle",
    "joint",
    "thruster",
    "collision_matrix",
    "acc_rr_manifolds",
    "acc_cr_manifolds",
    "acc_cc_manifolds",
    "gravity",
)
_ENV_PARAM_KEYS = (*SIM_PARAM_FIELDS, "max_timesteps", "pixels_per_unit", "dense_reward_scale")
_STATIC_KEYS = (
    "num_polygons",
    "num_circles",
    "num_joints",
    "num_thrusters",
    "max_polygon_vertices",
    "num_solver_iterations",
    "solver_batch_size",
    "do_warm_starting",
    "num_static_fixated_polys",
    "screen_dim",
    "downscale",
    "frame_skip",
    "max_shape_size",
    "num_motor_bindings",
    "num_thruster_bindings",
)
_NP_DTYPE = {"f": np.float32, "i": np.int32, "b": np.bool_}

#: Largest float32; a JSON number beyond it (``1e39``) would load as inf.
_F32_MAX = float(np.finfo(np.float32).max)
#: Magnitude bound of every float field of a level (metres, seconds, kilograms: shipped and
#: original levels stay below 1e2 except inverse inertias of small shapes, ~1e6); beyond it
#: products in the solver overflow float32. Fields with their own bound are in ``_LIMITS``.
_FLOAT_LIMIT = 1e6
_LIMITS = {"inverse_mass": 1e9, "inverse_inertia": 1e9}
#: Fields that must be >= 0 (slot values; a negative friction or inverse mass is unphysical).
_NON_NEGATIVE = ("friction", "restitution", "inverse_mass", "inverse_inertia", "density", "radius")
#: Env params that must be > 0 (a time step, clipping bounds, the render scale) and >= 0.
_PARAMS_POSITIVE = (
    "dt",
    "pixels_per_unit",
    "clip_position",
    "clip_velocity",
    "clip_angular_velocity",
)
_PARAMS_NON_NEGATIVE = (
    "slop",
    "base_friction",
    "base_motor_speed",
    "base_motor_power",
    "base_thruster_power",
    "motor_decay_coefficient",
    "motor_joint_limit",
    "joint_stiffness",
    *(k for k in SIM_PARAM_FIELDS if "baumgarte" in k),
)
#: Upper bounds of the solver's dimensionless factors and of the time step (defaults 0.01-5 and
#: 1/60 s); beyond them the position and joint corrections diverge within a few steps.
_PARAMS_MAX = {
    "dt": 1.0,
    "slop": 1.0,
    "joint_stiffness": 10.0,
    **{k: 100.0 for k in SIM_PARAM_FIELDS if "baumgarte" in k},
}


# ---------------------------------------------------------------------------------------------
# NumPy helpers (level I/O runs on the host: no per-op XLA compilation)


def collision_matrix_np(num_shapes: int, a_index, b_index, active) -> np.ndarray:
    """``physics.calculate_collision_matrix`` in NumPy: ``False`` on the diagonal and for every
    pair of shapes linked by a chain of active joints, ``True`` elsewhere. [N, N] bool."""
    n = num_shapes
    reach = np.eye(n, dtype=bool)
    act = np.asarray(active, bool)
    a, b = np.asarray(a_index)[act], np.asarray(b_index)[act]
    reach[a, b] = True
    reach[b, a] = True
    for _ in range(max(1, math.ceil(math.log2(max(n, 2))))):
        reach = (reach.astype(np.int64) @ reach.astype(np.int64)) > 0
    return np.logical_not(reach)


def _empty_manifolds_np(n: int, points: int | None = None) -> dict[str, np.ndarray]:
    lead = (n,) if points is None else (n, points)
    return {k: np.zeros(lead + shape, _NP_DTYPE[kind]) for k, kind, shape in _MANIFOLD}


def _to_jnp(tree):
    return jax.tree.map(lambda x: jnp.asarray(x), tree)


# ---------------------------------------------------------------------------------------------
# Reading


class _Reader:
    """Validating JSON -> NumPy conversion with field paths in every error."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, path: str, problem: str) -> NoReturn:
        raise LevelFormatError(f"{self.source}: {path}: {problem}")

    def obj(self, x, path: str, keys: Sequence[str]) -> dict:
        if not isinstance(x, dict):
            self.fail(
                path, f"got {type(x).__name__}; expected a JSON object with keys {list(keys)}"
            )
        unknown = [k for k in x if k not in keys]
        if unknown:
            self.fail(path, f"unknown key(s) {unknown}; expected exactly {list(keys)}")
        missing = [k for k in keys if k not in x]
        if missing:
            self.fail(path, f"missing key(s) {missing}")
        return x

    def scalar(self, x, path: str, kind: str):
        if kind == "b":
            if isinstance(x, bool):
                return x
            self.fail(path, f"value {x!r}; expected true or false")
        if isinstance(x, bool) or not isinstance(x, int | float):
            self.fail(path, f"value {x!r}; expected a number")
        if kind == "i":
            if isinstance(x, float) and not x.is_integer():
                self.fail(path, f"value {x!r}; expected an integer")
            if not -(2**31) <= x < 2**31:
                self.fail(path, f"value {x!r}; expected an integer that fits int32")
            return int(x)
        if not math.isfinite(x) or abs(x) > _F32_MAX:
            self.fail(path, f"value {x!r}; expected a finite number (finite as float32)")
        limit = _LIMITS.get(path.rsplit(".", 1)[-1].split("[", 1)[0], _FLOAT_LIMIT)
        if abs(x) > limit:
            self.fail(
                path,
                f"value {x!r}; expected |value| <= {limit:g} (a metre-scale scene; larger "
                "magnitudes overflow the float32 physics)",
            )
        return x

    def array(self, x, path: str, kind: str, shape: tuple[int, ...]):
        if not shape:
            return self.scalar(x, path, kind)
        n = shape[0]
        keys = [str(i) for i in range(n)]
        if not isinstance(x, dict):
            self.fail(path, f"got {x!r:.60}; expected an array object with keys {keys}")
        if list(x) != keys:
            self.fail(path, f"has keys {list(x)[:8]}; expected exactly {keys} (length {n})")
        return [self.array(x[k], f"{path}[{k}]", kind, shape[1:]) for k in keys]

    def records(self, x, path: str, count: int, schema, what: str, size_field: str):
        if not isinstance(x, list):
            self.fail(path, f"got {type(x).__name__}; expected a list of {count} {what}")
        if len(x) != count:
            self.fail(
                path,
                f"has {len(x)} entries; expected {count} (static_env_params.{size_field})"
                + (" -- more entities than the static sizes allow" if len(x) > count else ""),
            )
        keys = [k for k, _, _ in schema]
        cols: dict[str, list] = {k: [] for k in keys}
        for i, rec in enumerate(x):
            self.obj(rec, f"{path}[{i}]", keys)
            for k, kind, shape in schema:
                cols[k].append(self.array(rec[k], f"{path}[{i}].{k}", kind, shape))
        out = {}
        for k, kind, shape in schema:
            out[k] = np.asarray(cols[k], dtype=_NP_DTYPE[kind]).reshape((count,) + shape)
        return out


def _static_from_json(r: _Reader, x) -> StaticEnvParams:
    x = r.obj(x, "static_env_params", _STATIC_KEYS)
    values: dict[str, Any] = {}
    for k in _STATIC_KEYS:
        path = f"static_env_params.{k}"
        if k == "screen_dim":
            values[k] = tuple(r.array(x[k], path, "i", (2,)))
        elif k == "do_warm_starting":
            values[k] = r.scalar(x[k], path, "b")
        else:
            v = x[k]
            if isinstance(v, bool) or not isinstance(v, int):
                r.fail(path, f"value {v!r}; expected an integer")
            values[k] = v
    try:
        return StaticEnvParams(**values)
    except ValueError as e:
        raise LevelFormatError(f"{r.source}: static_env_params: {e}") from None


def _params_from_json(r: _Reader, x) -> EnvParams:
    x = r.obj(x, "env_params", (*_ENV_PARAM_KEYS, "num_shape_roles"))
    values = {}
    for k in _ENV_PARAM_KEYS:
        kind = "i" if k == "max_timesteps" else "f"
        v = r.scalar(x[k], f"env_params.{k}", kind)
        values[k] = x[k] if kind == "f" else v
    if x["num_shape_roles"] != NUM_SHAPE_ROLES or isinstance(x["num_shape_roles"], bool):
        r.fail(
            "env_params.num_shape_roles",
            f"value {x['num_shape_roles']!r}; expected {NUM_SHAPE_ROLES} (roles {ROLE_NAMES})",
        )
    if values["max_timesteps"] < 1:
        r.fail("env_params.max_timesteps", f"value {values['max_timesteps']}; expected >= 1")
    for k in _PARAMS_POSITIVE:
        if values[k] <= 0:
            r.fail(f"env_params.{k}", f"value {values[k]}; expected > 0")
    for k in _PARAMS_NON_NEGATIVE:
        if values[k] < 0:
            r.fail(f"env_params.{k}", f"value {values[k]}; expected >= 0")
    for k, high in _PARAMS_MAX.items():
        if values[k] > high:
            r.fail(f"env_params.{k}", f"value {values[k]}; expected <= {high:g}")
    return EnvParams(**values)


def _body(cols: dict) -> RigidBody:
    return RigidBody(**{k: cols[k] for k, _, _ in _BODY})


def _manifold(cols: dict, lead: tuple[int, ...]) -> CollisionManifold:
    return CollisionManifold(
        **{k: cols[k].reshape(lead + cols[k].shape[1:]) for k, _, _ in _MANIFOLD}
    )


def _check_values(r: _Reader, sp: StaticEnvParams, polys, circles, joints, thrusters) -> None:
    N = sp.num_shapes
    active = np.concatenate([polys["active"], circles["active"]])
    for name, cols in (("polygon", polys), ("circle", circles)):
        for i in range(len(cols["role"])):
            path = f"env_state.{name}[{i}]"
            for k in _NON_NEGATIVE:
                if cols[k][i] < 0:
                    r.fail(f"{path}.{k}", f"value {float(cols[k][i])}; expected >= 0")
            n = int(cols["n_vertices"][i])
            if name == "polygon" and cols["active"][i] and n in (3, 4):
                # The scene builder's check (physics.geometry): clockwise and strictly convex.
                try:
                    validate_polygon_vertices(cols["vertices"][i][:n], f"{path}.vertices")
                except ValueError as e:
                    r.fail(f"{path}.vertices", str(e).removeprefix(f"{path}.vertices"))
            role = int(cols["role"][i])
            if not 0 <= role < NUM_SHAPE_ROLES:
                r.fail(
                    f"{path}.role",
                    f"value {role}; expected one of 0 (default), 1 (green), 2 (blue), 3 (red)",
                )
            if int(cols["collision_mode"][i]) not in (0, 1, 2):
                r.fail(
                    f"{path}.collision_mode",
                    f"value {int(cols['collision_mode'][i])}; expected 0, 1 or 2",
                )
            if cols["active"][i] and not cols["density"][i] > 0:
                r.fail(f"{path}.density", f"value {cols['density'][i]}; expected > 0")
            if name == "polygon" and cols["active"][i] and cols["n_vertices"][i] not in (3, 4):
                r.fail(f"{path}.n_vertices", f"value {cols['n_vertices'][i]}; expected 3 or 4")
            if name == "circle" and cols["active"][i] and not cols["radius"][i] > 0:
                r.fail(f"{path}.radius", f"value {cols['radius'][i]}; expected > 0")
    for i in range(sp.num_joints):
        path = f"env_state.joint[{i}]"
        b = int(joints["motor_binding"][i])
        if joints["active"][i] and not 0 <= b < sp.num_motor_bindings:
            r.fail(
                f"{path}.motor_binding",
                f"value {b}; expected 0..{sp.num_motor_bindings - 1} (num_motor_bindings)",
            )
        if joints["active"][i]:
            for end in ("a_index", "b_index"):
                idx = int(joints[end][i])
                if not 0 <= idx < N:
                    r.fail(f"{path}.{end}", f"value {idx}; expected a shape index 0..{N - 1}")
                if not active[idx]:
                    r.fail(f"{path}.{end}", f"value {idx} is an inactive shape slot")
            if joints["a_index"][i] == joints["b_index"][i]:
                r.fail(path, f"a_index = b_index = {int(joints['a_index'][i])}; expected 2 shapes")
    for i in range(sp.num_thrusters):
        path = f"env_state.thruster[{i}]"
        b = int(thrusters["thruster_binding"][i])
        if thrusters["active"][i] and not 0 <= b < sp.num_thruster_bindings:
            r.fail(
                f"{path}.thruster_binding",
                f"value {b}; expected 0..{sp.num_thruster_bindings - 1} (num_thruster_bindings)",
            )
        if thrusters["active"][i]:
            idx = int(thrusters["object_index"][i])
            if not 0 <= idx < N:
                r.fail(f"{path}.object_index", f"value {idx}; expected a shape index 0..{N - 1}")
            if not active[idx]:
                r.fail(f"{path}.object_index", f"value {idx} is an inactive shape slot")


def level_from_json(data: Any, source: str = "<level>") -> Level:
    """Parse a level JSON object (already ``json.load``-ed) into a ``Level``.

    Raises:
        LevelFormatError: naming ``source``, the field path and the problem.
    """
    r = _Reader(source)
    top = r.obj(data, "<top level>", ("env_state", "env_params", "static_env_params"))
    sp = _static_from_json(r, top["static_env_params"])
    params = _params_from_json(r, top["env_params"])
    es = r.obj(top["env_state"], "env_state", _ENV_STATE_KEYS)
    P, C, J, T, N = (
        sp.num_polygons,
        sp.num_circles,
        sp.num_joints,
        sp.num_thrusters,
        sp.num_shapes,
    )
    polys = r.records(
        es["polygon"], "env_state.polygon", P, _BODY + _BODY_EXTRA, "polygons", "num_polygons"
    )
    circles = r.records(
        es["circle"], "env_state.circle", C, _BODY + _BODY_EXTRA, "circles", "num_circles"
    )
    joints = r.records(
        es["joint"], "env_state.joint", J, _JOINT + _JOINT_EXTRA, "joints", "num_joints"
    )
    thrusters = r.records(
        es["thruster"],
        "env_state.thruster",
        T,
        _THRUSTER + _THRUSTER_EXTRA,
        "thrusters",
        "num_thrusters",
    )
    n_cc, n_cr, n_rr = pair_counts(sp.sim)
    rr = r.records(
        es["acc_rr_manifolds"],
        "env_state.acc_rr_manifolds",
        2 * n_rr,
        _MANIFOLD,
        "manifolds",
        "num_polygons (2 per polygon pair)",
    )
    cr = r.records(
        es["acc_cr_manifolds"],
        "env_state.acc_cr_manifolds",
        n_cr,
        _MANIFOLD,
        "manifolds",
        "num_circles * num_polygons",
    )
    cc = r.records(
        es["acc_cc_manifolds"],
        "env_state.acc_cc_manifolds",
        n_cc,
        _MANIFOLD,
        "manifolds",
        "num_circles pairs",
    )
    matrix = np.asarray(r.array(es["collision_matrix"], "env_state.collision_matrix", "b", (N, N)))
    gravity = np.asarray(r.array(es["gravity"], "env_state.gravity", "f", (2,)), np.float32)
    _check_values(r, sp, polys, circles, joints, thrusters)

    joint = Joint(**{k: joints[k] for k, _, _ in _JOINT})
    recomputed = collision_matrix_np(N, joints["a_index"], joints["b_index"], joints["active"])
    sim = SimState(
        polygon=_body(polys),
        circle=_body(circles),
        joint=joint,
        thruster=Thruster(**{k: thrusters[k] for k, _, _ in _THRUSTER}),
        collision_matrix=matrix if np.array_equal(matrix, recomputed) else recomputed,
        acc_rr_manifolds=_manifold(rr, (n_rr, 2)),
        acc_cr_manifolds=_manifold(cr, (n_cr,)),
        acc_cc_manifolds=_manifold(cc, (n_cc,)),
        gravity=gravity,
    )
    state = from_sim_state(_to_jnp(sim), sp).replace(
        polygon_shape_roles=jnp.asarray(polys["role"]),
        circle_shape_roles=jnp.asarray(circles["role"]),
        polygon_highlighted=jnp.asarray(polys["highlighted"]),
        circle_highlighted=jnp.asarray(circles["highlighted"]),
        polygon_densities=jnp.asarray(polys["density"]),
        circle_densities=jnp.asarray(circles["density"]),
        motor_bindings=jnp.asarray(joints["motor_binding"]),
        thruster_bindings=jnp.asarray(thrusters["thruster_binding"]),
    )
    return Level(state, sp, params)


#: Size and nesting limits checked before the JSON parser runs (the largest shipped level is
#: ~0.3 MB and nests 6 deep; Python's parser recurses once per level of nesting).
MAX_LEVEL_BYTES = 64 * 2**20
MAX_LEVEL_DEPTH = 32


def _max_nesting(text: str) -> int:
    """Deepest ``[``/``{`` nesting of JSON ``text``, outside strings (a linear scan, no parse)."""
    stripped = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)  # brackets inside strings do not count
    b = np.frombuffer(stripped.encode("utf-8"), np.uint8)
    step = np.isin(b, (ord("["), ord("{"))).astype(np.int64) - np.isin(b, (ord("]"), ord("}")))
    return int(np.max(np.cumsum(step), initial=0))


def load_level(path: str | os.PathLike, static_params: StaticEnvParams | None = None) -> Level:
    """Read a level file; with ``static_params`` the level is padded into those (larger) sizes.

    Args:
        path: the ``.json`` file.
        static_params: optional target sizes (see ``expand_level``); its other static fields
            (frame skip, solver settings) replace the file's.

    Returns:
        ``Level(state, static_params, params)``.

    Raises:
        FileNotFoundError: no such file.
        LevelFormatError: malformed or truncated JSON, unknown or missing keys, wrong array
            lengths, invalid values, or more entities than ``static_params`` allows.
    """
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise FileNotFoundError(f"{source}: no such level file")
    size = path.stat().st_size
    if size > MAX_LEVEL_BYTES:
        raise LevelFormatError(
            f"{source}: file is {size} bytes; expected a level file of at most "
            f"{MAX_LEVEL_BYTES} bytes"
        )
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise LevelFormatError(
            f"{source}: not UTF-8 text (byte {e.start}: {e.reason}); expected a JSON level file"
        ) from None
    depth = _max_nesting(text)
    if depth > MAX_LEVEL_DEPTH:
        raise LevelFormatError(
            f"{source}: JSON nested {depth} levels deep; expected at most {MAX_LEVEL_DEPTH} "
            "(a level file nests 6)"
        )
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise LevelFormatError(
            f"{source}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); "
            "the file may be truncated"
        ) from None
    except (ValueError, RecursionError) as e:  # e.g. an integer literal with 5000 digits
        raise LevelFormatError(f"{source}: not a valid level JSON ({e})") from None
    level = level_from_json(data, source)
    if static_params is not None:
        state = expand_level(level.state, level.static_params, static_params, source=source)
        level = Level(state, static_params, level.params)
    return level


# ---------------------------------------------------------------------------------------------
# Writing


def _py(x, kind: str):
    if kind == "f":
        return float(np.float32(x))
    if kind == "i":
        return int(x)
    return bool(x)


def _json_array(x: np.ndarray | np.generic, kind: str):
    if x.ndim == 0:
        return _py(x, kind)
    return {str(i): _json_array(x[i], kind) for i in range(x.shape[0])}


def _json_records(cols: dict[str, np.ndarray], schema, count: int) -> list[dict]:
    return [{k: _json_array(cols[k][i], kind) for k, kind, _ in schema} for i in range(count)]


def _param_value(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float):
        return v
    a = np.asarray(v)
    if a.shape != ():
        raise ValueError(f"EnvParams field has shape {a.shape}; expected a scalar to save")
    return a.item()


def level_to_json(state: EnvState, static_params: StaticEnvParams, params: EnvParams) -> dict:
    """The level as a JSON-ready dict in the original's layout (key order included).

    Raises:
        ValueError: if ``state`` does not have the shapes of ``static_params`` (e.g. batched).
    """
    sp = static_params
    _check_state_shapes(state, sp)
    host = jax.tree.map(np.asarray, state)
    sim = host.sim

    def body_cols(b, roles, dens, hl):
        cols = {k: getattr(b, k) for k, _, _ in _BODY}
        cols.update(role=roles, density=dens, highlighted=hl)
        return cols

    polys = body_cols(
        sim.polygon, host.polygon_shape_roles, host.polygon_densities, host.polygon_highlighted
    )
    circles = body_cols(
        sim.circle, host.circle_shape_roles, host.circle_densities, host.circle_highlighted
    )
    joints = {k: getattr(sim.joint, k) for k, _, _ in _JOINT}
    joints["motor_binding"] = host.motor_bindings
    thrusters = {k: getattr(sim.thruster, k) for k, _, _ in _THRUSTER}
    thrusters["thruster_binding"] = host.thruster_bindings
    n_cc, n_cr, n_rr = pair_counts(sp.sim)
    rr = {
        k: getattr(sim.acc_rr_manifolds, k).reshape(
            (2 * n_rr,) + getattr(sim.acc_rr_manifolds, k).shape[2:]
        )
        for k, _, _ in _MANIFOLD
    }
    cr = {k: getattr(sim.acc_cr_manifolds, k) for k, _, _ in _MANIFOLD}
    cc = {k: getattr(sim.acc_cc_manifolds, k) for k, _, _ in _MANIFOLD}
    env_state = {
        "polygon": _json_records(polys, _BODY + _BODY_EXTRA, sp.num_polygons),
        "circle": _json_records(circles, _BODY + _BODY_EXTRA, sp.num_circles),
        "joint": _json_records(joints, _JOINT + _JOINT_EXTRA, sp.num_joints),
        "thruster": _json_records(thrusters, _THRUSTER + _THRUSTER_EXTRA, sp.num_thrusters),
        "collision_matrix": _json_array(sim.collision_matrix, "b"),
        "acc_rr_manifolds": _json_records(rr, _MANIFOLD, 2 * n_rr),
        "acc_cr_manifolds": _json_records(cr, _MANIFOLD, n_cr),
        "acc_cc_manifolds": _json_records(cc, _MANIFOLD, n_cc),
        "gravity": _json_array(sim.gravity, "f"),
    }
    env_params = {k: _param_value(getattr(params, k)) for k in _ENV_PARAM_KEYS}
    env_params["num_shape_roles"] = NUM_SHAPE_ROLES
    static = {}
    for k in _STATIC_KEYS:
        v = getattr(sp, k)
        static[k] = {"0": v[0], "1": v[1]} if k == "screen_dim" else v
    return {"env_state": env_state, "env_params": env_params, "static_env_params": static}


def save_level(
    path: str | os.PathLike,
    state: EnvState,
    static_params: StaticEnvParams,
    params: EnvParams | None = None,
    *,
    overwrite: bool = False,
) -> Path:
    """Write a level file in the original's format (atomically: temp file, then rename).

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is False.
        ValueError: the state does not match ``static_params``.
    """
    path = Path(path)
    params = EnvParams() if params is None else params
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path}: exists; pass overwrite=True to replace it")
    text = json.dumps(level_to_json(state, static_params, params))
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise FileExistsError(
                    f"{path}: exists; pass overwrite=True to replace it"
                ) from None
            os.unlink(tmp)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


# ---------------------------------------------------------------------------------------------
# Sizes, batching and reset distributions


def _check_state_shapes(state: EnvState, sp: StaticEnvParams, what: str = "state") -> None:
    got = (
        state.sim.polygon.active.shape,
        state.sim.circle.active.shape,
        state.sim.joint.active.shape,
        state.sim.thruster.active.shape,
    )
    want = ((sp.num_polygons,), (sp.num_circles,), (sp.num_joints,), (sp.num_thrusters,))
    if got != want:
        raise ValueError(
            f"{what} has polygon/circle/joint/thruster shapes {got}; expected {want} from "
            f"static_params (an unbatched state of these sizes)"
        )


def static_sizes_of(state: EnvState) -> tuple[int, int, int, int]:
    """(P, C, J, T) capacities of an unbatched state."""
    return (
        state.sim.polygon.active.shape[-1],
        state.sim.circle.active.shape[-1],
        state.sim.joint.active.shape[-1],
        state.sim.thruster.active.shape[-1],
    )


def expand_level(
    state: EnvState,
    from_static: StaticEnvParams,
    to_static: StaticEnvParams,
    *,
    source: str = "<level>",
) -> EnvState:
    """Pad a level into larger capacities, keeping every existing slot in order.

    New polygon slots go after the old polygons, so circle global indices (joint ends, thruster
    parents) shift by the number of added polygons. New slots are all zeros (inactive), as in the
    original's ``expand_env_state``. The collision matrix is recomputed and the warm-start
    manifolds of the new pair lists are empty.

    Other static fields (frame skip, solver settings) are taken from ``to_static``.

    Raises:
        LevelFormatError: the level has more slots than ``to_static`` allows, or uses a motor or
            thruster binding that ``to_static`` does not have.
    """
    fs, ts = from_static, to_static
    _check_state_shapes(state, fs)
    for k in ("num_polygons", "num_circles", "num_joints", "num_thrusters"):
        if getattr(fs, k) > getattr(ts, k):
            P, C, J, T = (
                int(np.sum(np.asarray(a)))
                for a in (
                    state.sim.polygon.active,
                    state.sim.circle.active,
                    state.sim.joint.active,
                    state.sim.thruster.active,
                )
            )
            raise LevelFormatError(
                f"{source}: static_env_params.{k}: the level has {getattr(fs, k)} slots but the "
                f"target size allows {getattr(ts, k)} (more entities than the static sizes allow;"
                f" active polygons/circles/joints/thrusters: {P}/{C}/{J}/{T})"
            )
    for k, values, used, limit in (
        ("num_motor_bindings", state.motor_bindings, state.sim.joint.active, ts.num_motor_bindings),
        (
            "num_thruster_bindings",
            state.thruster_bindings,
            state.sim.thruster.active,
            ts.num_thruster_bindings,
        ),
    ):
        v = np.asarray(values)[np.asarray(used)]
        if v.size and int(v.max()) >= limit:
            raise LevelFormatError(
                f"{source}: static_env_params.{k}: the level uses binding {int(v.max())} but the "
                f"target size has {limit} bindings; expected bindings < {limit}"
            )
    add_p = ts.num_polygons - fs.num_polygons
    host = jax.device_get(state)

    def pad(tree, n):
        return jax.tree.map(
            lambda x: np.concatenate([x, np.zeros((n,) + x.shape[1:], x.dtype)], axis=0), tree
        )

    def shift(idx):
        return np.where(idx >= fs.num_polygons, idx + add_p, idx).astype(idx.dtype)

    sim = host.sim
    add_c = ts.num_circles - fs.num_circles
    add_j = ts.num_joints - fs.num_joints
    add_t = ts.num_thrusters - fs.num_thrusters
    joint = pad(sim.joint, add_j)
    joint = joint.replace(a_index=shift(joint.a_index), b_index=shift(joint.b_index))
    thruster = pad(sim.thruster, add_t)
    thruster = thruster.replace(object_index=shift(thruster.object_index))
    n_cc, n_cr, n_rr = pair_counts(ts.sim)
    new_sim = SimState(
        polygon=pad(sim.polygon, add_p),
        circle=pad(sim.circle, add_c),
        joint=joint,
        thruster=thruster,
        collision_matrix=collision_matrix_np(
            ts.num_shapes, joint.a_index, joint.b_index, joint.active
        ),
        acc_rr_manifolds=CollisionManifold(**_empty_manifolds_np(n_rr, 2)),
        acc_cr_manifolds=CollisionManifold(**_empty_manifolds_np(n_cr)),
        acc_cc_manifolds=CollisionManifold(**_empty_manifolds_np(n_cc)),
        gravity=sim.gravity,
    )
    new = host.replace(
        sim=new_sim,
        polygon_shape_roles=pad(host.polygon_shape_roles, add_p),
        circle_shape_roles=pad(host.circle_shape_roles, add_c),
        polygon_highlighted=pad(host.polygon_highlighted, add_p),
        circle_highlighted=pad(host.circle_highlighted, add_c),
        polygon_densities=pad(host.polygon_densities, add_p),
        circle_densities=pad(host.circle_densities, add_c),
        motor_bindings=pad(host.motor_bindings, add_j),
        motor_auto=pad(host.motor_auto, add_j),
        thruster_bindings=pad(host.thruster_bindings, add_t),
    )
    return _to_jnp(new)


def stack_levels(states: Sequence[EnvState]) -> EnvState:
    """Stack same-sized states into one batched state (leading axis = level)."""
    if len(states) == 0:
        raise ValueError("states is empty; expected at least one level")
    sizes = {static_sizes_of(s) for s in states}
    if len(sizes) != 1:
        raise ValueError(
            f"levels have different sizes {sorted(sizes)}; expand them to one StaticEnvParams "
            "first (load_levels does this)"
        )
    return _to_jnp(jax.tree.map(lambda *xs: np.stack(xs), *jax.device_get(list(states))))


def load_levels(
    paths: Sequence[str | os.PathLike], static_params: StaticEnvParams | None = None
) -> tuple[EnvState, StaticEnvParams, EnvParams]:
    """Load several files, pad them to one size and stack them.

    Args:
        paths: level files.
        static_params: target sizes; default the element-wise largest sizes among the files.

    Returns:
        ``(batched_state, static_params, params)`` with the first file's ``params``.
    """
    if len(paths) == 0:
        raise ValueError("paths is empty; expected at least one level file")
    levels = [load_level(p) for p in paths]
    if static_params is None:
        first = levels[0].static_params
        static_params = first.replace(
            **{
                k: max(getattr(lv.static_params, k) for lv in levels)
                for k in ("num_polygons", "num_circles", "num_joints", "num_thrusters")
            }
        )
    states = [
        expand_level(lv.state, lv.static_params, static_params, source=str(p))
        for lv, p in zip(levels, paths, strict=True)
    ]
    return stack_levels(states), static_params, levels[0].params


def make_reset_fn(levels: EnvState) -> Callable[[PRNGKeyArray], EnvState]:
    """``reset_fn(key)`` drawing one of the stacked ``levels`` uniformly (``stack_levels``)."""
    n = int(levels.timestep.shape[0]) if levels.timestep.ndim == 1 else 0
    if n < 1:
        raise ValueError("levels must be a stacked (batched) EnvState; use stack_levels")

    def reset_fn(key: PRNGKeyArray) -> EnvState:
        i = jax.random.randint(key, (), 0, n)
        return jax.tree.map(lambda x: x[i], levels)

    return reset_fn


# The arena of every Kinetix level: floor, left wall, right wall, ceiling (the original files').
_ARENA = (
    ((2.5, -4.8), ((2.5, 5.2), (2.5, -5.2), (-2.5, -5.2), (-2.5, 5.2))),
    ((0.0, 0.0), ((-5.0, 5.0), (0.0, 5.0), (0.0, 0.0), (-5.0, 0.0))),
    ((0.0, 0.0), ((5.0, 5.0), (10.0, 5.0), (10.0, 0.0), (5.0, 0.0))),
    ((2.5, 10.2), ((2.5, 5.2), (2.5, -5.2), (-2.5, -5.2), (-2.5, 5.2))),
)


def _record(schema, **values) -> dict:
    rec = {}
    for k, kind, shape in schema:
        v = np.asarray(values.get(k, 0), _NP_DTYPE[kind])
        rec[k] = _json_array(np.broadcast_to(v, shape), kind)
    return rec


def _rect_mass(w: float, h: float, density: float = 1.0) -> dict:
    m = density * w * h
    return {"inverse_mass": 1.0 / m, "inverse_inertia": 12.0 / (m * (w * w + h * h))}


def _circle_mass(r: float, density: float = 1.0) -> dict:
    return {
        "inverse_mass": 1.0 / (density * math.pi * r * r),
        "inverse_inertia": 4.0 / (density * math.pi * r**4),
    }


def _rect_vertices(w: float, h: float):
    hw, hh = w / 2, h / 2
    return ((-hw, hh), (hw, hh), (hw, -hh), (-hw, -hh))


def demo_level(static_params: StaticEnvParams) -> EnvState:
    """A small built-in level that fits every preset size (S and up).

    A grey cart (polygon 4, 0.8 m x 0.2 m) rides on a green wheel (circle 0, r = 0.15 m) joined by
    a motorised revolute joint (motor binding 0) and carries a thruster pushing right (thruster
    binding 0); the blue goal is a fixated circle (circle 1, r = 0.3 m) at x = 4 m. When the sizes
    allow (M and up: a sixth polygon) a red fixated block floats at (2.5, 2.5) m. Driving or
    thrusting right reaches the goal. Built on the host (no XLA compilation): masses follow the
    engine's formulas (rectangle ``I = m (w^2 + h^2) / 12``, circle ``I = rho pi r^4 / 4``).

    Raises:
        ValueError: if ``static_params`` has fewer than 5 polygons, 2 circles, 1 joint or
            1 thruster.
    """
    sp = static_params
    if sp.num_polygons < 5 or sp.num_circles < 2 or sp.num_joints < 1 or sp.num_thrusters < 1:
        raise ValueError(
            f"demo_level needs >= 5 polygons, 2 circles, 1 joint and 1 thruster; got "
            f"{sp.num_polygons}/{sp.num_circles}/{sp.num_joints}/{sp.num_thrusters}"
        )
    body = _BODY + _BODY_EXTRA
    polys = [
        _record(
            body, position=p, vertices=v, collision_mode=2, active=True, n_vertices=4, density=1
        )
        for p, v in _ARENA
    ]
    cart = dict(position=(1.0, 0.75), vertices=_rect_vertices(0.8, 0.2), **_rect_mass(0.8, 0.2))
    polys.append(
        _record(body, active=True, n_vertices=4, density=1, friction=1, collision_mode=1, **cart)
    )
    if sp.num_polygons >= 6:
        polys.append(
            _record(
                body,
                position=(2.5, 2.5),
                vertices=_rect_vertices(0.4, 0.4),
                active=True,
                n_vertices=4,
                density=1,
                friction=1,
                collision_mode=1,
                role=3,
            )
        )
    idle = dict(n_vertices=4, density=1, friction=1, collision_mode=1)
    polys += [_record(body, **idle) for _ in range(sp.num_polygons - len(polys))]
    wheel = dict(position=(1.0, 0.55), radius=0.15, role=1, **_circle_mass(0.15))
    goal = dict(position=(4.0, 0.7), radius=0.3, role=2)
    circles = [
        _record(body, active=True, density=1, friction=1, collision_mode=1, **c)
        for c in (wheel, goal)
    ]
    circles += [
        _record(body, density=1, friction=1, collision_mode=1) for _ in range(sp.num_circles - 2)
    ]
    P = sp.num_polygons
    joint = dict(
        a_index=4,
        b_index=P,
        a_relative_pos=(0.0, -0.2),
        global_position=(1.0, 0.55),
        active=True,
        motor_speed=1.0,
        motor_power=1.0,
        motor_on=True,
        min_rotation=-math.pi,
        max_rotation=math.pi,
    )
    joints = [_record(_JOINT + _JOINT_EXTRA, **joint)]
    joints += [_record(_JOINT + _JOINT_EXTRA) for _ in range(sp.num_joints - 1)]
    thruster = dict(
        object_index=4,
        relative_position=(-0.4, 0.0),
        power=1.0,
        global_position=(0.6, 0.75),
        active=True,
    )
    thrusters = [_record(_THRUSTER + _THRUSTER_EXTRA, **thruster)]
    thrusters += [_record(_THRUSTER + _THRUSTER_EXTRA) for _ in range(sp.num_thrusters - 1)]
    n_cc, n_cr, n_rr = pair_counts(sp.sim)
    N = sp.num_shapes
    data = {
        "env_state": {
            "polygon": polys,
            "circle": circles,
            "joint": joints,
            "thruster": thrusters,
            "collision_matrix": _json_array(np.zeros((N, N), bool), "b"),
            "acc_rr_manifolds": [_record(_MANIFOLD) for _ in range(2 * n_rr)],
            "acc_cr_manifolds": [_record(_MANIFOLD) for _ in range(n_cr)],
            "acc_cc_manifolds": [_record(_MANIFOLD) for _ in range(n_cc)],
            "gravity": {"0": 0.0, "1": float(np.float32(-9.81))},
        },
        "env_params": {
            **{k: getattr(EnvParams(), k) for k in _ENV_PARAM_KEYS},
            "num_shape_roles": 4,
        },
        "static_env_params": {
            k: ({"0": v[0], "1": v[1]} if k == "screen_dim" else v)
            for k, v in ((k, getattr(sp, k)) for k in _STATIC_KEYS)
        },
    }
    return level_from_json(data, "<demo level>").state
