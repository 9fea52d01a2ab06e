"""SwiGLU and MLP against NumPy references."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.nn.mlp import MLP, SwiGLU


def _silu(x):
    return x / (1.0 + np.exp(-x))


def test_swiglu_matches_numpy():
    x = jax.random.normal(jax.random.key(0), (2, 5, 16))
    layer = SwiGLU(d_ff=24, init_std=0.2)
    params = layer.init(jax.random.key(1), x)
    p = nn.unbox(params)["params"]
    y = jax.jit(layer.apply)(params, x)
    xn = np.asarray(x, np.float64)
    expected = (_silu(xn @ np.asarray(p["wi_gate"])) * (xn @ np.asarray(p["wi_up"]))) @ np.asarray(
        p["wo"]
    )
    np.testing.assert_allclose(np.asarray(y), expected, rtol=1e-4, atol=1e-5)
    specs = nn.get_partition_spec(params)["params"]
    P = jax.sharding.PartitionSpec
    assert specs == {"wi_gate": P("embed", "mlp"), "wi_up": P("embed", "mlp"), "wo": P("mlp", "embed")}


def test_swiglu_works_on_flat_tokens():
    """MoE experts call the FFN on flattened [tokens, embed] inputs."""
    x = jax.random.normal(jax.random.key(0), (7, 16))
    layer = SwiGLU(d_ff=8)
    params = layer.init(jax.random.key(1), x)
    y3 = layer.apply(params, x[None])
    np.testing.assert_allclose(np.asarray(layer.apply(params, x)), np.asarray(y3[0]), atol=1e-6)


def test_mlp_matches_numpy():
    x = jax.random.normal(jax.random.key(0), (4, 6))
    layer = MLP(features=(10, 12, 3), activation=nn.tanh)
    params = layer.init(jax.random.key(1), x)
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), nn.unbox(params)["params"])
    h = np.asarray(x, np.float64)
    for i in range(3):
        h = h @ p[f"kernel_{i}"] + p[f"bias_{i}"]
        if i < 2:
            h = np.tanh(h)
    np.testing.assert_allclose(np.asarray(layer.apply(params, x)), h, rtol=1e-5, atol=1e-6)
    specs = nn.get_partition_spec(params)["params"]
    assert specs["kernel_1"] == jax.sharding.PartitionSpec("mlp", "embed")


def test_bad_sizes_raise():
    with pytest.raises(ValueError, match="d_ff=0"):
        SwiGLU(d_ff=0).init(jax.random.key(0), jnp.ones((1, 4)))
    with pytest.raises(ValueError, match="features"):
        MLP(features=()).init(jax.random.key(0), jnp.ones((1, 4)))
