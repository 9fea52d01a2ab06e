"""Adding a shape to a full scene inside jit: a silent no-op (Jax2D) unless the checked mode is on."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import physics as px


@pytest.fixture(scope="module")
def full_scene():
    sp = px.StaticSimParams(num_polygons=5, num_circles=1, num_joints=1, num_thrusters=1)
    state = px.create_empty_sim(sp)
    state, _ = px.add_circle(state, sp, [2.0, 1.0], 0.2)  # the only circle slot
    return state, sp


def _add(sp):
    return jax.jit(lambda s, x: px.add_circle(s, sp, jnp.stack([x, 1.0]), 0.3)[0])


def test_full_scene_in_jit_is_a_silent_no_op_by_default(full_scene):
    state, sp = full_scene
    out = _add(sp)(state, jnp.float32(3.0))
    for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(state), strict=True):
        np.testing.assert_array_equal(a, b)


def test_checked_mode_raises_on_a_full_scene(full_scene):
    state, sp = full_scene
    with px.capacity_checks():
        add = _add(sp)
        with pytest.raises(Exception, match="circle capacity is full.*num_circles"):
            jax.block_until_ready(add(state, jnp.float32(3.0)))
        # vmapped too, and a scene with room passes the check.
        batched = jax.vmap(add, in_axes=(None, 0))
        with pytest.raises(Exception, match="capacity is full"):
            jax.block_until_ready(batched(state, jnp.arange(2.0)))
        roomy = px.create_empty_sim(sp)
        out = add(roomy, jnp.float32(3.0))
    assert bool(out.circle.active[0])
