"""A small procedurally generated open world seen egocentrically in pixels (LS-Imagine's testbed).

MineDojo cannot run here, so this env keeps what LS-Imagine's mechanisms need from it: a first-
person view in which a distant target is *small* (a few pixels) and grows as the agent approaches,
so that zooming into the image region of the target approximates moving towards it.

World: a square arena ``[0, L]^2`` holding one *target* (a resource to collect, as in the paper's
"harvest log") and ``num_distractors`` grey rocks, all upright cylinders of radius ``r`` and
height ``1``. The agent stands at ``p`` (eye height ``0.5``) facing ``heading``. At reset the
agent is in the middle of the arena and the target is drawn at a distance ``U[d_min, d_max]`` and
a bearing inside the central two thirds of the field of view: it is visible, and far on the
``"hard"`` variant (``d in [6, 10]``: a 2-4 pixel sliver on 32x32) and near on ``"easy"``
(``d in [1.5, 3]``).

Actions (``Discrete(5)``): ``0`` no-op, ``1`` move forward ``0.5``, ``2`` turn left, ``3`` turn
right (``pi/8`` each), ``4`` interact. Interacting collects the target when it is within reach
(``|p - target| < 1.2`` and ``|bearing| < fov/4``): reward ``1`` and ``terminated``; every other
step gives ``0`` (sparse success reward). Episodes are truncated after ``max_steps`` steps.

Rendering (a per-column ray caster, ``render``): column ``c`` of ``S`` casts a ray at angle
``heading + fov (1/2 - (c + 1/2)/S)``; the nearest cylinder hit at distance ``t`` (corrected to
the view plane, ``t cos(dθ)``) spans rows ``[S/2 - (1 - 0.5) f/t, S/2 + 0.5 f/t]`` with focal
length ``f = S / (2 tan(fov/2))``; sky above the horizon, grass below, colours fade with distance.
Observations are uint8 ``[S, S, 3]``, ``S`` in ``{32, 64}``.

``info`` (for analysis only): ``target`` (x, y), ``target_distance``, ``agent`` (x, y),
``success`` and ``relevance`` (``exp(-d/2)`` with the target in view, else 0: the label of the
MineCLIP stand-in, see ``jaxlab.rl.world_models.affordance``). ``zoom(image, centre, size)`` crops a square box around ``centre`` (pixel row,
column) and resizes it back to ``S x S`` (bilinear), the operator of LS-Imagine's affordance
labels and jumpy transitions. Registered as ``"open-world"``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, UInt8

from jaxlab.core.config import ConfigError
from jaxlab.envs.base import Environment
from jaxlab.envs.spaces import Box, Discrete

NUM_ACTIONS = 5
NOOP, FORWARD, LEFT, RIGHT, INTERACT = range(NUM_ACTIONS)
OBS_SIZES = (32, 64)
VARIANTS = {"easy": (1.5, 3.0), "hard": (6.0, 10.0)}
FOV = float(np.pi / 3)
TURN = float(np.pi / 8)
STEP = 0.5
REACH = 1.2
RADIUS = 0.35
EYE = 0.5
SKY = np.array([135, 190, 235], np.float32)
GRASS = np.array([70, 140, 60], np.float32)
FOG = np.array([180, 200, 190], np.float32)
TARGET_COLOUR = np.array([170, 80, 30], np.float32)
ROCK_COLOUR = np.array([110, 110, 115], np.float32)


@struct.dataclass
class OpenWorldState:
    """Attributes: agent ``pos`` float32[2] and ``heading`` (radians), object centres ``objects``
    float32[1 + k, 2] (row 0 is the target), ``t`` steps taken (leading batch axes allowed)."""

    pos: Float[Array, "*b 2"]
    heading: Float[Array, "*b"]
    objects: Float[Array, "*b n 2"]
    t: Int[Array, "*b"]


@struct.dataclass
class OpenWorldParams:
    """Traced parameters: target distance range ``d_min``/``d_max`` and ``max_steps`` (Python
    numbers or arrays, e.g. one per vmapped env)."""

    d_min: float | Array = 6.0
    d_max: float | Array = 10.0
    max_steps: int | Array = 64


@dataclasses.dataclass(frozen=True)
class StaticOpenWorld:
    """Shape-fixing parameters: observation side ``obs_size`` and ``num_distractors`` rocks."""

    obs_size: int = 32
    num_distractors: int = 4
    arena: float = 22.0

    def __post_init__(self):
        if self.obs_size not in OBS_SIZES:
            raise ConfigError("obs_size", self.obs_size, f"one of {OBS_SIZES}")
        n = self.num_distractors
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ConfigError("num_distractors", n, "an int >= 0")


def render(
    pos: Float[Array, " 2"],
    heading: Float[Array, ""],
    objects: Float[Array, "n 2"],
    size: int,
    arena: float,
) -> UInt8[Array, "S S 3"]:
    """The egocentric ``size x size`` RGB view (module docstring); row 0 of ``objects`` is the
    target."""
    f = size / (2.0 * np.tan(FOV / 2))
    cols = (jnp.arange(size) + 0.5) / size
    dtheta = FOV * (0.5 - cols)
    ang = heading + dtheta
    u = jnp.stack([jnp.cos(ang), jnp.sin(ang)], -1)  # [S, 2]
    d = objects - pos[None]  # [n, 2]
    b = u @ d.T  # [S, n] projection of each centre on each ray
    perp2 = jnp.sum(d * d, -1)[None, :] - b**2
    hit = (perp2 < RADIUS**2) & (b > 0)
    t = b - jnp.sqrt(jnp.maximum(RADIUS**2 - perp2, 0.0))
    t = jnp.maximum(t, 0.05)
    t = jnp.where(hit, t, jnp.inf)
    nearest = jnp.argmin(t, axis=1)
    tn = jnp.min(t, axis=1) * jnp.cos(dtheta)  # [S], inf when nothing is hit
    any_hit = jnp.isfinite(tn)
    tn_safe = jnp.where(any_hit, tn, 1.0)
    top = size / 2 - (1.0 - EYE) * f / tn_safe
    bottom = size / 2 + EYE * f / tn_safe
    rows = jnp.arange(size)[:, None] + 0.5  # [S, 1]
    is_obj = any_hit[None, :] & (rows >= top[None, :]) & (rows <= bottom[None, :])
    obj_colour = jnp.where(
        (nearest == 0)[:, None], TARGET_COLOUR[None], ROCK_COLOUR[None]
    )  # [S, 3]
    fade = jnp.clip(tn_safe / arena, 0.0, 1.0)[:, None] * 0.6
    obj_colour = obj_colour * (1 - fade) + FOG[None] * fade
    # ground: the distance of the floor point seen by row r is EYE f / (r - S/2)
    below = rows - size / 2
    floor_t = EYE * f / jnp.maximum(below, 1e-3)
    gfade = (jnp.clip(floor_t / arena, 0.0, 1.0) * 0.6)[..., None]  # [S, 1, 1]
    ground = GRASS[None, None] * (1 - gfade) + FOG[None, None] * gfade
    back = jnp.where((below > 0)[..., None], ground, SKY[None, None])  # [S, 1, 3]
    img = jnp.where(is_obj[..., None], obj_colour[None, :, :], back)
    return jnp.clip(jnp.round(img), 0, 255).astype(jnp.uint8)


def zoom(
    image: Float[Array, "S S C"] | UInt8[Array, "S S C"],
    centre: Float[Array, " 2"],
    box: Float[Array, ""] | float,
) -> Float[Array, "S S C"]:
    """Crop the ``box x box`` square centred at pixel ``centre`` (row, column) and resize it to
    the full ``S x S`` (bilinear, ``jax.image.scale_and_translate``; traced box and centre).
    Output float32 in the input's value range."""
    s = image.shape[0]
    scale = s / jnp.asarray(box, jnp.float32)
    centre = jnp.asarray(centre, jnp.float32)
    translation = s / 2 - centre * scale
    return jax.image.scale_and_translate(
        image.astype(jnp.float32),
        (s, s, image.shape[-1]),
        (0, 1),
        jnp.stack([scale, scale]),
        translation,
        method="linear",
        antialias=True,
    )


def bearing(state: OpenWorldState) -> Float[Array, ""]:
    """Angle of the target relative to the heading, wrapped to ``(-pi, pi]``."""
    d = state.objects[0] - state.pos
    a = jnp.arctan2(d[1], d[0]) - state.heading
    return jnp.arctan2(jnp.sin(a), jnp.cos(a))


class OpenWorld(Environment):
    """The egocentric open-world collection task (module docstring)."""

    obs_is_function_of_state = True

    def __init__(self, static: StaticOpenWorld = StaticOpenWorld(), auto_reset: bool = True):
        self.static = static
        self.auto_reset = bool(auto_reset)

    def __eq__(self, other) -> bool:
        return (
            type(other) is OpenWorld
            and other.static == self.static
            and other.auto_reset == self.auto_reset
        )

    def __hash__(self) -> int:
        return hash(("OpenWorld", self.static, self.auto_reset))

    @property
    def default_params(self) -> OpenWorldParams:
        return OpenWorldParams()

    def get_obs(self, state: OpenWorldState, params: OpenWorldParams):
        s = self.static
        return render(state.pos, state.heading, state.objects, s.obs_size, s.arena)

    def reset_env(self, key: PRNGKeyArray, params: OpenWorldParams):
        k_h, k_d, k_b, k_r = jax.random.split(key, 4)
        L = self.static.arena
        pos = jnp.array([L / 2, L / 2], jnp.float32)
        heading = jax.random.uniform(k_h, (), minval=-np.pi, maxval=np.pi)
        dist = jax.random.uniform(k_d, (), minval=params.d_min, maxval=params.d_max)
        rel = jax.random.uniform(k_b, (), minval=-FOV / 3, maxval=FOV / 3)
        target = pos + dist * jnp.stack([jnp.cos(heading + rel), jnp.sin(heading + rel)])
        k = self.static.num_distractors
        # rocks: uniform in the arena, kept at least 2 from the agent and the target
        r = jax.random.uniform(k_r, (k, 2), minval=1.0, maxval=L - 1.0)
        push = jnp.where(jnp.linalg.norm(r - pos[None], axis=-1, keepdims=True) < 2.0, 3.0, 0.0)
        r = jnp.clip(r + push, 1.0, L - 1.0)
        near_t = jnp.linalg.norm(r - target[None], axis=-1, keepdims=True) < 2.0
        r = jnp.where(near_t, jnp.clip(2 * pos[None] - r, 1.0, L - 1.0), r)
        objects = jnp.concatenate([target[None], r], 0).astype(jnp.float32)
        state = OpenWorldState(
            pos=pos, heading=heading.astype(jnp.float32), objects=objects, t=jnp.int32(0)
        )
        return self.get_obs(state, params), state

    def step_env(self, key, state: OpenWorldState, action, params: OpenWorldParams):
        del key
        a = jnp.asarray(action, jnp.int32)
        heading = state.heading + jnp.where(a == LEFT, TURN, 0.0) - jnp.where(a == RIGHT, TURN, 0.0)
        heading = jnp.arctan2(jnp.sin(heading), jnp.cos(heading)).astype(jnp.float32)
        step = jnp.where(a == FORWARD, STEP, 0.0)
        L = self.static.arena
        pos = jnp.clip(
            state.pos + step * jnp.stack([jnp.cos(heading), jnp.sin(heading)]), 0.5, L - 0.5
        ).astype(jnp.float32)
        new = state.replace(pos=pos, heading=heading, t=state.t + 1)
        dist = jnp.linalg.norm(new.objects[0] - pos)
        success = (a == INTERACT) & (dist < REACH) & (jnp.abs(bearing(new)) < FOV / 4)
        truncated = (new.t >= params.max_steps) & ~success
        reward = jnp.where(success, 1.0, 0.0).astype(jnp.float32)
        info = {
            "success": success,
            "target": new.objects[0],
            "target_distance": dist.astype(jnp.float32),
            "agent": pos,
            "relevance": relevance(new),
        }
        return self.get_obs(new, params), new, reward, success, truncated, info

    def action_space(self, params=None) -> Discrete:
        return Discrete(NUM_ACTIONS)

    def observation_space(self, params=None) -> Box:
        s = self.static.obs_size
        return Box(0, 255, (s, s, 3), jnp.uint8)


def oracle_action(state: OpenWorldState) -> Int[Array, ""]:
    """A scripted expert: turn towards the target, walk, interact when in reach (for tests and
    the benchmark's upper bound)."""
    b = bearing(state)
    dist = jnp.linalg.norm(state.objects[0] - state.pos)
    act = jnp.where(b > TURN / 2, LEFT, jnp.where(b < -TURN / 2, RIGHT, FORWARD))
    return jnp.where((dist < REACH - 0.2) & (jnp.abs(b) < FOV / 4), INTERACT, act).astype(jnp.int32)


def relevance(state: OpenWorldState) -> Float[Array, ""]:
    """Ground-truth task relevance of the view, ``exp(-d/2)`` when the target is in the field of
    view (0 otherwise): the supervision of the small similarity model that stands in for MineCLIP
    in LS-Imagine's affordance labels (``info["relevance"]``)."""
    dist = jnp.linalg.norm(state.objects[0] - state.pos)
    return jnp.where(jnp.abs(bearing(state)) < FOV / 2, jnp.exp(-dist / 2), 0.0).astype(jnp.float32)


def target_in_view(state: OpenWorldState) -> Bool[Array, ""]:
    """Whether the target's centre lies inside the field of view."""
    return jnp.abs(bearing(state)) < FOV / 2


def make_open_world(
    variant: str = "hard",
    obs_size: int = 32,
    num_distractors: int = 4,
    max_steps: int = 64,
    auto_reset: bool = True,
):
    """Registry factory: ``(OpenWorld, OpenWorldParams)`` for ``variant`` ``"easy"``/``"hard"``."""
    if variant not in VARIANTS:
        raise ConfigError("variant", variant, f"one of {sorted(VARIANTS)}")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ConfigError("max_steps", max_steps, "an int >= 1")
    static = StaticOpenWorld(obs_size=obs_size, num_distractors=num_distractors)
    d_min, d_max = VARIANTS[variant]
    return OpenWorld(static, auto_reset=auto_reset), OpenWorldParams(d_min, d_max, max_steps)
