"""Pre-norm transformer block: shapes, causality, residual structure and FFN injection."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.nn.mlp import MLP
from jaxlab.nn.transformer import TransformerBlock

B, S, D = 2, 32, 32


@pytest.fixture(scope="module")
def block_and_params():
    block = TransformerBlock(n_heads=4, head_dim=8, d_ff=64)
    x = np.random.default_rng(0).standard_normal((B, S, D)).astype(np.float32)
    params = jax.jit(block.init)(jax.random.key(1), x)
    return block, params, jax.jit(lambda p, x: block.apply(p, x)[0]), x


def test_block_shapes_and_param_tree(block_and_params):
    block, params, apply, x = block_and_params
    y = apply(params, x)
    assert y.shape == (B, S, D) and y.dtype == jnp.float32
    assert set(params["params"]) == {"attn_norm", "attn", "ffn_norm", "ffn"}
    assert set(params["params"]["ffn"]) == {"wi_gate", "wi_up", "wo"}


def test_block_is_causal(block_and_params):
    _, params, apply, x = block_and_params
    t = 20
    x2 = x.copy()
    x2[:, t] = 5.0 * np.random.default_rng(5).standard_normal((B, D))
    y1, y2 = np.asarray(apply(params, x)), np.asarray(apply(params, x2))
    np.testing.assert_array_equal(y1[:, :t], y2[:, :t])
    assert np.abs(y1[:, t:] - y2[:, t:]).max() > 1e-3


def test_block_is_pre_norm_residual(block_and_params):
    """With zero output projections both sub-layers vanish and the block is the identity."""
    _, params, apply, x = block_and_params
    inner = nn.unbox(params)["params"]
    zeroed = {
        **inner,
        "attn": {**inner["attn"], "wo": jnp.zeros_like(inner["attn"]["wo"])},
        "ffn": {**inner["ffn"], "wo": jnp.zeros_like(inner["ffn"]["wo"])},
    }
    np.testing.assert_array_equal(np.asarray(apply({"params": zeroed}, x)), np.asarray(x))


def test_ffn_factory_replaces_the_ffn():
    block = TransformerBlock(
        n_heads=2, head_dim=8, ffn_factory=lambda: MLP(features=(48, D), activation=nn.gelu)
    )
    x = jnp.ones((1, 4, D), jnp.float32)
    params = jax.eval_shape(block.init, jax.random.key(1), x)
    assert set(params["params"]["ffn"]) == {"kernel_0", "bias_0", "kernel_1", "bias_1"}
    y = jax.eval_shape(lambda p: block.apply(p, x)[0], params)
    assert y.shape == (1, 4, D)


def test_missing_ffn_width_raises():
    with pytest.raises(ValueError, match="d_ff=0"):
        TransformerBlock(n_heads=2, head_dim=8).init(jax.random.key(0), jnp.ones((1, 4, D)))
