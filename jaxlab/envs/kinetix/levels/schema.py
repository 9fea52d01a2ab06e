"""The Kinetix level JSON format: its field tables, the ``Level`` tuple and its error type.

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

The tables below list each record's fields as ``(json key, kind, shape)`` in file order; the
reader (``read``), the writer (``write``) and the built-in level (``demo``) all walk them. The
NumPy helpers build the arrays derived from a level on the host (no per-op XLA compilation).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.envs.kinetix.state import SIM_PARAM_FIELDS, EnvParams, EnvState, StaticEnvParams


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

BODY = (
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
BODY_EXTRA = (("role", "i", ()), ("density", "f", ()), ("highlighted", "b", ()))
JOINT = (
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
JOINT_EXTRA = (("motor_binding", "i", ()),)
THRUSTER = (
    ("object_index", "i", ()),
    ("relative_position", "f", (2,)),
    ("rotation", "f", ()),
    ("power", "f", ()),
    ("global_position", "f", (2,)),
    ("active", "b", ()),
)
THRUSTER_EXTRA = (("thruster_binding", "i", ()),)
MANIFOLD = (
    ("normal", "f", (2,)),
    ("penetration", "f", ()),
    ("collision_point", "f", (2,)),
    ("active", "b", ()),
    ("acc_impulse_normal", "f", ()),
    ("acc_impulse_tangent", "f", ()),
    ("restitution_velocity_target", "f", ()),
)
ENV_STATE_KEYS = (
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
ENV_PARAM_KEYS = (*SIM_PARAM_FIELDS, "max_timesteps", "pixels_per_unit", "dense_reward_scale")
STATIC_KEYS = (
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
NP_DTYPE = {"f": np.float32, "i": np.int32, "b": np.bool_}


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


def empty_manifolds_np(n: int, points: int | None = None) -> dict[str, np.ndarray]:
    lead = (n,) if points is None else (n, points)
    return {k: np.zeros(lead + shape, NP_DTYPE[kind]) for k, kind, shape in MANIFOLD}


def to_jnp(tree):
    return jax.tree.map(lambda x: jnp.asarray(x), tree)
