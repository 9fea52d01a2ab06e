"""Multi-head attention: NumPy reference with causal/padding masks, QK-norm and the KV cache."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.nn.attention import KVCache, MultiHeadAttention

B, S, D, H, K = 2, 12, 16, 2, 8


def _rope_np(x, positions, base=1e4):
    half = x.shape[-1] // 2
    theta = base ** (-np.arange(half) * 2.0 / x.shape[-1])
    z = (x[..., :half] + 1j * x[..., half:]) * np.exp(1j * positions[:, :, None, None] * theta)
    return np.concatenate([z.real, z.imag], axis=-1)


def _attention_reference(p, x, padding, causal, qk_norm=False, eps=1e-5):
    x = np.asarray(x, np.float64)
    q = np.einsum("bsd,dhk->bshk", x, p["wq"])
    k = np.einsum("bsd,dhk->bshk", x, p["wk"])
    v = np.einsum("bsd,dhk->bshk", x, p["wv"])
    if qk_norm:
        q = q / np.sqrt(np.mean(q**2, axis=(2, 3), keepdims=True) + eps) * p["q_norm"]["scale"]
        k = k / np.sqrt(np.mean(k**2, axis=(2, 3), keepdims=True) + eps) * p["k_norm"]["scale"]
    pos = np.broadcast_to(np.arange(x.shape[1]), x.shape[:2]).astype(np.float64)
    q, k = _rope_np(q, pos), _rope_np(k, pos)
    out = np.zeros_like(q)
    for b in range(x.shape[0]):
        for h in range(q.shape[2]):
            scores = q[b, :, h] @ k[b, :, h].T / np.sqrt(q.shape[-1])
            allowed = np.broadcast_to(padding[b][None, :], scores.shape).copy()
            if causal:
                allowed &= np.tril(np.ones_like(allowed))
            scores = np.where(allowed, scores, -np.inf)
            w = np.exp(scores - scores.max(axis=-1, keepdims=True))
            w = w / w.sum(axis=-1, keepdims=True)
            out[b, :, h] = w @ v[b, :, h]
    return np.einsum("bshk,hkd->bsd", out, p["wo"])


@pytest.fixture(scope="module")
def data():
    x = jax.random.normal(jax.random.key(0), (B, S, D))
    padding = np.ones((B, S), bool)
    padding[0, 9:] = False  # right padding in row 0
    padding[1, [2, 5]] = False  # holes in row 1
    return x, padding


@pytest.mark.parametrize(
    "causal,qk_norm", [(True, False), (False, False), (True, True)], ids=["causal", "bidir", "qknorm"]
)
def test_attention_matches_numpy(data, causal, qk_norm):
    x, padding = data
    layer = MultiHeadAttention(n_heads=H, head_dim=K, causal=causal, qk_norm=qk_norm, init_std=0.2)
    params = layer.init(jax.random.key(1), x)
    if qk_norm:  # non-trivial gains
        inner = nn.unbox(params)["params"]
        gains = jax.random.uniform(jax.random.key(3), (2, H, K), minval=0.5, maxval=1.5)
        inner = {**inner, "q_norm": {"scale": gains[0]}, "k_norm": {"scale": gains[1]}}
        params = {"params": inner}
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), nn.unbox(params)["params"])
    y, cache = jax.jit(lambda prm, x, m: layer.apply(prm, x, padding_mask=m))(
        params, x, jnp.asarray(padding)
    )
    assert cache is None
    expected = _attention_reference(p, x, padding, causal, qk_norm)
    # rows whose query sees at least one real key are defined
    np.testing.assert_allclose(np.asarray(y), expected, rtol=1e-4, atol=1e-5)


def test_attention_partitioning_names():
    layer = MultiHeadAttention(n_heads=H, head_dim=K, qk_norm=True)
    params = layer.init(jax.random.key(1), jnp.ones((1, 4, D)))
    P = jax.sharding.PartitionSpec
    specs = nn.get_partition_spec(params)["params"]
    assert specs["wq"] == P("embed", "heads", "kv")
    assert specs["wo"] == P("heads", "kv", "embed")
    assert specs["q_norm"]["scale"] == P("heads", "kv")


def test_fully_masked_rows_stay_finite(data):
    x, _ = data
    layer = MultiHeadAttention(n_heads=H, head_dim=K)
    params = layer.init(jax.random.key(1), x)
    y, _ = layer.apply(params, x, padding_mask=jnp.zeros((B, S), jnp.bool_))
    assert np.isfinite(np.asarray(y)).all()


@pytest.fixture(scope="module")
def cached_layer(data):
    x, _ = data
    layer = MultiHeadAttention(n_heads=H, head_dim=K, qk_norm=True)
    params = layer.init(jax.random.key(1), x)
    full = jax.jit(lambda p, x: layer.apply(p, x)[0])
    step = jax.jit(lambda p, x, c: layer.apply(p, x, cache=c))
    return params, full, step


def test_prefill_then_decode_equals_full_forward(data, cached_layer):
    x, _ = data
    params, full, step = cached_layer
    expected = full(params, x)
    cache = KVCache.init(B, S + 4, H, K)
    y_pre, cache = step(params, x[:, :7], cache)
    outs = [y_pre]
    for t in range(7, S):
        y_t, cache = step(params, x[:, t : t + 1], cache)
        outs.append(y_t)
    np.testing.assert_array_equal(np.asarray(cache.index), [S, S])
    np.testing.assert_allclose(np.asarray(jnp.concatenate(outs, 1)), np.asarray(expected), atol=1e-5)


def test_cache_rows_can_roll_back_independently(data, cached_layer):
    """Lowering one row's index discards its later tokens (speculative-decoding rollback)."""
    x, _ = data
    params, full, step = cached_layer
    cache = KVCache.init(B, S, H, K)
    _, cache = step(params, x[:, :8], cache)
    # row 0 rejects its last 3 tokens; row 1 keeps all 8
    cache = cache.replace(index=jnp.array([5, 8], jnp.int32))
    x_new = jax.random.normal(jax.random.key(9), (B, 1, D))
    y, cache = step(params, x_new, cache)
    row0 = full(params, jnp.concatenate([x[:1, :5], x_new[:1]], 1))[:, -1]
    row1 = full(params, jnp.concatenate([x[1:, :8], x_new[1:]], 1))[:, -1]
    np.testing.assert_allclose(np.asarray(y[:, 0]), np.asarray(jnp.concatenate([row0, row1])), atol=1e-5)
    np.testing.assert_array_equal(np.asarray(cache.index), [6, 9])


def test_kv_cache_init_validates():
    with pytest.raises(ValueError, match="max_len=0"):
        KVCache.init(1, 0, 2, 4)
