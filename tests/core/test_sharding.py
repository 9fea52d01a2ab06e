"""Meshes from config, logical-axis rules, placement of batches and flax states, shard_map."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from jaxlab.core import sharding
from jaxlab.core.config import ConfigError


def test_fill_axis_and_errors():
    assert sharding.MeshConfig(data=-1, fsdp=2).resolve(8) == (4, 2, 1, 1)
    assert sharding.MeshConfig(data=2, fsdp=2, tensor=1, expert=2).resolve(8) == (2, 2, 1, 2)
    with pytest.raises(ConfigError, match="divid"):
        sharding.MeshConfig(data=-1, fsdp=3).resolve(8)
    with pytest.raises(ConfigError, match="product"):
        sharding.MeshConfig(data=2, fsdp=2).resolve(8)
    with pytest.raises(ConfigError, match="at most one"):
        sharding.MeshConfig(data=-1, fsdp=-1)
    mesh = sharding.make_mesh(sharding.MeshConfig(data=2, fsdp=4))
    assert dict(mesh.shape) == {"data": 2, "fsdp": 4, "tensor": 1, "expert": 1}


def test_logical_rules():
    assert sharding.logical_to_spec(("batch", "seq", "embed")) == P(
        ("data", "fsdp", "expert"), None, None
    )  # fsdp already used by batch
    assert sharding.logical_to_spec(("embed", "mlp")) == P("fsdp", "tensor")
    assert sharding.logical_to_spec(("expert", "embed", "mlp")) == P("expert", "fsdp", "tensor")


class Tiny(nn.Module):
    @nn.compact
    def __call__(self, x):
        w = self.param(
            "w",
            nn.with_logical_partitioning(nn.initializers.ones, ("embed", "mlp")),
            (x.shape[-1], 16),
        )
        b = self.param("b", nn.initializers.zeros, (16,))
        return x @ w + b[None, :]


def test_state_shardings_follow_logical_names():
    mesh = sharding.make_mesh(sharding.MeshConfig(data=2, fsdp=4))
    abstract = jax.eval_shape(Tiny().init, jax.random.PRNGKey(0), jnp.ones((8, 8)))
    shards = nn.unbox(sharding.state_shardings(abstract, mesh))
    assert shards["params"]["w"].spec == P("fsdp", None)  # tensor axis has size 1
    assert all(a is None for a in shards["params"]["b"].spec)


def test_shard_batch_and_divisibility():
    mesh = sharding.make_mesh(sharding.MeshConfig(data=8))
    x = np.arange(32.0).reshape(16, 2)
    arr = sharding.shard_batch({"x": x}, mesh)["x"]
    assert len(arr.addressable_shards) == 8 and arr.addressable_shards[0].data.shape == (2, 2)
    with pytest.raises(ValueError, match="not divisible"):
        sharding.shard_batch({"x": np.zeros((6, 2))}, mesh)


def test_shard_map_psum_equals_global_sum():
    mesh = sharding.make_mesh(sharding.MeshConfig(data=8))
    x = jnp.arange(64.0).reshape(16, 4)
    f = sharding.shard_map(
        lambda a: jax.lax.psum(a.sum(0), "data"), mesh, in_specs=P("data"), out_specs=P()
    )
    np.testing.assert_allclose(jax.jit(f)(x), x.sum(0))
