"""The driving world's sizes (static), parameters (traced) and state, and where its agents are."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Bool, Float, Int

from jaxlab.core.config import ConfigError
from jaxlab.envs.driving.geometry import point_at


@dataclasses.dataclass(frozen=True)
class DrivingStatic:
    """Static (shape-fixing) sizes of the world.

    Attributes:
        n_neighbours: neighbour capacity N.
        n_static: parked-car capacity S.
        n_lanes: lane capacity L (6 are used by the scenes; at least 6).
        lane_points: points P per lane token.
        lane_dense: points of the internal lane polylines.
        history: past steps of the neighbour tokens (including the current one).
        horizon: future steps of a plan (the action) and of the planner's trajectories.
        n_route: route lane tokens R: consecutive 60 m windows of the ego's route lane (the
            original feeds up to 25 route lanes); windows past the route's end are padding.
    """

    n_neighbours: int = 4
    n_static: int = 2
    n_lanes: int = 6
    lane_points: int = 16
    lane_dense: int = 96
    history: int = 5
    horizon: int = 16
    n_route: int = 1

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f.name, v, "a positive int")
        if self.n_lanes < 6:
            raise ConfigError("n_lanes", self.n_lanes, "an int >= 6 (the scenes use 6 lanes)")
        if self.n_static < 1 or self.n_neighbours < 1:
            raise ConfigError("n_neighbours", self.n_neighbours, "an int >= 1")


@struct.dataclass
class DrivingParams:
    """Traced parameters.

    Attributes:
        scene_type: 0 straight, 1 intersection, 2 merge, -1 uniform over the three.
        max_steps: episode length in steps of ``dt``.
        route_visible: whether the route token is given to the planner.
        dt: step (s).
        offroad_limit: distance (m) from every lane centre that ends the episode.
        agent_type_probs: probabilities of a neighbour being a vehicle, a pedestrian or a
            bicycle (``vehicles.AGENT_TYPES``; sizes and desired speeds per type); all vehicles
            by default.
        perception_range: the distance (m) from the ego within which a neighbour is observed at
            a history step (the per-step validity of its token; a neighbour out of range now is
            not observed at all); 0 observes every neighbour at every step.
    """

    scene_type: int | Array = -1
    max_steps: int | Array = 60
    route_visible: bool | Array = True
    dt: float | Array = 0.1
    offroad_limit: float | Array = 6.0
    agent_type_probs: tuple[float, float, float] | Array = (1.0, 0.0, 0.0)
    perception_range: float | Array = 0.0


@struct.dataclass
class DrivingState:
    """World state (one scene).

    Attributes:
        lanes: (L, M, 2) lane polylines; ``lane_len`` (L,) their lengths; ``lane_valid`` (L,).
        lane_light (L,): traffic-light state (``scenes.LIGHT_STATES``); lane_speed_limit (L,) m/s
            where ``lane_has_limit`` (L,).
        scene: scene type; ``route`` the ego's route lane; ``route_mode`` its index among the
            scene's ego routes (0 left / keep, 1 straight / change, 2 right).
        ego: (4,) x, y, heading, speed; ``ego_acc``, ``ego_yaw_rate`` the last controls' effect.
        ego_v0, ego_headway: the expert driver's style in this scene (IDM desired speed in
            [6, 10] m/s and time headway in [0.6, 1.8] s; hidden from the observation, so the
            expert's future is uncertain given what a planner sees, as a human driver's is).
        nb_lane (N,), nb_s (N,), nb_v (N,), nb_v0 (N,) desired speed, nb_valid (N,), nb_type (N,)
            agent type (``vehicles.AGENT_TYPES``).
        static: (S, 5) x, y, heading, length, width; ``static_valid`` (S,).
        past: (history, 1 + N, 4) x, y, heading, speed of ego and neighbours, oldest first.
        t: steps taken; ``start_s`` the ego's arc length on its route at reset.
        (Annotations allow leading batch axes: states are vmapped over scenes.)
    """

    lanes: Float[Array, "*b L M 2"]
    lane_len: Float[Array, "*b L"]
    lane_valid: Bool[Array, "*b L"]
    lane_light: Int[Array, "*b L"]
    lane_speed_limit: Float[Array, "*b L"]
    lane_has_limit: Bool[Array, "*b L"]
    scene: Int[Array, "*b"]
    route: Int[Array, "*b"]
    route_mode: Int[Array, "*b"]
    ego: Float[Array, "*b 4"]
    ego_acc: Float[Array, "*b"]
    ego_yaw_rate: Float[Array, "*b"]
    ego_v0: Float[Array, "*b"]
    ego_headway: Float[Array, "*b"]
    nb_lane: Int[Array, "*b N"]
    nb_s: Float[Array, "*b N"]
    nb_v: Float[Array, "*b N"]
    nb_v0: Float[Array, "*b N"]
    nb_valid: Bool[Array, "*b N"]
    nb_type: Int[Array, "*b N"]
    static: Float[Array, "*b S 5"]
    static_valid: Bool[Array, "*b S"]
    past: Float[Array, "*b H A 4"]
    t: Int[Array, "*b"]
    start_s: Float[Array, "*b"]


def neighbour_poses(state: DrivingState) -> tuple[Float[Array, "N 2"], Float[Array, " N"]]:
    """World positions and headings of the neighbours."""
    poly = state.lanes[state.nb_lane]
    length = state.lane_len[state.nb_lane]
    return jax.vmap(point_at)(poly, length, state.nb_s)


def agents(state: DrivingState) -> Float[Array, "A 4"]:
    """(x, y, heading, speed) of ego and neighbours (absent neighbours as they are)."""
    xy, h = neighbour_poses(state)
    nb = jnp.concatenate([xy, h[:, None], state.nb_v[:, None]], -1)
    return jnp.concatenate([state.ego[None], nb], 0)
