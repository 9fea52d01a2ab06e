"""Shared helpers of the physics tests: one small static configuration and its compiled
rollouts (cached, so every test module reuses the same few compilations)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxlab import physics as px

# Floor in slot 0 only (no walls), so slot 0 is the single static slot.
SP = px.StaticSimParams(
    num_polygons=7,
    num_circles=3,
    num_joints=2,
    num_thrusters=2,
    num_static_fixated_polys=1,
)
NUM_ACTIONS = SP.num_joints + SP.num_thrusters
CHUNK = 60  # steps per compiled rollout call (1 s at dt = 1/60)


def empty(gravity=(0.0, -9.81), floor=True) -> px.SimState:
    """An empty test scene (floor top at y = 0.4 when ``floor``)."""
    state = px.create_empty_sim(SP, add_floor=floor, add_walls_and_ceiling=False)
    return state.replace(gravity=jnp.asarray(gravity, jnp.float32))


def make_rollout(solver: str):
    def rollout(state, params, actions):
        def body(s, a):
            s, (rr, cr, cc) = px.step(s, params, SP, a, solver=solver)
            return s, (s, rr.active, cr.active, cc.active)

        return jax.lax.scan(body, state, actions)

    return jax.jit(rollout)


class Runner:
    """Runs ``n`` steps (a multiple of ``CHUNK``) with constant actions, returning the final
    state and the stacked per-step states."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, state, steps, actions=None, params=None):
        params = px.SimParams() if params is None else params
        act = jnp.zeros(NUM_ACTIONS) if actions is None else jnp.asarray(actions, jnp.float32)
        acts = jnp.broadcast_to(act, (CHUNK, NUM_ACTIONS))
        if steps % CHUNK:
            raise ValueError(f"steps={steps}; expected a multiple of {CHUNK}")
        traj = []
        for _ in range(steps // CHUNK):
            state, (states, *_) = self.fn(state, params, acts)
            traj.append(states)
        return state, jax.tree.map(lambda *x: jnp.concatenate(x), *traj)


@functools.cache
def runner(solver: str = "fast") -> Runner:
    """The compiled ``CHUNK``-step rollout for ``SP`` (one compilation per solver)."""
    return Runner(make_rollout(solver))
