"""Kinetix env state and parameters (``kinetix/environment/env_state.py`` of the original).

* ``EnvState``: the physics ``SimState`` (field ``sim``) plus what the env adds per entity: shape
  roles, densities, highlight flags, action bindings of joints and thrusters, the auto-motor flags,
  the step counter and the last green-blue distance (dense reward).
* ``EnvParams``: traced numbers; the physics ``SimParams`` fields (flat, like the original and its
  JSON) plus ``max_timesteps``, ``pixels_per_unit`` and ``dense_reward_scale``.
* ``StaticEnvParams``: frozen and hashable; capacities and everything else that fixes shapes or
  control flow (physics static fields, ``frame_skip``, binding counts, screen size).

Shape roles: 0 default (grey), 1 green (the agent's ball), 2 blue (the goal), 3 red (death). A
green shape touching a blue one gives reward +1 and ends the episode; touching a red one gives -1
and ends it (red wins if both happen in the same substep).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxtyping import Array, Bool, Float, Int

from jaxlab.physics import SimParams, SimState, StaticSimParams

NUM_SHAPE_ROLES = 4
ROLE_NAMES = ("default", "green", "blue", "red")


@struct.dataclass
class EnvState:
    """One Kinetix world.

    Attributes:
        sim: the physics state (bodies, joints, thrusters, manifolds, gravity).
        polygon_shape_roles: [P] int32 role of each polygon (0 default, 1 green, 2 blue, 3 red).
        circle_shape_roles: [C] int32 role of each circle.
        polygon_highlighted: [P] bool editor highlight (kept for the file format; no effect).
        circle_highlighted: [C] bool.
        polygon_densities: [P] float32 density used for the mass (observed by the agent).
        circle_densities: [C] float32.
        motor_bindings: [J] int32, joint j is driven by action entry ``motor_bindings[j]``.
        motor_auto: [J] bool, the joint's motor always runs at +1 regardless of the action.
        thruster_bindings: [T] int32, thruster t fires with action entry
            ``num_motor_bindings + thruster_bindings[t]``.
        timestep: int32 env steps taken in this episode.
        last_distance: float32 green-blue distance after the previous step, -1 at the start of
            an episode (no dense reward on the first step).
    """

    sim: SimState
    polygon_shape_roles: Int[Array, " p"]
    circle_shape_roles: Int[Array, " c"]
    polygon_highlighted: Bool[Array, " p"]
    circle_highlighted: Bool[Array, " c"]
    polygon_densities: Float[Array, " p"]
    circle_densities: Float[Array, " c"]
    motor_bindings: Int[Array, " j"]
    motor_auto: Bool[Array, " j"]
    thruster_bindings: Int[Array, " t"]
    timestep: Int[Array, ""]
    last_distance: Float[Array, ""]


#: ``SimParams`` field names, in the order of the JSON ``env_params`` object.
SIM_PARAM_FIELDS = (
    "dt",
    "slop",
    "baumgarte_coefficient_joints_v",
    "baumgarte_coefficient_joints_p",
    "baumgarte_coefficient_fjoint_av",
    "baumgarte_coefficient_rjoint_limit_av",
    "baumgarte_coefficient_collision",
    "joint_stiffness",
    "clip_position",
    "clip_velocity",
    "clip_angular_velocity",
    "base_motor_speed",
    "base_motor_power",
    "base_thruster_power",
    "motor_decay_coefficient",
    "motor_joint_limit",
    "base_friction",
)


@struct.dataclass
class EnvParams:
    """Traced env parameters (vmap over them for domain randomisation).

    The first fields are the physics ``SimParams`` (Jax2D defaults); ``sim`` assembles them.

    Attributes:
        max_timesteps: episode length; the episode is truncated when ``timestep >= max_timesteps``.
        pixels_per_unit: pixels per metre of the full-size screen (pixel observations and renders
            use ``pixels_per_unit / downscale``).
        dense_reward_scale: ``kappa`` of the dense shaping ``-kappa (d_t - d_{t-1})`` on the sum of
            green-blue centre distances ``d``. 0.1 is the original's ``EnvParams`` default and the
            value stored in its level files (its training configs use 0.2).
    """

    dt: float = 1 / 60
    slop: float = 0.01
    baumgarte_coefficient_joints_v: float = 2.0
    baumgarte_coefficient_joints_p: float = 0.7
    baumgarte_coefficient_fjoint_av: float = 2.0
    baumgarte_coefficient_rjoint_limit_av: float = 5.0
    baumgarte_coefficient_collision: float = 0.2
    joint_stiffness: float = 0.6
    clip_position: float = 15
    clip_velocity: float = 100
    clip_angular_velocity: float = 50
    base_motor_speed: float = 6.0
    base_motor_power: float = 900.0
    base_thruster_power: float = 10.0
    motor_decay_coefficient: float = 0.1
    motor_joint_limit: float = 0.1
    base_friction: float = 0.4
    max_timesteps: int = 256
    pixels_per_unit: float = 100
    dense_reward_scale: float = 0.1

    @property
    def sim(self) -> SimParams:
        """The physics parameters."""
        return SimParams(**{k: getattr(self, k) for k in SIM_PARAM_FIELDS})


#: ``StaticEnvParams`` fields that are ``StaticSimParams`` fields.
STATIC_SIM_FIELDS = (
    "num_polygons",
    "num_circles",
    "num_joints",
    "num_thrusters",
    "max_polygon_vertices",
    "num_solver_iterations",
    "solver_batch_size",
    "do_warm_starting",
    "num_static_fixated_polys",
)


@dataclasses.dataclass(frozen=True)
class StaticEnvParams:
    """Shape-fixing env configuration (frozen, hashable; a static argument under ``jit``).

    Field names and meanings follow the original (and its JSON ``static_env_params``).

    Attributes:
        num_polygons: polygon capacity P, including the 4 static ones (floor, 2 walls, ceiling).
        num_circles: circle capacity C.
        num_joints: joint capacity J.
        num_thrusters: thruster capacity T.
        max_polygon_vertices: vertex slots per polygon (4).
        num_solver_iterations: physics solver iterations per substep.
        solver_batch_size: contacts solved in parallel per solver batch.
        do_warm_starting: carry accumulated impulses between substeps.
        num_static_fixated_polys: leading polygon slots that never move (4).
        screen_dim: full-size screen (width, height) in pixels.
        downscale: pixel observations are ``screen_dim // downscale``.
        frame_skip: physics substeps per env step.
        max_shape_size: largest shape extent the original renderer draws (metres; stored only).
        num_motor_bindings: motor entries of the unified action (4).
        num_thruster_bindings: thruster entries of the unified action (2).

    Defaults are the L preset (``StaticEnvParams.from_size("l")``); the original's class
    defaults were 12/12/12/12 shapes with ``frame_skip=1``, which none of its presets use.
    """

    num_polygons: int = 12
    num_circles: int = 4
    num_joints: int = 6
    num_thrusters: int = 2
    max_polygon_vertices: int = 4
    num_solver_iterations: int = 10
    solver_batch_size: int = 16
    do_warm_starting: bool = True
    num_static_fixated_polys: int = 4
    screen_dim: tuple[int, int] = (500, 500)
    downscale: int = 4
    frame_skip: int = 2
    max_shape_size: int = 2
    num_motor_bindings: int = 4
    num_thruster_bindings: int = 2

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "do_warm_starting":
                if not isinstance(v, bool | np.bool_):
                    raise ValueError(f"StaticEnvParams.do_warm_starting={v!r}; expected a bool")
                object.__setattr__(self, f.name, bool(v))
                continue
            if f.name == "screen_dim":
                dims = tuple(v) if isinstance(v, tuple | list) else None
                if (
                    dims is None
                    or len(dims) != 2
                    or any(isinstance(d, bool) or not isinstance(d, int | np.integer) for d in dims)
                    or any(d < 1 for d in dims)
                ):
                    raise ValueError(
                        f"StaticEnvParams.screen_dim={v!r}; expected (width, height) positive ints"
                    )
                object.__setattr__(self, f.name, (int(dims[0]), int(dims[1])))
                continue
            if isinstance(v, bool) or not isinstance(v, int | np.integer):
                raise ValueError(f"StaticEnvParams.{f.name}={v!r}; expected a Python int")
            object.__setattr__(self, f.name, int(v))
            low = 1 if f.name in _POSITIVE else 0
            if v < low:
                raise ValueError(f"StaticEnvParams.{f.name}={v}; expected >= {low}")
        if self.num_static_fixated_polys != 4:
            raise ValueError(
                f"StaticEnvParams.num_static_fixated_polys={self.num_static_fixated_polys}; "
                "expected 4 (floor, two walls and ceiling, as in Kinetix)"
            )
        if self.num_polygons < self.num_static_fixated_polys:
            raise ValueError(
                f"StaticEnvParams.num_polygons={self.num_polygons}; expected >= "
                f"num_static_fixated_polys={self.num_static_fixated_polys}"
            )
        if self.max_polygon_vertices != 4:
            raise ValueError(
                f"StaticEnvParams.max_polygon_vertices={self.max_polygon_vertices}; expected 4"
            )
        for name in ("screen_dim",):
            w, h = getattr(self, name)
            if w < self.downscale or h < self.downscale:
                raise ValueError(
                    f"StaticEnvParams.screen_dim={(w, h)} is smaller than downscale="
                    f"{self.downscale}; expected each side >= downscale"
                )

    @property
    def sim(self) -> StaticSimParams:
        """The physics static parameters."""
        return StaticSimParams(**{k: getattr(self, k) for k in STATIC_SIM_FIELDS})

    @property
    def num_shapes(self) -> int:
        """Total shape capacity N = P + C (the global index space)."""
        return self.num_polygons + self.num_circles

    @property
    def unified_action_size(self) -> int:
        """Entries of the unified action: motor bindings then thruster bindings."""
        return self.num_motor_bindings + self.num_thruster_bindings

    def replace(self, **changes) -> StaticEnvParams:
        """A copy with ``changes`` applied (validated)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_size(cls, size: str, **changes) -> StaticEnvParams:
        """The original's S/M/L presets (paper Table 3), optionally with ``changes``.

        | size | polygons (incl. 4 static) | circles | joints | thrusters |
        |------|---------------------------|---------|--------|-----------|
        | s    | 5                         | 2       | 1      | 1         |
        | m    | 6                         | 3       | 2      | 2         |
        | l    | 12                        | 4       | 6      | 2         |

        All use ``frame_skip=2``, 4 motor and 2 thruster bindings.
        """
        if size not in SIZES:
            raise ValueError(f"size={size!r}; expected one of {sorted(SIZES)}")
        return dataclasses.replace(SIZES[size], **changes)


_POSITIVE = {
    "max_polygon_vertices",
    "num_solver_iterations",
    "solver_batch_size",
    "downscale",
    "frame_skip",
    "num_motor_bindings",
    "num_thruster_bindings",
}

SIZES: dict[str, StaticEnvParams] = {
    "s": StaticEnvParams(num_polygons=5, num_circles=2, num_joints=1, num_thrusters=1),
    "m": StaticEnvParams(num_polygons=6, num_circles=3, num_joints=2, num_thrusters=2),
    "l": StaticEnvParams(num_polygons=12, num_circles=4, num_joints=6, num_thrusters=2),
}


def global_roles(state: EnvState) -> Int[Array, " n"]:
    """Roles of all N = P + C shapes in global-index order, 0 for inactive slots."""
    return jnp.concatenate(
        [
            state.polygon_shape_roles * state.sim.polygon.active,
            state.circle_shape_roles * state.sim.circle.active,
        ]
    )


def from_sim_state(sim: SimState, static_params: StaticEnvParams) -> EnvState:
    """Wrap a physics state as an ``EnvState`` with default roles (0), unit densities, motor and
    thruster bindings 0, no auto motors, ``timestep=0`` and ``last_distance=-1`` (the original's
    ``create_empty_env`` values)."""
    P, C, J, T = (
        static_params.num_polygons,
        static_params.num_circles,
        static_params.num_joints,
        static_params.num_thrusters,
    )
    z = lambda n, dtype: jnp.asarray(np.zeros(n, dtype))
    return EnvState(
        sim=sim,
        polygon_shape_roles=z(P, np.int32),
        circle_shape_roles=z(C, np.int32),
        polygon_highlighted=z(P, bool),
        circle_highlighted=z(C, bool),
        polygon_densities=jnp.asarray(np.ones(P, np.float32)),
        circle_densities=jnp.asarray(np.ones(C, np.float32)),
        motor_bindings=z(J, np.int32),
        motor_auto=z(J, bool),
        thruster_bindings=z(T, np.int32),
        timestep=jnp.asarray(np.int32(0)),
        last_distance=jnp.asarray(np.float32(-1.0)),
    )


def create_empty_env(static_params: StaticEnvParams) -> EnvState:
    """The empty arena (floor, walls, ceiling) as an ``EnvState`` (original ``create_empty_env``)."""
    from jaxlab.physics import create_empty_sim

    return from_sim_state(create_empty_sim(static_params.sim), static_params)
