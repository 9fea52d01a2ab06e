"""The rule-based expert of the driving world: the privileged driver whose rollouts are the
planner's training logs and the reference of the closed-loop score."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.envs.driving.geometry import point_at, project, to_frame
from jaxlab.envs.driving.state import DrivingParams, DrivingState, DrivingStatic, agents
from jaxlab.envs.driving.vehicles import CAR_LENGTH, agent_size, idm


def expert_plan(
    state: DrivingState, params: DrivingParams, static: DrivingStatic
) -> Float[Array, "T 4"]:
    """The rule-based expert: follow the route lane with IDM speed control (the scene's
    ``ego_v0`` and ``ego_headway``) behind the nearest neighbour or parked car ahead along the
    route (assumed to keep its speed); an ego-frame plan (horizon, 4)."""
    dt = params.dt
    poly, length = state.lanes[state.route], state.lane_len[state.route]
    s0, _ = project(poly, length, state.ego[:2])
    # leader: the nearest neighbour or parked car ahead along the route (within 3 m of it)
    ag = agents(state)
    oxy = jnp.concatenate([ag[1:, :2], state.static[:, :2]], 0)
    ov = jnp.concatenate([ag[1:, 3], jnp.zeros(static.n_static)])
    olen = jnp.concatenate([agent_size(state.nb_type)[:, 0], state.static[:, 3]])
    ovalid = jnp.concatenate([state.nb_valid, state.static_valid])
    so, do = jax.vmap(lambda q: project(poly, length, q))(oxy)
    ahead = ovalid & (so > s0 - 2.0) & (do < 3.0)
    gaps = jnp.where(ahead, so - s0 - 0.5 * (CAR_LENGTH + olen), 100.0)
    j = jnp.argmin(gaps)
    gap0 = gaps[j]
    v_lead0 = jnp.where(ahead[j], ov[j], state.ego[3])
    v0, headway = state.ego_v0, state.ego_headway

    def body(carry, _):
        s, v, g = carry
        a = idm(v, v0, g, v_lead0, headway)
        v2 = jnp.clip(v + a * dt, 0.0, 15.0)
        g2 = g + (v_lead0 - v2) * dt
        return (s + v2 * dt, v2, g2), s + v2 * dt

    _, ss = jax.lax.scan(body, (s0, state.ego[3], gap0), None, length=static.horizon)
    p, hd = point_at(poly, length, ss)
    p = to_frame(p, state.ego[:2], state.ego[2])
    rel = hd - state.ego[2]
    return jnp.concatenate([p, jnp.cos(rel)[:, None], jnp.sin(rel)[:, None]], -1)
