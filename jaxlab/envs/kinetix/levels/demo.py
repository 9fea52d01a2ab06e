"""The built-in demo level (``demo_level``): a cart on a motorised wheel with a thruster, sized to
fit every preset, built on the host from the format's tables."""

from __future__ import annotations

import math

import numpy as np

from jaxlab.envs.kinetix.levels.read import level_from_json
from jaxlab.envs.kinetix.levels.schema import (
    BODY,
    BODY_EXTRA,
    ENV_PARAM_KEYS,
    JOINT,
    JOINT_EXTRA,
    MANIFOLD,
    NP_DTYPE,
    STATIC_KEYS,
    THRUSTER,
    THRUSTER_EXTRA,
)
from jaxlab.envs.kinetix.levels.write import json_array
from jaxlab.envs.kinetix.state import EnvParams, EnvState, StaticEnvParams
from jaxlab.physics import pair_counts

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
        v = np.asarray(values.get(k, 0), NP_DTYPE[kind])
        rec[k] = json_array(np.broadcast_to(v, shape), kind)
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


def _demo_bodies(sp: StaticEnvParams) -> tuple[list[dict], list[dict]]:
    """The polygon and circle records of ``demo_level`` (arena, cart, block; wheel, goal)."""
    body = BODY + BODY_EXTRA
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
    return polys, circles


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
    polys, circles = _demo_bodies(sp)
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
    joints = [_record(JOINT + JOINT_EXTRA, **joint)]
    joints += [_record(JOINT + JOINT_EXTRA) for _ in range(sp.num_joints - 1)]
    thruster = dict(
        object_index=4,
        relative_position=(-0.4, 0.0),
        power=1.0,
        global_position=(0.6, 0.75),
        active=True,
    )
    thrusters = [_record(THRUSTER + THRUSTER_EXTRA, **thruster)]
    thrusters += [_record(THRUSTER + THRUSTER_EXTRA) for _ in range(sp.num_thrusters - 1)]
    n_cc, n_cr, n_rr = pair_counts(sp.sim)
    N = sp.num_shapes
    data = {
        "env_state": {
            "polygon": polys,
            "circle": circles,
            "joint": joints,
            "thruster": thrusters,
            "collision_matrix": json_array(np.zeros((N, N), bool), "b"),
            "acc_rr_manifolds": [_record(MANIFOLD) for _ in range(2 * n_rr)],
            "acc_cr_manifolds": [_record(MANIFOLD) for _ in range(n_cr)],
            "acc_cc_manifolds": [_record(MANIFOLD) for _ in range(n_cc)],
            "gravity": {"0": 0.0, "1": float(np.float32(-9.81))},
        },
        "env_params": {
            **{k: getattr(EnvParams(), k) for k in ENV_PARAM_KEYS},
            "num_shape_roles": 4,
        },
        "static_env_params": {
            k: ({"0": v[0], "1": v[1]} if k == "screen_dim" else v)
            for k, v in ((k, getattr(sp, k)) for k in STATIC_KEYS)
        },
    }
    return level_from_json(data, "<demo level>").state
