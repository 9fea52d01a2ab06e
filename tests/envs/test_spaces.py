"""Spaces: samples are contained, out-of-space values are not, everything works under jit/vmap."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.envs.spaces import Box, Dict, Discrete, MultiDiscrete

KEYS = jax.random.split(jax.random.key(0), 64)


def test_discrete_samples_cover_the_range_and_contains_is_exact():
    s = Discrete(5)
    xs = jax.jit(jax.vmap(s.sample))(KEYS)
    assert xs.dtype == jnp.int32 and xs.shape == (64,)
    assert set(np.asarray(xs).tolist()) == {0, 1, 2, 3, 4}
    assert bool(jnp.all(jax.jit(jax.vmap(s.contains))(xs)))
    assert not bool(s.contains(jnp.int32(5))) and not bool(s.contains(jnp.int32(-1)))
    assert not bool(s.contains(jnp.zeros(2, jnp.int32)))  # wrong shape
    assert not bool(s.contains(jnp.float32(1.0)))  # wrong kind of dtype


def test_multidiscrete_respects_each_dimension():
    s = MultiDiscrete([3, 3, 2])
    xs = jax.jit(jax.vmap(s.sample))(KEYS)
    assert xs.shape == (64, 3)
    assert np.asarray(xs[:, 2]).max() == 1 and np.asarray(xs[:, 0]).max() == 2
    assert bool(jnp.all(jax.jit(jax.vmap(s.contains))(xs)))
    assert not bool(s.contains(jnp.array([0, 0, 2], jnp.int32)))
    assert not bool(s.contains(jnp.array([0, 3, 0], jnp.int32)))


@pytest.mark.parametrize(
    "low,high",
    [(-1.0, 1.0), (0.0, np.inf), (-np.inf, 2.0), (-np.inf, np.inf)],
    ids=["bounded", "below", "above", "unbounded"],
)
def test_box_samples_lie_in_bounds(low, high):
    s = Box(low, high, (3, 2))
    xs = jax.jit(jax.vmap(s.sample))(KEYS)
    assert xs.shape == (64, 3, 2) and xs.dtype == jnp.float32
    assert np.all(np.isfinite(np.asarray(xs)))
    assert bool(jnp.all(jax.jit(jax.vmap(s.contains))(xs)))
    assert not bool(s.contains(jnp.full((3, 2), jnp.nan)))
    assert not bool(s.contains(jnp.zeros((2, 3))))
    if np.isfinite(high):
        assert not bool(s.contains(jnp.full((3, 2), high + 1.0)))


def test_box_int_and_bool():
    si = Box(0, 6, (4,), jnp.int32)
    xi = jax.jit(jax.vmap(si.sample))(KEYS)
    assert xi.dtype == jnp.int32 and int(xi.min()) >= 0 and int(xi.max()) == 6
    sb = Box(0, 1, (4,), bool)
    xb = jax.jit(jax.vmap(sb.sample))(KEYS)
    assert xb.dtype == jnp.bool_ and bool(jnp.all(jax.jit(jax.vmap(sb.contains))(xb)))
    assert not bool(sb.contains(jnp.zeros(4, jnp.float32)))


def test_dict_builds_its_container_and_checks_every_field():
    s = Dict({"a": Discrete(2), "b": Box(-1.0, 1.0, (2,))})
    x = s.sample(jax.random.key(1))
    assert set(x) == {"a", "b"} and bool(s.contains(x))
    assert not bool(s.contains({"a": x["a"], "b": jnp.array([2.0, 0.0])}))
    assert not bool(s.contains({"a": x["a"]}))


@pytest.mark.parametrize(
    "make",
    [
        lambda: Discrete(0),
        lambda: MultiDiscrete([]),
        lambda: MultiDiscrete([2, 0]),
        lambda: Box(1.0, 0.0, (2,)),
        lambda: Box([0.0, 0.0, 0.0], 1.0, (2,)),
        lambda: Dict({}),
    ],
    ids=["discrete0", "md-empty", "md-zero", "box-low-high", "box-broadcast", "dict-empty"],
)
def test_bad_space_arguments_raise(make):
    with pytest.raises(ValueError):
        make()
