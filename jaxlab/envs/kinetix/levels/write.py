"""Writing level files: ``Level`` -> JSON in the original's layout (``level_to_json``,
``save_level``).

``save_level`` writes the same bytes the original's ``export_env_state_to_json`` writes
(``json.dumps`` layout, float32 values as Python floats), so read -> write reproduces every
original file byte for byte.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import jax
import numpy as np

from jaxlab.envs.kinetix.levels.checks import check_state_shapes
from jaxlab.envs.kinetix.levels.schema import (
    BODY,
    BODY_EXTRA,
    ENV_PARAM_KEYS,
    JOINT,
    JOINT_EXTRA,
    MANIFOLD,
    STATIC_KEYS,
    THRUSTER,
    THRUSTER_EXTRA,
)
from jaxlab.envs.kinetix.state import NUM_SHAPE_ROLES, EnvParams, EnvState, StaticEnvParams
from jaxlab.physics import pair_counts


def _py(x, kind: str):
    if kind == "f":
        return float(np.float32(x))
    if kind == "i":
        return int(x)
    return bool(x)


def json_array(x: np.ndarray | np.generic, kind: str):
    if x.ndim == 0:
        return _py(x, kind)
    return {str(i): json_array(x[i], kind) for i in range(x.shape[0])}


def _json_records(cols: dict[str, np.ndarray], schema, count: int) -> list[dict]:
    return [{k: json_array(cols[k][i], kind) for k, kind, _ in schema} for i in range(count)]


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
    check_state_shapes(state, sp)
    host = jax.tree.map(np.asarray, state)
    sim = host.sim

    def body_cols(b, roles, dens, hl):
        cols = {k: getattr(b, k) for k, _, _ in BODY}
        cols.update(role=roles, density=dens, highlighted=hl)
        return cols

    polys = body_cols(
        sim.polygon, host.polygon_shape_roles, host.polygon_densities, host.polygon_highlighted
    )
    circles = body_cols(
        sim.circle, host.circle_shape_roles, host.circle_densities, host.circle_highlighted
    )
    joints = {k: getattr(sim.joint, k) for k, _, _ in JOINT}
    joints["motor_binding"] = host.motor_bindings
    thrusters = {k: getattr(sim.thruster, k) for k, _, _ in THRUSTER}
    thrusters["thruster_binding"] = host.thruster_bindings
    n_cc, n_cr, n_rr = pair_counts(sp.sim)
    rr = {
        k: getattr(sim.acc_rr_manifolds, k).reshape(
            (2 * n_rr,) + getattr(sim.acc_rr_manifolds, k).shape[2:]
        )
        for k, _, _ in MANIFOLD
    }
    cr = {k: getattr(sim.acc_cr_manifolds, k) for k, _, _ in MANIFOLD}
    cc = {k: getattr(sim.acc_cc_manifolds, k) for k, _, _ in MANIFOLD}
    env_state = {
        "polygon": _json_records(polys, BODY + BODY_EXTRA, sp.num_polygons),
        "circle": _json_records(circles, BODY + BODY_EXTRA, sp.num_circles),
        "joint": _json_records(joints, JOINT + JOINT_EXTRA, sp.num_joints),
        "thruster": _json_records(thrusters, THRUSTER + THRUSTER_EXTRA, sp.num_thrusters),
        "collision_matrix": json_array(sim.collision_matrix, "b"),
        "acc_rr_manifolds": _json_records(rr, MANIFOLD, 2 * n_rr),
        "acc_cr_manifolds": _json_records(cr, MANIFOLD, n_cr),
        "acc_cc_manifolds": _json_records(cc, MANIFOLD, n_cc),
        "gravity": json_array(sim.gravity, "f"),
    }
    env_params = {k: _param_value(getattr(params, k)) for k in ENV_PARAM_KEYS}
    env_params["num_shape_roles"] = NUM_SHAPE_ROLES
    static = {}
    for k in STATIC_KEYS:
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
