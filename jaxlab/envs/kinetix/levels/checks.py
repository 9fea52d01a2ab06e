"""What a valid level is beyond its layout: value bounds, cross-references and shapes.

``Reader`` converts JSON to NumPy checking types, lengths and magnitudes with the field path in
every error; ``check_params`` and ``check_values`` check the converted values (signs, ranges,
roles, joint and thruster references to active shapes); ``check_state_shapes`` checks that a
state has the capacities of its ``StaticEnvParams``. Every problem raises ``LevelFormatError``
naming the file, the field path (``env_state.joint[0].motor_binding``) and what was expected.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NoReturn

import numpy as np

from jaxlab.envs.kinetix.levels.schema import NP_DTYPE, LevelFormatError
from jaxlab.envs.kinetix.state import (
    NUM_SHAPE_ROLES,
    SIM_PARAM_FIELDS,
    EnvState,
    StaticEnvParams,
)
from jaxlab.physics.geometry import validate_polygon_vertices

#: Largest float32; a JSON number beyond it (``1e39``) would load as inf.
F32_MAX = float(np.finfo(np.float32).max)
#: Magnitude bound of every float field of a level (metres, seconds, kilograms: shipped and
#: original levels stay below 1e2 except inverse inertias of small shapes, ~1e6); beyond it
#: products in the solver overflow float32. Fields with their own bound are in ``LIMITS``.
FLOAT_LIMIT = 1e6
LIMITS = {"inverse_mass": 1e9, "inverse_inertia": 1e9}
#: Fields that must be >= 0 (slot values; a negative friction or inverse mass is unphysical).
NON_NEGATIVE = ("friction", "restitution", "inverse_mass", "inverse_inertia", "density", "radius")
#: Env params that must be > 0 (a time step, clipping bounds, the render scale) and >= 0.
PARAMS_POSITIVE = (
    "dt",
    "pixels_per_unit",
    "clip_position",
    "clip_velocity",
    "clip_angular_velocity",
)
PARAMS_NON_NEGATIVE = (
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
PARAMS_MAX = {
    "dt": 1.0,
    "slop": 1.0,
    "joint_stiffness": 10.0,
    **{k: 100.0 for k in SIM_PARAM_FIELDS if "baumgarte" in k},
}


class Reader:
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
        if not math.isfinite(x) or abs(x) > F32_MAX:
            self.fail(path, f"value {x!r}; expected a finite number (finite as float32)")
        limit = LIMITS.get(path.rsplit(".", 1)[-1].split("[", 1)[0], FLOAT_LIMIT)
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
            out[k] = np.asarray(cols[k], dtype=NP_DTYPE[kind]).reshape((count,) + shape)
        return out


def check_params(r: Reader, values: dict) -> None:
    """Range checks of the ``env_params`` values (already converted by ``r``)."""
    if values["max_timesteps"] < 1:
        r.fail("env_params.max_timesteps", f"value {values['max_timesteps']}; expected >= 1")
    for k in PARAMS_POSITIVE:
        if values[k] <= 0:
            r.fail(f"env_params.{k}", f"value {values[k]}; expected > 0")
    for k in PARAMS_NON_NEGATIVE:
        if values[k] < 0:
            r.fail(f"env_params.{k}", f"value {values[k]}; expected >= 0")
    for k, high in PARAMS_MAX.items():
        if values[k] > high:
            r.fail(f"env_params.{k}", f"value {values[k]}; expected <= {high:g}")


def check_values(r: Reader, sp: StaticEnvParams, polys, circles, joints, thrusters) -> None:
    N = sp.num_shapes
    active = np.concatenate([polys["active"], circles["active"]])
    for name, cols in (("polygon", polys), ("circle", circles)):
        for i in range(len(cols["role"])):
            path = f"env_state.{name}[{i}]"
            for k in NON_NEGATIVE:
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


def check_state_shapes(state: EnvState, sp: StaticEnvParams, what: str = "state") -> None:
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
