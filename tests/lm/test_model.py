"""Decoder LM: shapes, causality, KV-cache decoding, padding, the FFN hook, learning."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.lm.data import load_corpus, pack_windows
from jaxlab.lm.model import Decoder, DecoderConfig, dense_ffn, init_cache, next_token_loss
from jaxlab.lm.tokenizer import ByteTokenizer
from jaxlab.nn.mlp import MLP

CFG = DecoderConfig(
    d_model=32, n_layers=2, n_heads=4, head_dim=8, d_ff=64, max_len=32, qk_norm=True
)
B, S = 2, 32


@pytest.fixture(scope="module")
def tokens():
    return np.random.default_rng(0).integers(0, CFG.vocab_size, (B, S)).astype(np.int32)


@pytest.fixture(scope="module")
def lm(tokens):
    model = Decoder(CFG)
    params = jax.jit(model.init)(jax.random.key(0), tokens)
    forward = jax.jit(lambda p, t: model.apply(p, t))
    decode = jax.jit(lambda p, t, c: model.apply(p, t, c, method=Decoder.decode))
    return model, params, forward, decode


def test_logits_shape_and_partitioning(lm, tokens):
    _, params, forward, _ = lm
    logits = forward(params, tokens)
    assert logits.shape == (B, S, CFG.vocab_size) and logits.dtype == jnp.float32
    # at init (std 0.02) the prediction is close to uniform: loss ≈ ln V
    loss = next_token_loss(logits[:, :-1], tokens[:, 1:])
    np.testing.assert_allclose(float(loss), np.log(CFG.vocab_size), atol=0.05)
    specs = nn.get_partition_spec(params)["params"]
    P = jax.sharding.PartitionSpec
    assert specs["embed"]["embedding"] == P("vocab", "embed")
    assert specs["head"]["kernel"] == P("embed", "vocab")
    assert specs["blocks_1"]["ffn"]["wi_gate"] == P("embed", "mlp")
    assert set(specs) == {"embed", "blocks_0", "blocks_1", "final_norm", "head"}


def test_changing_a_future_token_keeps_past_logits(lm, tokens):
    _, params, forward, _ = lm
    t = 17
    edited = tokens.copy()
    edited[:, t] = (edited[:, t] + 1) % CFG.vocab_size
    a, b = np.asarray(forward(params, tokens)), np.asarray(forward(params, edited))
    np.testing.assert_array_equal(a[:, :t], b[:, :t])
    assert np.abs(a[:, t:] - b[:, t:]).max() > 1e-4


def test_prefill_and_one_token_decode_equal_full_forward(lm, tokens):
    _, params, forward, decode = lm
    full = np.asarray(forward(params, tokens))
    cache = init_cache(CFG, B)
    logits, cache = decode(params, tokens[:, :20], cache)
    steps = [logits]
    for t in range(20, S):
        logits, cache = decode(params, tokens[:, t : t + 1], cache)
        steps.append(logits)
    np.testing.assert_allclose(np.asarray(jnp.concatenate(steps, axis=1)), full, atol=1e-5)
    assert [int(c.index[0]) for c in cache] == [S] * CFG.n_layers


def test_greedy_generation_in_scan_matches_full_forward(lm, tokens):
    """Decoding is jit/scan-able: greedy tokens generated with the cache inside ``lax.scan`` are
    the argmax of the full forward pass run on the generated sequence."""
    model, params, forward, _ = lm
    prompt_len, new = 20, S - 20

    @jax.jit
    def generate(params, prompt):
        cache = init_cache(CFG, B)
        logits, cache = model.apply(params, prompt, cache, method=Decoder.decode)
        first = jnp.argmax(logits[:, -1], axis=-1)

        def step(carry, _):
            token, cache = carry
            logits, cache = model.apply(params, token[:, None], cache, method=Decoder.decode)
            nxt = jnp.argmax(logits[:, 0], axis=-1)
            return (nxt, cache), token

        _, generated = jax.lax.scan(step, (first, cache), None, length=new)
        return generated.T  # [batch, new]

    generated = np.asarray(generate(params, tokens[:, :prompt_len]))
    sequence = np.concatenate([tokens[:, :prompt_len], generated], axis=1).astype(np.int32)
    greedy = np.argmax(np.asarray(forward(params, sequence)), axis=-1)
    np.testing.assert_array_equal(greedy[:, prompt_len - 1 : S - 1], generated)


def test_left_padding_with_positions_matches_unpadded(lm, tokens):
    model, params, _, _ = lm
    pad = 5
    row = tokens[0]
    padded = np.concatenate([np.zeros(pad, np.int32), row[: S - pad]])
    batch = np.stack([padded, row])
    mask = np.stack([np.arange(S) >= pad, np.ones(S, bool)])
    positions = (np.cumsum(mask, axis=1) - 1).clip(0).astype(np.int32)
    logits = jax.jit(lambda p, t, m, pos: model.apply(p, t, padding_mask=m, positions=pos))(
        params, batch, mask, positions
    )
    np.testing.assert_allclose(
        np.asarray(logits[0, pad:]), np.asarray(logits[1, : S - pad]), atol=1e-5
    )


class _SowingFFN(nn.Module):
    """Stand-in for an MoE layer: a dense FFN that reports an auxiliary loss."""

    d_ff: int

    @nn.compact
    def __call__(self, x):
        self.sow("losses", "aux", jnp.mean(jnp.square(x)))
        return MLP(features=(self.d_ff, x.shape[-1]), activation=nn.silu)(x)


def test_layer_ffn_hook_chooses_per_layer_and_collects_losses(tokens):
    model = Decoder(CFG, layer_ffn=lambda i: _SowingFFN(d_ff=48) if i == 1 else dense_ffn(CFG))
    variables = jax.eval_shape(model.init, jax.random.key(0), tokens)
    params = variables["params"]
    assert set(params["blocks_0"]["ffn"]) == {"wi_gate", "wi_up", "wo"}
    assert set(params["blocks_1"]["ffn"]["MLP_0"]) == {"kernel_0", "bias_0", "kernel_1", "bias_1"}
    logits, state = jax.eval_shape(
        lambda v: model.apply({"params": v["params"]}, tokens, mutable=["losses"]), variables
    )
    assert logits.shape == (B, S, CFG.vocab_size)
    assert list(state["losses"]) == ["blocks_1"]
    assert state["losses"]["blocks_1"]["ffn"]["aux"][0].shape == ()


def test_tied_embeddings_and_bf16_shapes(tokens):
    cfg = DecoderConfig(
        d_model=32,
        n_layers=1,
        n_heads=2,
        head_dim=8,
        d_ff=32,
        max_len=S,
        tie_embeddings=True,
        dtype="bfloat16",
    )
    model = Decoder(cfg)
    variables = jax.eval_shape(model.init, jax.random.key(0), tokens)
    assert "head" not in variables["params"]
    logits = jax.eval_shape(model.apply, variables, tokens)
    assert logits.shape == (B, S, cfg.vocab_size) and logits.dtype == jnp.float32
    assert init_cache(cfg, 3, 16)[0].key.dtype == jnp.bfloat16


def test_grouped_query_attention_equals_mha_with_repeated_kv_heads():
    """With ``n_kv_heads=2`` of 4 heads the model equals plain MHA whose key/value kernels repeat
    each shared head twice (the 2-head KV cache is checked by ``jaxlab generate --hf-dir`` against
    ``transformers``' greedy generation in ``tests/recipes/test_generate.py``)."""
    gqa_cfg = DecoderConfig(
        vocab_size=50, d_model=16, n_layers=1, n_heads=4, n_kv_heads=2, head_dim=4, d_ff=32,
        max_len=8,
    )  # fmt: skip
    mha_cfg = DecoderConfig(**{**gqa_cfg.__dict__, "n_kv_heads": None})
    toks = np.arange(8, dtype=np.int32)[None] % 50
    shapes = nn.meta.unbox(jax.eval_shape(Decoder(gqa_cfg).init, jax.random.key(1), toks))
    rng = np.random.default_rng(0)
    params = jax.tree.map(lambda x: rng.normal(0, 0.3, x.shape).astype(x.dtype), shapes)
    attn = params["params"]["blocks_0"]["attn"]
    assert attn["wk"].shape == (16, 2, 4) and attn["wq"].shape == (16, 4, 4)
    assert init_cache(gqa_cfg, 1)[0].key.shape == (1, 8, 2, 4)
    mha = jax.tree.map(lambda x: x, params)
    for name in ("wk", "wv"):
        mha["params"]["blocks_0"]["attn"][name] = np.repeat(attn[name], 2, axis=1)
    gqa_logits = jax.jit(Decoder(gqa_cfg).apply)(params, toks)
    np.testing.assert_allclose(gqa_logits, jax.jit(Decoder(mha_cfg).apply)(mha, toks), atol=1e-5)


@pytest.mark.parametrize(
    "field,value",
    [
        ("d_model", 0),
        ("head_dim", 7),
        ("n_kv_heads", 3),
        ("dtype", "float64"),
        ("init", "xavier"),
        ("init_std", 0.0),
    ],
)
def test_config_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"DecoderConfig.{field}="):
        DecoderConfig(**{field: value})


def test_bad_call_shapes_raise(lm):
    model, params, _, _ = lm
    with pytest.raises(ValueError, match="expected at most 32"):
        jax.eval_shape(model.apply, params, jnp.zeros((1, S + 1), jnp.int32))
    with pytest.raises(ValueError, match="max_len=64"):
        init_cache(CFG, 1, 64)


def test_tiny_model_learns_a_fixed_batch():
    """A 2-layer, 32-wide model trained with Adam on one batch of corpus text: loss must fall."""
    cfg = DecoderConfig(d_model=32, n_layers=2, n_heads=4, head_dim=8, d_ff=64, max_len=32)
    stream = np.concatenate(
        [ByteTokenizer().encode(d, add_bos=True, add_eos=True) for d in load_corpus()[:40]]
    )
    batch = pack_windows(stream, S + 1)[:8]
    model = Decoder(cfg)
    optimizer = optax.adam(3e-3)

    def loss_fn(params):
        return next_token_loss(model.apply(params, batch[:, :-1]), batch[:, 1:])

    @jax.jit
    def train(key):
        params = model.init(key, batch[:, :-1])
        opt_state = optimizer.init(params)

        def step(carry, _):
            params, opt_state = carry
            loss, grads = jax.value_and_grad(loss_fn)(params)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), loss

        _, losses = jax.lax.scan(step, (params, opt_state), None, length=100)
        return losses

    losses = np.asarray(train(jax.random.key(0)))
    assert np.isfinite(losses).all()
    assert losses[0] > 5.0  # ≈ ln 259 at init
    assert losses[-10:].mean() / losses[0] < 0.25, losses[[0, 25, 50, 75, 99]]
