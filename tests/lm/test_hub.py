"""Hugging Face model directories: logits equal ``transformers``' (fixtures made by
``fixtures/make_hf_fixture.py``; greedy generation is checked through ``jaxlab generate --hf-dir``
in ``tests/recipes/test_generate.py``), bitwise save/load round trips, the tokenizer, bad input."""

import dataclasses
import json
import shutil
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec
from safetensors.numpy import load_file, save_file

from jaxlab.core.sharding import MeshConfig, make_mesh
from jaxlab.lm.hub import HubError, hf_config_from_decoder, load_hf, load_tokenizer, save_hf
from jaxlab.lm.model import Decoder, DecoderConfig
from jaxlab.lm.moe import MoEConfig
from jaxlab.nn.quantization import QuantConfig

FIXTURES = Path(__file__).parent / "fixtures"
# GQA + untied head; tied + Llama 3.1 RoPE scaling; OLMoE (QK-norm, 4 experts top-2, GQA);
# OLMo-2 (QK-norm, post-norm blocks, GQA)
NAMES = ["tiny_llama", "tiny_llama_tied", "tiny_olmoe", "tiny_olmo2"]


@pytest.fixture(scope="module", params=NAMES)
def loaded(request):
    return load_hf(FIXTURES / request.param), np.load(FIXTURES / request.param / "reference.npz")


def test_config_reads_the_llama_features():
    gqa, tied = (load_hf(FIXTURES / n).cfg for n in NAMES[:2])
    assert (gqa.n_heads, gqa.n_kv_heads, gqa.head_dim, gqa.tie_embeddings) == (4, 2, 8, False)
    assert gqa.rope_scaling is None and tied.tie_embeddings
    assert (
        tied.rope_scaling.factor == 8.0 and tied.rope_scaling.original_max_position_embeddings == 16
    )


def test_config_reads_the_olmo_features():
    cfg = load_hf(FIXTURES / "tiny_olmoe").cfg
    assert cfg.qk_norm and cfg.n_kv_heads == 2 and cfg.moe_layers is None
    moe = cfg.moe
    assert (moe.num_experts, moe.top_k, moe.expert_ff, moe.normalize_topk) == (4, 2, 16, False)
    assert moe.dispatch == "dropless"  # every routed token computed, as transformers does
    olmo2 = load_hf(FIXTURES / "tiny_olmo2").cfg
    assert olmo2.norm_position == "post" and olmo2.qk_norm and olmo2.moe is None


def test_logits_equal_transformers(loaded):
    model, ref = loaded
    logits = jax.jit(Decoder(model.cfg).apply)(model.params, jnp.asarray(ref["tokens"][None]))
    np.testing.assert_allclose(np.asarray(logits), ref["logits"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("max_shard_bytes", [None, 40_000], ids=["single", "sharded"])
def test_save_then_load_is_bitwise(loaded, tmp_path, max_shard_bytes):
    model, _ = loaded
    out = save_hf(tmp_path / "m", model.cfg, model.params, max_shard_bytes=max_shard_bytes)
    assert (out / "model.safetensors.index.json").exists() == (max_shard_bytes is not None)
    again = load_hf(out)
    assert again.cfg == model.cfg
    flat, tree = jax.tree_util.tree_flatten(model.params)
    flat2, tree2 = jax.tree_util.tree_flatten(again.params)
    assert tree == tree2
    assert all(
        a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(flat, flat2, strict=True)
    )


def test_saved_file_holds_the_fixture_tensors_unchanged(tmp_path):
    model = load_hf(FIXTURES / "tiny_llama")
    save_hf(tmp_path / "m", model.cfg, model.params)
    original = load_file(FIXTURES / "tiny_llama" / "model.safetensors")
    written = load_file(tmp_path / "m" / "model.safetensors")
    assert original.keys() == written.keys()
    assert all(np.array_equal(original[k], written[k]) for k in original)


def test_a_jaxlab_model_saves_and_loads(tmp_path):
    cfg = DecoderConfig(vocab_size=40, d_model=16, n_layers=1, n_heads=4, n_kv_heads=1, head_dim=4)
    shapes = jax.eval_shape(Decoder(cfg).init, jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32))
    rng = np.random.default_rng(0)
    params = jax.tree.map(lambda x: rng.normal(size=x.shape).astype(x.dtype), nn.meta.unbox(shapes))
    again = load_hf(save_hf(tmp_path / "m", cfg, params))
    assert again.cfg == cfg
    leaves = jax.tree_util.tree_leaves_with_path(again.params)
    expected = dict(jax.tree_util.tree_leaves_with_path(params))
    assert len(leaves) == len(expected)
    assert all(np.array_equal(expected[path], leaf) for path, leaf in leaves)


def test_tokenizer_has_the_byte_tokenizer_interface():
    tok = load_tokenizer(FIXTURES / "tiny_llama", model_vocab_size=128)
    ids = tok.encode("The quick brown fox", add_bos=True, add_eos=True)
    assert ids.dtype == np.int32 and ids[0] == tok.bos_id == 0 and ids[-1] == tok.eos_id == 1
    assert tok.decode(ids) == "The quick brown fox"
    assert tok.decode(np.append(ids, 5), stop_at_eos=True) == "The quick brown fox"
    with pytest.raises(ValueError, match=r"expected ids in \[0, 128\)"):
        tok.decode([128])


def test_token_bytes_spell_the_text_and_refuse_specials():
    from jaxlab.lm.hub.tokenizer import token_bytes
    from jaxlab.lm.sources import train_bpe

    tok = load_tokenizer(FIXTURES / "tiny_llama", model_vocab_size=130)
    table = token_bytes(tok)
    assert len(table) == 130 and table[128] is None and table[129] is None  # padded ids
    assert table[tok.bos_id] is None and table[tok.eos_id] is None and table[tok.pad_id] is None
    text = "The cat sat. A dog-run"
    assert b"".join(table[i] for i in tok.encode(text)) == text.encode()
    sentencepiece_like = dataclasses.replace(tok, tokenizer=train_bpe(["a b c"], 8))
    with pytest.raises(HubError, match="decoder 'Metaspace', expected a byte-level BPE"):
        token_bytes(sentencepiece_like)


def _copy(tmp_path: Path, name: str = "tiny_llama") -> Path:
    return Path(shutil.copytree(FIXTURES / name, tmp_path / name))


def _rewrite(directory: Path, edit) -> None:
    file = directory / "model.safetensors"
    tensors = load_file(file)
    edit(tensors)
    save_file(tensors, file, metadata={"format": "pt"})


def test_missing_tensor_is_named(tmp_path):
    d = _copy(tmp_path)
    _rewrite(d, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(
        HubError, match=r"model\.safetensors: missing tensor.*layers\.1\.mlp\.up_proj"
    ):
        load_hf(d)


def test_missing_expert_is_named(tmp_path):
    d = _copy(tmp_path, "tiny_olmoe")
    _rewrite(d, lambda t: t.pop("model.layers.1.mlp.experts.3.down_proj.weight"))
    with pytest.raises(HubError, match=r"missing tensor.*layers\.1\.mlp\.experts\.3\.down_proj"):
        load_hf(d)


def test_wrong_shape_is_named(tmp_path):
    d = _copy(tmp_path)
    _rewrite(d, lambda t: t.update({"model.norm.weight": np.ones(31, np.float32)}))
    with pytest.raises(
        HubError,
        match=r"model\.safetensors: tensor 'model\.norm\.weight' has shape \(31,\), expected \(32,\)",
    ):
        load_hf(d)


def test_extra_tensor_is_named(tmp_path):
    d = _copy(tmp_path)
    _rewrite(d, lambda t: t.update({"model.layers.2.mlp.up_proj.weight": np.ones(3, np.float32)}))
    with pytest.raises(HubError, match=r"unexpected tensor.*layers\.2\.mlp\.up_proj"):
        load_hf(d)


def test_truncated_file_is_named(tmp_path):
    d = _copy(tmp_path)
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(HubError, match=r"model\.safetensors"):
        load_hf(d)


@pytest.mark.parametrize(
    "name, edit, field",
    [
        ("tiny_llama", {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, "GPT2LMHead"),
        ("tiny_llama", {"attention_bias": True}, "attention_bias"),
        ("tiny_llama", {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}}, "'yarn'"),
        ("tiny_llama", {"num_key_value_heads": 3}, "n_kv_heads"),
        ("tiny_olmoe", {"clip_qkv": 8.0}, "clip_qkv"),
        ("tiny_olmoe", {"num_experts_per_tok": 5}, "top_k"),
    ],
    ids=["architecture", "bias", "rope-type", "kv-heads", "olmoe-clip-qkv", "olmoe-top-k"],
)
def test_unsupported_config_is_refused_by_name(tmp_path, name, edit, field):
    d = _copy(tmp_path, name)
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, **edit}))
    with pytest.raises(HubError, match=rf"config\.json.*{field}"):
        load_hf(d)


def test_tokenizer_larger_than_the_model_is_refused():
    with pytest.raises(HubError, match=r"tokenizer\.json: vocabulary of \d+ ids exceeds.*=16"):
        load_tokenizer(FIXTURES / "tiny_llama", model_vocab_size=16)


@pytest.mark.parametrize("name", ["tiny_llama", "tiny_olmoe"])
def test_loading_onto_a_mesh_shards_by_the_logical_rules(name):
    mesh = make_mesh(MeshConfig(data=1, fsdp=4, tensor=2))
    ref = np.load(FIXTURES / name / "reference.npz")
    model = load_hf(FIXTURES / name, mesh=mesh)
    wq = model.params["params"]["blocks_0"]["attn"]["wq"]  # [embed, heads, kv]: fsdp, tensor
    assert wq.sharding.spec == PartitionSpec("fsdp", "tensor", None)
    assert wq.addressable_shards[0].data.shape == (8, 2, 8)
    logits = jax.jit(Decoder(model.cfg).apply)(model.params, jnp.asarray(ref["tokens"][None]))
    np.testing.assert_allclose(np.asarray(logits), ref["logits"], atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "changes, written",
    [
        ({}, "llama"),
        ({"qk_norm": True, "norm_position": "post"}, "olmo2"),
        ({"qk_norm": True, "moe": MoEConfig(num_experts=4, top_k=2, expert_ff=8)}, "olmoe"),
        ({"moe": MoEConfig(num_experts=4, top_k=2, expert_ff=8)}, "qk_norm"),
        ({"qk_norm": True}, "qk_norm"),
        ({"quant": QuantConfig(w_bits=4)}, "quant"),
    ],
    ids=["llama", "olmo2", "olmoe", "moe-without-qk-norm", "pre-norm-qk-norm", "quant"],
)
def test_the_written_format_follows_the_model_or_is_refused_by_field(changes, written):
    cfg = dataclasses.replace(DecoderConfig(d_model=32, n_heads=4, head_dim=8), **changes)
    if written in ("llama", "olmo2", "olmoe"):
        assert hf_config_from_decoder(cfg)["model_type"] == written
    else:
        with pytest.raises(HubError, match=rf"DecoderConfig\.{written}="):
            hf_config_from_decoder(cfg)
