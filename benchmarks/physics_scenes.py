"""Benchmark scenes for the physics engine (shared with the Jax2D peer benchmark).

``benchmark_scene(size)`` builds a Kinetix-sized scene (S, M or L capacities, paper Table 3) with a
few active bodies, revolute joints (motors on) and thrusters, using the jaxlab scene API. The
state's field names are Jax2D's, so a peer benchmark can map it 1:1 onto ``jax2d.sim_state``.
"""

from __future__ import annotations

import numpy as np

from jaxlab.physics import (
    SimState,
    StaticSimParams,
    add_circle,
    add_rectangle,
    add_revolute_joint,
    add_thruster,
    create_empty_sim,
)

SIZES = {
    # (polygons incl. 4 static, circles, joints, thrusters)
    "s": (5, 2, 1, 1),
    "m": (6, 3, 2, 2),
    "l": (12, 4, 6, 2),
}


def benchmark_static_params(size: str) -> StaticSimParams:
    """Kinetix capacities for ``size`` in {"s", "m", "l"}."""
    key = size.lower()
    if key not in SIZES:
        raise ValueError(f"size={size!r}; expected one of {sorted(SIZES)}")
    p, c, j, t = SIZES[key]
    return StaticSimParams(num_polygons=p, num_circles=c, num_joints=j, num_thrusters=t)


def benchmark_scene(size: str) -> tuple[StaticSimParams, SimState]:
    """A representative scene of the given size.

    S: one box, two circles (one a motorised wheel of the box), one thruster.
    M: two boxes, three circles, two motor joints, two thrusters.
    L: eight boxes (the car body, a tilted box, a three-box tower, a three-link chain), four circles, six joints (motors,
    one with rotation limits), two thrusters.

    Returns:
        ``(static_params, state)``.
    """
    sp = benchmark_static_params(size)
    s = create_empty_sim(sp)
    key = size.lower()
    s, (_, body) = add_rectangle(s, sp, [1.5, 0.8], [1.0, 0.3])
    s, (_, wheel) = add_circle(s, sp, [1.1, 0.6], 0.2)
    s, _ = add_revolute_joint(s, sp, body, wheel, [-0.4, -0.15], [0.0, 0.0], motor_on=True)
    s, _ = add_thruster(s, sp, body, [-0.5, 0.0], 0.0, power=1.0)
    s, _ = add_circle(s, sp, [3.5, 1.0], 0.3)
    if key in ("m", "l"):
        s, (_, box2) = add_rectangle(s, sp, [3.0, 2.0], [0.4, 0.4], rotation=0.3)
        s, (_, wheel2) = add_circle(s, sp, [1.9, 0.6], 0.2)
        s, _ = add_revolute_joint(s, sp, body, wheel2, [0.4, -0.15], [0.0, 0.0], motor_on=True)
        s, _ = add_thruster(s, sp, box2, [0.0, -0.2], float(np.pi / 2), power=1.0)
    if key == "l":
        s, (_, circ) = add_circle(s, sp, [4.2, 2.5], 0.25)
        for i in range(3):
            s, _ = add_rectangle(s, sp, [4.0, 0.65 + 0.5 * i], [0.5, 0.48])
        s, (_, link_a) = add_rectangle(s, sp, [2.0, 3.0], [0.6, 0.15])
        s, (_, link_b) = add_rectangle(s, sp, [2.6, 3.0], [0.6, 0.15])
        s, (_, link_c) = add_rectangle(s, sp, [3.2, 3.0], [0.6, 0.15], fixated=True)
        s, _ = add_revolute_joint(s, sp, link_a, link_b, [0.3, 0.0], [-0.3, 0.0])
        s, _ = add_revolute_joint(
            s,
            sp,
            link_b,
            link_c,
            [0.3, 0.0],
            [-0.3, 0.0],
            motor_on=True,
            has_joint_limits=True,
            min_rotation=-0.7,
            max_rotation=0.7,
        )
        s, _ = add_revolute_joint(s, sp, link_a, circ, [-0.3, 0.0], [0.0, 0.0])
        s, _ = add_revolute_joint(s, sp, box2, link_a, [0.0, 0.2], [0.0, 0.0], motor_on=True)
    return sp, s
