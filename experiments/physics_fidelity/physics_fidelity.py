"""Replay the reference fixtures of the original Jax2D with jaxlab's engine.

Shared by ``tests/physics/test_fidelity.py`` and ``physics_fidelity_report.py`` beside it
(``experiments.physics_fidelity.physics_fidelity``).
Every level of one size class has the same static capacities, so the levels of a size are
stacked along a leading axis and rolled out with one ``vmap``-ed ``lax.scan`` (one compilation
per size class and horizon).

Deviation of a level at engine step k (1-based) is

    dev_k = max over active shapes i of max(|x_i^jaxlab - x_i^ref|_inf, |theta_i^jaxlab - theta_i^ref|)

with positions in metres and rotations in radians (row ``k - 1`` of the fixture arrays).
"""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from experiments.physics_fidelity.physics_fixtures import fixture_paths, load_fixture
from jaxlab import physics as px
from jaxlab.core.compile import jit
from jaxlab.physics.state import empty_manifolds

BODY_FIELDS = (
    "position",
    "rotation",
    "velocity",
    "angular_velocity",
    "inverse_mass",
    "inverse_inertia",
    "friction",
    "restitution",
    "collision_mode",
    "active",
    "n_vertices",
    "vertices",
    "radius",
)
JOINT_FIELDS = (
    "a_index",
    "b_index",
    "a_relative_pos",
    "b_relative_pos",
    "global_position",
    "active",
    "acc_impulse",
    "acc_r_impulse",
    "motor_speed",
    "motor_power",
    "motor_on",
    "motor_has_joint_limits",
    "min_rotation",
    "max_rotation",
    "is_fixed_joint",
    "rotation",
)
THRUSTER_FIELDS = (
    "object_index",
    "relative_position",
    "rotation",
    "power",
    "global_position",
    "active",
)
PARAM_FIELDS = tuple(f for f in px.SimParams.__dataclass_fields__)
STATIC_FIELDS = (
    "num_polygons",
    "num_circles",
    "num_joints",
    "num_thrusters",
    "max_polygon_vertices",
    "num_solver_iterations",
    "solver_batch_size",
    "num_static_fixated_polys",
)
ZERO_STEPS = 240
ACT_STEPS = 120


def static_params_of(d: dict) -> px.StaticSimParams:
    """The engine's static sizes as stored in a fixture (``static_*``)."""
    kw = {f: int(d[f"static_{f}"]) for f in STATIC_FIELDS}
    return px.StaticSimParams(do_warm_starting=bool(d["static_do_warm_starting"]), **kw)


def sim_params_of(d: dict) -> px.SimParams:
    """The ``SimParams`` used by the reference run (``param_*``), as float32 scalars."""
    return px.SimParams(**{f: jnp.float32(d[f"param_{f}"]) for f in PARAM_FIELDS})


def sim_state_of(d: dict) -> px.SimState:
    """jaxlab ``SimState`` from a fixture's ``init_*`` arrays (slot order preserved), with empty
    warm-start manifolds as in the reference."""
    sp = static_params_of(d)
    n_cc, n_cr, n_rr = px.pair_counts(sp)

    def body(kind):
        return px.RigidBody(**{f: jnp.asarray(d[f"init_{kind}_{f}"]) for f in BODY_FIELDS})

    return px.SimState(
        polygon=body("polygon"),
        circle=body("circle"),
        joint=px.Joint(**{f: jnp.asarray(d[f"init_joint_{f}"]) for f in JOINT_FIELDS}),
        thruster=px.Thruster(**{f: jnp.asarray(d[f"init_thruster_{f}"]) for f in THRUSTER_FIELDS}),
        collision_matrix=jnp.asarray(d["init_collision_matrix"]),
        acc_rr_manifolds=empty_manifolds(n_rr, 2),
        acc_cr_manifolds=empty_manifolds(n_cr),
        acc_cc_manifolds=empty_manifolds(n_cc),
        gravity=jnp.asarray(d["init_gravity"]),
    )


class SizeBatch:
    """All fixtures of one size class, stacked along a leading level axis.

    Attributes:
        names: level stems (``<size>_<level>``), in ``fixture_paths`` order.
        static_params: the shared ``StaticSimParams``.
        params: ``SimParams`` with leaves [L].
        state: initial ``SimState`` with leaves [L, ...].
        actions: [L, J+T] the reference's all-+1 engine action (zeros without actuators).
        has_act: [L] bool, whether the level has the ``act_*`` trajectory.
        ref_zero / ref_act: ``(pos [L, K, N, 2], rot [L, K, N])`` reference trajectories over the
            global shape index (polygons then circles); ``ref_act`` rows of levels without
            actuators are zeros.
        active: [L, N] bool, the active shapes.
    """

    def __init__(self, size: str, paths: list[Path] | None = None):
        paths = fixture_paths(size) if paths is None else paths
        if not paths:
            raise ValueError(f"size={size!r} has no fixtures, expected at least one .npz")
        data = [load_fixture(p) for p in paths]
        self.names = [p.stem for p in paths]
        sps = {static_params_of(d) for d in data}
        if len(sps) != 1:
            raise ValueError(f"size={size!r} mixes static sizes {sps}, expected one")
        self.static_params = sps.pop()
        stack = functools.partial(jax.tree.map, lambda *x: jnp.stack(x))
        self.params = stack(*[sim_params_of(d) for d in data])
        self.state = stack(*[sim_state_of(d) for d in data])
        sp = self.static_params
        n_act = sp.num_joints + sp.num_thrusters
        self.has_act = np.array([bool(d["has_actuators"]) for d in data])
        self.actions = jnp.asarray(
            np.stack(
                [
                    d["act_engine_action"] if h else np.zeros(n_act, np.float32)
                    for d, h in zip(data, self.has_act, strict=True)
                ]
            )
        )

        def ref(d, pre, k):
            if f"{pre}polygon_position" not in d:
                n = sp.num_shapes
                return np.zeros((k, n, 2), np.float32), np.zeros((k, n), np.float32)
            pos = np.concatenate([d[f"{pre}polygon_position"], d[f"{pre}circle_position"]], 1)
            rot = np.concatenate([d[f"{pre}polygon_rotation"], d[f"{pre}circle_rotation"]], 1)
            return pos[:k], rot[:k]

        zero = [ref(d, "", ZERO_STEPS) for d in data]
        act = [ref(d, "act_", ACT_STEPS) for d in data]
        self.ref_zero = (np.stack([z[0] for z in zero]), np.stack([z[1] for z in zero]))
        self.ref_act = (np.stack([a[0] for a in act]), np.stack([a[1] for a in act]))
        self.active = np.concatenate(
            [
                np.stack([d["init_polygon_active"] for d in data]),
                np.stack([d["init_circle_active"] for d in data]),
            ],
            1,
        )


HORIZONS_S = (0.5, 1.0, 2.0, 4.0)


@functools.cache
def rollout_fn(static_params: px.StaticSimParams, steps: int, solver: str = "fast"):
    """Jitted ``(states [B], params [B], actions [B, A]) -> (pos [B, K, N, 2], rot [B, K, N])``:
    ``steps`` engine steps with constant actions, vmapped over scenes (one compilation per
    static size, horizon and solver)."""

    def one(state, params, actions):
        def body(s, _):
            s, _ = px.step(s, params, static_params, actions, solver=solver)
            pos = jnp.concatenate([s.polygon.position, s.circle.position], 0)
            rot = jnp.concatenate([s.polygon.rotation, s.circle.rotation], 0)
            return s, (pos, rot)

        return jax.lax.scan(body, state, None, length=steps)[1]

    return jit(jax.vmap(one))


def _dev(pos, rot, ref, active) -> np.ndarray:
    err = np.maximum(np.abs(np.asarray(pos) - ref[0]).max(-1), np.abs(np.asarray(rot) - ref[1]))
    return np.where(active[:, None, :], err, 0.0).max(-1)


def deviations(
    batch: SizeBatch, solver: str = "fast", gravity_scale: float = 1.0
) -> dict[str, np.ndarray]:
    """Per-level, per-step deviations ``dev_k`` (module docstring) of jaxlab from the reference.

    Both variants run in one call of one compiled function (the zero-action and the all-+1
    scenes are stacked, 2L scenes of ``ZERO_STEPS`` steps).

    Args:
        batch: the levels of one size.
        solver: jaxlab's solver (``"fast"`` or ``"reference"``).
        gravity_scale: multiplies every scene's gravity (1 for the faithful comparison; other
            values check that the tolerances detect a wrong engine).

    Returns:
        ``{"zero": [L, 240], "act": [L, 120]}`` NumPy arrays; ``act`` rows of levels without
        actuators are NaN.
    """
    n = len(batch.names)
    states = jax.tree.map(lambda x: jnp.concatenate([x, x]), batch.state)
    states = states.replace(gravity=states.gravity * gravity_scale)
    params = jax.tree.map(lambda x: jnp.concatenate([x, x]), batch.params)
    actions = jnp.concatenate([jnp.zeros_like(batch.actions), batch.actions])
    pos, rot = rollout_fn(batch.static_params, ZERO_STEPS, solver)(states, params, actions)
    pos, rot = np.asarray(pos), np.asarray(rot)
    zero = _dev(pos[:n], rot[:n], batch.ref_zero, batch.active)
    act = _dev(pos[n:, :ACT_STEPS], rot[n:, :ACT_STEPS], batch.ref_act, batch.active)
    act = np.where(batch.has_act[:, None], act, np.nan)
    return {"zero": zero, "act": act}


def max_up_to(dev: np.ndarray, seconds: float, dt: float = 1 / 60) -> np.ndarray:
    """[L] running maximum of ``dev`` [L, K] over the first ``round(seconds / dt)`` steps
    (NaN where that horizon exceeds the trajectory or the row is NaN)."""
    k = round(seconds / dt)
    if k > dev.shape[1]:
        return np.full(dev.shape[0], np.nan)
    return dev[:, :k].max(1)
