"""Fake quantisation: error ∝ 2^-b, idempotence, grid, straight-through gradient, layer hooks."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.lm.model import Decoder, DecoderConfig, init_cache
from jaxlab.lm.moe import MoEConfig, MoEFeedForward
from jaxlab.nn.quantization import FLOAT_FORMATS, QuantConfig, fake_quant, quantize_dequantize
from tests.typecheck import unchecked

X = jax.random.normal(jax.random.key(0), (256, 32)) * jnp.linspace(0.1, 3.0, 32)[None, :]


def _numpy_quant(x, bits, axis):
    qmax = 2 ** (bits - 1) - 1
    s = np.max(np.abs(x), axis=axis, keepdims=True) / qmax
    return np.clip(np.round(x / s), -qmax - 1, qmax) * s


@pytest.mark.parametrize("bits", [3, 8])
def test_matches_numpy_reference_per_channel(bits):
    got = jax.jit(quantize_dequantize, static_argnums=(1, 2))(X, bits, 0)
    np.testing.assert_allclose(got, _numpy_quant(np.asarray(X), bits, 0), rtol=1e-6, atol=1e-7)
    levels = [np.unique(np.asarray(got[:, j])).size for j in range(X.shape[1])]
    assert max(levels) <= 2**bits


def test_error_falls_as_two_to_minus_b():
    bits = np.arange(3, 13)
    rmse = [float(jnp.sqrt(jnp.mean((quantize_dequantize(X, int(b), 0) - X) ** 2))) for b in bits]
    slope = np.polyfit(bits, np.log2(rmse), 1)[0]
    assert -1.05 < slope < -0.95, slope
    # worst case: half a step of each column's grid
    for b in (4, 8):
        step = jnp.max(jnp.abs(X), axis=0, keepdims=True) / (2 ** (b - 1) - 1)
        assert bool(jnp.all(jnp.abs(quantize_dequantize(X, b, 0) - X) <= step / 2 * (1 + 1e-5)))


@pytest.mark.parametrize("axes", [None, 0, (0, 1)], ids=["tensor", "channel", "all-axes"])
def test_idempotent(axes):
    once = quantize_dequantize(X, 4, axes)
    np.testing.assert_allclose(quantize_dequantize(once, 4, axes), once, rtol=1e-6, atol=1e-7)


def test_zero_group_stays_zero():
    x = X.at[:, 3].set(0.0)
    assert bool(jnp.all(quantize_dequantize(x, 4, 0)[:, 3] == 0))


def test_ste_gradient_is_identity():
    c = jax.random.normal(jax.random.key(1), X.shape)
    for bits in (2, 4):
        g = jax.jit(jax.grad(lambda x, b=bits: jnp.sum(fake_quant(x, b, 0) * c)))(X)
        np.testing.assert_array_equal(g, c)
    assert fake_quant(X, None) is X


@pytest.mark.parametrize("bits", [1, 33, 0, 2.5, True])
def test_bad_bits_name_the_field(bits):
    with pytest.raises(ConfigError, match="'w_bits'"):
        QuantConfig(w_bits=bits)
    with pytest.raises(ConfigError, match="bits"):
        unchecked(quantize_dequantize)(X, bits)  # its own validation


KV = (
    jax.random.normal(jax.random.key(7), (2, 5, 3, 4))
    * jnp.linspace(0.2, 2.0, 3)[None, None, :, None]
)


@pytest.mark.parametrize(
    "granularity,axes",
    [("head", (0, 1, 3)), ("token_head", (3,)), ("token", (2, 3)), ("tensor", None)],
)
def test_kv_granularity_matches_numpy(granularity, axes):
    """The default (the paper's) is one scale per head over batch, tokens and head_dim."""
    quant = QuantConfig(kv_bits=3, kv_granularity=granularity)
    np.testing.assert_allclose(quant.cache(KV), _numpy_quant(np.asarray(KV), 3, axes), rtol=1e-6)
    if granularity == "head":
        np.testing.assert_array_equal(QuantConfig(kv_bits=3).cache(KV), quant.cache(KV))


def test_weight_and_activation_granularities_match_numpy():
    """Defaults: weights per output channel, activations per tensor; the alternatives too."""
    x = np.asarray(X)
    default = QuantConfig(w_bits=3, a_bits=3)
    np.testing.assert_allclose(default.weights("mlp", X, (0,)), _numpy_quant(x, 3, 0), rtol=1e-6)
    np.testing.assert_allclose(default.activations("mlp", X), _numpy_quant(x, 3, None), rtol=1e-6)
    w = QuantConfig(w_bits=3, a_bits=3, w_granularity="tensor", a_granularity="token")
    np.testing.assert_allclose(w.weights("mlp", X, (0,)), _numpy_quant(x, 3, None), rtol=1e-6)
    np.testing.assert_allclose(w.activations("mlp", X), _numpy_quant(x, 3, 1), rtol=1e-6)


def test_granularity_that_does_not_fit_names_the_key():
    for key, value in (("w_granularity", "head"), ("a_granularity", "head"),
                       ("kv_granularity", "channel")):  # fmt: skip
        with pytest.raises(ConfigError, match=f"'{key}'"):
            QuantConfig(**{key: value})
    with pytest.raises(ConfigError, match="'quant.kv_granularity'"):
        unchecked(QuantConfig.cache)(QuantConfig(kv_bits=4), X)  # its own validation
    with pytest.raises(ConfigError, match="'quant.w_granularity'"):
        QuantConfig(w_bits=4).weights("mlp", X, (0, 1))
    with pytest.raises(ConfigError, match="'quant.a_granularity'"):
        QuantConfig(a_bits=4, a_granularity="token").activations("mlp", X[0])


def test_unknown_or_absent_target_names_the_field():
    with pytest.raises(ConfigError, match="'targets'"):
        QuantConfig(w_bits=4, targets=("attn",))
    with pytest.raises(ConfigError, match="quant.targets"):
        DecoderConfig(quant=QuantConfig(w_bits=4, targets=("experts",)))
    with pytest.raises(ConfigError, match="quant.targets"):
        DecoderConfig(tie_embeddings=True, quant=QuantConfig(w_bits=4, targets=("head",)))


CFG = DecoderConfig(d_model=32, n_layers=2, n_heads=2, head_dim=16, d_ff=64, max_len=16)


@pytest.fixture(scope="module")
def model_and_params():
    tokens = jax.random.randint(jax.random.key(2), (2, 16), 0, CFG.vocab_size)
    params = jax.jit(Decoder(CFG).init)(jax.random.key(3), tokens)
    return tokens, params


def _logits(quant, params, tokens):
    cfg = DecoderConfig(**{**CFG.__dict__, "quant": quant})
    return jax.jit(Decoder(cfg).apply)(params, tokens)


def test_16_bit_model_equals_full_precision_to_round_off(model_and_params):
    tokens, params = model_and_params
    full = _logits(QuantConfig(), params, tokens)
    q16 = _logits(QuantConfig(16, 16, 16, targets=("attention", "mlp", "head")), params, tokens)
    q4 = _logits(QuantConfig(4, 4, 4), params, tokens)
    err16 = float(jnp.max(jnp.abs(q16 - full)))
    err4 = float(jnp.max(jnp.abs(q4 - full)))
    assert err16 < 1e-4 * float(jnp.max(jnp.abs(full))) + 1e-5, err16
    assert err4 > 50 * err16  # the hooks are live: 4 bits moves the logits
    per_token = _logits(QuantConfig(4, 4, 4, kv_granularity="token_head"), params, tokens)
    assert float(jnp.max(jnp.abs(per_token - q4))) > 10 * err16  # the KV granularity is live


def test_kv_quantised_cache_decoding_equals_full_pass(model_and_params):
    """Per-token, per-head KV scales make incremental decoding equal the full pass."""
    tokens, params = model_and_params
    quant = QuantConfig(w_bits=5, kv_bits=3, kv_granularity="token_head")
    cfg = DecoderConfig(**{**CFG.__dict__, "quant": quant})
    model = Decoder(cfg)
    full = jax.jit(model.apply)(params, tokens)
    decode = jax.jit(lambda p, t, c: model.apply(p, t, c, method=Decoder.decode))
    first, cache = decode(params, tokens[:, :8], init_cache(cfg, tokens.shape[0]))
    second, _ = decode(params, tokens[:, 8:], cache)
    np.testing.assert_allclose(jnp.concatenate([first, second], axis=1), full, atol=2e-5)


def test_moe_expert_hook_equals_quantising_the_weights():
    """Fake-quantised experts compute the full-precision layer on ``Q_b``-rounded expert kernels."""
    cfg = MoEConfig(num_experts=4, top_k=2, expert_ff=16)
    x = jax.random.normal(jax.random.key(4), (2, 8, 16))
    init = jax.jit(MoEFeedForward(cfg).init)
    params = nn.meta.unbox({"params": init(jax.random.key(5), x)["params"]})
    rounded = {
        "params": {
            k: quantize_dequantize(v, 3, 1) if k in ("w1", "w2", "w3") else v
            for k, v in params["params"].items()
        }
    }
    quant = QuantConfig(w_bits=3, targets=("experts",))
    mutable = ["moe_aux_loss", "moe_stats"]

    @jax.jit
    def both(p, r):
        y_q = MoEFeedForward(cfg, quant=quant).apply(p, x, mutable=mutable)[0]
        y_r = MoEFeedForward(cfg).apply(r, x, mutable=mutable)[0]
        return y_q, y_r

    # the rounding is not a no-op, so equal outputs mean the hook quantises the experts
    assert float(jnp.max(jnp.abs(rounded["params"]["w1"] - params["params"]["w1"]))) > 1e-3
    y_q, y_r = both(params, rounded)
    np.testing.assert_allclose(y_q, y_r, atol=1e-6)


def _format_values(fmt):
    """Every finite value of a float format (codes ``0 .. 2^width - 1``), its codes, its max."""
    dtype, width = FLOAT_FORMATS[fmt]
    codes = np.arange(2**width, dtype=np.uint8)
    values = codes.view(np.dtype(dtype)).astype(np.float32)
    keep = np.isfinite(values)
    return values[keep], codes[keep], float(ml_dtypes.finfo(np.dtype(dtype)).max)


@pytest.fixture(scope="module")
def float_grids():
    """Per format: every finite value, in a column scaled by 1 and one by 2^-5 (per-channel
    scales are powers of two: the grid is hit exactly), and the midpoints of neighbouring
    positive values beside the format's max (per-tensor scale 1)."""
    inputs, outputs = {}, {}
    for fmt in FLOAT_FORMATS:
        values, codes, fmax = _format_values(fmt)
        pos = np.argsort(values)
        pos = pos[values[pos] > 0]
        mids = np.r_[(values[pos][:-1] + values[pos][1:]) / 2, fmax]
        inputs[fmt] = (np.stack([values, values / 32], axis=1), mids)

    @jax.jit
    def run(inputs):
        width = {f: FLOAT_FORMATS[f][1] for f in FLOAT_FORMATS}
        return {
            f: (
                quantize_dequantize(grid, width[f], 0, fmt=f),
                quantize_dequantize(mids, width[f], fmt=f),
            )
            for f, (grid, mids) in inputs.items()
        }

    for fmt, (grid, mids) in run(inputs).items():
        outputs[fmt] = (np.asarray(grid), np.asarray(mids))
    return inputs, outputs


@pytest.mark.parametrize("fmt", list(FLOAT_FORMATS))
def test_float_format_values_round_trip_and_ties_go_to_even(float_grids, fmt):
    inputs, outputs = float_grids
    np.testing.assert_array_equal(outputs[fmt][0], inputs[fmt][0])
    values, codes, _ = _format_values(fmt)
    code_of = dict(zip(values.tolist(), codes.tolist(), strict=False))
    got = outputs[fmt][1][:-1]
    assert all(v in code_of and code_of[v] % 2 == 0 for v in got.tolist()), got  # even mantissa
    lo, hi = np.sort(values[values > 0])[:-1], np.sort(values[values > 0])[1:]
    assert np.all((got == lo) | (got == hi))


def test_float_format_error_ranks_by_mantissa_bits():
    """Relative error of a Gaussian tensor at matched (absmax) scaling: FP4 E2M1 (1 mantissa bit)
    > FP8 E5M2 (2) > FP8 E4M3 (3), per tensor and per output channel."""
    x = jax.random.normal(jax.random.key(3), (512, 16))

    scopes = {"tensor": None, "channel": 0}

    @jax.jit
    def errors(x):
        return {
            f"{f}/{scope}": jnp.linalg.norm(quantize_dequantize(x, w, axes, fmt=f) - x)
            / jnp.linalg.norm(x)
            for f, (_, w) in FLOAT_FORMATS.items()
            for scope, axes in scopes.items()
        }

    e = {k: float(v) for k, v in errors(x).items()}
    for scope in scopes:
        fp4, e5m2, e4m3 = (e[f"{f}/{scope}"] for f in ("fp4_e2m1", "fp8_e5m2", "fp8_e4m3"))
        assert fp4 > 1.5 * e5m2 > 1.5 * 1.5 * e4m3, (scope, fp4, e5m2, e4m3)


def test_float_formats_in_quant_config():
    q = QuantConfig(w_format="fp8_e4m3", a_format="fp4_e2m1")
    assert (q.w_bits, q.a_bits, q.kv_bits) == (8, 4, None)
    with pytest.raises(ConfigError, match="'w_format'"):
        QuantConfig(w_format="fp6_e3m2")
    with pytest.raises(ConfigError, match="'kv_bits'"):
        QuantConfig(kv_bits=4, kv_format="fp8_e5m2")
    w = X[:, :4]
    np.testing.assert_array_equal(
        q.weights("mlp", w, (0,)), quantize_dequantize(w, 8, 0, fmt="fp8_e4m3")
    )
    np.testing.assert_array_equal(
        q.activations("mlp", w), quantize_dequantize(w, 4, fmt="fp4_e2m1")
    )
