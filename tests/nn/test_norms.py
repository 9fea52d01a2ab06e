"""RMSNorm against a NumPy reference."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.nn.norms import RMSNorm


def _rms_norm_reference(x, gain, axes, eps):
    x = np.asarray(x, np.float64)
    ms = np.mean(x**2, axis=axes, keepdims=True)
    return x / np.sqrt(ms + eps) * np.asarray(gain, np.float64)


@pytest.mark.parametrize(
    "num_axes,names", [(1, ("embed",)), (2, ("heads", "kv"))], ids=["embed", "heads_kv"]
)
def test_rms_norm_matches_numpy(num_axes, names):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 5, 4, 8)) * 3.0 + 0.5).astype(np.float32)
    layer = RMSNorm(num_axes=num_axes, axis_names=names, eps=1e-5)
    params = jax.jit(layer.init)(jax.random.key(1), x)
    feature_shape = x.shape[4 - num_axes :]
    assert nn.unbox(params)["params"]["scale"].shape == feature_shape
    assert nn.get_partition_spec(params)["params"]["scale"] == jax.sharding.PartitionSpec(*names)
    gain = rng.uniform(0.5, 1.5, feature_shape).astype(np.float32)
    y = jax.jit(layer.apply)({"params": {"scale": gain}}, x)
    axes = tuple(range(4 - num_axes, 4))
    expected = _rms_norm_reference(
        x, gain.reshape((1,) * (4 - num_axes) + feature_shape), axes, 1e-5
    )
    np.testing.assert_allclose(np.asarray(y), expected, rtol=1e-5, atol=1e-6)
    # with unit gain the normalised axes have unit root-mean-square
    y1 = np.asarray(layer.apply(params, jnp.asarray(x)), np.float64)
    np.testing.assert_allclose(np.sqrt(np.mean(y1**2, axis=axes)), 1.0, rtol=1e-4)


def test_rms_norm_keeps_input_dtype():
    x = jnp.ones((2, 3, 8), jnp.bfloat16)
    layer = RMSNorm()
    y = layer.apply({"params": {"scale": jnp.ones((8,))}}, x)
    assert y.dtype == jnp.bfloat16


def test_rms_norm_rejects_mismatched_names():
    with pytest.raises(ValueError, match="axis_names"):
        RMSNorm(num_axes=2).init(jax.random.key(0), jnp.ones((2, 3, 4)))
