"""Token embedding lookup, tied and untied output heads."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.nn.embeddings import OutputHead, TokenEmbedding


def test_embedding_lookup_and_tied_head():
    emb = TokenEmbedding(vocab_size=11, d_model=6)
    ids = np.array([[0, 3, 10], [5, 5, 1]], np.int32)
    params = jax.jit(emb.init)(jax.random.key(0), ids)
    table = np.asarray(nn.unbox(params)["params"]["embedding"])
    assert np.abs(table).max() <= 0.06 + 1e-7  # 0.02-std normal truncated at 3σ
    h = emb.apply(params, jnp.asarray(ids))
    np.testing.assert_array_equal(np.asarray(h), table[ids])
    logits = emb.apply(params, h, method=TokenEmbedding.attend)
    np.testing.assert_allclose(np.asarray(logits), table[ids] @ table.T, rtol=1e-5)
    assert nn.get_partition_spec(params)["params"]["embedding"] == jax.sharding.PartitionSpec(
        "vocab", "embed"
    )


def test_output_head_is_float32_projection():
    head = OutputHead(vocab_size=9, init_std=0.5)
    h = jnp.asarray(np.random.default_rng(1).standard_normal((2, 3, 4)), jnp.bfloat16)
    params = jax.jit(head.init)(jax.random.key(0), h)
    logits = head.apply(params, h)
    assert logits.shape == (2, 3, 9) and logits.dtype == jnp.float32
    w = np.asarray(jnp.asarray(nn.unbox(params)["params"]["kernel"], jnp.bfloat16), np.float32)
    np.testing.assert_allclose(
        np.asarray(logits), np.asarray(h, np.float32) @ w, rtol=1e-2, atol=1e-2
    )
