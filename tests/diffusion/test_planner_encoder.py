"""The planner's scene encoder on the original's inputs: masked entries (padded neighbours, parked
cars, lanes and route lanes, invalid history steps, unknown speed limits) leave the output
unchanged whatever their content, and agent types, traffic lights, speed limits, lane boundaries
and per-step validity reach it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from jaxlab.diffusion import planner as pl

CFG = pl.PlannerConfig(
    n_neighbours=3,
    history=3,
    n_static=2,
    n_lanes=3,
    lane_points=4,
    n_route=3,
    horizon=4,
    width=16,
    heads=2,
    encoder_depth=1,
    decoder_depth=1,
)
B = 2


def _scene():
    shapes = CFG.input_shapes()
    keys = iter(jax.random.split(jax.random.PRNGKey(0), len(shapes)))
    sc = {k: jax.random.normal(next(keys), (B,) + s) for k, s in shapes.items()}
    sc["neighbour_valid"] = jnp.array([[True, True, False]] * B)
    sc["neighbour_step_valid"] = jnp.array([[[True] * 3, [False, True, True], [False] * 3]] * B)
    sc["neighbour_types"] = jnp.broadcast_to(jnp.eye(3)[jnp.array([0, 2, 1])], (B, 3, 3))
    sc["static_valid"] = jnp.array([[True, False]] * B)
    sc["lane_valid"] = jnp.array([[True, True, False]] * B)
    sc["lane_traffic_light"] = jnp.broadcast_to(jnp.eye(4)[jnp.array([0, 2, 3])], (B, 3, 4))
    sc["lane_speed_limit"] = jnp.broadcast_to(jnp.array([10.0, 7.0, 5.0]), (B, 3))
    sc["lane_speed_limit_valid"] = jnp.array([[True, False, False]] * B)
    sc["route_valid"] = jnp.array([[True, True, False]] * B)
    return sc


@pytest.fixture(scope="module")
def encode():
    scene = _scene()
    enc = pl.SceneEncoder(CFG)

    @jax.jit
    def init(key):
        flat, unravel = ravel_pytree(enc.init(key, scene))
        return unravel(flat + 0.2 * jax.random.normal(jax.random.PRNGKey(2), flat.shape))

    params = init(jax.random.PRNGKey(1))
    return scene, jax.jit(lambda sc: enc.apply(params, sc))


def _edit(scene, key, idx, value):
    return dict(scene, **{key: scene[key].at[idx].set(value)})


def test_masked_entries_do_not_reach_the_encoder_output(encode):
    scene, fn = encode
    tok, mask, route = fn(scene)
    junk = dict(scene)
    for key, idx in (
        ("neighbours", (slice(None), 2)),  # the padded neighbour
        ("neighbours", (slice(None), 1, 0)),  # the step before neighbour 1 entered
        ("neighbour_types", (slice(None), 2)),
        ("static", (slice(None), 1)),
        ("lanes", (slice(None), 2)),
        ("lane_boundaries", (slice(None), 2)),
        ("lane_traffic_light", (slice(None), 2)),
        ("lane_speed_limit", (slice(None), slice(1, None))),  # no known limit / padded lane
        ("route", (slice(None), 2)),
    ):
        junk = _edit(junk, key, idx, 123.0)
    tok2, mask2, route2 = fn(junk)
    np.testing.assert_array_equal(mask, mask2)
    np.testing.assert_array_equal(np.asarray(mask)[0], [1, 1, 0, 1, 0, 1, 1, 0, 1])
    np.testing.assert_allclose(tok2, tok, atol=1e-6)
    np.testing.assert_allclose(route2, route, atol=1e-6)
    assert np.all(np.asarray(tok)[~np.asarray(mask)] == 0.0)


@pytest.mark.parametrize(
    "key, idx, value",
    [
        ("neighbour_types", (slice(None), 0), jnp.array([0.0, 1.0, 0.0])),  # vehicle -> pedestrian
        ("neighbour_step_valid", (slice(None), 1, 0), True),
        ("lane_traffic_light", (slice(None), 0), jnp.array([0.0, 0.0, 1.0, 0.0])),  # green -> red
        ("lane_speed_limit", (slice(None), 0), 5.0),
        ("lane_speed_limit_valid", (slice(None), 1), True),
        ("lane_boundaries", (slice(None), 1, 0), 0.5),
    ],
    ids=["agent-type", "step-validity", "light", "speed-limit", "has-limit", "boundary"],
)
def test_types_lights_limits_and_boundaries_reach_the_output(encode, key, idx, value):
    scene, fn = encode
    tok, _, _ = fn(scene)
    tok2, _, _ = fn(_edit(scene, key, idx, value))
    assert float(jnp.max(jnp.abs(tok2 - tok))) > 1e-4
