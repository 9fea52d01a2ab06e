"""The driving world as an environment (``DrivingWorld``, registered as ``"driving"``): reset from
a sampled scene, the ego's tracker and bicycle model, the neighbours' IDM, collisions, reward and
the planner's token observation (the package docstring describes them)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.core.config import ConfigError
from jaxlab.envs.base import Environment
from jaxlab.envs.driving import expert
from jaxlab.envs.driving.geometry import (
    box_axes,
    plan_steps,
    point_at,
    project,
    resample,
    sat_separation,
    to_frame,
)
from jaxlab.envs.driving.render import render_top_view
from jaxlab.envs.driving.scenes import LANE_WIDTH, sample_scene
from jaxlab.envs.driving.state import (
    DrivingParams,
    DrivingState,
    DrivingStatic,
    agents,
    neighbour_poses,
)
from jaxlab.envs.driving.vehicles import (
    AGENT_SPEEDS,
    CAR_LENGTH,
    CAR_WIDTH,
    WHEELBASE,
    agent_size,
    idm,
)
from jaxlab.envs.spaces import Box, Dict


class DrivingWorld(Environment):
    """The driving world of the package docstring (static sizes in ``static``)."""

    obs_is_function_of_state = True

    def __init__(self, static: DrivingStatic | None = None, auto_reset: bool = True):
        self.static = DrivingStatic() if static is None else static
        if not isinstance(self.static, DrivingStatic):
            raise ConfigError("static", static, "a DrivingStatic")
        self.auto_reset = bool(auto_reset)

    def __eq__(self, other):
        return (
            type(other) is type(self)
            and other.static == self.static
            and other.auto_reset == self.auto_reset
        )

    def __hash__(self):
        return hash((type(self).__name__, self.static, self.auto_reset))

    @property
    def default_params(self) -> DrivingParams:
        return DrivingParams()

    # ------------------------------------------------------------------ geometry of agents
    def neighbour_poses(
        self, state: DrivingState
    ) -> tuple[Float[Array, "N 2"], Float[Array, " N"]]:
        """World positions and headings of the neighbours."""
        return neighbour_poses(state)

    def agents(self, state: DrivingState) -> Float[Array, "A 4"]:
        """(x, y, heading, speed) of ego and neighbours (absent neighbours as they are)."""
        return agents(state)

    # ------------------------------------------------------------------ reset
    def reset_env(self, key: PRNGKeyArray, params: DrivingParams):
        sp = self.static
        n_nb, n_st = sp.n_neighbours, sp.n_static
        ks = jax.random.split(key, 10)
        scene = jnp.where(
            jnp.asarray(params.scene_type) < 0,
            jax.random.randint(ks[0], (), 0, 3),
            jnp.asarray(params.scene_type),
        ).astype(jnp.int32)
        out = sample_scene(ks[1], scene, n_nb, n_st)
        lanes_k, lvalid, routes, rprobs, ego_s, nb_lanes, nb_probs, nb_first, st, st_valid = out[
            :10
        ]
        light, speed_limit, has_limit = out[10]
        lanes, lens = jax.vmap(lambda p: resample(p, sp.lane_dense))(lanes_k)
        pad = sp.n_lanes - 6
        lanes = jnp.concatenate([lanes, jnp.zeros((pad,) + lanes.shape[1:])], 0)
        lens = jnp.concatenate([lens, jnp.ones(pad)])
        lvalid = jnp.concatenate([lvalid, jnp.zeros(pad, bool)])
        light = jnp.concatenate([light, jnp.full(pad, 3, jnp.int32)])
        speed_limit = jnp.concatenate([speed_limit, jnp.zeros(pad)])
        has_limit = jnp.concatenate([has_limit, jnp.zeros(pad, bool)])
        mode = jax.random.categorical(ks[2], jnp.log(rprobs + 1e-12)).astype(jnp.int32)
        route = routes[mode].astype(jnp.int32)
        ego_xy, ego_h = point_at(lanes[route], lens[route], jnp.asarray(ego_s))
        v_ego = jax.random.uniform(ks[3], (), minval=5.0, maxval=8.0)
        ego = jnp.concatenate([ego_xy, jnp.stack([ego_h, v_ego])])
        # neighbours: a random number, each on its own slot (10 m apart) ahead of the ego
        count = jax.random.randint(ks[4], (), 1, n_nb + 1)
        nb_valid = jnp.arange(n_nb) < count
        choice = jax.vmap(lambda k, p: jax.random.categorical(k, jnp.log(p + 1e-12)))(
            jax.random.split(ks[5], n_nb), nb_probs
        )
        nb_lane = jnp.take_along_axis(nb_lanes, choice[:, None], 1)[:, 0].astype(jnp.int32)
        jitter = jax.random.uniform(ks[6], (n_nb,), minval=-1.5, maxval=1.5)
        nb_s = nb_first + 11.0 * jnp.arange(n_nb) + jitter
        nb_v0 = jax.random.uniform(ks[7], (n_nb,), minval=4.0, maxval=9.0)
        # agent types (a key of their own, so an all-vehicle world draws what it always drew)
        k_type, k_speed = jax.random.split(jax.random.fold_in(key, 11))
        type_p = jnp.asarray(params.agent_type_probs, jnp.float32)
        nb_type = jax.random.categorical(k_type, jnp.log(type_p + 1e-12), shape=(n_nb,))
        nb_type = nb_type.astype(jnp.int32)
        lo, hi = (jnp.asarray(AGENT_SPEEDS, jnp.float32)[nb_type, i] for i in (0, 1))
        other_v0 = lo + (hi - lo) * jax.random.uniform(k_speed, (n_nb,))
        nb_v0 = jnp.where(nb_type == 0, nb_v0, other_v0)
        start_s, _ = project(lanes[route], lens[route], ego_xy)
        state = DrivingState(
            lanes=lanes.astype(jnp.float32),
            lane_len=lens.astype(jnp.float32),
            lane_valid=lvalid,
            lane_light=light.astype(jnp.int32),
            lane_speed_limit=speed_limit.astype(jnp.float32),
            lane_has_limit=has_limit,
            scene=scene,
            route=route,
            route_mode=mode,
            ego=ego.astype(jnp.float32),
            ego_acc=jnp.float32(0.0),
            ego_yaw_rate=jnp.float32(0.0),
            ego_v0=jax.random.uniform(ks[8], (), jnp.float32, 6.0, 10.0),
            ego_headway=jax.random.uniform(ks[9], (), jnp.float32, 0.6, 1.8),
            nb_lane=nb_lane,
            nb_s=nb_s.astype(jnp.float32),
            nb_v=nb_v0.astype(jnp.float32),
            nb_v0=nb_v0.astype(jnp.float32),
            nb_valid=nb_valid,
            nb_type=nb_type,
            static=st.astype(jnp.float32),
            static_valid=st_valid,
            past=jnp.zeros((sp.history, 1 + n_nb, 4), jnp.float32),
            t=jnp.int32(0),
            start_s=start_s.astype(jnp.float32),
        )
        # history: constant-velocity back-extrapolation of the initial poses
        ag = self.agents(state)
        back = (jnp.arange(sp.history)[::-1] * params.dt)[:, None]
        past_xy = ag[None, :, :2] - back[..., None] * (
            ag[None, :, 3:4] * jnp.stack([jnp.cos(ag[:, 2]), jnp.sin(ag[:, 2])], -1)[None]
        )
        past = jnp.concatenate(
            [past_xy, jnp.broadcast_to(ag[None, :, 2:], (sp.history,) + ag[:, 2:].shape)], -1
        )
        state = state.replace(past=past.astype(jnp.float32))
        return self.get_obs(state, params), state

    # ------------------------------------------------------------------ dynamics
    def _leader_gaps(
        self, xy: Float[Array, "A 2"], h: Float[Array, " A"], v: Float[Array, " A"], state
    ) -> tuple[Float[Array, " A"], Float[Array, " A"]]:
        """Bumper gap to, and speed of, the nearest agent or parked car ahead of each agent
        (within +-2 m laterally); a free road gives (100 m, own speed)."""
        n_a = xy.shape[0]
        valid_a = jnp.concatenate([jnp.ones(1, bool), state.nb_valid])
        oxy = jnp.concatenate([xy, state.static[:, :2]], 0)
        ov = jnp.concatenate([v, jnp.zeros(self.static.n_static)])
        ovalid = jnp.concatenate([valid_a, state.static_valid])
        alen = jnp.concatenate([jnp.full(1, CAR_LENGTH), agent_size(state.nb_type)[:, 0]])
        olen = jnp.concatenate([alen, state.static[:, 3]])
        fwd, lat = box_axes(h)
        d = oxy[None] - xy[:, None]
        lon = jnp.sum(d * fwd[:, None], -1)
        la = jnp.abs(jnp.sum(d * lat[:, None], -1))
        gap = lon - 0.5 * (alen[:, None] + olen[None])
        self_mask = jnp.eye(n_a, oxy.shape[0], dtype=bool)
        ok = (lon > 0) & (la < 2.0) & ovalid[None] & ~self_mask
        gap = jnp.where(ok, gap, 100.0)
        j = jnp.argmin(gap, -1)
        return jnp.take_along_axis(gap, j[:, None], 1)[:, 0], jnp.where(
            jnp.take_along_axis(ok, j[:, None], 1)[:, 0], ov[j], v
        )

    idm = staticmethod(idm)  # vehicles.idm, also reachable as DrivingWorld.idm

    def track(
        self, ego: Float[Array, " 4"], plan: Float[Array, "T 4"], dt: float | Array
    ) -> tuple[Float[Array, ""], Float[Array, ""]]:
        """Pure pursuit + speed control of the ego towards an ego-frame plan: (accel, steer).

        The desired speed is the plan's mean signed progress over its first three steps
        (:func:`geometry.plan_steps`: each step projected on the heading it starts from), at
        least 0: a point placed behind the previous one slows the ego down, never reads as speed.
        """
        plan_xy = jnp.nan_to_num(plan[:, :2])
        v = ego[3]
        _, progress = plan_steps(plan)
        v_des = jnp.maximum(jnp.mean(progress[:3]) / dt, 0.0)
        acc = jnp.clip(2.0 * (v_des - v), -6.0, 3.0)
        dist = jnp.linalg.norm(plan_xy, axis=-1)
        look = jnp.maximum(3.0, 0.8 * v)
        idx = jnp.argmax(jnp.where(dist >= look, 1.0, 0.0) - 1e-3 * jnp.arange(dist.shape[0]))
        idx = jnp.where(jnp.any(dist >= look), idx, dist.shape[0] - 1)
        target = plan_xy[idx]
        ld = jnp.maximum(jnp.linalg.norm(target), 1e-3)
        alpha = jnp.arctan2(target[1], jnp.maximum(target[0], 1e-3))
        steer = jnp.arctan(2 * WHEELBASE * jnp.sin(alpha) / ld)
        steer = jnp.where(target[0] > 0.1, steer, 0.0)
        return acc, jnp.clip(steer, -0.6, 0.6)

    def step_env(self, key, state: DrivingState, action, params: DrivingParams):
        del key
        dt = jnp.asarray(params.dt, jnp.float32)
        plan = jnp.asarray(action, jnp.float32)
        acc, steer = self.track(state.ego, plan, dt)
        x, y, h, v = state.ego
        v_new = jnp.clip(v + acc * dt, 0.0, 15.0)
        yaw_rate = v * jnp.tan(steer) / WHEELBASE
        ego = jnp.stack(
            [x + v * jnp.cos(h) * dt, y + v * jnp.sin(h) * dt, h + yaw_rate * dt, v_new]
        )
        ag = self.agents(state)
        gap, v_lead = self._leader_gaps(ag[:, :2], ag[:, 2], ag[:, 3], state)
        a_nb = self.idm(state.nb_v, state.nb_v0, gap[1:], v_lead[1:])
        nb_v = jnp.clip(state.nb_v + a_nb * dt, 0.0, 20.0)
        nb_s = jnp.minimum(state.nb_s + nb_v * dt, state.lane_len[state.nb_lane])
        new = state.replace(
            ego=ego.astype(jnp.float32),
            ego_acc=((v_new - v) / dt).astype(jnp.float32),
            ego_yaw_rate=yaw_rate.astype(jnp.float32),
            nb_s=nb_s.astype(jnp.float32),
            nb_v=nb_v.astype(jnp.float32),
            t=state.t + 1,
        )
        ag2 = self.agents(new)
        new = new.replace(past=jnp.concatenate([state.past[1:], ag2[None]], 0))
        ev = self.events(new, params)
        s_prev, _ = project(state.lanes[state.route], state.lane_len[state.route], state.ego[:2])
        progress = ev["route_s"] - s_prev
        reward = (progress / 10.0 - ev["collision"].astype(jnp.float32)).astype(jnp.float32)
        terminated = ev["collision"] | (ev["offroad_dist"] > params.offroad_limit)
        truncated = (new.t >= params.max_steps) & ~terminated
        info = {k: ev[k] for k in ("collision", "offroad_dist", "route_s", "min_separation")}
        info["scene"] = new.scene
        return self.get_obs(new, params), new, reward, terminated, truncated, info

    def events(self, state: DrivingState, params: DrivingParams) -> dict:
        """Collision (box overlap with a neighbour or parked car), distance outside the lanes
        (m beyond half a lane width from the nearest lane centre), route arc length, and the
        smallest box separation."""
        xy, h = self.neighbour_poses(state)
        car = jnp.array([CAR_LENGTH, CAR_WIDTH])
        sep_nb = sat_separation(
            state.ego[None, :2], state.ego[2:3], car[None], xy, h, agent_size(state.nb_type)
        )
        sep_st = sat_separation(
            state.ego[None, :2],
            state.ego[2:3],
            car[None],
            state.static[:, :2],
            state.static[:, 2],
            state.static[:, 3:5],
        )
        sep = jnp.concatenate(
            [jnp.where(state.nb_valid, sep_nb, 1e3), jnp.where(state.static_valid, sep_st, 1e3)]
        )
        d = jax.vmap(lambda p, n: project(p, n, state.ego[:2])[1])(state.lanes, state.lane_len)
        d = jnp.min(jnp.where(state.lane_valid, d, 1e3))
        route_s, _ = project(state.lanes[state.route], state.lane_len[state.route], state.ego[:2])
        return {
            "collision": jnp.min(sep) < 0.0,
            "min_separation": jnp.min(sep),
            "offroad_dist": jnp.maximum(d - 0.5 * LANE_WIDTH, 0.0),
            "route_s": route_s,
        }

    # ------------------------------------------------------------------ observation
    def _lane_tokens(self, poly, length, ego, start=-10.0):
        """(P, 8): x, y, cos, sin of P points from ``start`` to ``start`` + 60 m along the lane
        from the ego's projection, and the offsets (left - centre, right - centre) of the lane's
        boundaries (half a lane width beside the centre line), all in the ego frame."""
        s0, _ = project(poly, length, ego[:2])
        s = (s0 + (start + 10.0)) + jnp.linspace(-10.0, 50.0, self.static.lane_points)
        p, hd = point_at(poly, length, s)
        p = to_frame(p, ego[:2], ego[2])
        c, sn = jnp.cos(hd - ego[2]), jnp.sin(hd - ego[2])
        left = 0.5 * LANE_WIDTH * jnp.stack([-sn, c], -1)
        return jnp.concatenate([p, c[:, None], sn[:, None], left, -left], -1)

    def _neighbour_tokens(self, state: DrivingState, params: DrivingParams):
        """(N, history, 8) neighbour tokens, their per-step validity (N, history) and agent
        types (N, 3) one-hot; a neighbour beyond ``perception_range`` of the ego at a step is
        not observed at that step."""
        ego = state.ego
        past = state.past[:, 1:]  # (H, N, 4)
        pxy = to_frame(past[..., :2], ego[:2], ego[2])
        ph = past[..., 2] - ego[2]
        vel = past[..., 3:4] * jnp.stack([jnp.cos(ph), jnp.sin(ph)], -1)
        size = jnp.broadcast_to(agent_size(state.nb_type)[None], pxy.shape)
        nb = jnp.concatenate([pxy, jnp.cos(ph)[..., None], jnp.sin(ph)[..., None], vel, size], -1)
        rng = jnp.asarray(params.perception_range, jnp.float32)
        dist = jnp.linalg.norm(past[..., :2] - state.past[:, :1, :2], axis=-1)  # (H, N)
        step_valid = state.nb_valid[None] & ((rng <= 0) | (dist <= rng))
        nb = jnp.where(step_valid[..., None], nb, 0.0).transpose(1, 0, 2)
        types = jax.nn.one_hot(state.nb_type, 3) * state.nb_valid[:, None]
        return nb, step_valid.T, types

    def get_obs(self, state: DrivingState, params: DrivingParams) -> dict:
        ego = state.ego
        nb, step_valid, types = self._neighbour_tokens(state, params)
        nb_valid = step_valid[:, -1]
        cur_nb = nb[:, -1, :4]
        current = jnp.concatenate([jnp.array([[0.0, 0.0, 1.0, 0.0]]), cur_nb], 0)
        sxy = to_frame(state.static[:, :2], ego[:2], ego[2])
        sh = state.static[:, 2] - ego[2]
        static = jnp.concatenate(
            [sxy, jnp.cos(sh)[:, None], jnp.sin(sh)[:, None], state.static[:, 3:5]], -1
        )
        static = jnp.where(state.static_valid[:, None], static, 0.0)
        lanes = jax.vmap(lambda p, n: self._lane_tokens(p, n, ego))(state.lanes, state.lane_len)
        lanes = jnp.where(state.lane_valid[:, None, None], lanes, 0.0)
        # route lanes: consecutive 60 m windows of the route lane, padding past its end
        poly, length = state.lanes[state.route], state.lane_len[state.route]
        starts = -10.0 + 60.0 * jnp.arange(self.static.n_route)
        route = jax.vmap(lambda a: self._lane_tokens(poly, length, ego, a)[:, :4])(starts)
        s0, _ = project(poly, length, ego[:2])
        vis = jnp.asarray(params.route_visible, bool)
        route_valid = vis & (s0 + starts < length)
        light = jax.nn.one_hot(state.lane_light, 4) * state.lane_valid[:, None]
        has_limit = state.lane_has_limit & state.lane_valid
        return {
            "ego": jnp.stack([ego[3], state.ego_acc, state.ego_yaw_rate]).astype(jnp.float32),
            "current": current.astype(jnp.float32),
            "neighbours": nb.astype(jnp.float32),
            "neighbour_valid": nb_valid,
            "neighbour_step_valid": step_valid,
            "neighbour_types": (types * nb_valid[:, None]).astype(jnp.float32),
            "static": static.astype(jnp.float32),
            "static_valid": state.static_valid,
            "lanes": lanes[..., :4].astype(jnp.float32),
            "lane_valid": state.lane_valid,
            "lane_boundaries": lanes[..., 4:].astype(jnp.float32),
            "lane_traffic_light": light.astype(jnp.float32),
            "lane_speed_limit": jnp.where(has_limit, state.lane_speed_limit, 0.0),
            "lane_speed_limit_valid": has_limit,
            "route": jnp.where(route_valid[:, None, None], route, 0.0).astype(jnp.float32),
            "route_valid": route_valid,
        }

    def action_space(self, params=None) -> Box:
        return Box(-100.0, 100.0, (self.static.horizon, 4), jnp.float32)

    def observation_space(self, params=None) -> Dict:
        sp = self.static
        big = 1e4
        return Dict(
            {
                "ego": Box(-big, big, (3,), jnp.float32),
                "current": Box(-big, big, (1 + sp.n_neighbours, 4), jnp.float32),
                "neighbours": Box(-big, big, (sp.n_neighbours, sp.history, 8), jnp.float32),
                "neighbour_valid": Box(False, True, (sp.n_neighbours,), jnp.bool_),
                "neighbour_step_valid": Box(False, True, (sp.n_neighbours, sp.history), jnp.bool_),
                "neighbour_types": Box(0.0, 1.0, (sp.n_neighbours, 3), jnp.float32),
                "static": Box(-big, big, (sp.n_static, 6), jnp.float32),
                "static_valid": Box(False, True, (sp.n_static,), jnp.bool_),
                "lanes": Box(-big, big, (sp.n_lanes, sp.lane_points, 4), jnp.float32),
                "lane_valid": Box(False, True, (sp.n_lanes,), jnp.bool_),
                "lane_boundaries": Box(-big, big, (sp.n_lanes, sp.lane_points, 4), jnp.float32),
                "lane_traffic_light": Box(0.0, 1.0, (sp.n_lanes, 4), jnp.float32),
                "lane_speed_limit": Box(0.0, big, (sp.n_lanes,), jnp.float32),
                "lane_speed_limit_valid": Box(False, True, (sp.n_lanes,), jnp.bool_),
                "route": Box(-big, big, (sp.n_route, sp.lane_points, 4), jnp.float32),
                "route_valid": Box(False, True, (sp.n_route,), jnp.bool_),
            }
        )

    # ------------------------------------------------------------------ the rule-based expert
    def expert_plan(self, state: DrivingState, params: DrivingParams) -> Float[Array, "T 4"]:
        """The rule-based expert's ego-frame plan (horizon, 4): :func:`expert.expert_plan`."""
        return expert.expert_plan(state, params, self.static)

    # ------------------------------------------------------------------ rendering
    def render(
        self,
        state: DrivingState,
        plan: np.ndarray | None = None,
        predictions: np.ndarray | None = None,
        *,
        size: int = 160,
        extent: float = 40.0,
    ) -> np.ndarray:
        """An RGB uint8 top view of ``state``: :func:`render.render_top_view`."""
        return render_top_view(state, plan, predictions, size=size, extent=extent)


def make_driving(
    auto_reset=True,
    scene_type=-1,
    max_steps=60,
    route_visible=True,
    n_neighbours=4,
    horizon=16,
    history=5,
    n_route=1,
    agent_type_probs=(1.0, 0.0, 0.0),
    perception_range=0.0,
):
    """Registry factory of ``"driving"``: ``(DrivingWorld, DrivingParams)``."""
    if scene_type not in (-1, 0, 1, 2):
        raise ConfigError("scene_type", scene_type, "-1 (random), 0, 1 or 2")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ConfigError("max_steps", max_steps, "an int >= 1")
    check_world_params(agent_type_probs, perception_range)
    static = DrivingStatic(
        n_neighbours=n_neighbours, horizon=horizon, history=history, n_route=n_route
    )
    env = DrivingWorld(static, auto_reset=auto_reset)
    params = env.default_params.replace(
        scene_type=scene_type,
        max_steps=max_steps,
        route_visible=bool(route_visible),
        agent_type_probs=tuple(float(p) for p in agent_type_probs),
        perception_range=float(perception_range),
    )
    return env, params


def check_world_params(agent_type_probs, perception_range) -> None:
    """Raise ``ConfigError`` naming the field for bad agent-type probabilities or range."""
    probs = tuple(agent_type_probs)
    if len(probs) != 3 or any(not p >= 0 for p in probs) or not sum(probs) > 0:
        raise ConfigError(
            "agent_type_probs", agent_type_probs, "3 floats >= 0 (vehicle, pedestrian, bicycle)"
        )
    if not (np.isfinite(perception_range) and perception_range >= 0):
        raise ConfigError("perception_range", perception_range, "a distance >= 0 (m; 0: all)")
