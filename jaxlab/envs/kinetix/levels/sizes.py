"""Level capacities: padding a level into larger sizes, stacking same-sized levels into a batch,
and the uniform reset distribution over such a batch."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import numpy as np
from jaxtyping import PRNGKeyArray

from jaxlab.envs.kinetix.levels.checks import check_state_shapes
from jaxlab.envs.kinetix.levels.schema import (
    LevelFormatError,
    collision_matrix_np,
    empty_manifolds_np,
    to_jnp,
)
from jaxlab.envs.kinetix.state import EnvState, StaticEnvParams
from jaxlab.physics import CollisionManifold, SimState, pair_counts


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
    check_state_shapes(state, fs)
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
        acc_rr_manifolds=CollisionManifold(**empty_manifolds_np(n_rr, 2)),
        acc_cr_manifolds=CollisionManifold(**empty_manifolds_np(n_cr)),
        acc_cc_manifolds=CollisionManifold(**empty_manifolds_np(n_cc)),
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
    return to_jnp(new)


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
    return to_jnp(jax.tree.map(lambda *xs: np.stack(xs), *jax.device_get(list(states))))


def make_reset_fn(levels: EnvState) -> Callable[[PRNGKeyArray], EnvState]:
    """``reset_fn(key)`` drawing one of the stacked ``levels`` uniformly (``stack_levels``)."""
    n = int(levels.timestep.shape[0]) if levels.timestep.ndim == 1 else 0
    if n < 1:
        raise ValueError("levels must be a stacked (batched) EnvState; use stack_levels")

    def reset_fn(key: PRNGKeyArray) -> EnvState:
        i = jax.random.randint(key, (), 0, n)
        return jax.tree.map(lambda x: x[i], levels)

    return reset_fn
