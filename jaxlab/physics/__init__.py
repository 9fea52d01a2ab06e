"""jaxlab.physics: a 2D rigid-body engine reimplementing Jax2D with the same dynamics.

Quick start::

    from jaxlab import physics as px

    sp = px.StaticSimParams(num_polygons=5, num_circles=2, num_joints=1, num_thrusters=1)
    state = px.create_empty_sim(sp)
    state, (_, box) = px.add_rectangle(state, sp, [2.5, 1.0], [0.5, 0.5])
    step = px.make_step(sp)
    state, manifolds = step(state, px.SimParams(), jnp.zeros(2))
"""

from jaxlab.physics.collision import calculate_collision_matrix, pair_counts, pair_indices
from jaxlab.physics.engine import PhysicsEngine, make_step, step
from jaxlab.physics.geometry import (
    recalculate_mass_and_inertia,
    select_shape,
)
from jaxlab.physics.joints import recompute_global_joint_positions
from jaxlab.physics.scene import (
    add_circle,
    add_fixed_joint,
    add_polygon,
    add_rectangle,
    add_revolute_joint,
    add_thruster,
    capacity_checks,
    create_empty_sim,
)
from jaxlab.physics.state import (
    CollisionManifold,
    Joint,
    RigidBody,
    SimParams,
    SimState,
    StaticSimParams,
    Thruster,
)

__all__ = [
    "CollisionManifold",
    "Joint",
    "PhysicsEngine",
    "RigidBody",
    "SimParams",
    "SimState",
    "StaticSimParams",
    "Thruster",
    "add_circle",
    "add_fixed_joint",
    "add_polygon",
    "add_rectangle",
    "add_revolute_joint",
    "add_thruster",
    "calculate_collision_matrix",
    "capacity_checks",
    "create_empty_sim",
    "make_step",
    "pair_counts",
    "pair_indices",
    "recalculate_mass_and_inertia",
    "recompute_global_joint_positions",
    "select_shape",
    "step",
]
