"""Level mutators for ACCEL-style editing (``kinetix/environment/ued/mutators.py`` and
``ued.py:make_mutate_env`` of the original).

Each mutator is a pure ``fn(key, state, static_params, params=None, env_params=None) -> state``
(jit it with ``static_params`` static, or vmap it over keys and levels) and leaves the level
consistent: masses and inertias recomputed from the densities, the joint collision matrix
recomputed, the static arena untouched, capacities respected (a mutator without room is a no-op).

| mutator | effect |
| --- | --- |
| ``mutate_add_shape`` | a free shape (one proposal of the generator's ``propose_shape``) |
| ``mutate_add_connected_shape`` | a shape joined to an existing one (revolute or fixed joint) |
| ``mutate_add_thruster`` | a thruster on a random dynamic shape |
| ``mutate_remove_thruster`` | removes a thruster, never the level's last control |
| ``mutate_swap_role`` | two non-static shapes with different roles exchange roles |
| ``mutate_toggle_fixation`` | a non-static shape becomes static, or dynamic again |
| ``mutate_change_size`` | a shape gets new dimensions; joint anchors on it scale along |
| ``mutate_change_position`` | a shape and everything jointed to it move by ``U[-0.5, 0.5]^2`` |
| ``mutate_change_rotation`` | a shape turns by ``U[0, pi/2]`` (fixed-joint references follow) |

After a size or rotation change the original lets joints pull their shapes back together with 5
physics steps without gravity or contacts, zeroing velocities after each; so do these.

Every mutator is ``apply_mutations`` with one fixed kind, so all of them (and ``mutate``) are one
traced program: a ``lax.switch`` over 8 branches and a single conditional ``settle``. Jitting one
mutator therefore compiles all branches, and ACCEL's random edits need that one compile only.

``mutate(key, state, static_params, n)`` applies ``n`` random mutators with the original's
weights: add shape 1 (if a slot is free), add connected shape 1 (and a joint slot), swap role 1,
add thruster 1 (if a thruster slot is free), remove thruster 1 (if one can go), toggle fixation
0.1, size 1, position 1, rotation 1. The original's shape and joint removals have weight 0 there
and are not offered.

Differences from the original: ``mutate_remove_thruster`` keeps at least one control (thruster
or motor) in the level, and the roles and controls invariants of the generator (a green, a blue,
a control) are therefore preserved by every mutator here; the original can remove the last one.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from jaxlab.envs.kinetix.generator import (
    GeneratorParams,
    add_random_thruster,
    choice,
    commit_shape,
    count_roles,
    finalize_level,
    has_control,
    propose_shape,
    sample_dimensions,
)
from jaxlab.envs.kinetix.state import EnvParams, EnvState, StaticEnvParams
from jaxlab.physics import step as physics_step

#: Mutator names in the order ``mutate`` indexes them.
MUTATIONS = (
    "add_shape",
    "add_connected_shape",
    "swap_role",
    "add_thruster",
    "remove_thruster",
    "toggle_fixation",
    "change_size",
    "change_position",
    "change_rotation",
)

_SETTLE_STEPS = 5


def _defaults(params, env_params):
    return (
        GeneratorParams() if params is None else params,
        EnvParams() if env_params is None else env_params,
    )


def _editable(state: EnvState, static_params: StaticEnvParams) -> Bool[Array, " n"]:
    """[P + C] active shapes outside the static arena."""
    S = static_params.num_static_fixated_polys
    return jnp.concatenate([state.sim.polygon.active.at[:S].set(False), state.sim.circle.active])


def _motor_control(state: EnvState) -> Bool[Array, ""]:
    j = state.sim.joint
    return jnp.any(j.active & ~j.is_fixed_joint & (j.motor_on | state.motor_auto))


def _scatter_global(state: EnvState, static_params: StaticEnvParams, field: str, values):
    """Split [P + C] ``values`` of a body field back into polygons and circles."""
    P = static_params.num_polygons
    sim = state.sim
    return state.replace(
        sim=sim.replace(
            polygon=sim.polygon.replace(**{field: values[:P]}),
            circle=sim.circle.replace(**{field: values[P:]}),
        )
    )


def _global(state: EnvState, field: str):
    return jnp.concatenate([getattr(state.sim.polygon, field), getattr(state.sim.circle, field)])


# ---------------------------------------------------------------------------------------------
# Raw edits (no settling, no mass/collision-matrix update)


def _add_shape(key, state, connected, static_params, params, env_params):
    off = jnp.asarray(False)  # no forced no-fixate, revolute joint or motor
    prop = propose_shape(key, state, connected, off, off, off, static_params, params, env_params)
    return commit_shape(state, prop, jnp.asarray(True), static_params)


def _remove_thruster(key, state, static_params):
    thr = state.sim.thruster
    removable = thr.active & ((jnp.sum(thr.active) > 1) | _motor_control(state))
    idx = choice(jax.random.uniform(key), removable.astype(jnp.float32))
    do = jnp.any(removable)
    active = thr.active.at[idx].set(jnp.where(do, False, thr.active[idx]))
    return state.replace(sim=state.sim.replace(thruster=thr.replace(active=active)))


def _swap_role(key, state, static_params):
    S = static_params.num_static_fixated_polys
    editable = _editable(state, static_params)
    roles = jnp.concatenate([state.polygon_shape_roles, state.circle_shape_roles])
    present = jax.vmap(lambda r: count_roles(state, r, num_static=S))(jnp.arange(4)) > 0
    u = jax.random.uniform(key, (2,))
    a = choice(u[0], editable.astype(jnp.float32))
    w_b = editable & (roles != roles[a])
    b = choice(u[1], w_b.astype(jnp.float32))
    do = (jnp.sum(present) > 1) & jnp.any(w_b)
    new = roles.at[a].set(roles[b]).at[b].set(roles[a])
    new = jnp.where(do, new, roles)
    P = static_params.num_polygons
    return state.replace(polygon_shape_roles=new[:P], circle_shape_roles=new[P:])


def _toggle_fixation(key, state, static_params):
    editable = _editable(state, static_params)
    idx = choice(jax.random.uniform(key), editable.astype(jnp.float32))
    do = jnp.any(editable)
    inv_i = _global(state, "inverse_inertia")
    fixed = inv_i[idx] == 0.0
    # A fixed shape gets placeholder 1s that the mass recomputation replaces; a dynamic one 0s.
    value = jnp.where(fixed, 1.0, 0.0)
    inv_i = inv_i.at[idx].set(jnp.where(do, value, inv_i[idx]))
    inv_m = _global(state, "inverse_mass")
    inv_m = inv_m.at[idx].set(jnp.where(do, value, inv_m[idx]))
    state = _scatter_global(state, static_params, "inverse_inertia", inv_i)
    return _scatter_global(state, static_params, "inverse_mass", inv_m)


def _change_size(key, state, static_params, params):
    P = static_params.num_polygons
    editable = _editable(state, static_params)
    u = jax.random.uniform(key, (6,))
    idx = choice(u[0], editable.astype(jnp.float32))
    do = jnp.any(editable)
    is_rect = idx < P
    pi, ci = jnp.minimum(idx, P - 1), jnp.clip(idx - P, 0, static_params.num_circles - 1)
    new_verts, _, radius = sample_dimensions(u[1:6], is_rect, params.max_shape_size, params)
    old_verts = state.sim.polygon.vertices[pi]
    corner = lambda v: jnp.argmin(v[:, 0] * 100 + v[:, 1])
    old_c, new_c = old_verts[corner(old_verts)], new_verts[corner(new_verts)]
    scale_rect = jnp.where(old_c == 0, 1.0, new_c / jnp.where(old_c == 0, 1.0, old_c))
    old_r = state.sim.circle.radius[ci]
    scale_circ = radius / jnp.where(old_r == 0, 1.0, old_r)
    scale = jnp.where(is_rect, scale_rect, jnp.stack([scale_circ, scale_circ]))
    scale = jnp.where(do, scale, 1.0)
    j = state.sim.joint
    on_a = (j.active & (j.a_index == idx))[:, None]
    on_b = (j.active & (j.b_index == idx))[:, None]
    joint = j.replace(
        a_relative_pos=jnp.where(on_a, j.a_relative_pos * scale[None, :], j.a_relative_pos),
        b_relative_pos=jnp.where(on_b, j.b_relative_pos * scale[None, :], j.b_relative_pos),
    )
    poly, circ = state.sim.polygon, state.sim.circle
    poly = poly.replace(
        vertices=poly.vertices.at[pi].set(
            jnp.where(do & is_rect, old_verts * scale[None, :], old_verts)
        )
    )
    circ = circ.replace(radius=circ.radius.at[ci].set(jnp.where(do & ~is_rect, radius, old_r)))
    return state.replace(sim=state.sim.replace(polygon=poly, circle=circ, joint=joint))


def _change_position(key, state, static_params, env_params):
    sp = static_params
    P, S = sp.num_polygons, sp.num_static_fixated_polys
    editable = _editable(state, sp)
    u = jax.random.uniform(key, (3,))
    idx = choice(u[0], editable.astype(jnp.float32))
    do = jnp.any(editable)
    delta = u[1:3] - 0.5
    moving = (~state.sim.collision_matrix[idx]).at[:S].set(False) & do
    pos = _global(state, "position")
    pos = jnp.where(moving[:, None], pos + delta[None, :], pos)
    # Keep the arena bounds: shift the moved group back by the worst overflow of any shape.
    poly, circ = state.sim.polygon, state.sim.circle
    vmask = jnp.arange(4)[None, :] < poly.n_vertices[:, None]
    p_lo = pos[:P] + jnp.stack(
        [jnp.min(jnp.where(vmask, poly.vertices[..., k], 0.0), axis=1) for k in range(2)], -1
    )
    p_hi = pos[:P] + jnp.stack(
        [jnp.max(jnp.where(vmask, poly.vertices[..., k], 0.0), axis=1) for k in range(2)], -1
    )
    c_lo = pos[P:] - circ.radius[:, None]
    c_hi = pos[P:] + circ.radius[:, None]
    lo = jnp.concatenate([p_lo, c_lo])
    hi = jnp.concatenate([p_hi, c_hi])
    lo = jnp.min(jnp.where(editable[:, None], lo, jnp.inf), axis=0)
    hi = jnp.max(jnp.where(editable[:, None], hi, -jnp.inf), axis=0)
    w = sp.screen_dim[0] / env_params.pixels_per_unit
    h = sp.screen_dim[1] / env_params.pixels_per_unit
    fix = jnp.stack(
        [
            jnp.maximum(0.0, -lo[0]) - jnp.maximum(0.0, hi[0] - w),
            jnp.maximum(0.0, 0.4 - lo[1]) - jnp.maximum(0.0, hi[1] - h),
        ]
    )
    pos = jnp.where(moving[:, None], pos + fix[None, :], pos)
    return _scatter_global(state, sp, "position", pos)


def _change_rotation(key, state, static_params):
    editable = _editable(state, static_params)
    u = jax.random.uniform(key, (2,))
    idx = choice(u[0], editable.astype(jnp.float32))
    do = jnp.any(editable)
    delta = jnp.where(do, u[1] * math.pi / 2, 0.0)
    j = state.sim.joint
    fixed = j.active & j.is_fixed_joint
    ref = j.rotation - jnp.where(fixed & (j.a_index == idx), delta, 0.0)
    ref = ref + jnp.where(fixed & (j.b_index == idx), delta, 0.0)
    rot = _global(state, "rotation")
    rot = rot.at[idx].add(delta)
    state = _scatter_global(state, static_params, "rotation", rot)
    return state.replace(sim=state.sim.replace(joint=j.replace(rotation=ref)))


def settle(state: EnvState, static_params: StaticEnvParams, env_params: EnvParams) -> EnvState:
    """5 physics steps without gravity, contacts or actions, velocities zeroed after each (the
    original's ``do_dummy_step``): joints pull resized or turned shapes back together."""
    sp = static_params
    sim0 = state.sim
    action = jnp.zeros(sp.num_joints + sp.num_thrusters, jnp.float32)
    sim_params = env_params.sim

    def body(sim, _):
        sim = sim.replace(
            collision_matrix=jnp.zeros_like(sim0.collision_matrix),
            gravity=jnp.zeros_like(sim0.gravity),
        )
        sim, _ = physics_step(sim, sim_params, sp.sim, action)
        zero = lambda b: b.replace(
            velocity=jnp.zeros_like(b.velocity), angular_velocity=jnp.zeros_like(b.angular_velocity)
        )
        return sim.replace(polygon=zero(sim.polygon), circle=zero(sim.circle)), None

    sim, _ = jax.lax.scan(body, sim0, None, length=_SETTLE_STEPS)
    return state.replace(
        sim=sim.replace(collision_matrix=sim0.collision_matrix, gravity=sim0.gravity)
    )


# ---------------------------------------------------------------------------------------------
# Public mutators


def mutation_weights(state: EnvState) -> Float[Array, " 9"]:
    """Unnormalised weights of ``MUTATIONS`` for ``state`` (module docstring)."""
    sim = state.sim
    slot = ~jnp.all(sim.polygon.active) | ~jnp.all(sim.circle.active)
    joint_slot = slot & ~jnp.all(sim.joint.active)
    thr = sim.thruster.active
    removable = jnp.any(thr) & ((jnp.sum(thr) > 1) | _motor_control(state))
    f = lambda b: jnp.asarray(b, jnp.float32)
    return jnp.stack(
        [f(slot), f(joint_slot), f(1.0), f(~jnp.all(thr)), f(removable)]
        + [f(0.1), f(1.0), f(1.0), f(1.0)]
    )


def apply_mutations(
    key: PRNGKeyArray,
    state: EnvState,
    kinds: Int[Array, " n"],
    static_params: StaticEnvParams,
    params: GeneratorParams | None = None,
    env_params: EnvParams | None = None,
) -> tuple[EnvState, Int[Array, " n"]]:
    """Apply the mutators ``kinds`` (indices into ``MUTATIONS``; ``-1`` draws one with
    ``mutation_weights``) in sequence with ``lax.scan``.

    One traced program serves every mutator: a ``lax.switch`` over 8 branches (adding a free and
    a connected shape share one), one conditional ``settle`` after size and rotation changes, and
    ``finalize_level`` (masses, collision matrix) after every edit.

    Returns:
        ``(level, kinds)``: the edited level and the mutator index applied at each step.
    """
    gp, ep = _defaults(params, env_params)
    sp = static_params
    branches = [
        lambda k, s, kind: _add_shape(k, s, kind == 1, sp, gp, ep),
        lambda k, s, kind: _swap_role(k, s, sp),
        lambda k, s, kind: add_random_thruster(k, s, jnp.asarray(True), sp, gp),
        lambda k, s, kind: _remove_thruster(k, s, sp),
        lambda k, s, kind: _toggle_fixation(k, s, sp),
        lambda k, s, kind: _change_size(k, s, sp, gp),
        lambda k, s, kind: _change_position(k, s, sp, ep),
        lambda k, s, kind: _change_rotation(k, s, sp),
    ]
    branch_of = jnp.array([0, 0, 1, 2, 3, 4, 5, 6, 7], jnp.int32)
    size_kind, rot_kind = MUTATIONS.index("change_size"), MUTATIONS.index("change_rotation")

    def body(state, xs):
        k, forced = xs
        k_pick, k_edit = jax.random.split(k)
        drawn = choice(jax.random.uniform(k_pick), mutation_weights(state))
        kind = jnp.where(forced >= 0, forced, drawn).astype(jnp.int32)
        state = jax.lax.switch(branch_of[kind], branches, k_edit, state, kind)
        needs_settle = (kind == size_kind) | (kind == rot_kind)
        state = jax.lax.cond(needs_settle, lambda s: settle(s, sp, ep), lambda s: s, state)
        return finalize_level(state, sp), kind

    kinds = jnp.asarray(kinds, jnp.int32)
    return jax.lax.scan(body, state, (jax.random.split(key, kinds.shape[0]), kinds))


def mutate(
    key: PRNGKeyArray,
    state: EnvState,
    static_params: StaticEnvParams,
    n: int = 1,
    params: GeneratorParams | None = None,
    env_params: EnvParams | None = None,
) -> tuple[EnvState, Int[Array, " n"]]:
    """Apply ``n`` random mutators in sequence (weights in the module docstring).

    Args:
        key: PRNG key.
        state: the level.
        static_params: sizes (static).
        n: number of edits (static).
        params: the generator's distribution (sizes and probabilities of new entities).
        env_params: env parameters (arena size, physics of ``settle``).

    Returns:
        ``(level, kinds)``: the edited level and the index into ``MUTATIONS`` of each edit.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n={n!r}; expected a Python int >= 0")
    return apply_mutations(
        key, state, jnp.full((n,), -1, jnp.int32), static_params, params, env_params
    )


def _single(name: str, doc: str):
    kind = MUTATIONS.index(name)

    def mutator(
        key: PRNGKeyArray,
        state: EnvState,
        static_params: StaticEnvParams,
        params: GeneratorParams | None = None,
        env_params: EnvParams | None = None,
    ) -> EnvState:
        return apply_mutations(
            key, state, jnp.full((1,), kind, jnp.int32), static_params, params, env_params
        )[0]

    mutator.__name__ = mutator.__qualname__ = f"mutate_{name}"
    mutator.__doc__ = (
        doc
        + "\n\n(``apply_mutations`` with this one kind; masses and collision matrix recomputed.)"
    )
    return mutator


mutate_add_shape = _single(
    "add_shape", "Add a free shape (one ``generator.propose_shape``; no-op without a free slot)."
)
mutate_add_connected_shape = _single(
    "add_connected_shape",
    "Add a shape joined to an existing one (no-op without a free shape or joint slot).",
)
mutate_swap_role = _single(
    "swap_role", "Exchange the roles of two non-static shapes with different roles."
)
mutate_add_thruster = _single(
    "add_thruster", "Attach a thruster to a random dynamic shape (``add_random_thruster``)."
)
mutate_remove_thruster = _single(
    "remove_thruster", "Deactivate a random thruster, unless it is the level's only control."
)
mutate_toggle_fixation = _single(
    "toggle_fixation",
    "Make a random non-static shape static (inverse mass and inertia 0) or dynamic again.",
)
mutate_change_size = _single(
    "change_size",
    "Resample a shape's dimensions (``sample_dimensions``), scaling a polygon's vertices per axis "
    "by ``new / old`` of its lowest-leftmost corner (or setting the circle's radius) and the joint "
    "anchors on it by the same factors; then ``settle``.",
)
mutate_change_position = _single(
    "change_position",
    "Move a shape and all shapes jointed to it by ``U[-0.5, 0.5]^2``, then shift the moved group "
    "back inside the arena (``0 <= x <= w``, ``0.4 <= y <= h``) by the largest overflow.",
)
mutate_change_rotation = _single(
    "change_rotation",
    "Turn a shape by ``U[0, pi/2]``; fixed joints on it keep their relative angle by moving their "
    "reference (``-delta`` as shape a, ``+delta`` as shape b); then ``settle``.",
)


__all__ = [
    "MUTATIONS",
    "apply_mutations",
    "has_control",
    "mutate",
    "mutate_add_connected_shape",
    "mutate_add_shape",
    "mutate_add_thruster",
    "mutate_change_position",
    "mutate_change_rotation",
    "mutate_change_size",
    "mutate_remove_thruster",
    "mutate_swap_role",
    "mutate_toggle_fixation",
    "mutation_weights",
    "settle",
]
