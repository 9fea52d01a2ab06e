"""``core.run.place_batches``: placement on a data-sharded mesh, refusal of a batch the mesh does
not divide, and stacked (multi-step) placement equal to placing each step on its own."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from jaxlab.core import run as run_lib
from jaxlab.core.sharding import MeshConfig, make_mesh


@pytest.fixture(scope="module")
def mesh():
    return make_mesh(MeshConfig(data=4), jax.devices()[:4])


def host_batch(rows: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return {
        "x": rng.normal(size=(rows, 3)).astype(np.float32),
        "y": rng.integers(0, 10, size=(rows,)).astype(np.int32),
    }


def test_batch_is_split_over_the_data_axis(mesh):
    batch = host_batch(8)
    spec = run_lib.batch_spec(batch, mesh)
    placed = run_lib.place_batches(batch, spec, leading=0)
    for name in ("x", "y"):
        np.testing.assert_array_equal(np.asarray(placed[name]), batch[name])
        assert placed[name].sharding == NamedSharding(
            mesh, PartitionSpec("data", *([None] * (batch[name].ndim - 1)))
        )
        shards = sorted(placed[name].addressable_shards, key=lambda s: s.index[0].start)
        assert [s.data.shape[0] for s in shards] == [2, 2, 2, 2]
        np.testing.assert_array_equal(np.asarray(shards[1].data), batch[name][2:4])


def test_refuses_a_batch_the_mesh_does_not_divide(mesh):
    spec = run_lib.batch_spec(host_batch(8), mesh)
    with pytest.raises(
        run_lib.BatchSplitError, match=r"dimension 6 is not divisible by the mesh axes \('data',\)"
    ):
        run_lib.place_batches(host_batch(6), spec, leading=0)
    steps = np.stack([host_batch(6)["x"]] * 2)
    with pytest.raises(run_lib.BatchSplitError, match=r"batch of shape \(6, 3\).*size 4"):
        run_lib.place_batches({"x": steps, "y": np.zeros((2, 6), np.int32)}, spec, leading=1)


def test_multi_step_placement_equals_single_step_placement(mesh):
    steps = [host_batch(8, seed) for seed in range(3)]
    spec = run_lib.batch_spec(steps[0], mesh)
    stacked = jax.tree.map(lambda *xs: np.stack(xs), *steps)
    placed = run_lib.place_batches(stacked, spec, leading=1)
    for t, step in enumerate(steps):
        single = run_lib.place_batches(step, spec, leading=0)
        for name in ("x", "y"):
            np.testing.assert_array_equal(np.asarray(placed[name][t]), np.asarray(single[name]))
            # the leading (step) axis is replicated, the batch axis split as in one step
            assert placed[name].sharding.spec[:2] == (None, "data")
            shard = placed[name].addressable_shards[0]
            assert shard.data.shape[:2] == (3, 2)
            np.testing.assert_array_equal(
                np.asarray(shard.data[t]),
                np.asarray(single[name].addressable_shards[0].data),
            )
