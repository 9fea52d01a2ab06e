"""The on-device replay buffer (flashbax item buffer behind ``rl.replay``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxlab.core.config import ConfigError
from jaxlab.rl.replay import ReplayConfig, make_replay


def _fill(buf, values):
    state = buf.init({"v": jnp.int32(0), "x": jnp.zeros(2)})
    add = jax.jit(buf.add)
    for chunk in np.array_split(np.asarray(values, np.int32), 4):
        state = add(state, {"v": jnp.asarray(chunk), "x": jnp.zeros((len(chunk), 2))})
    return state


def _samples(buf, state, draws=800):
    keys = jax.random.split(jax.random.key(0), draws)
    out = jax.jit(jax.vmap(lambda k: buf.sample(state, k).experience["v"]))(keys)
    return np.asarray(out).ravel()


@pytest.mark.parametrize(("added", "expect"), [(10, range(10)), (20, range(4, 20))])
def test_sampling_is_uniform_over_what_was_added(added, expect):
    buf = make_replay(ReplayConfig(buffer_size=16, batch_size=16, min_size=1))
    state = _fill(buf, np.arange(added))
    v = _samples(buf, state)
    expect = list(expect)
    assert set(np.unique(v)) == set(expect)  # only the items still held (the ring overwrote)
    counts = np.array([(v == e).sum() for e in expect])
    p = stats.chisquare(counts).pvalue
    assert p > 1e-3, (counts, p)


def test_sampling_before_anything_is_added_is_refused_by_can_sample():
    buf = make_replay(ReplayConfig(buffer_size=16, batch_size=4, min_size=4))
    state = buf.init({"v": jnp.int32(0)})
    assert not bool(buf.can_sample(state))
    state = buf.add(state, {"v": jnp.arange(4, dtype=jnp.int32)})
    assert bool(buf.can_sample(state))


def test_state_is_a_pytree_of_arrays():
    buf = make_replay(ReplayConfig(buffer_size=8, batch_size=2))
    state = _fill(buf, np.arange(5))
    leaves = jax.tree.leaves(state)
    assert leaves and all(isinstance(x, jax.Array) for x in leaves)


@pytest.mark.parametrize(
    ("cfg", "field"),
    [
        (ReplayConfig(buffer_size=8, batch_size=16), "buffer_size"),
        (ReplayConfig(buffer_size=8, batch_size=4, min_size=9), "buffer_size"),
        (ReplayConfig(buffer_size=8, batch_size=0), "batch_size"),
    ],
)
def test_bad_sizes_name_the_field(cfg, field):
    with pytest.raises(ConfigError, match=field):
        make_replay(cfg)


def test_sequence_replay_samples_consecutive_items_of_one_stream():
    from jaxlab.rl.replay import SequenceReplayConfig, make_sequence_replay

    r = make_sequence_replay(
        SequenceReplayConfig(num_envs=2, capacity=8, batch_size=16, sequence_length=3)
    )
    state = r.init({"x": jnp.zeros((), jnp.int32)})
    for t in range(5):
        state = r.add(state, {"x": jnp.array([[t], [100 + t]], jnp.int32)})
    assert bool(r.can_sample(state))
    seqs = np.asarray(r.sample(state, jax.random.key(0)).experience["x"])
    assert seqs.shape == (16, 3)
    assert np.all(np.diff(seqs, axis=1) == 1)  # consecutive items
    assert np.all((seqs % 100)[:, -1] <= 4)  # only items that were added
    with pytest.raises(ConfigError, match="sequence_length"):
        make_sequence_replay(SequenceReplayConfig(capacity=4, sequence_length=5))
