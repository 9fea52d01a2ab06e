"""A small driving world in JAX: the Diffusion Planner's closed-loop simulator (Zheng et al.,
ICLR 2025, §3).

nuPlan is not available here, so the planner is trained and evaluated in this procedurally
generated world. Everything is a fixed-capacity struct of arrays (``DrivingStatic``), so ``reset``
and ``step`` jit and vmap over scenes. Registered as ``"driving"``.

Scenes (``scene_type``; -1 draws one uniformly):

- 0 ``straight``: a two-lane road along x; lanes 0 and 1, and the lane-change routes 0 -> 1 and
  1 -> 0 as their own polylines. The ego starts on lane 0 and either keeps its lane or changes
  (probability 1/2 each; a parked car on lane 0 (probability 1/2) forces the change).
- 1 ``intersection``: an approach from the south with three routes (left, straight, right, one
  third each), the cross road and the oncoming lane; a parked car may stand beside the approach.
  The ego starts 16 m before the junction, the first neighbour 4 m before it (its turn is not
  yet visible: the neighbours' behaviour modes).
- 2 ``merge``: an on-ramp joining a two-lane main road; the ego starts on the ramp.

Lanes are centre-line polylines of ``lane_dense`` points (world frame, equal arc-length spacing).
Neighbours follow a lane (chosen at random among the scene's routes for their slot: the behaviour
modes) with the intelligent driver model (IDM, Treiber et al. 2000)

    a = a_max [1 - (v / v0)^4 - (s*(v, dv) / gap)^2],  s* = s0 + v T + v dv / (2 sqrt(a_max b)),

whose leader is the nearest agent or parked car ahead within a lateral band. The ego is a
kinematic bicycle (wheelbase 2.7 m) tracking the action: a planned trajectory of ``horizon``
future states (x, y, cos h, sin h) at ``dt`` in the ego frame, with pure pursuit for steering
(look-ahead max(3, 0.8 v) m along the plan) and a proportional speed controller towards the plan's
speed. One step is ``dt`` = 0.1 s (planning at 10 Hz).

Observation (ego frame: ego at the origin heading +x), the planner's token format:

- ``ego`` (3,): speed, acceleration, yaw rate;
- ``current`` (1 + N, 4): current (x, y, cos, sin) of the ego (always (0, 0, 1, 0)) and neighbours;
- ``neighbours`` (N, history, 8): past states (x, y, cos, sin, vx, vy, length, width), oldest
  first, zero where not observed; ``neighbour_step_valid`` (N, history) whether each step is
  observed (within ``params.perception_range`` of the ego; 0: always), ``neighbour_valid`` (N,)
  its current step; ``neighbour_types`` (N, 3) one-hot vehicle / pedestrian / bicycle (drawn with
  ``params.agent_type_probs``, each type with its own box size and desired speeds);
- ``static`` (S, 6): parked cars (x, y, cos, sin, length, width); ``static_valid`` (S,);
- ``lanes`` (L, P, 4): P points (x, y, cos, sin) of every lane from 10 m behind to 50 m ahead of
  the ego's projection; ``lane_valid`` (L,); ``lane_boundaries`` (L, P, 4) the offsets of the
  left and right boundaries from those points (half a lane width to either side);
  ``lane_traffic_light`` (L, 4) one-hot green / yellow / red / unknown (only the intersection
  has signals); ``lane_speed_limit`` (L,) m/s where ``lane_speed_limit_valid`` (L,);
- ``route`` (R, P, 4): R = ``n_route`` consecutive 60 m windows of the ego's route lane, the
  first as its lane token; ``route_valid`` (R,) False past the route's end and everywhere when
  ``params.route_visible`` is False (the planner must then infer the route: multimodal plans).

Reward: progress along the route (m) / 10 per step, -1 on collision. Terminated on a collision
(separating-axis overlap of the oriented boxes) or when the ego is more than ``offroad_limit`` m
from every lane centre; truncated after ``max_steps``.

The modules: ``state`` (sizes, parameters, state), ``geometry`` (polylines, frames, box
separation), ``scenes`` (the generators), ``vehicles`` (car size, IDM), ``world`` (the
environment), ``expert`` (the rule-based driver), ``render`` (a top view), ``evaluation`` (expert
logs, closed-loop score) and ``perturbation`` (the ego state perturbation of training samples).
"""

from jaxlab.envs.driving.expert import expert_plan
from jaxlab.envs.driving.geometry import (
    from_frame,
    plan_steps,
    point_at,
    project,
    resample,
    sat_separation,
    to_frame,
)
from jaxlab.envs.driving.scenes import LANE_WIDTH, LIGHT_STATES, SCENE_TYPES
from jaxlab.envs.driving.state import DrivingParams, DrivingState, DrivingStatic
from jaxlab.envs.driving.vehicles import AGENT_SIZES, AGENT_TYPES, CAR_LENGTH, CAR_WIDTH, WHEELBASE
from jaxlab.envs.driving.world import DrivingWorld, make_driving

__all__ = [
    "AGENT_SIZES",
    "AGENT_TYPES",
    "CAR_LENGTH",
    "CAR_WIDTH",
    "LANE_WIDTH",
    "LIGHT_STATES",
    "SCENE_TYPES",
    "WHEELBASE",
    "DrivingParams",
    "DrivingState",
    "DrivingStatic",
    "DrivingWorld",
    "expert_plan",
    "from_frame",
    "make_driving",
    "plan_steps",
    "point_at",
    "project",
    "resample",
    "sat_separation",
    "to_frame",
]
