"""Multi-head attention: NumPy reference with causal/padding masks, QK-norm and the KV cache."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.nn.attention import KVCache, MultiHeadAttention
from tests.typecheck import checks_off

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
    x = np.random.default_rng(0).standard_normal((B, S, D)).astype(np.float32)
    padding = np.ones((B, S), bool)
    padding[0, 9:] = False  # right padding in row 0
    padding[1, [2, 5]] = False  # holes in row 1
    return x, padding


@pytest.fixture(scope="module")
def qk_params(data):
    """One parameter set (with QK-norm gains) shared by every variant; plain variants drop the
    gains."""
    x, _ = data
    layer = MultiHeadAttention(n_heads=H, head_dim=K, qk_norm=True, init_std=0.2)
    params = jax.jit(layer.init)(jax.random.key(1), x)
    specs = nn.get_partition_spec(params)["params"]
    P = jax.sharding.PartitionSpec
    assert specs["wq"] == P("embed", "heads", "kv") and specs["wo"] == P("heads", "kv", "embed")
    assert specs["q_norm"]["scale"] == P("heads", "kv")
    inner = nn.unbox(params)["params"]
    gains = np.random.default_rng(3).uniform(0.5, 1.5, (2, H, K)).astype(np.float32)
    return {**inner, "q_norm": {"scale": gains[0]}, "k_norm": {"scale": gains[1]}}


def _params(qk_params, qk_norm):
    if qk_norm:
        return {"params": qk_params}
    return {"params": {k: v for k, v in qk_params.items() if not k.endswith("_norm")}}


@pytest.mark.parametrize(
    "causal,qk_norm",
    [(True, False), (False, False), (True, True)],
    ids=["causal", "bidir", "qknorm"],
)
def test_attention_matches_numpy(data, qk_params, causal, qk_norm):
    x, padding = data
    layer = MultiHeadAttention(n_heads=H, head_dim=K, causal=causal, qk_norm=qk_norm)
    params = _params(qk_params, qk_norm)
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params["params"])
    apply = jax.jit(lambda prm, x, m: layer.apply(prm, x, padding_mask=m))
    y, cache = apply(params, x, padding)
    assert cache is None
    expected = _attention_reference(p, x, padding, causal, qk_norm)
    np.testing.assert_allclose(np.asarray(y), expected, rtol=1e-4, atol=1e-5)
    # a fully padded batch gives finite (meaningless) outputs, never NaN
    y0, _ = apply(params, x, np.zeros_like(padding))
    assert np.isfinite(np.asarray(y0)).all()


@pytest.fixture(scope="module")
def cached_layer(qk_params):
    layer = MultiHeadAttention(n_heads=H, head_dim=K, qk_norm=True)
    full = jax.jit(lambda p, x: layer.apply(p, x)[0])
    step = jax.jit(lambda p, x, c: layer.apply(p, x, cache=c))
    return {"params": qk_params}, full, step


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
    np.testing.assert_allclose(
        np.asarray(jnp.concatenate(outs, 1)), np.asarray(expected), atol=1e-5
    )


def test_cache_rows_can_roll_back_independently(data, cached_layer):
    """Lowering one row's index discards its later tokens (speculative-decoding rollback)."""
    x, _ = data
    params, full, step = cached_layer
    cache = KVCache.init(B, S + 4, H, K)
    _, cache = step(params, x[:, :7], cache)
    # row 0 rejects its last 3 tokens; row 1 keeps all 7
    cache = cache.replace(index=jnp.array([4, 7], jnp.int32))
    x_new = np.random.default_rng(9).standard_normal((B, 1, D)).astype(np.float32)
    y, cache = step(params, x_new, cache)
    np.testing.assert_array_equal(np.asarray(cache.index), [5, 8])
    # reference: full causal forward of [x0[:4], new0, ...] and [x1[:7], new1, ...]
    edited = x.copy()
    edited[0, 4], edited[1, 7] = x_new[0, 0], x_new[1, 0]
    ref = np.asarray(full(params, edited))
    np.testing.assert_allclose(np.asarray(y[:, 0]), np.stack([ref[0, 4], ref[1, 7]]), atol=1e-5)


def test_kv_cache_init_validates():
    with pytest.raises(ValueError, match="max_len=0"):
        KVCache.init(1, 0, 2, 4)


def _cross_reference(p, x, ctx, ctx_mask):
    x, ctx = np.asarray(x, np.float64), np.asarray(ctx, np.float64)
    q = np.einsum("bsd,dhk->bshk", x, p["wq"])
    k = np.einsum("bcd,dhk->bchk", ctx, p["wk"])
    v = np.einsum("bcd,dhk->bchk", ctx, p["wv"])
    out = np.zeros_like(q)
    for b in range(x.shape[0]):
        for h in range(q.shape[2]):
            scores = q[b, :, h] @ k[b, :, h].T / np.sqrt(q.shape[-1])
            scores = np.where(ctx_mask[b][None, :], scores, -np.inf)
            w = np.exp(scores - scores.max(axis=-1, keepdims=True))
            out[b, :, h] = (w / w.sum(axis=-1, keepdims=True)) @ v[b, :, h]
    return np.einsum("bshk,hkd->bsd", out, p["wo"])


def test_cross_attention_matches_numpy_and_ignores_masked_context(data):
    """Queries from x, keys/values from a context of another length and width, key padding."""
    x, _ = data
    rng = np.random.default_rng(5)
    ctx = rng.standard_normal((B, 7, 10)).astype(np.float32)
    ctx_mask = np.ones((B, 7), bool)
    ctx_mask[0, 4:] = False
    ctx_mask[1, [1, 3]] = False
    layer = MultiHeadAttention(n_heads=H, head_dim=K, causal=False, use_rope=False, init_std=0.2)
    j = jnp.asarray  # the layer's inputs are JAX arrays (docs/types.md)
    params = nn.unbox(layer.init(jax.random.key(2), j(x), context=j(ctx), context_mask=j(ctx_mask)))
    assert params["params"]["wk"].shape == (10, H, K) and params["params"]["wq"].shape == (D, H, K)
    apply = jax.jit(lambda prm, x, c, m: layer.apply(prm, x, context=c, context_mask=m)[0])
    y = apply(params, x, ctx, ctx_mask)
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params["params"])
    np.testing.assert_allclose(
        np.asarray(y), _cross_reference(p, x, ctx, ctx_mask), rtol=1e-4, atol=1e-5
    )
    # changing masked context tokens leaves the output unchanged; changing a real one does not
    poked = ctx.copy()
    poked[0, 5] += 10.0
    np.testing.assert_array_equal(np.asarray(apply(params, x, poked, ctx_mask)), np.asarray(y))
    poked[0, 1] += 10.0
    assert not np.allclose(np.asarray(apply(params, x, poked, ctx_mask))[0], np.asarray(y)[0])


def test_cross_attention_refuses_bad_inputs(data):
    x = jnp.asarray(data[0])
    ctx = jnp.zeros((B, 3, 4), jnp.float32)
    causal = MultiHeadAttention(n_heads=H, head_dim=K, use_rope=False)
    with pytest.raises(ValueError, match="causal=True"):
        causal.init(jax.random.key(0), x, context=ctx)
    layer = MultiHeadAttention(n_heads=H, head_dim=K, causal=False, use_rope=False)
    with pytest.raises(ValueError, match="context_mask: got shape"), checks_off():
        layer.init(jax.random.key(0), x, context=ctx, context_mask=jnp.ones((B, 4), bool))
    with pytest.raises(ValueError, match=r"context: got shape \(1, 3, 4\)"), checks_off():
        layer.init(jax.random.key(0), x, context=ctx[:1])  # the layer's own validation
    with pytest.raises(ValueError, match="context_mask: given without context"):
        layer.init(jax.random.key(0), x, context_mask=jnp.ones((B, 3), bool))
