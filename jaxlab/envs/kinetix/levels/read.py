"""Reading level files: JSON -> ``Level`` (``load_level``, ``level_from_json``, ``load_levels``).

Differences from the original loader, on purpose: the file's ``max_timesteps``, ``screen_dim``
and ``downscale`` are kept (the original resets them to defaults), ``highlighted`` is kept (the
original drops it) and the polygon-pair manifolds are read entry by entry (the original reads
entry ``i`` into pair ``i`` for both points). The collision matrix is recomputed from the joints,
as in the original (identical for every valid file).

Every problem with a file raises ``LevelFormatError`` (a ``ValueError``) naming the file, the
field path (``env_state.joint[0].motor_binding``) and what was expected; size and nesting limits
are checked before the JSON parser runs.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxlab.envs.kinetix.levels.checks import Reader, check_params, check_values
from jaxlab.envs.kinetix.levels.schema import (
    BODY,
    BODY_EXTRA,
    ENV_PARAM_KEYS,
    ENV_STATE_KEYS,
    JOINT,
    JOINT_EXTRA,
    MANIFOLD,
    STATIC_KEYS,
    THRUSTER,
    THRUSTER_EXTRA,
    Level,
    LevelFormatError,
    collision_matrix_np,
    to_jnp,
)
from jaxlab.envs.kinetix.levels.sizes import expand_level, stack_levels
from jaxlab.envs.kinetix.state import (
    NUM_SHAPE_ROLES,
    ROLE_NAMES,
    EnvParams,
    EnvState,
    StaticEnvParams,
    from_sim_state,
)
from jaxlab.physics import CollisionManifold, Joint, RigidBody, SimState, Thruster, pair_counts


def _static_from_json(r: Reader, x) -> StaticEnvParams:
    x = r.obj(x, "static_env_params", STATIC_KEYS)
    values: dict[str, Any] = {}
    for k in STATIC_KEYS:
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


def _params_from_json(r: Reader, x) -> EnvParams:
    x = r.obj(x, "env_params", (*ENV_PARAM_KEYS, "num_shape_roles"))
    values = {}
    for k in ENV_PARAM_KEYS:
        kind = "i" if k == "max_timesteps" else "f"
        v = r.scalar(x[k], f"env_params.{k}", kind)
        values[k] = x[k] if kind == "f" else v
    if x["num_shape_roles"] != NUM_SHAPE_ROLES or isinstance(x["num_shape_roles"], bool):
        r.fail(
            "env_params.num_shape_roles",
            f"value {x['num_shape_roles']!r}; expected {NUM_SHAPE_ROLES} (roles {ROLE_NAMES})",
        )
    check_params(r, values)
    return EnvParams(**values)


def _body(cols: dict) -> RigidBody:
    return RigidBody(**{k: cols[k] for k, _, _ in BODY})


def _manifold(cols: dict, lead: tuple[int, ...]) -> CollisionManifold:
    return CollisionManifold(
        **{k: cols[k].reshape(lead + cols[k].shape[1:]) for k, _, _ in MANIFOLD}
    )


def level_from_json(data: Any, source: str = "<level>") -> Level:
    """Parse a level JSON object (already ``json.load``-ed) into a ``Level``.

    Raises:
        LevelFormatError: naming ``source``, the field path and the problem.
    """
    r = Reader(source)
    top = r.obj(data, "<top level>", ("env_state", "env_params", "static_env_params"))
    sp = _static_from_json(r, top["static_env_params"])
    params = _params_from_json(r, top["env_params"])
    es = r.obj(top["env_state"], "env_state", ENV_STATE_KEYS)
    P, C, J, T, N = (
        sp.num_polygons,
        sp.num_circles,
        sp.num_joints,
        sp.num_thrusters,
        sp.num_shapes,
    )
    polys = r.records(
        es["polygon"], "env_state.polygon", P, BODY + BODY_EXTRA, "polygons", "num_polygons"
    )
    circles = r.records(
        es["circle"], "env_state.circle", C, BODY + BODY_EXTRA, "circles", "num_circles"
    )
    joints = r.records(
        es["joint"], "env_state.joint", J, JOINT + JOINT_EXTRA, "joints", "num_joints"
    )
    thrusters = r.records(
        es["thruster"],
        "env_state.thruster",
        T,
        THRUSTER + THRUSTER_EXTRA,
        "thrusters",
        "num_thrusters",
    )
    n_cc, n_cr, n_rr = pair_counts(sp.sim)
    rr = r.records(
        es["acc_rr_manifolds"],
        "env_state.acc_rr_manifolds",
        2 * n_rr,
        MANIFOLD,
        "manifolds",
        "num_polygons (2 per polygon pair)",
    )
    cr = r.records(
        es["acc_cr_manifolds"],
        "env_state.acc_cr_manifolds",
        n_cr,
        MANIFOLD,
        "manifolds",
        "num_circles * num_polygons",
    )
    cc = r.records(
        es["acc_cc_manifolds"],
        "env_state.acc_cc_manifolds",
        n_cc,
        MANIFOLD,
        "manifolds",
        "num_circles pairs",
    )
    matrix = np.asarray(r.array(es["collision_matrix"], "env_state.collision_matrix", "b", (N, N)))
    gravity = np.asarray(r.array(es["gravity"], "env_state.gravity", "f", (2,)), np.float32)
    check_values(r, sp, polys, circles, joints, thrusters)

    joint = Joint(**{k: joints[k] for k, _, _ in JOINT})
    recomputed = collision_matrix_np(N, joints["a_index"], joints["b_index"], joints["active"])
    sim = SimState(
        polygon=_body(polys),
        circle=_body(circles),
        joint=joint,
        thruster=Thruster(**{k: thrusters[k] for k, _, _ in THRUSTER}),
        collision_matrix=matrix if np.array_equal(matrix, recomputed) else recomputed,
        acc_rr_manifolds=_manifold(rr, (n_rr, 2)),
        acc_cr_manifolds=_manifold(cr, (n_cr,)),
        acc_cc_manifolds=_manifold(cc, (n_cc,)),
        gravity=gravity,
    )
    state = from_sim_state(to_jnp(sim), sp).replace(
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


def level_from_text(text: str, source: str = "<level>") -> Level:
    """Parse level JSON text into a ``Level`` with the file reader's checks: the size and nesting
    limits before the JSON parser runs, then ``level_from_json``.

    Raises:
        LevelFormatError: naming ``source``, the field path and the problem.
    """
    size = len(text.encode("utf-8"))
    if size > MAX_LEVEL_BYTES:
        raise LevelFormatError(
            f"{source}: level is {size} bytes; expected a level file of at most "
            f"{MAX_LEVEL_BYTES} bytes"
        )
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
    return level_from_json(data, source)


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
    level = level_from_text(text, source)
    if static_params is not None:
        state = expand_level(level.state, level.static_params, static_params, source=source)
        level = Level(state, static_params, level.params)
    return level


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
