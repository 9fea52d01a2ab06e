"""Post-training quantisation: RTN per channel, GPTQ against a NumPy Alg. 1, GPTQ beats RTN."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.lm.data import load_corpus, pack_windows
from jaxlab.lm.model import Decoder, DecoderConfig, next_token_loss
from jaxlab.lm.quant import gptq_matrix, gptq_quantize, linear_layers, rtn_quantize
from jaxlab.lm.tokenizer import ByteTokenizer
from jaxlab.nn.quantization import QuantConfig, quantize_dequantize


def _numpy_gptq(w, h, bits, damp=0.01, group_size=-1, desc_act=False):
    """GPTQ Alg. 1 without lazy batching (row i of our W = column i of the paper's W); with
    ``desc_act`` rows in decreasing order of diag H, with ``group_size`` a fresh per-column scale
    from the updated rows at each group's first row (IST-DASLab/gptq ``fasterquant``)."""
    w = np.array(w, np.float64)
    h = np.array(h, np.float64)
    qmax = 2 ** (bits - 1) - 1
    scale = np.max(np.abs(w), axis=0) / qmax
    perm = np.argsort(-np.diag(h), kind="stable") if desc_act else np.arange(w.shape[0])
    w, h = w[perm], h[perm][:, perm]
    h = h + damp * np.mean(np.diag(h)) * np.eye(h.shape[0])
    u = np.linalg.cholesky(np.linalg.inv(h)).T
    q = np.zeros_like(w)
    for i in range(w.shape[0]):
        if group_size > 0 and i % group_size == 0:
            scale = np.max(np.abs(w[i : i + group_size]), axis=0) / qmax
        q[i] = np.clip(np.round(w[i] / scale), -qmax - 1, qmax) * scale
        err = (w[i] - q[i]) / u[i, i]
        w[i + 1 :] -= np.outer(u[i, i + 1 :], err)
    out = np.empty_like(q)
    out[perm] = q
    return out


@pytest.fixture(scope="module")
def layer():
    x = jax.random.normal(jax.random.key(0), (256, 10)) @ jax.random.normal(
        jax.random.key(1), (10, 10)
    )
    w = jax.random.normal(jax.random.key(2), (10, 6))
    return x, w, 2.0 * x.T @ x / x.shape[0]


@pytest.mark.parametrize("block_size", [4, 16], ids=["lazy-blocks-padded", "one-block"])
def test_gptq_matches_numpy_algorithm_1(layer, block_size):
    _, w, h = layer
    got = gptq_matrix(w, h, bits=3, block_size=block_size)
    np.testing.assert_allclose(got, _numpy_gptq(w, h, 3), rtol=2e-4, atol=2e-4)
    scale = np.max(np.abs(np.asarray(w)), axis=0, keepdims=True) / 3
    np.testing.assert_allclose(
        np.asarray(got) / scale, np.round(np.asarray(got) / scale), atol=1e-3
    )


def test_gptq_lowers_the_layer_output_error(layer):
    x, w, h = layer
    for bits in (3, 4):
        err_rtn = float(jnp.sum((x @ (quantize_dequantize(w, bits, 0) - w)) ** 2))
        err_gptq = float(jnp.sum((x @ (gptq_matrix(w, h, bits=bits, block_size=4) - w)) ** 2))
        assert err_gptq < 0.9 * err_rtn, (bits, err_gptq, err_rtn)


@pytest.mark.parametrize(
    "group_size,desc_act,block_size",
    [(5, False, 4), (2, True, 4)],
    ids=["groups-inside-blocks", "groups-and-act-order"],
)
def test_gptq_groups_and_act_order_match_numpy(layer, group_size, desc_act, block_size):
    x, w, _ = layer
    x = x * jnp.array([[1.0, 3.0, 0.5, 2.0, 1.0, 4.0, 1.0, 0.2, 1.5, 1.0]])  # diag H unsorted
    h = 2.0 * x.T @ x / x.shape[0]
    got = gptq_matrix(w, h, bits=3, block_size=block_size, group_size=group_size, desc_act=desc_act)
    want = _numpy_gptq(w, h, 3, group_size=group_size, desc_act=desc_act)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


def test_act_order_on_a_sorted_diagonal_and_one_group_change_nothing(layer):
    x, w, _ = layer
    x = (
        x / jnp.sqrt(jnp.mean(x**2, axis=0, keepdims=True)) * jnp.linspace(3.0, 1.0, 10)[None]
    )  # diag H decreasing
    h = 2.0 * x.T @ x / x.shape[0]
    assert np.all(np.diff(np.diag(h)) < 0)
    plain = np.asarray(gptq_matrix(w, h, bits=3, block_size=16))
    np.testing.assert_array_equal(gptq_matrix(w, h, bits=3, block_size=16, desc_act=True), plain)
    np.testing.assert_array_equal(gptq_matrix(w, h, bits=3, block_size=16, group_size=10), plain)


SEEDS = 5


@pytest.fixture(scope="module")
def outlier_errors():
    """``||X (Q(W) - W)||^2`` of GPTQ per channel, with act-order and with groups of 8 on layers
    whose inputs have 4 outlier features (x10), over 5 seeds, at 3 and 4 bits: ``[bits, seed]``."""

    def one(key, bits):
        k = jax.random.split(key, 4)
        mix = jnp.eye(32) + 0.05 * jax.random.normal(k[1], (32, 32))
        x = jax.random.normal(k[0], (256, 32)) @ mix
        outliers = jax.random.choice(k[3], 32, (4,), replace=False)
        x = x * jnp.ones((1, 32)).at[0, outliers].set(10.0)
        w = jax.random.normal(k[2], (32, 16))
        h = 2.0 * x.T @ x / x.shape[0]
        errs = []
        for g, act in ((-1, False), (-1, True), (8, False)):
            q = gptq_matrix(w, h, bits=bits, block_size=8, group_size=g, desc_act=act)
            errs.append(jnp.sum((x @ (q - w)) ** 2))
        return jnp.stack(errs)

    keys = jax.random.split(jax.random.key(7), SEEDS)
    per_bits = jax.vmap(jax.vmap(one, (0, None)), (None, 0))
    errs = np.asarray(jax.jit(per_bits)(keys, jnp.array([3, 4])))  # [bits, seed, variant]
    return dict(zip(("channel", "act", "group"), np.moveaxis(errs, -1, 0), strict=True))


def test_act_order_lowers_the_error_with_outlier_inputs(outlier_errors):
    e = outlier_errors
    wins = np.mean(e["act"] < e["channel"], axis=1)  # per bit width, over seeds
    assert np.all(wins >= 4 / SEEDS), (wins, e["channel"], e["act"])


def test_groups_lower_the_error(outlier_errors):
    e = outlier_errors
    wins = np.mean(e["group"] < e["channel"], axis=1)
    assert np.all(wins >= 4 / SEEDS), (wins, e["channel"], e["group"])


def test_group_size_refused_by_name(layer):
    _, w, h = layer
    for g in (3, 0, -2, 20):
        with pytest.raises(ConfigError, match="'group_size'"):
            gptq_matrix(w, h, bits=3, group_size=g)


CFG = DecoderConfig(d_model=32, n_layers=2, n_heads=2, head_dim=16, d_ff=64, max_len=32)
SEQ, BATCH, STEPS = 32, 16, 150


@pytest.fixture(scope="module")
def trained():
    """A tiny byte LM trained for 150 Adam steps in one compiled scan."""
    docs = load_corpus()
    stream = np.concatenate(
        [ByteTokenizer().encode(d, add_bos=True, add_eos=True) for d in docs[:120]]
    )
    windows = pack_windows(stream, SEQ + 1)
    rng = np.random.default_rng(0)
    rng.shuffle(windows)
    train, held = windows[:-128], windows[-128:]
    train = np.resize(train, (STEPS, BATCH, SEQ + 1))
    model = Decoder(CFG)
    params = nn.meta.unbox(jax.jit(model.init)(jax.random.key(0), train[0, :, :-1]))
    opt = optax.adam(1e-2)

    def loss(p, t):
        return next_token_loss(model.apply(p, t[:, :-1]), t[:, 1:])

    @jax.jit
    def fit(params):
        def step(carry, batch):
            p, s = carry
            g = jax.grad(loss)(p, batch)
            u, s = opt.update(g, s, p)
            return (optax.apply_updates(p, u), s), None

        return jax.lax.scan(step, (params, opt.init(params)), train)[0][0]

    params = fit(params)
    evaluate = jax.jit(loss)
    return params, windows[:64, :-1], held, evaluate


def test_gptq_beats_rtn_on_a_trained_model(trained):
    params, calib, held, evaluate = trained
    base = float(evaluate(params, held))
    assert base < 3.2, base  # it learned something (uniform over bytes is 5.6 nats)
    # 2 and 4 bits: at 3 bits both increases sit inside the held-out loss's noise at this size
    # (one run gave RTN +0.0002 at 3 bits vs +0.0035 at
    # 4, i.e. not even monotone in the bits; GPTQ +0.0035 and +0.0009; at 2 bits 0.162 vs 0.021)
    for bits in (2, 4):
        rtn = float(evaluate(rtn_quantize(CFG, params, bits), held)) - base
        gptq = float(evaluate(gptq_quantize(CFG, params, calib, bits, block_size=16), held)) - base
        assert 0 < gptq < rtn, (bits, gptq, rtn)


@pytest.fixture(scope="module")
def untrained():
    tokens = jnp.zeros((2, SEQ), jnp.int32)
    return tokens, nn.meta.unbox(jax.jit(Decoder(CFG).init)(jax.random.key(1), tokens))


def test_rtn_touches_only_the_targeted_kernels(untrained):
    params = untrained[1]
    layers = linear_layers(CFG, params)
    assert len(layers) == 2 * 7 + 1  # q k v o gate up down per block, and the head
    q = rtn_quantize(CFG, params, 4, targets=("mlp",))
    flat, flat_q = jax.tree_util.tree_leaves_with_path(params), jax.tree.leaves(q)
    for (path, a), b in zip(flat, flat_q, strict=True):
        names = "/".join(str(getattr(k, "key", k)) for k in path)
        changed = not np.array_equal(np.asarray(a), np.asarray(b))
        assert changed == ("/ffn/" in names), names


def test_rtn_groups_share_one_scale_per_group_of_inputs(untrained):
    params = untrained[1]
    q = rtn_quantize(CFG, params, 3, targets=("mlp",), group_size=16)
    w = np.asarray(params["params"]["blocks_0"]["ffn"]["wi_gate"])  # [32, 64]
    got = np.asarray(q["params"]["blocks_0"]["ffn"]["wi_gate"]).reshape(2, 16, 64)
    scale = np.max(np.abs(w.reshape(2, 16, 64)), axis=1, keepdims=True) / 3
    want = np.clip(np.round(w.reshape(2, 16, 64) / scale), -4, 3) * scale
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    with pytest.raises(ConfigError, match="'group_size'.*divisor"):
        rtn_quantize(CFG, params, 3, group_size=64)  # divides d_ff=64, not d_model=32


def test_gptq_quantize_passes_groups_and_order_to_each_layer(untrained, monkeypatch):
    import jaxlab.lm.quant as quant

    seen = []

    def fake(w, hessian, **kw):
        seen.append((kw["group_size"], kw["desc_act"]))
        return w

    monkeypatch.setattr(quant, "gptq_matrix", fake)
    calib, params = untrained
    quant.gptq_quantize(CFG, params, calib, 3, targets=("mlp",), group_size=16, desc_act=True)
    assert seen == [(16, True)] * 6  # gate, up, down of two blocks


def test_ptq_bad_input_names_the_field(untrained):
    calib, params = untrained
    with pytest.raises(ConfigError, match="bits"):
        rtn_quantize(CFG, params, 1)
    with pytest.raises(ConfigError, match="bits"):
        gptq_quantize(CFG, params, calib, 33)
    with pytest.raises(ConfigError, match="quant.targets"):
        rtn_quantize(CFG, params, 4, targets=("experts",))
    with pytest.raises(ConfigError, match="'targets'"):
        QuantConfig(w_bits=4, targets=("mlp", "lm_head"))


def test_checkpoint_saved_before_quant_existed_restores(tmp_path):
    """A run saved before ``DecoderConfig.quant`` existed restores into today's default config,
    and a run that quantises is refused (the changed field is named)."""
    import dataclasses

    from jaxlab.core.checkpoint import Checkpointer, IncompatibleCheckpointError

    @dataclasses.dataclass(frozen=True)
    class Run:
        model: DecoderConfig = CFG

    old = Checkpointer(tmp_path, Run(), async_save=False)
    del old.config_dict["model"]["quant"]  # what a checkpoint from before the field holds
    old.save(1, {"w": jnp.ones(3)}, force=True)
    old.close()
    ck = Checkpointer(tmp_path, Run(), async_save=False)
    ck.check_config(1)
    ck.close()
    quantised = Run(DecoderConfig(**{**CFG.__dict__, "quant": QuantConfig(w_bits=4)}))
    ck = Checkpointer(tmp_path, quantised, async_save=False)
    with pytest.raises(IncompatibleCheckpointError, match="model.quant.w_bits"):
        ck.check_config(1)
    ck.close()
