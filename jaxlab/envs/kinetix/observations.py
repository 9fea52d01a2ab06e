"""Kinetix observations (``kinetix/render/renderer_symbolic_*.py`` and ``renderer_pixels.py``).

Feature layouts (same order, sizes and quirks as the original, so policies transfer):

* **Shape base (16):** position (2), velocity (2), ``m^-1``, ``I^-1``, density, ``tanh(w / 10)``,
  role one-hot (4), ``sin(theta)``, ``cos(theta)``, friction, restitution.
* **Polygon (26):** base, 0 (circle flag), the 4 local vertices (8; ``-1`` for unused slots),
  ``n_vertices <= 3``.
* **Circle (18):** base, radius, 1.
* **Joint (18 + M, 22 by default):** active, fixed, ``from``/``to`` anchors (2 + 2), ``sin``/``cos``
  of the reference angle; then, zeroed for fixed joints: motor speed, power, on, has-limits,
  binding one-hot (M), ``sin``/``cos`` of min and max rotation and ``min - ref``, ``max - ref``
  (the last six times has-limits). Rows ``0..J-1`` are the ``b -> a`` direction
  (``from = b_relative_pos``, index pair ``(b, a)``), rows ``J..2J-1`` the ``a -> b`` direction.
* **Thruster (6 + N, 8 by default):** active, relative position (2), binding one-hot (N),
  ``sin``/``cos`` of its rotation, power.

Observation types:

* ``"symbolic_entity"``: ``EntityObservation`` with polygons (P, 27) and circles (C, 19) (features
  plus ``gravity_y / 10``), joints (2J, 22), thrusters (T, 8), masks, ``joint_indexes`` (2J, 2),
  ``thruster_indexes`` (T,) and ``attention_mask`` (4, N, N): all shapes, joined by a chain of
  joints (``~collision_matrix``), joined directly (one hop), in contact at the last substep (from
  the warm-start manifolds; set at ``[a, b]`` of each contact pair only). Every mask is cut to
  active shapes. NaNs in the state are replaced by numbers first.
* ``"symbolic_flat"``: one vector of length ``(P-3)*26 + C*18 + J*(22+2N) + T*(8+N) + 1``
  (N = P + C): polygons without the walls and ceiling, circles, the ``b -> a`` joint rows with
  one-hots of ``b`` and ``a``, thrusters with a one-hot of their shape, and ``gravity_y / 10``;
  inactive rows are zero; clipped to ``[-10, 10]``; NaN -> 0. 140 (S), 247 (M), 679 (L).
* ``"symbolic_flat_padded"``: the same rows as a matrix, each padded to the widest row, plus a
  type one-hot (4) and ``gravity_y / 10``: (6, 41) S, (10, 45) M, (21, 59) L.
* ``"pixels"``: ``PixelsObservation`` with ``image`` [W, H, 3] in ``[0, 1]`` (``render.py``, the
  original's [x, y] layout with y up along axis 1) and ``global_info = [gravity_y / 10]``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxtyping import Array, Bool, Float, Int

from jaxlab.envs.kinetix.state import NUM_SHAPE_ROLES, EnvParams, EnvState, StaticEnvParams
from jaxlab.envs.spaces import Box, Dict, Space
from jaxlab.physics import RigidBody, pair_indices

OBSERVATION_TYPES = ("symbolic_entity", "symbolic_flat", "symbolic_flat_padded", "pixels")
_ALIASES = {"entity": "symbolic_entity", "flat": "symbolic_flat", "padded": "symbolic_flat_padded"}


def check_observation_type(observation_type: str) -> str:
    """Validate ``observation_type`` (short aliases ``entity``/``flat``/``padded`` accepted)."""
    t = _ALIASES.get(observation_type, observation_type)
    if t not in OBSERVATION_TYPES:
        raise ValueError(
            f"observation_type={observation_type!r}; expected one of {list(OBSERVATION_TYPES)}"
        )
    return t


@struct.dataclass
class EntityObservation:
    """Per-entity features, masks and relations (see the module docstring for the layouts)."""

    circles: Float[Array, "c 19"]
    polygons: Float[Array, "p 27"]
    joints: Float[Array, "j2 22"]
    thrusters: Float[Array, "t 8"]
    circle_mask: Bool[Array, " c"]
    polygon_mask: Bool[Array, " p"]
    joint_mask: Bool[Array, " j2"]
    thruster_mask: Bool[Array, " t"]
    attention_mask: Bool[Array, "4 n n"]
    joint_indexes: Int[Array, "j2 2"]
    thruster_indexes: Int[Array, " t"]


@struct.dataclass
class PixelsObservation:
    """``image`` [W, H, 3] in [0, 1] (x along axis 0, y up along axis 1) and
    ``global_info`` [1] = gravity_y / 10."""

    image: Float[Array, "w h 3"]
    global_info: Float[Array, " 1"]


# ---------------------------------------------------------------------------------------------
# Feature blocks


def _base_features(bodies: RigidBody, density, roles) -> Float[Array, "n 16"]:
    col = lambda x: x[:, None]
    return jnp.concatenate(
        [
            bodies.position,
            bodies.velocity,
            col(bodies.inverse_mass),
            col(bodies.inverse_inertia),
            col(density),
            col(jnp.tanh(bodies.angular_velocity / 10)),
            jax.nn.one_hot(roles, NUM_SHAPE_ROLES, dtype=jnp.float32),
            col(jnp.sin(bodies.rotation)),
            col(jnp.cos(bodies.rotation)),
            col(bodies.friction),
            col(bodies.restitution),
        ],
        axis=1,
    )


def polygon_features(state: EnvState) -> Float[Array, "p 26"]:
    """Polygon rows (26 features each)."""
    poly = state.sim.polygon
    P, V = poly.vertices.shape[:2]
    used = np.arange(V)[None, :, None] < poly.n_vertices[:, None, None]
    vertices = jnp.where(used, poly.vertices, -1.0).reshape(P, 2 * V)
    return jnp.concatenate(
        [
            _base_features(poly, state.polygon_densities, state.polygon_shape_roles),
            jnp.zeros((P, 1), jnp.float32),
            vertices,
            (poly.n_vertices <= 3)[:, None].astype(jnp.float32),
        ],
        axis=1,
    )


def circle_features(state: EnvState) -> Float[Array, "c 18"]:
    """Circle rows (18 features each)."""
    circ = state.sim.circle
    C = circ.radius.shape[0]
    return jnp.concatenate(
        [
            _base_features(circ, state.circle_densities, state.circle_shape_roles),
            circ.radius[:, None],
            jnp.ones((C, 1), jnp.float32),
        ],
        axis=1,
    )


def joint_features(
    state: EnvState, static_params: StaticEnvParams
) -> tuple[Float[Array, "j2 k"], Int[Array, "j2 2"], Bool[Array, " j2"]]:
    """Joint rows for both directions, their (from, to) shape indices and mask."""
    j = state.sim.joint
    f = lambda x: x.astype(jnp.float32)[:, None]
    lim = f(j.motor_has_joint_limits)
    motor = jnp.concatenate(
        [
            f(j.motor_speed),
            f(j.motor_power),
            f(j.motor_on),
            lim,
            jax.nn.one_hot(
                state.motor_bindings, static_params.num_motor_bindings, dtype=jnp.float32
            ),
            f(jnp.sin(j.min_rotation)) * lim,
            f(jnp.cos(j.min_rotation)) * lim,
            f(jnp.sin(j.max_rotation)) * lim,
            f(jnp.cos(j.max_rotation)) * lim,
            f(j.min_rotation - j.rotation) * lim,
            f(j.max_rotation - j.rotation) * lim,
        ],
        axis=1,
    ) * (1.0 - f(j.is_fixed_joint))
    head = (f(j.active), f(j.is_fixed_joint))
    tail = (f(jnp.sin(j.rotation)), f(jnp.cos(j.rotation)), motor)
    b_to_a = jnp.concatenate([*head, j.b_relative_pos, j.a_relative_pos, *tail], axis=1)
    a_to_b = jnp.concatenate([*head, j.a_relative_pos, j.b_relative_pos, *tail], axis=1)
    features = jnp.concatenate([b_to_a, a_to_b], axis=0)
    ba = jnp.stack([j.b_index, j.a_index], axis=1)
    ba = jnp.where(j.active[:, None], ba, 0)
    indexes = jnp.concatenate([ba, ba[:, ::-1]], axis=0).astype(jnp.int32)
    mask = jnp.concatenate([j.active, j.active])
    return features, indexes, mask


def thruster_features(
    state: EnvState, static_params: StaticEnvParams
) -> tuple[Float[Array, "t k"], Int[Array, " t"], Bool[Array, " t"]]:
    """Thruster rows, their shape indices and mask."""
    t = state.sim.thruster
    features = jnp.concatenate(
        [
            t.active.astype(jnp.float32)[:, None],
            t.relative_position,
            jax.nn.one_hot(
                state.thruster_bindings, static_params.num_thruster_bindings, dtype=jnp.float32
            ),
            jnp.sin(t.rotation)[:, None],
            jnp.cos(t.rotation)[:, None],
            t.power[:, None],
        ],
        axis=1,
    )
    return features, t.object_index.astype(jnp.int32), t.active


# ---------------------------------------------------------------------------------------------
# Observation functions


def _nan_to_num_state(state: EnvState) -> EnvState:
    return jax.tree.map(
        lambda x: jnp.nan_to_num(x) if jnp.issubdtype(x.dtype, jnp.floating) else x, state
    )


def make_entity_observation(static_params: StaticEnvParams):
    """``obs(state) -> EntityObservation`` for ``static_params`` (constants built once)."""
    sp = static_params
    P, N = sp.num_polygons, sp.num_shapes
    cc, cr, rr = pair_indices(sp.sim)
    rows = np.concatenate([rr[:, 0], cr[:, 0] + P, cc[:, 0] + P]).astype(np.int32)
    cols = np.concatenate([rr[:, 1], cr[:, 1], cc[:, 1] + P]).astype(np.int32)

    def obs(state: EnvState) -> EntityObservation:
        state = _nan_to_num_state(state)
        sim = state.sim
        jf, ji, jm = joint_features(state, sp)
        tf, ti, tm = thruster_features(state, sp)
        grav = sim.gravity[1] / 10
        polys = jnp.concatenate([polygon_features(state), jnp.full((P, 1), grav)], axis=1)
        circles = jnp.concatenate(
            [circle_features(state), jnp.full((sp.num_circles, 1), grav)], axis=1
        )
        val = jnp.concatenate([sim.polygon.active, sim.circle.active])
        both = val[:, None] & val[None, :]
        one_hop = jnp.zeros((N, N), bool).at[ji[:, 0], ji[:, 1]].set(True).at[0, 0].set(False)
        contact_active = jnp.concatenate(
            [
                sim.acc_rr_manifolds.active[:, 0] | sim.acc_rr_manifolds.active[:, 1],
                sim.acc_cr_manifolds.active,
                sim.acc_cc_manifolds.active,
            ]
        )
        contact = jnp.zeros((N, N), bool).at[rows, cols].set(contact_active)
        attention = jnp.stack(
            [both, jnp.logical_not(sim.collision_matrix) & both, one_hop & both, contact & both]
        )
        return EntityObservation(
            circles=circles,
            polygons=polys,
            joints=jf,
            thrusters=tf,
            circle_mask=sim.circle.active,
            polygon_mask=sim.polygon.active,
            joint_mask=jm,
            thruster_mask=tm,
            attention_mask=attention,
            joint_indexes=ji,
            thruster_indexes=ti,
        )

    return obs


def _symbolic_rows(state: EnvState, sp: StaticEnvParams):
    """Masked polygon (without walls/ceiling), circle, joint and thruster rows of the flat obs."""
    N, J = sp.num_shapes, sp.num_joints
    keep = np.ones(sp.num_polygons, bool)
    keep[1 : sp.num_static_fixated_polys] = False
    keep_idx = np.flatnonzero(keep)
    sim = state.sim
    pf = polygon_features(state)[keep_idx]
    pm = sim.polygon.active[keep_idx]
    cf = circle_features(state)
    jf, ji, jm = joint_features(state, sp)
    tf, ti, tm = thruster_features(state, sp)
    jf = jnp.concatenate(
        [
            jf[:J],
            jax.nn.one_hot(ji[:J, 0], N, dtype=jnp.float32),
            jax.nn.one_hot(ji[:J, 1], N, dtype=jnp.float32),
        ],
        axis=1,
    )
    tf = jnp.concatenate([tf, jax.nn.one_hot(ti, N, dtype=jnp.float32)], axis=1)
    return (
        jnp.where(pm[:, None], pf, 0.0),
        jnp.where(sim.circle.active[:, None], cf, 0.0),
        jnp.where(jm[:J, None], jf, 0.0),
        jnp.where(tm[:, None], tf, 0.0),
    )


def make_flat_observation(static_params: StaticEnvParams):
    """``obs(state) -> [flat_size]`` (clipped to [-10, 10], NaN -> 0)."""
    sp = static_params

    def obs(state: EnvState) -> Float[Array, " d"]:
        rows = _symbolic_rows(state, sp)
        flat = jnp.concatenate(
            [r.reshape(-1) for r in rows] + [state.sim.gravity[1:2] / 10], axis=0
        )
        return jnp.nan_to_num(jnp.clip(flat, -10.0, 10.0))

    return obs


def make_padded_observation(static_params: StaticEnvParams):
    """``obs(state) -> [rows, width + 5]`` (rows padded, type one-hot, gravity; clipped)."""
    sp = static_params

    def obs(state: EnvState) -> Float[Array, "r w"]:
        rows = _symbolic_rows(state, sp)
        width = max(r.shape[1] for r in rows)
        padded = [jnp.pad(r, ((0, 0), (0, width - r.shape[1]))) for r in rows]
        types = np.concatenate([np.full(r.shape[0], i) for i, r in enumerate(rows)])
        one_hot = np.eye(4, dtype=np.float32)[types]
        body = jnp.concatenate(padded, axis=0)
        grav = jnp.full((body.shape[0], 1), state.sim.gravity[1] / 10)
        out = jnp.concatenate([body, jnp.asarray(one_hot), grav], axis=1)
        return jnp.nan_to_num(jnp.clip(out, -10.0, 10.0))

    return obs


def make_pixel_observation(static_params: StaticEnvParams):
    """``obs(state, params) -> PixelsObservation`` (``render.render_pixels`` / 255)."""
    from jaxlab.envs.kinetix.render import make_render_pixels

    render = make_render_pixels(static_params)

    def obs(state: EnvState, params: EnvParams) -> PixelsObservation:
        image = render(state, params).astype(jnp.float32) / 255.0
        return PixelsObservation(image=image, global_info=state.sim.gravity[1:2] / 10.0)

    return obs


def make_observation_fn(observation_type: str, static_params: StaticEnvParams):
    """``obs(state, params)`` for ``observation_type`` (constants precomputed once)."""
    t = check_observation_type(observation_type)
    if t == "pixels":
        return make_pixel_observation(static_params)
    fn = {
        "symbolic_entity": make_entity_observation,
        "symbolic_flat": make_flat_observation,
        "symbolic_flat_padded": make_padded_observation,
    }[t](static_params)
    return lambda state, params: fn(state)


def flat_size(static_params: StaticEnvParams) -> int:
    """Length of the flat observation: ``(P-3)*26 + C*18 + J*(22+2N) + T*(8+N) + 1`` (with the
    default 4 motor / 2 thruster bindings)."""
    sp = static_params
    N = sp.num_shapes
    jw = 18 + sp.num_motor_bindings + 2 * N
    tw = 6 + sp.num_thruster_bindings + N
    kept = sp.num_polygons - (sp.num_static_fixated_polys - 1)
    return kept * 26 + sp.num_circles * 18 + sp.num_joints * jw + sp.num_thrusters * tw + 1


def padded_shape(static_params: StaticEnvParams) -> tuple[int, int]:
    """Shape of the padded observation: (rows, max row width + 5)."""
    sp = static_params
    N = sp.num_shapes
    rows = (sp.num_polygons - (sp.num_static_fixated_polys - 1)) + sp.num_circles
    rows += sp.num_joints + sp.num_thrusters
    width = max(26, 18, 18 + sp.num_motor_bindings + 2 * N, 6 + sp.num_thruster_bindings + N)
    return rows, width + 5


def pixel_shape(static_params: StaticEnvParams) -> tuple[int, int, int]:
    """Shape of the pixel image: ``(width // downscale, height // downscale, 3)``."""
    w, h = static_params.screen_dim
    return w // static_params.downscale, h // static_params.downscale, 3


def observation_space(observation_type: str, static_params: StaticEnvParams) -> Space:
    """The observation space (Box or Dict with the observation's container type)."""
    t = check_observation_type(observation_type)
    sp = static_params
    inf = np.inf
    P, C, J, T, N = (
        sp.num_polygons,
        sp.num_circles,
        sp.num_joints,
        sp.num_thrusters,
        sp.num_shapes,
    )
    if t == "symbolic_flat":
        return Box(-10.0, 10.0, (flat_size(sp),), jnp.float32)
    if t == "symbolic_flat_padded":
        return Box(-10.0, 10.0, padded_shape(sp), jnp.float32)
    if t == "pixels":
        return Dict(
            {
                "image": Box(0.0, 1.0, pixel_shape(sp), jnp.float32),
                "global_info": Box(-inf, inf, (1,), jnp.float32),
            },
            container=PixelsObservation,
        )
    mask = lambda *shape: Box(0, 1, shape, bool)
    return Dict(
        {
            "circles": Box(-inf, inf, (C, 19), jnp.float32),
            "polygons": Box(-inf, inf, (P, 27), jnp.float32),
            "joints": Box(-inf, inf, (2 * J, 18 + sp.num_motor_bindings), jnp.float32),
            "thrusters": Box(-inf, inf, (T, 6 + sp.num_thruster_bindings), jnp.float32),
            "circle_mask": mask(C),
            "polygon_mask": mask(P),
            "joint_mask": mask(2 * J),
            "thruster_mask": mask(T),
            "attention_mask": mask(4, N, N),
            "joint_indexes": Box(0, N - 1, (2 * J, 2), jnp.int32),
            "thruster_indexes": Box(0, N - 1, (T,), jnp.int32),
        },
        container=EntityObservation,
    )


def random_entity_observation(
    seed: int,
    batch: int,
    *,
    polygons: int = 5,
    circles: int = 2,
    joints: int = 1,
    thrusters: int = 1,
) -> EntityObservation:
    """A random, structurally valid batch of entity observations (numpy): random features, masks
    with at least one active polygon, joint/thruster indexes into active entities and a masked
    attention pattern. For network tests and benchmarks that need inputs without an env."""
    rng = np.random.default_rng(seed)
    n = polygons + circles
    poly_mask = rng.random((batch, polygons)) < 0.8
    poly_mask[:, 0] = True
    circle_mask = rng.random((batch, circles)) < 0.8
    active = np.concatenate([poly_mask, circle_mask], axis=1)
    act_idx = [np.flatnonzero(a) for a in active]
    joint_idx = np.stack([rng.choice(ix, size=(2 * joints, 2)) for ix in act_idx])
    thr_idx = np.stack([rng.choice(ix, size=(thrusters,)) for ix in act_idx])
    att = rng.random((batch, 4, n, n)) < 0.6
    att = att & active[:, None, :, None] & active[:, None, None, :]

    def f(*shape: int) -> np.ndarray:
        return rng.normal(size=(batch, *shape)).astype(np.float32)

    return EntityObservation(
        circles=f(circles, 19),
        polygons=f(polygons, 27),
        joints=f(2 * joints, 22),
        thrusters=f(thrusters, 8),
        circle_mask=circle_mask,
        polygon_mask=poly_mask,
        joint_mask=rng.random((batch, 2 * joints)) < 0.7,
        thruster_mask=rng.random((batch, thrusters)) < 0.7,
        attention_mask=att,
        joint_indexes=joint_idx.astype(np.int32),
        thruster_indexes=thr_idx.astype(np.int32),
    )
