"""SwiGLU and MLP against NumPy references."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.nn.mlp import MLP, SwiGLU

P = jax.sharding.PartitionSpec


def _silu(x):
    return x / (1.0 + np.exp(-x))


def test_swiglu_matches_numpy():
    x = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
    layer = SwiGLU(d_ff=24, init_std=0.2)
    params = jax.jit(layer.init)(jax.random.key(1), x)
    p = {k: np.asarray(v, np.float64) for k, v in nn.unbox(params)["params"].items()}
    apply = jax.jit(layer.apply)
    xn = x.astype(np.float64)
    expected = (_silu(xn @ p["wi_gate"]) * (xn @ p["wi_up"])) @ p["wo"]
    np.testing.assert_allclose(np.asarray(apply(params, x)), expected, rtol=1e-4, atol=1e-5)
    specs = nn.get_partition_spec(params)["params"]
    assert specs == {
        "wi_gate": P("embed", "mlp"),
        "wi_up": P("embed", "mlp"),
        "wo": P("mlp", "embed"),
    }
    # MoE experts call the FFN on flattened [tokens, embed] inputs: same map
    flat = apply(params, x.reshape(10, 16))
    np.testing.assert_allclose(np.asarray(flat), expected.reshape(10, 16), rtol=1e-4, atol=1e-5)


def test_mlp_matches_numpy():
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    layer = MLP(features=(10, 12, 3), activation=nn.tanh)
    params = jax.jit(layer.init)(jax.random.key(1), x)
    p = {k: np.asarray(v, np.float64) for k, v in nn.unbox(params)["params"].items()}
    h = x.astype(np.float64)
    for i in range(3):
        h = h @ p[f"kernel_{i}"] + p[f"bias_{i}"]
        if i < 2:
            h = np.tanh(h)
    np.testing.assert_allclose(np.asarray(jax.jit(layer.apply)(params, x)), h, rtol=1e-5, atol=1e-6)
    specs = nn.get_partition_spec(params)["params"]
    assert specs["kernel_0"] == P("embed", "mlp") and specs["kernel_1"] == P("mlp", "embed")


def test_bad_sizes_raise():
    with pytest.raises(ValueError, match="d_ff=0"):
        SwiGLU(d_ff=0).init(jax.random.key(0), jnp.ones((1, 4)))
    with pytest.raises(ValueError, match="features"):
        MLP(features=()).init(jax.random.key(0), jnp.ones((1, 4)))
