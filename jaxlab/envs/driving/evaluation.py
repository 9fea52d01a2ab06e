"""Expert logs and closed-loop evaluation in the driving world (:mod:`jaxlab.envs.driving.world`).

- :func:`expert_logs`: roll the rule-based expert out on many scenes (one ``vmap``, one
  ``lax.scan``) and cut the log into planner training samples: the scene tokens at step k and the
  agents' logged future k+1 .. k+T in the ego frame of step k, with neighbour validity.
- :func:`closed_loop`: replan at every 0.1 s step (10 Hz) with an injected planner
  ``plan_fn(key, obs, state) -> (B, T, 4)`` ego-frame plans, or joint (B, A, T, 4) trajectories
  whose agent 0 is executed (learned planners read only ``obs``; the privileged rule-based expert
  reads the world ``state``), the world's tracker executing them; returns
  per-scene nuPlan-style metrics and the combined score.

Score (in the spirit of nuPlan's closed-loop score, CLS-NR; nuPlan ``metrics_description.md``),
per scenario:

    score = no_at_fault_collision * drivable_compliance * making_progress
            * (5 ttc_ok + 5 progress + 4 speed_ok + 2 comfortable) / 16

- at-fault collision: a box overlap with a neighbour or parked car while the ego moves
  (v > 0.5 m/s; being hit while stopped is not at fault) -- nuPlan's fault rules are richer;
- drivable compliance: the ego centre never more than 0.3 m beyond half a lane width from every
  lane centre;
- progress: ego route progress / the expert's on the same scenario, clipped to [0, 1]; making
  progress: that ratio >= 0.2;
- ttc_ok: no step at which, extrapolating ego and neighbours at constant velocity, the boxes
  overlap within 0.95 s (sampled every 0.1 s);
- speed_ok: ego speed never above 12 m/s; comfortable: longitudinal acceleration in
  [-4.05, 2.40] m/s^2, |lateral acceleration| <= 4.89 m/s^2 and |jerk| <= 4.13 m/s^3 (nuPlan's
  bounds) at every step after the first two.

Plan quality (not in the score): ``jump_rate``, the share of a scenario's replanning steps whose
executed plan has a step longer than 2 m per 0.1 s (:data:`JUMP_STEP`; 0 for the expert);
``backward_rate``, the share whose plan has a step going backwards along its own heading by more
than 0.1 m (:data:`BACKWARD_STEP`; :func:`geometry.plan_steps`); ``max_jump``, the longest plan
step (m); ``offroad_time``, the share of steps more than 0.3 m off the lanes.

The score is averaged over scenarios and reported x100 per scenario type. Open loop,
:func:`ade_fde` compares plans with the logged expert futures.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.envs.driving.geometry import plan_steps, project, sat_separation, to_frame
from jaxlab.envs.driving.scenes import SCENE_TYPES
from jaxlab.envs.driving.state import DrivingParams, DrivingState
from jaxlab.envs.driving.vehicles import CAR_LENGTH, CAR_WIDTH, agent_size
from jaxlab.envs.driving.world import DrivingWorld

#: a plan step longer than this (m per 0.1 s, 72 km/h over the world's 15 m/s cap) is a jump
JUMP_STEP = 2.0
#: a plan step with signed progress below this (m per 0.1 s, 1 m/s backwards) is a backward step
BACKWARD_STEP = -0.1

PlanFn = Callable[[PRNGKeyArray, dict, object], Float[Array, "B T 4"]]


def _agents_in_frame(ag: Float[Array, "K A 4"], ego: Float[Array, " 4"]) -> Float[Array, "K A 4"]:
    xy = to_frame(ag[..., :2], ego[:2], ego[2])
    h = ag[..., 2] - ego[2]
    return jnp.concatenate([xy, jnp.cos(h)[..., None], jnp.sin(h)[..., None]], -1)


def expert_logs(
    key: PRNGKeyArray,
    env: DrivingWorld,
    params: DrivingParams,
    *,
    n_scenes: int,
    steps: int,
    edit_reset: Callable[[DrivingState], DrivingState] | None = None,
) -> dict[str, Array]:
    """Planner training samples from expert rollouts: ``n_scenes * steps`` samples.

    Returns a dict with the scene tokens (each with leading axis n_scenes * steps), ``future``
    (S, 1 + N, T, 4) in the ego frame, ``scene_type`` (S,), and for measuring modes the ego's arc
    length on its route ``ego_s`` (S,), its route's index ``route_mode`` (S,) and the
    neighbours' lanes ``nb_lane`` (S, N) (at the intersection 0 left, 1 straight, 2 right).
    ``edit_reset`` changes each scene's state after its reset, before the first observation (a
    forced route, say: the same scenes rolled out under another choice).
    """
    horizon = env.static.horizon
    params = params.replace(max_steps=steps + horizon + 1)
    keys = jax.random.split(key, n_scenes)

    def one(k):
        _, st = env.reset(k, params)
        if edit_reset is not None:
            st = edit_reset(st)

        def body(s, _):
            plan = env.expert_plan(s, params)
            o = env.get_obs(s, params)
            _, s2, *_ = env.step_env(k, s, plan, params)
            ego_s, _ = project(s.lanes[s.route], s.lane_len[s.route], s.ego[:2])
            return s2, (o, env.agents(s), s.ego, ego_s)

        _, (obs_log, ag_log, ego_log, s_log) = jax.lax.scan(body, st, None, length=steps + horizon)
        idx = jnp.arange(steps)[:, None] + 1 + jnp.arange(horizon)[None]  # (steps, T)
        fut_world = ag_log[idx]  # (steps, T, A, 4)
        fut = jax.vmap(_agents_in_frame)(fut_world, ego_log[:steps])  # (steps, T, A, 4)
        obs_k = jax.tree.map(lambda v: v[:steps], obs_log)
        modes = (
            jnp.full((steps,), st.route_mode),
            jnp.broadcast_to(st.nb_lane, (steps,) + st.nb_lane.shape),
        )
        return obs_k, jnp.swapaxes(fut, 1, 2), jnp.full((steps,), st.scene), s_log[:steps], modes

    obs, fut, scene, ego_s, (route_mode, nb_lane) = jax.vmap(one)(keys)
    flat = lambda v: v.reshape((n_scenes * steps,) + v.shape[2:])  # noqa: E731
    out = {k: flat(v) for k, v in obs.items()}
    out["future"] = flat(fut)
    out["scene_type"] = flat(scene)
    out["ego_s"] = flat(ego_s)
    out["route_mode"] = flat(route_mode)
    out["nb_lane"] = flat(nb_lane)
    return out


def closed_loop(
    key: PRNGKeyArray,
    env: DrivingWorld,
    params: DrivingParams,
    plan_fn: PlanFn,
    *,
    n_scenes: int,
    steps: int,
    expert_progress: Float[Array, " B"] | None = None,
    record: bool = False,
) -> dict[str, Array]:
    """Closed-loop rollouts of ``plan_fn`` on ``n_scenes`` scenes (reset keys split from ``key``;
    the same key gives the same scenes for every planner). Returns per-scene metrics (module
    docstring) and, with ``record``, the states and plans of every step.

    ``expert_progress`` (B,) normalises progress; None uses the run's own progress (ratio 1).
    """
    params = params.replace(max_steps=steps + 1)
    k_reset, k_plan = jax.random.split(key)
    obs, st = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, n_scenes), params)
    step = jax.vmap(env.step_env, in_axes=(None, 0, 0, None))
    dt = params.dt

    def body(carry, k):
        obs, st, done = carry
        plan = plan_fn(k, obs, st)
        ego_plan = plan[:, 0] if plan.ndim == 4 else plan  # joint (B, A, T, 4) plans: the ego's
        obs2, st2, _, term, _, info = step(k, st, ego_plan, params)
        # freeze finished episodes (a collision or leaving the road ends the scenario)
        keep = lambda a, b: jnp.where(  # noqa: E731
            done.reshape(done.shape + (1,) * (a.ndim - 1)), a, b
        )
        st2 = jax.tree.map(keep, st, st2)
        obs2 = jax.tree.map(keep, obs, obs2)
        ttc_bad = jax.vmap(_ttc_violation)(jax.vmap(env.agents)(st2), st2.nb_valid, st2.nb_type)
        length, progress = plan_steps(ego_plan)
        rec = {
            "collision": info["collision"] & ~done,
            "moving": st.ego[:, 3] > 0.5,
            "offroad": info["offroad_dist"],
            "route_s": info["route_s"],
            "speed": st2.ego[:, 3],
            "acc": st2.ego_acc,
            "yaw_rate": st2.ego_yaw_rate,
            "ttc_bad": ttc_bad & ~done,
            "plan_jump": jnp.max(length, -1),
            "plan_backward": jnp.any(progress < BACKWARD_STEP, -1),
            "done": done,
        }
        if record:
            rec["state"] = st
            rec["plan"] = plan
        return (obs2, st2, done | term), rec

    keys = jax.random.split(k_plan, steps)
    _, log = jax.lax.scan(body, (obs, st, jnp.zeros(n_scenes, bool)), keys)
    return _metrics(log, st, dt, expert_progress) | ({"log": log} if record else {})


def _ttc_violation(ag: Float[Array, "A 4"], nb_valid, nb_type) -> Array:
    """Constant-velocity extrapolation of ego and neighbours overlaps within 0.95 s."""
    taus = jnp.arange(1, 10) * 0.1

    def at(tau):
        vel = ag[:, 3:4] * jnp.stack([jnp.cos(ag[:, 2]), jnp.sin(ag[:, 2])], -1)
        p = ag[:, :2] + tau * vel
        car = jnp.array([[CAR_LENGTH, CAR_WIDTH]])
        return sat_separation(p[:1], ag[:1, 2], car, p[1:], ag[1:, 2], agent_size(nb_type))

    sep = jax.vmap(at)(taus)  # (9, N)
    return jnp.any((sep < 0) & nb_valid[None])


def _metrics(log, st0, dt, expert_progress) -> dict[str, Array]:
    collision = jnp.any(log["collision"] & log["moving"], 0)
    drivable = jnp.max(log["offroad"], 0) <= 0.3
    progress_m = log["route_s"][-1] - st0.start_s
    ref = progress_m if expert_progress is None else expert_progress
    ratio = jnp.clip(progress_m / jnp.maximum(ref, 1.0), 0.0, 1.0)
    making = ratio >= 0.2
    live = ~log["done"]
    speed_ok = ~jnp.any((log["speed"] > 12.0) & live, 0)
    acc = log["acc"]
    jerk = jnp.concatenate([jnp.zeros_like(acc[:1]), (acc[1:] - acc[:-1]) / dt], 0)
    lat = log["speed"] * log["yaw_rate"]
    late = (jnp.arange(acc.shape[0]) >= 2)[:, None] & live
    comfy = ~jnp.any(
        late & ((acc > 2.40) | (acc < -4.05) | (jnp.abs(lat) > 4.89) | (jnp.abs(jerk) > 4.13)), 0
    )
    ttc_ok = ~jnp.any(log["ttc_bad"], 0)
    n_live = jnp.maximum(jnp.sum(live, 0), 1)
    jump = jnp.sum((log["plan_jump"] > JUMP_STEP) & live, 0) / n_live
    backward = jnp.sum(log["plan_backward"] & live, 0) / n_live
    f = lambda b: b.astype(jnp.float32)  # noqa: E731
    weighted = (5 * f(ttc_ok) + 5 * ratio + 4 * f(speed_ok) + 2 * f(comfy)) / 16
    score = f(~collision) * f(drivable) * f(making) * weighted
    return {
        "score": score,
        "collision": f(collision),
        "drivable": f(drivable),
        "progress": ratio,
        "progress_m": progress_m,
        "making_progress": f(making),
        "ttc_ok": f(ttc_ok),
        "speed_ok": f(speed_ok),
        "comfortable": f(comfy),
        "offroad_time": jnp.mean(f(log["offroad"] > 0.3) * f(live), 0),
        "jump_rate": jump,
        "backward_rate": backward,
        "max_jump": jnp.max(jnp.where(live, log["plan_jump"], 0.0), 0),
        "scene_type": st0.scene,
    }


def summarize(metrics: dict[str, Array]) -> dict[str, float]:
    """Mean of every metric over scenes (``max_jump``: the largest over scenes), and per scene
    type the score x100 and the jump and backward-step rates."""
    m = jax.device_get(metrics)
    out = {k: float(np.mean(v)) for k, v in m.items() if k not in ("scene_type", "log")}
    out["score"] *= 100.0
    if "max_jump" in m:
        out["max_jump"] = float(np.max(m["max_jump"]))
    for i, name in enumerate(SCENE_TYPES):
        sel = np.asarray(m["scene_type"]) == i
        if sel.any():
            out[f"score_{name}"] = float(100.0 * np.mean(np.asarray(m["score"])[sel]))
            for k in ("jump_rate", "backward_rate"):
                if k in m:
                    out[f"{k}_{name}"] = float(np.mean(np.asarray(m[k])[sel]))
    return out


def ade_fde(
    plan: Float[Array, "B T d"], target: Float[Array, "B T e"]
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """Average and final displacement error (m) of plans against logged expert futures (the
    first two features of each state are x, y; the rest, e.g. heading, are ignored)."""
    d = jnp.linalg.norm(plan[..., :2] - target[..., :2], axis=-1)
    return jnp.mean(d), jnp.mean(d[:, -1])


def expert_plan_fn(env: DrivingWorld, params: DrivingParams) -> PlanFn:
    """The rule-based expert as a closed-loop planner (privileged: reads the world state)."""
    plan = jax.vmap(lambda s: env.expert_plan(s, params))
    return lambda key, obs, state: plan(state)


def constant_velocity_plan_fn(horizon: int, dt: float) -> PlanFn:
    """The constant-velocity baseline: keep the current speed straight ahead (ego frame)."""
    return lambda key, obs, state: constant_velocity_plan(obs, horizon, dt)


def constant_velocity_plan(obs: dict, horizon: int, dt: float) -> Float[Array, "B T 4"]:
    """Plans (B, T, 4) at the current speed straight ahead (ego frame)."""
    v = obs["ego"][:, 0]
    t = (jnp.arange(1, horizon + 1) * dt)[None]
    x = v[:, None] * t
    z = jnp.zeros_like(x)
    return jnp.stack([x, z, jnp.ones_like(x), z], -1)
