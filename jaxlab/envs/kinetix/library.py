"""The project's own Kinetix level library: human-designed S, M and L levels with solutions.

Every level is built by a function of this module with the physics scene API
(``jaxlab.physics.scene``) through the small ``SceneBuilder`` below, and registered by name
(``"<size>/<name>"``) with its size and a one-line description. The same levels ship as Kinetix
JSON files in ``jaxlab/envs/kinetix/levels/<size>/<name>.json`` and their solutions in
``jaxlab/envs/kinetix/levels/solutions.json``: for each level a list of ``(action, repeat)``
segments of multi-discrete actions ``[m0, m1, m2, m3, t0, t1]`` (motors ``{0: off, 1: +1,
2: -1}``, thrusters ``{0, 1}``); replaying the segments from the level's initial state (and the
no-op action after the last segment) reaches the blue goal with the green shape within
``max_timesteps`` (reward +1, terminated), while the no-op policy does not.

Command line (``jaxlab.envs.kinetix.cli``)::

    jaxlab levels library --write [--force]   # (re)write the JSON files
    jaxlab levels library --search NAME [--seed S] [--candidates N] [--save]
    jaxlab levels library --render DIR         # first frame of each level as PNG
    jaxlab levels library --verify [SIZE]      # replay the solutions and the no-op policy

Coordinates are metres in the standard arena: floor top at ``y = 0.4``, walls at ``x = 0`` and
``x = 5``, ceiling at ``y = 5``. Angles are radians, counter-clockwise.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Int

from jaxlab.core.compile import jit
from jaxlab.envs.kinetix.levels import Level, level_to_json, load_level, save_level
from jaxlab.envs.kinetix.state import EnvParams, EnvState, StaticEnvParams, from_sim_state
from jaxlab.physics import (
    add_circle,
    add_fixed_joint,
    add_polygon,
    add_revolute_joint,
    add_thruster,
    create_empty_sim,
    recompute_global_joint_positions,
)

LEVELS_DIR = Path(__file__).resolve().parent / "levels"
SOLUTIONS_FILE = LEVELS_DIR / "solutions.json"
ROLES = {"default": 0, "green": 1, "blue": 2, "red": 3}
FLOOR = 0  # global index of the floor polygon
NOOP = (0, 0, 0, 0, 0, 0)


# ---------------------------------------------------------------------------------------------
# Scene building


def _rot(angle: float, v) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    x, y = float(v[0]), float(v[1])
    return np.array([c * x - s * y, s * x + c * y], np.float32)


class SceneBuilder:
    """Builds one level on top of ``jaxlab.physics.scene`` (concrete values, host side).

    Shapes are placed in world coordinates; joints and thrusters take *world* anchor points and
    convert them to each body's local frame. Roles, densities and bindings are collected here and
    written into the ``EnvState`` by ``build``.

    Args:
        size: ``"s"``, ``"m"`` or ``"l"`` (the original's presets).
    """

    def __init__(self, size: str):
        self.static_params = StaticEnvParams.from_size(size)
        self.sim = create_empty_sim(self.static_params.sim)
        self.P = self.static_params.num_polygons
        self.roles: dict[int, int] = {}
        self.densities: dict[int, float] = {}
        self.motor_bindings: dict[int, int] = {}
        self.thruster_bindings: dict[int, int] = {}

    def _pose(self, index: int) -> tuple[np.ndarray, float]:
        body = self.sim.polygon if index < self.P else self.sim.circle
        i = index if index < self.P else index - self.P
        return np.asarray(body.position[i]), float(body.rotation[i])

    def _local(self, index: int, world) -> np.ndarray:
        pos, rot = self._pose(index)
        return _rot(-rot, np.asarray(world, np.float32) - pos)

    def _shape(self, index: int, role: str, density: float) -> int:
        self.roles[index] = ROLES[role]
        self.densities[index] = float(density)
        return index

    def rect(
        self,
        center,
        width: float,
        height: float,
        *,
        angle: float = 0.0,
        role: str = "default",
        fixed: bool = False,
        density: float = 1.0,
        friction: float = 1.0,
    ) -> int:
        """A ``width x height`` rectangle centred at ``center``, rotated by ``angle``."""
        hw, hh = width / 2, height / 2
        return self.polygon(
            center,
            [(-hw, hh), (hw, hh), (hw, -hh), (-hw, -hh)],
            angle=angle,
            role=role,
            fixed=fixed,
            density=density,
            friction=friction,
        )

    def polygon(
        self,
        origin,
        vertices,
        *,
        angle: float = 0.0,
        role: str = "default",
        fixed: bool = False,
        density: float = 1.0,
        friction: float = 1.0,
    ) -> int:
        """A convex polygon with clockwise local ``vertices`` around ``origin``."""
        self.sim, (_, g) = add_polygon(
            self.sim,
            self.static_params.sim,
            np.asarray(origin, np.float32),
            np.asarray(vertices, np.float32),
            rotation=angle,
            density=density,
            friction=friction,
            fixated=fixed,
        )
        return self._shape(g, role, density)

    def circle(
        self,
        center,
        radius: float,
        *,
        role: str = "default",
        fixed: bool = False,
        density: float = 1.0,
        friction: float = 1.0,
    ) -> int:
        """A circle of ``radius`` centred at ``center``."""
        self.sim, (_, g) = add_circle(
            self.sim,
            self.static_params.sim,
            np.asarray(center, np.float32),
            radius,
            density=density,
            friction=friction,
            fixated=fixed,
        )
        return self._shape(g, role, density)

    def hinge(
        self,
        a: int,
        b: int,
        anchor,
        *,
        motor: bool = True,
        binding: int = 0,
        speed: float = 1.0,
        power: float = 1.0,
        limits: tuple[float, float] | None = None,
    ) -> int:
        """A revolute joint between shapes ``a`` and ``b`` at the world point ``anchor``."""
        lo, hi = limits if limits is not None else (-math.pi, math.pi)
        self.sim, j = add_revolute_joint(
            self.sim,
            self.static_params.sim,
            a,
            b,
            self._local(a, anchor),
            self._local(b, anchor),
            motor_on=motor,
            motor_speed=speed,
            motor_power=power,
            has_joint_limits=limits is not None,
            min_rotation=lo,
            max_rotation=hi,
        )
        self.motor_bindings[j] = binding
        return j

    def weld(self, a: int, b: int, anchor) -> int:
        """A fixed joint welding ``b`` to ``a`` at the world point ``anchor`` (current pose)."""
        rel = self._pose(b)[1] - self._pose(a)[1]
        self.sim, j = add_fixed_joint(
            self.sim,
            self.static_params.sim,
            a,
            b,
            self._local(a, anchor),
            self._local(b, anchor),
            rotation=rel,
        )
        return j

    def thruster(
        self, body: int, at, direction: float, *, power: float = 1.0, binding: int = 0
    ) -> int:
        """A thruster on ``body`` at world point ``at`` pushing along world angle ``direction``."""
        rel = direction - self._pose(body)[1]
        self.sim, t = add_thruster(
            self.sim, self.static_params.sim, body, self._local(body, at), rel, power
        )
        self.thruster_bindings[t] = binding
        return t

    def build(self, *, floor: str = "default") -> EnvState:
        """The finished ``EnvState`` (floor role ``floor``), cached anchors refreshed."""
        sp = self.static_params
        self.roles[FLOOR] = ROLES[floor]
        sim = recompute_global_joint_positions(self.sim, sp.sim)
        state = from_sim_state(sim, sp)
        pr = np.zeros(sp.num_polygons, np.int32)
        cr = np.zeros(sp.num_circles, np.int32)
        pd = np.ones(sp.num_polygons, np.float32)
        cd = np.ones(sp.num_circles, np.float32)
        for g, r in self.roles.items():
            (pr if g < self.P else cr)[g if g < self.P else g - self.P] = r
        for g, d in self.densities.items():
            (pd if g < self.P else cd)[g if g < self.P else g - self.P] = d
        mb = np.zeros(sp.num_joints, np.int32)
        tb = np.zeros(sp.num_thrusters, np.int32)
        for j, b in self.motor_bindings.items():
            mb[j] = b
        for t, b in self.thruster_bindings.items():
            tb[t] = b
        return state.replace(
            polygon_shape_roles=jnp.asarray(pr),
            circle_shape_roles=jnp.asarray(cr),
            polygon_densities=jnp.asarray(pd),
            circle_densities=jnp.asarray(cd),
            motor_bindings=jnp.asarray(mb),
            thruster_bindings=jnp.asarray(tb),
        )


# ---------------------------------------------------------------------------------------------
# Registry


@dataclasses.dataclass(frozen=True)
class LibraryLevel:
    """A registered level: ``name`` ("<size>/<stem>"), ``size``, ``description`` and its
    ``builder() -> EnvState``."""

    name: str
    size: str
    description: str
    builder: Callable[[], EnvState]

    @property
    def path(self) -> Path:
        """Its JSON file inside the package."""
        return LEVELS_DIR / f"{self.name}.json"

    @property
    def static_params(self) -> StaticEnvParams:
        return StaticEnvParams.from_size(self.size)


LIBRARY: dict[str, LibraryLevel] = {}


def register(size: str, description: str):
    """Decorator registering ``builder`` as level ``"<size>/<builder name>"``."""

    def wrap(builder: Callable[[], EnvState]) -> Callable[[], EnvState]:
        name = f"{size}/{builder.__name__}"
        LIBRARY[name] = LibraryLevel(name, size, description, builder)
        return builder

    return wrap


# ---------------------------------------------------------------------------------------------
# Levels: S (1 free polygon, 2 circles, 1 joint, 1 thruster)


@register("s", "car: a one-wheel car drives left along the floor to a blue ball")
def car_left() -> EnvState:
    b = SceneBuilder("s")
    body = b.rect((3.6, 0.95), 0.9, 0.16, role="green")
    wheel = b.circle((3.6, 0.68), 0.26)
    b.hinge(body, wheel, (3.6, 0.68), binding=0)
    b.circle((0.7, 0.75), 0.3, role="blue", fixed=True)
    return b.build()


@register("s", "thruster: a box with a slanted jet must fly past a red ball to a blue goal")
def thrust_past_red() -> EnvState:
    b = SceneBuilder("s")
    box = b.rect((1.0, 0.56), 0.3, 0.3, role="green")
    b.thruster(box, (1.0, 0.56), math.radians(62), binding=0, power=0.4)
    b.circle((1.0, 2.6), 0.5, role="red", fixed=True)
    b.circle((3.0, 4.2), 0.3, role="blue", fixed=True)
    return b.build()


@register("s", "arm: swing a motorised green arm up and over to touch a blue ball, not the red")
def arm_reach() -> EnvState:
    b = SceneBuilder("s")
    arm = b.rect((2.2, 1.2), 1.4, 0.14, role="green")
    b.hinge(FLOOR, arm, (1.6, 1.2), binding=0, speed=0.6)
    b.circle((0.8, 2.3), 0.25, role="blue", fixed=True)
    b.circle((2.9, 0.75), 0.25, role="red", fixed=True)
    return b.build()


@register("s", "balancing: tilt a plank to roll the green ball off its right end onto blue")
def tilt_plank() -> EnvState:
    b = SceneBuilder("s")
    plank = b.rect((2.5, 1.6), 2.6, 0.12)
    b.hinge(FLOOR, plank, (2.5, 1.6), binding=0, speed=0.15, power=0.5)
    b.circle((2.5, 1.81), 0.15, role="green")
    b.circle((4.25, 1.2), 0.2, role="blue", fixed=True)
    return b.build(floor="red")


@register("s", "throwing: flick a lever to throw the green ball up onto a blue target")
def catapult() -> EnvState:
    b = SceneBuilder("s")
    lever = b.rect((1.55, 1.0), 1.5, 0.12)
    b.hinge(FLOOR, lever, (2.2, 1.0), binding=0, speed=1.5, power=1.0)
    b.circle((0.95, 1.2), 0.14, role="green", density=0.5)
    b.circle((3.9, 2.6), 0.35, role="blue", fixed=True)
    return b.build(floor="red")


@register("s", "morphology: a green box drags itself right with an off-centre motorised cam")
def cam_crawler() -> EnvState:
    b = SceneBuilder("s")
    body = b.rect((1.2, 0.62), 0.7, 0.44, role="green")
    cam = b.circle((0.65, 0.62), 0.22, density=2.0)
    b.hinge(body, cam, (0.8, 0.62), binding=0, speed=0.8, power=1.5)
    b.circle((4.4, 0.75), 0.3, role="blue", fixed=True)
    return b.build()


@register("s", "thruster: pulse a jet that also lifts, to slide under a red ball to the blue")
def thrust_under_red() -> EnvState:
    b = SceneBuilder("s")
    ball = b.circle((4.3, 0.61), 0.2, role="green")
    b.thruster(ball, (4.3, 0.61), math.radians(150), binding=0, power=0.6)
    b.circle((2.6, 1.45), 0.5, role="red", fixed=True)
    b.rect((0.5, 0.9), 0.6, 1.0, role="blue", fixed=True)
    return b.build()


@register("s", "balancing: a wheel carries a free green pole to a blue ball; red floor")
def unicycle_pole() -> EnvState:
    b = SceneBuilder("s")
    wheel = b.circle((1.2, 0.65), 0.25, density=2.0)
    lean = 0.08
    top = (1.2 - 0.6 * math.sin(lean), 0.65 + 0.6 * math.cos(lean))
    pole = b.rect(top, 0.1, 1.2, angle=lean, role="green", density=0.3)
    b.hinge(wheel, pole, (1.2, 0.65), binding=0, speed=0.5, power=1.0)
    b.circle((2.15, 1.3), 0.2, role="blue", fixed=True)
    return b.build(floor="red")


# ---------------------------------------------------------------------------------------------
# Levels: M (2 free polygons, 3 circles, 2 joints, 2 thrusters)


@register("m", "car: a two-wheel green car climbs a ramp to a blue ball on the plateau")
def car_ramp_climb() -> EnvState:
    b = SceneBuilder("m")
    body = b.rect((1.0, 0.88), 1.3, 0.15, role="green")
    for x in (0.65, 1.35):
        wheel = b.circle((x, 0.62), 0.2)
        b.hinge(body, wheel, (x, 0.62), binding=0, speed=1.0, power=1.5)
    b.polygon((0.0, 0.0), [(2.3, 0.4), (3.9, 1.0), (5.0, 1.0), (5.0, 0.4)], fixed=True)
    b.circle((4.6, 1.35), 0.3, role="blue", fixed=True)
    return b.build()


@register("m", "thruster: a two-engine lander lifts off a pad, steers round a red ball to blue")
def lander() -> EnvState:
    b = SceneBuilder("m")
    b.rect((1.0, 0.9), 0.9, 1.0, fixed=True)
    box = b.rect((1.0, 1.55), 0.6, 0.3, role="green")
    b.thruster(box, (0.75, 1.4), math.radians(75), binding=0, power=0.4)
    b.thruster(box, (1.25, 1.4), math.radians(105), binding=1, power=0.4)
    b.circle((2.4, 2.4), 0.4, role="red", fixed=True)
    b.circle((4.0, 3.4), 0.3, role="blue", fixed=True)
    return b.build(floor="red")


@register("m", "arm: a two-link arm (shoulder, elbow) reaches up to blue past a red ball")
def two_link_arm() -> EnvState:
    b = SceneBuilder("m")
    mount = b.circle((1.0, 0.62), 0.12, fixed=True)
    upper = b.rect((1.0, 1.2), 0.14, 1.0)
    b.hinge(mount, upper, (1.0, 0.72), binding=0, speed=0.5, power=3.0)
    fore = b.rect((1.45, 1.7), 0.9, 0.12, role="green", density=0.5)
    b.hinge(upper, fore, (1.0, 1.7), binding=1, speed=0.5, power=1.0)
    b.circle((1.55, 2.45), 0.22, role="blue", fixed=True)
    b.circle((2.25, 1.7), 0.2, role="red", fixed=True)
    return b.build()


@register("m", "throwing: a lever throws the green ball over a red wall onto the blue ball")
def throw_over_wall() -> EnvState:
    b = SceneBuilder("m")
    lever = b.rect((1.25, 0.9), 1.4, 0.12)
    b.hinge(FLOOR, lever, (1.85, 0.9), binding=0, speed=1.5, power=1.0)
    b.circle((0.7, 1.1), 0.14, role="green", density=0.5)
    b.rect((2.9, 1.4), 0.2, 2.0, role="red", fixed=True)
    b.circle((4.2, 0.75), 0.35, role="blue", fixed=True)
    return b.build()


@register("m", "car + thruster: drive to a tall box and jet up onto it to touch blue")
def car_jump_box() -> EnvState:
    b = SceneBuilder("m")
    body = b.rect((0.9, 0.86), 0.8, 0.15, role="green")
    for x in (0.6, 1.2):
        wheel = b.circle((x, 0.6), 0.18)
        b.hinge(body, wheel, (x, 0.6), binding=0, speed=1.0, power=1.0)
    b.thruster(body, (0.9, 0.86), math.radians(90), binding=0, power=0.6)
    b.rect((3.9, 0.95), 0.7, 1.1, fixed=True)
    b.circle((3.9, 1.75), 0.25, role="blue", fixed=True)
    return b.build()


@register("m", "morphology: a green box crawls right on two off-centre motorised cams")
def twin_cam_crawler() -> EnvState:
    b = SceneBuilder("m")
    body = b.rect((1.3, 0.64), 0.8, 0.44, role="green")
    rear = b.circle((0.75, 0.62), 0.2, density=2.0)
    b.hinge(body, rear, (0.9, 0.62), binding=0, speed=0.8, power=1.5)
    top = b.circle((1.3, 1.06), 0.15, density=3.0)
    b.hinge(body, top, (1.3, 0.95), binding=1, speed=1.0, power=1.0)
    b.circle((4.2, 0.75), 0.35, role="blue", fixed=True)
    return b.build()


@register("m", "balancing: jet a cart to keep its free pole up; the green tip must reach blue")
def cart_pole() -> EnvState:
    b = SceneBuilder("m")
    cart = b.rect((1.5, 0.53), 0.8, 0.25, friction=0.2)
    lean = -0.05
    top = (1.5 - 0.6 * math.sin(lean), 0.65 + 0.6 * math.cos(lean))
    pole = b.rect(top, 0.08, 1.2, angle=lean, density=0.5)
    b.hinge(cart, pole, (1.5, 0.65), motor=False)
    tip = (1.5 - 1.2 * math.sin(lean), 0.65 + 1.2 * math.cos(lean))
    ball = b.circle(tip, 0.12, role="green", density=0.5)
    b.weld(pole, ball, tip)
    b.thruster(cart, (1.1, 0.53), 0.0, binding=0, power=0.25)
    b.thruster(cart, (1.9, 0.53), math.pi, binding=1, power=0.25)
    b.circle((3.0, 1.0), 0.2, role="blue", fixed=True)
    return b.build(floor="red")


# ---------------------------------------------------------------------------------------------
# Levels: L (8 free polygons, 4 circles, 6 joints, 2 thrusters)


@register("l", "morphology: a green body on two two-segment legs (hips, knees) walks to blue")
def knee_walker() -> EnvState:
    b = SceneBuilder("l")
    body = b.rect((1.2, 1.45), 1.0, 0.2, role="green")
    lim = (-1.2, 1.2)
    for hip_x, hip_b, knee_b in ((0.8, 0, 1), (1.6, 2, 3)):
        thigh = b.rect((hip_x, 1.15), 0.1, 0.5)
        b.hinge(body, thigh, (hip_x, 1.4), binding=hip_b, speed=0.6, limits=lim)
        shin = b.rect((hip_x, 0.7), 0.1, 0.45)
        b.hinge(thigh, shin, (hip_x, 0.92), binding=knee_b, speed=0.6, limits=lim)
    b.circle((3.3, 0.8), 0.35, role="blue", fixed=True)
    return b.build()


@register("l", "car: a three-wheel green car crosses a hill under a red bar to a blue ball")
def car_hill() -> EnvState:
    b = SceneBuilder("l")
    body = b.rect((0.9, 0.86), 1.1, 0.14, role="green")
    for x in (0.55, 0.9, 1.25):
        wheel = b.circle((x, 0.6), 0.18)
        b.hinge(body, wheel, (x, 0.6), binding=0, speed=1.0, power=1.0)
    b.polygon((0.0, 0.0), [(1.9, 0.4), (2.9, 0.75), (2.9, 0.4)], fixed=True)
    b.polygon((0.0, 0.0), [(2.9, 0.75), (3.9, 0.4), (2.9, 0.4)], fixed=True)
    b.rect((2.9, 2.1), 0.8, 0.25, role="red", fixed=True)
    b.circle((4.6, 0.7), 0.28, role="blue", fixed=True)
    return b.build()


@register("l", "throwing + arm: a two-link arm with a cup hurls the green ball over a red wall")
def arm_throw() -> EnvState:
    b = SceneBuilder("l")
    base = b.rect((0.9, 0.65), 0.3, 0.5, fixed=True)
    upper = b.rect((0.9, 1.25), 0.12, 0.8)
    b.hinge(base, upper, (0.9, 0.9), binding=0, speed=1.5, power=1.5)
    fore = b.rect((0.55, 1.6), 0.7, 0.1)
    b.hinge(upper, fore, (0.9, 1.6), binding=1, speed=1.5, power=1.0)
    lip = b.rect((0.23, 1.7), 0.06, 0.2)
    b.weld(fore, lip, (0.23, 1.62))
    b.circle((0.36, 1.77), 0.1, role="green", density=0.5)
    b.rect((2.6, 1.2), 0.2, 1.6, role="red", fixed=True)
    b.circle((4.1, 0.8), 0.4, role="blue", fixed=True)
    return b.build()


@register("l", "thruster: fly a two-jet green rocket over a red pillar and under a red curtain")
def thruster_maze() -> EnvState:
    b = SceneBuilder("l")
    rocket = b.rect((0.6, 0.66), 0.3, 0.5, role="green")
    b.thruster(rocket, (0.6, 0.41), math.radians(90), binding=0, power=0.5)
    b.thruster(rocket, (0.45, 0.66), 0.0, binding=1, power=0.3)
    b.rect((1.6, 1.0), 0.3, 1.2, role="red", fixed=True)
    b.rect((3.0, 4.0), 0.3, 2.0, role="red", fixed=True)
    b.circle((4.3, 1.0), 0.3, role="blue", fixed=True)
    return b.build()


@register("l", "car + arm: drive an excavator right and raise its green arm to a blue ball")
def excavator() -> EnvState:
    b = SceneBuilder("l")
    body = b.rect((1.0, 0.86), 1.0, 0.18)
    for x in (0.65, 1.35):
        wheel = b.circle((x, 0.6), 0.18)
        b.hinge(body, wheel, (x, 0.6), binding=0, speed=0.8, power=1.0)
    tilt = -0.6
    boom_c = (1.0 - 0.7 * math.sin(tilt), 0.97 + 0.7 * math.cos(tilt))
    boom = b.rect(boom_c, 0.1, 1.4, angle=tilt, role="green", density=0.5)
    b.hinge(body, boom, (1.0, 0.97), binding=1, speed=0.5, power=1.5)
    b.rect((4.5, 1.4), 0.2, 2.0, fixed=True)
    b.circle((4.15, 2.35), 0.2, role="blue", fixed=True)
    b.rect((2.8, 2.75), 1.2, 0.2, role="red", fixed=True)
    return b.build()


# ---------------------------------------------------------------------------------------------
# Loading, solutions and rollouts


def names(size: str | None = None) -> list[str]:
    """Registered level names (of one size if given), in registration order."""
    return [n for n, lv in LIBRARY.items() if size is None or lv.size == size]


def _get(name: str) -> LibraryLevel:
    if name not in LIBRARY:
        raise ValueError(f"level name={name!r} is not in the library; expected one of {names()}")
    return LIBRARY[name]


def build_level(name: str) -> Level:
    """The level ``name`` from its builder: ``Level(state, static_params, EnvParams())``."""
    lv = _get(name)
    return Level(lv.builder(), lv.static_params, EnvParams())


def load_library_level(name: str, static_params: StaticEnvParams | None = None) -> Level:
    """Load library level ``name`` (e.g. ``"s/car_left"``) from its shipped JSON file.

    Args:
        name: ``"<size>/<stem>"``; see ``names()``.
        static_params: pad into these sizes (default: the file's own, i.e. the level's size).
    """
    return load_level(_get(name).path, static_params)


def load_solutions(path: str | Path = SOLUTIONS_FILE) -> dict[str, list[tuple[tuple, int]]]:
    """``name -> [(action, repeat), ...]`` from ``solutions.json``."""
    raw = json.loads(Path(path).read_text())
    out = {}
    for name, segments in raw.items():
        segs = []
        for i, seg in enumerate(segments):
            if len(seg) != 2 or len(seg[0]) != len(NOOP) or int(seg[1]) < 1:
                raise ValueError(
                    f"{path}: {name}[{i}]={seg!r}; expected [action of {len(NOOP)} ints, repeat>=1]"
                )
            segs.append((tuple(int(a) for a in seg[0]), int(seg[1])))
        out[name] = segs
    return out


def expand_segments(segments: Sequence[tuple[Sequence[int], int]], steps: int) -> np.ndarray:
    """Piecewise-constant segments -> [steps, 6] int32 actions (no-op after the last segment).

    Raises:
        ValueError: the segments are longer than ``steps``.
    """
    out = np.zeros((steps, len(NOOP)), np.int32)
    t = 0
    for action, repeat in segments:
        if t + repeat > steps:
            raise ValueError(f"segments last {t + repeat} steps; expected at most {steps}")
        out[t : t + repeat] = np.asarray(action, np.int32)
        t += repeat
    return out


def _no_reset(key):
    raise RuntimeError("library rollouts start from given states")


@functools.lru_cache(maxsize=8)
def make_rollout(static_params: StaticEnvParams, steps: int):
    """``rollout(states, actions, params) -> (outcome, end_step, closest)``, jitted, batched.

    ``states`` is a stacked batch ``[B]`` of ``EnvState``s, ``actions`` ``[B, steps, 6]``
    multi-discrete actions. Each episode runs ``steps`` env steps without resetting (``lax.scan``;
    ``vmap`` over the batch); ``outcome[b]`` is the sign of the sparse reward of the first
    terminal step (+1 goal, -1 red, 0 none), ``end_step[b]`` its index (``steps`` if none) and
    ``closest[b]`` the smallest green-blue centre distance reached up to then (for search).
    """
    from jaxlab.envs.kinetix.env import KinetixEnv

    env = KinetixEnv(
        static_params, reset_fn=_no_reset, auto_reset=False, observation_type="symbolic_flat"
    )
    key = jax.random.key(0)

    def one(state: EnvState, actions: Int[Array, "t 6"], params: EnvParams):
        def body(carry, xs):
            s, outcome, end, closest = carry
            t, a = xs
            _, s, _, term, _, info = env.step_env(key, s, a, params)
            first = (end == steps) & term
            sign = jnp.where(info["solved"], 1, -1)
            outcome = jnp.where(first, sign, outcome)
            live = end == steps
            closest = jnp.where(live, jnp.minimum(closest, info["distance"]), closest)
            end = jnp.where(first, t, end)
            return (s, outcome, end, closest), None

        init = (state, jnp.int32(0), jnp.int32(steps), jnp.float32(jnp.inf))
        (_, outcome, end, closest), _ = jax.lax.scan(body, init, (jnp.arange(steps), actions))
        return outcome, end, closest

    return jit(jax.vmap(one, in_axes=(0, 0, None)))


def solve_outcomes(
    states: EnvState, actions: Int[ArrayLike, "b t 6"], static_params: StaticEnvParams, params=None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run ``make_rollout`` on a stacked batch; ``(outcome, end_step, closest)`` as NumPy."""
    params = EnvParams() if params is None else params
    steps = int(actions.shape[1])
    out = make_rollout(static_params, steps)(states, jnp.asarray(actions), params)
    return tuple(np.asarray(x) for x in out)


def _stack(states: Sequence[EnvState]) -> EnvState:
    return jax.tree.map(lambda *xs: jnp.stack(xs), *states)


def _alphabet(state: EnvState) -> list[tuple[int, ...]]:
    """Every multi-discrete action over the bindings this level uses."""
    joint = jax.device_get(state.sim.joint)
    thr = jax.device_get(state.sim.thruster)
    driven = joint.active & joint.motor_on & ~joint.is_fixed_joint
    motors = set(np.asarray(state.motor_bindings)[driven].tolist())
    thrusters = set(np.asarray(state.thruster_bindings)[thr.active].tolist())
    out = [()]
    for i in range(len(NOOP)):
        vals = (0,)
        if i < 4 and i in motors:
            vals = (0, 1, 2)
        if i >= 4 and i - 4 in thrusters:
            vals = (0, 1)
        out = [o + (v,) for o in out for v in vals]
    return out


def search_solution(
    key,
    name: str,
    *,
    candidates: int = 256,
    rounds: int = 6,
    segments: int = 16,
    elite: float = 0.1,
) -> list[tuple[tuple, int]] | None:
    """Cross-entropy search for piecewise-constant actions that solve library level ``name``.

    The episode is split into ``segments`` equal segments; each holds one action of the level's
    alphabet (every multi-discrete action over the bindings it uses) drawn from a per-segment
    categorical distribution, uniform at first (the first round also tries every constant
    sequence). Each round rolls out ``candidates`` sequences in
    one batch, ranks them by (solved, closest green-blue distance, +0.5 if red was touched) and
    moves the distributions towards the best ``elite`` fraction (smoothing 0.7). Returns the
    segments of the fastest solving sequence, merged and cut at its goal step; ``None`` if no
    round solves the level.
    """
    level = build_level(name)
    steps = int(level.params.max_timesteps)
    alphabet = np.asarray(_alphabet(level.state), np.int32)
    seg_len = -(-steps // segments)
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel()[-1])
    probs = np.full((segments, len(alphabet)), 1.0 / len(alphabet))
    states = _stack([level.state] * candidates)
    for r in range(rounds):
        idx = np.stack([rng.choice(len(alphabet), size=candidates, p=p) for p in probs], 1)
        if r == 0:  # the constant sequences first
            n = min(len(alphabet), candidates)
            idx[:n] = np.arange(n)[:, None]
        actions = np.repeat(alphabet[idx], seg_len, axis=1)[:, :steps]
        outcome, end, closest = solve_outcomes(states, actions, level.static_params, level.params)
        ok = np.flatnonzero(outcome == 1)
        if ok.size:
            best = int(ok[np.argmin(end[ok])])
            merged: list[tuple[tuple, int]] = []
            for t in range(int(end[best]) + 1):
                a = tuple(int(x) for x in actions[best, t])
                if merged and merged[-1][0] == a:
                    merged[-1] = (a, merged[-1][1] + 1)
                else:
                    merged.append((a, 1))
            return merged
        score = np.where(np.isfinite(closest), closest, 1e3) + 0.5 * (outcome == -1)
        top = idx[np.argsort(score)[: max(1, int(elite * candidates))]]
        freq = np.stack([np.bincount(top[:, k], minlength=len(alphabet)) for k in range(segments)])
        probs = 0.3 * probs + 0.7 * freq / freq.sum(1, keepdims=True)
    return None


def replay_size(
    size: str, solutions: dict[str, list] | None = None, *, from_files: bool = True
) -> dict[str, tuple[int, int, int]]:
    """Replay the solution and the no-op policy of every level of ``size`` in one batch.

    All levels of the size are stacked with their solutions and again with all-no-op actions
    (one ``make_rollout`` call: ``lax.scan`` over ``max_timesteps`` steps, ``vmap`` over the
    ``2 x levels`` episodes).

    Args:
        size: "s", "m" or "l".
        solutions: ``name -> segments`` (default ``load_solutions()``).
        from_files: start from the shipped JSON files (else from the builders).

    Returns:
        ``name -> (solution outcome, solution end step, no-op outcome)``; outcomes are +1 (goal),
        -1 (red) or 0 (none within ``max_timesteps``).
    """
    solutions = load_solutions() if solutions is None else solutions
    sel = names(size)
    static = StaticEnvParams.from_size(size)
    levels = [load_library_level(n) if from_files else build_level(n) for n in sel]
    steps = int(levels[0].params.max_timesteps)
    states = _stack([lv.state for lv in levels] * 2)
    sol = [expand_segments(solutions[n], steps) for n in sel]
    noop = [np.zeros((steps, len(NOOP)), np.int32)] * len(sel)
    outcome, end, _ = solve_outcomes(states, np.stack(sol + noop), static, levels[0].params)
    k = len(sel)
    return {n: (int(outcome[i]), int(end[i]), int(outcome[k + i])) for i, n in enumerate(sel)}


# ---------------------------------------------------------------------------------------------
# Writing and rendering the shipped files


def write_all(root: str | Path = LEVELS_DIR, *, force: bool = False) -> list[Path]:
    """Write every level's JSON file to ``<root>/<size>/<stem>.json``.

    A file with identical contents is left alone; one with different contents is only replaced
    when ``force``.

    Returns:
        The paths written.

    Raises:
        FileExistsError: a differing file exists and ``force`` is False (nothing after it is
            written).
    """
    written = []
    for name in names():
        level = build_level(name)
        path = Path(root) / f"{name}.json"
        text = json.dumps(level_to_json(*level))
        if path.exists():
            if path.read_text() == text:
                continue
            if not force:
                raise FileExistsError(
                    f"{path}: exists with different contents; pass --force to replace it"
                )
        path.parent.mkdir(parents=True, exist_ok=True)
        save_level(path, *level, overwrite=True)
        written.append(path)
    return written


def render_all(out_dir: str | Path, selected: Sequence[str] | None = None) -> list[Path]:
    """First frame of each level (full 500x500 resolution) as ``<out_dir>/<size>_<stem>.png``."""
    from jaxlab.envs.kinetix.render import make_render_pixels, save_png, to_image

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in selected or names():
        level = build_level(name)
        render = make_render_pixels(level.static_params, downscale=1)
        image = to_image(render(level.state, level.params))
        path = out_dir / f"{name.replace('/', '_')}.png"
        save_png(path, image)
        paths.append(path)
    return paths
