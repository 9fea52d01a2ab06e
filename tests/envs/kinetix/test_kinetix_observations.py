"""Kinetix observations: the original's shapes for S/M/L and value parity with the original.

The fixtures ``fixtures/obs_<size>_<level>.npz`` (``make_env_fixtures.py``, kinetix-env 3.0.2)
hold original ``EnvState``s (as loaded, and after 20 steps, with contacts) and the original's
observations of them; we rebuild each state here and compare our observations to 1e-5.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.envs.kinetix import EnvParams, StaticEnvParams, demo_level
from jaxlab.envs.kinetix.observations import (
    EntityObservation,
    flat_size,
    make_observation_fn,
    observation_space,
    padded_shape,
)

FIXTURES = sorted((Path(__file__).resolve().parent / "fixtures").glob("obs_*.npz"))
IDS = [p.stem.removeprefix("obs_") for p in FIXTURES]
SIZES = {"s": (5, 2, 1, 1), "m": (6, 3, 2, 2), "l": (12, 4, 6, 2)}


@functools.cache
def obs_fn(observation_type: str, size: str):
    """Jitted observation function (compiled once per type and size)."""
    return jax.jit(make_observation_fn(observation_type, StaticEnvParams.from_size(size)))


@functools.cache
def template(size: str):
    return demo_level(StaticEnvParams.from_size(size))


@pytest.mark.parametrize(
    "size,flat,padded", [("s", 140, (6, 41)), ("m", 247, (10, 45)), ("l", 679, (21, 59))]
)
def test_shapes_match_the_original(size, flat, padded):
    sp = StaticEnvParams.from_size(size)
    P, C, J, T = SIZES[size]
    N = P + C
    assert flat_size(sp) == flat and padded_shape(sp) == padded
    state = template(size)
    params = EnvParams()
    assert obs_fn("symbolic_flat", size)(state, params).shape == (flat,)
    assert obs_fn("symbolic_flat_padded", size)(state, params).shape == padded
    ent = obs_fn("symbolic_entity", size)(state, params)
    assert ent.polygons.shape == (P, 27) and ent.circles.shape == (C, 19)
    assert ent.joints.shape == (2 * J, 22) and ent.thrusters.shape == (T, 8)
    assert ent.attention_mask.shape == (4, N, N) and ent.joint_indexes.shape == (2 * J, 2)
    assert ent.thruster_indexes.shape == (T,)
    for t in ("symbolic_flat", "symbolic_flat_padded", "symbolic_entity"):
        obs = obs_fn(t, size)(state, params)
        assert bool(jax.jit(observation_space(t, sp).contains)(obs))


def _load(path):
    with np.load(path, allow_pickle=False) as z:
        data = {k: z[k] for k in z.files}
    data["meta"] = json.loads(str(data["meta"]))
    return data


def _state_from_fixture(data, prefix):
    size = data["meta"]["level"].split("/")[0]

    def fill(path, leaf):
        names = [p.name for p in path]
        if names[0] == "sim":
            names = names[1:]
        key = f"{prefix}/state/" + ".".join(names)
        value = data[key]
        assert value.shape == leaf.shape, key
        return jnp.asarray(value.astype(leaf.dtype))

    return jax.tree_util.tree_map_with_path(fill, template(size)), size


@pytest.fixture(scope="module", params=FIXTURES, ids=IDS)
def fixture(request):
    return _load(request.param)


def test_fixtures_exist():
    assert len(FIXTURES) >= 5


@pytest.mark.parametrize("prefix", ["t0", "t1"])
def test_symbolic_observations_match_the_original(fixture, prefix):
    state, size = _state_from_fixture(fixture, prefix)
    params = EnvParams()
    flat = obs_fn("symbolic_flat", size)(state, params)
    np.testing.assert_allclose(np.asarray(flat), fixture[f"{prefix}/flat"], rtol=1e-5, atol=1e-5)
    padded = obs_fn("symbolic_flat_padded", size)(state, params)
    np.testing.assert_allclose(
        np.asarray(padded), fixture[f"{prefix}/padded"], rtol=1e-5, atol=1e-5
    )
    ent = obs_fn("symbolic_entity", size)(state, params)
    for field in EntityObservation.__dataclass_fields__:
        got, want = np.asarray(getattr(ent, field)), fixture[f"{prefix}/entity/{field}"]
        assert got.shape == want.shape, field
        if want.dtype == bool or np.issubdtype(want.dtype, np.integer):
            np.testing.assert_array_equal(got, want, err_msg=field)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=field)


def test_contact_attention_mask_is_exercised(fixture):
    """After 20 steps something rests on the floor: channel 3 (contacts) is not empty."""
    assert fixture["t1/entity/attention_mask"][3].any()
    state, size = _state_from_fixture(fixture, "t1")
    ent = obs_fn("symbolic_entity", size)(state, EnvParams())
    np.testing.assert_array_equal(
        np.asarray(ent.attention_mask[3]), fixture["t1/entity/attention_mask"][3]
    )


@pytest.mark.parametrize("path", [p for p in FIXTURES if p.stem.startswith("obs_s_")][:1])
def test_observations_jit_equals_eager(path):
    """On one S level (eager op-by-op evaluation compiles every primitive separately)."""
    state, size = _state_from_fixture(_load(path), "t1")
    params = EnvParams()
    for t in ("symbolic_flat", "symbolic_entity"):
        fn = make_observation_fn(t, StaticEnvParams.from_size(size))
        eager, jitted = fn(state, params), obs_fn(t, size)(state, params)
        for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


def test_nan_state_gives_finite_symbolic_observations(fixture):
    state, size = _state_from_fixture(fixture, "t0")
    bad = state.replace(sim=state.sim.replace(gravity=jnp.array([jnp.nan, jnp.inf])))
    bad = bad.replace(
        sim=bad.sim.replace(
            circle=bad.sim.circle.replace(position=bad.sim.circle.position.at[0, 0].set(jnp.nan))
        )
    )
    for t in ("symbolic_flat", "symbolic_flat_padded"):
        obs = obs_fn(t, size)(bad, EnvParams())
        assert np.all(np.isfinite(np.asarray(obs))) and np.abs(np.asarray(obs)).max() <= 10
    ent = obs_fn("symbolic_entity", size)(bad, EnvParams())
    assert np.all(np.isfinite(np.asarray(ent.circles)))
