"""Llama, OLMoE and OLMo-2 safetensors checkpoints <-> :class:`jaxlab.lm.model.Decoder` parameter trees.

Hugging Face ``nn.Linear`` weights are ``[out, in]``; jaxlab kernels are ``[in, ...out]`` with the
heads split out (``wq: [embed, heads, head_dim]``, ``wo: [heads, head_dim, embed]``). Both use the
rotate-half RoPE layout, so no permutation of the query/key rows is needed. OLMoE's experts are
stored one tensor per expert and stacked into jaxlab's ``[experts, ...]`` kernels. Tensors are read one
at a time from each shard with ``safetensors.safe_open`` (numpy), so only the converted tree is
held in memory. With a mesh, each tensor is placed on it by the logical-axis rules as soon as it
is read (``jax.make_array_from_callback``, so a host only materialises its own shards on device
and one tensor at a time in host memory).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from jaxlab.core.sharding import DEFAULT_RULES, state_shardings
from jaxlab.lm.hub.config import HubError, decoder_config_from_hf, hf_config_from_decoder
from jaxlab.lm.model import Decoder, DecoderConfig

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # buffers some older checkpoints store


@dataclasses.dataclass(frozen=True)
class _Tensor:
    """One checkpoint tensor: its HF name and shape, its jaxlab path and the layout maps.

    ``index`` is set for a tensor that fills one slice ``[index]`` of a stacked jaxlab tensor
    of leading size ``stack`` (an MoE expert's weight within ``[experts, ...]``)."""

    hf_name: str
    hf_shape: tuple[int, ...]
    path: tuple[str, ...]
    to_jax: Callable[[np.ndarray], np.ndarray]
    to_hf: Callable[[np.ndarray], np.ndarray]
    index: int | None = None
    stack: int = 0


def _same(w: np.ndarray) -> np.ndarray:
    return w


def _linear(out_shape: tuple[int, ...]) -> tuple[Callable, Callable]:
    """``[out, in] <-> [in, *out_shape]`` (a transposed ``nn.Linear`` weight, heads split)."""
    return (
        lambda w: np.ascontiguousarray(w.T).reshape(w.shape[1], *out_shape),
        lambda k: np.ascontiguousarray(k.reshape(k.shape[0], -1).T),
    )


def _output(in_shape: tuple[int, ...]) -> tuple[Callable, Callable]:
    """``[out, in] <-> [*in_shape, out]`` (the attention output projection, heads split)."""
    return (
        lambda w: np.ascontiguousarray(w.T).reshape(*in_shape, w.shape[0]),
        lambda k: np.ascontiguousarray(k.reshape(-1, k.shape[-1]).T),
    )


def _ffn_rows(cfg: DecoderConfig, pre: str, blk: str) -> list[_Tensor]:
    """The FFN tensors of one layer: Llama's SwiGLU ``mlp.*``, or OLMoE's router ``mlp.gate``
    and per-expert ``mlp.experts.{e}.*`` stacked into ``w1``/``w3``/``w2: [experts, ...]``."""
    d, f = cfg.d_model, cfg.d_ff
    if cfg.moe is None:
        rows = [
            ("mlp.gate_proj.weight", (f, d), ("ffn", "wi_gate"), _linear((f,))),
            ("mlp.up_proj.weight", (f, d), ("ffn", "wi_up"), _linear((f,))),
            ("mlp.down_proj.weight", (d, f), ("ffn", "wo"), _linear((d,))),
        ]
        return [_Tensor(pre + n, s, (blk, *p), *maps) for n, s, p, maps in rows]
    e, ff = cfg.moe.num_experts, cfg.moe.expert_ff
    out = [_Tensor(pre + "mlp.gate.weight", (e, d), (blk, "ffn", "router"), *_linear((e,)))]
    for i in range(e):
        rows = [
            ("gate_proj", (ff, d), "w1", _linear((ff,))),
            ("up_proj", (ff, d), "w3", _linear((ff,))),
            ("down_proj", (d, ff), "w2", _linear((d,))),
        ]
        out += [
            _Tensor(f"{pre}mlp.experts.{i}.{n}.weight", s, (blk, "ffn", w), *maps, i, e)
            for n, s, w, maps in rows
        ]
    return out


def _qk_norm_rows(cfg: DecoderConfig, pre: str, blk: str) -> list[_Tensor]:
    """OLMoE's ``q_norm``/``k_norm`` over the flattened heads ``[heads · head_dim]``; jaxlab's
    scales are ``[heads, head_dim]`` (the same RMSNorm over both axes)."""
    if not cfg.qk_norm:
        return []
    h, kv, hd = cfg.n_heads, cfg.kv_heads, cfg.head_dim
    flat = lambda w: np.ascontiguousarray(w.reshape(-1))
    return [
        _Tensor(pre + "self_attn.q_norm.weight", (h * hd,), (blk, "attn", "q_norm", "scale"),
                lambda w: w.reshape(h, hd), flat),
        _Tensor(pre + "self_attn.k_norm.weight", (kv * hd,), (blk, "attn", "k_norm", "scale"),
                lambda w: w.reshape(kv, hd), flat),
    ]  # fmt: skip


def tensor_specs(cfg: DecoderConfig) -> list[_Tensor]:
    """Every tensor of a Llama (or, with ``cfg.moe`` and ``cfg.qk_norm``, OLMoE; with post-norm
    and ``cfg.qk_norm``, OLMo-2) checkpoint for ``cfg``."""
    d, v, hd = cfg.d_model, cfg.vocab_size, cfg.head_dim
    h, kv = cfg.n_heads, cfg.kv_heads
    specs = [_Tensor("model.embed_tokens.weight", (v, d), ("embed", "embedding"), _same, _same)]
    for i in range(cfg.n_layers):
        pre, blk = f"model.layers.{i}.", f"blocks_{i}"
        # pre-norm: input_layernorm before attention, post_attention_layernorm before the FFN;
        # OLMo-2's post-norm: post_attention_ and post_feedforward_layernorm on their outputs
        attn_norm, ffn_norm = (
            ("post_attention_layernorm", "post_feedforward_layernorm")
            if cfg.norm_position == "post"
            else ("input_layernorm", "post_attention_layernorm")
        )
        rows = [
            (f"{attn_norm}.weight", (d,), ("attn_norm", "scale"), (_same, _same)),
            ("self_attn.q_proj.weight", (h * hd, d), ("attn", "wq"), _linear((h, hd))),
            ("self_attn.k_proj.weight", (kv * hd, d), ("attn", "wk"), _linear((kv, hd))),
            ("self_attn.v_proj.weight", (kv * hd, d), ("attn", "wv"), _linear((kv, hd))),
            ("self_attn.o_proj.weight", (d, h * hd), ("attn", "wo"), _output((h, hd))),
            (f"{ffn_norm}.weight", (d,), ("ffn_norm", "scale"), (_same, _same)),
        ]
        specs += [_Tensor(pre + n, s, (blk, *p), *maps) for n, s, p, maps in rows]
        specs += _qk_norm_rows(cfg, pre, blk) + _ffn_rows(cfg, pre, blk)
    specs.append(_Tensor("model.norm.weight", (d,), ("final_norm", "scale"), _same, _same))
    if not cfg.tie_embeddings:
        specs.append(_Tensor("lm_head.weight", (v, d), ("head", "kernel"), *_linear((v,))))
    return specs


@dataclasses.dataclass(frozen=True)
class HFModel:
    """A loaded model directory.

    Attributes:
        cfg: the decoder configuration read from ``config.json``.
        params: ``{"params": ...}`` numpy parameter tree for ``Decoder(cfg).apply``.
        config: the raw ``config.json`` (token ids and other informational fields).
        path: the directory.
    """

    cfg: DecoderConfig
    params: dict[str, Any]
    config: dict[str, Any]
    path: Path


def _shard_files(directory: Path) -> dict[str, Path]:
    """``tensor name -> file`` from the index, or every tensor of ``model.safetensors``."""
    index = directory / INDEX_FILE
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise HubError(f"{index}: not a safetensors index (expected a weight_map): {e}") from e
        return {name: directory / file for name, file in weight_map.items()}
    single = directory / SINGLE_FILE
    if not single.exists():
        raise HubError(f"{directory}: neither {SINGLE_FILE} nor {INDEX_FILE} found")
    with _open(single) as f:
        return dict.fromkeys(f.keys(), single)


def _open(file: Path):
    if not file.exists():
        raise HubError(f"{file}: missing (named in {INDEX_FILE})")
    try:
        return safe_open(str(file), framework="np")
    except (SafetensorError, OSError) as e:
        raise HubError(f"{file}: not a readable safetensors file ({e})") from None


def _read(files: dict[str, Path], wanted: list[_Tensor]) -> Iterator[tuple[_Tensor, np.ndarray]]:
    """Yields each wanted tensor, opening every shard once."""
    by_file: dict[Path, list[_Tensor]] = {}
    for spec in wanted:
        by_file.setdefault(files[spec.hf_name], []).append(spec)
    for file, specs in by_file.items():
        with _open(file) as f:
            for spec in specs:
                try:
                    shape = tuple(f.get_slice(spec.hf_name).get_shape())
                    if shape != spec.hf_shape:
                        raise HubError(
                            f"{file}: tensor {spec.hf_name!r} has shape {shape}, expected "
                            f"{spec.hf_shape} from config.json"
                        )
                    yield spec, f.get_tensor(spec.hf_name)
                except SafetensorError as e:
                    raise HubError(f"{file}: tensor {spec.hf_name!r} unreadable ({e})") from None


def param_shardings(
    cfg: DecoderConfig, mesh: Mesh, rules: Sequence[tuple[str, Any]] = DEFAULT_RULES
) -> dict[str, Any]:
    """``{"params": ...}`` of NamedShardings for ``Decoder(cfg)`` on ``mesh`` (logical rules)."""
    tokens = jax.ShapeDtypeStruct((1, 1), jnp.int32)
    abstract = jax.eval_shape(Decoder(cfg).init, jax.random.PRNGKey(0), tokens)["params"]
    return {"params": nn.meta.unbox(state_shardings(abstract, mesh, rules))}


def load_params(
    directory: str | Path,
    cfg: DecoderConfig,
    *,
    dtype: np.dtype | str | None = None,
    mesh: Mesh | None = None,
    rules: Sequence[tuple[str, Any]] = DEFAULT_RULES,
) -> dict[str, Any]:
    """Reads the checkpoint tensors of ``directory`` into a ``Decoder(cfg)`` parameter tree.

    Args:
        directory: the model directory.
        cfg: its decoder configuration (see :func:`decoder_config_from_hf`).
        dtype: parameter dtype (default ``cfg.param_dtype``).
        mesh: place every tensor on this mesh by ``rules`` as it is read (default: the default
            device).
        rules: logical-axis rules (:data:`jaxlab.core.sharding.DEFAULT_RULES`).

    Returns:
        ``{"params": {...}}`` of JAX arrays.

    Raises:
        HubError: naming the file and tensor, for a missing, extra or mis-shaped tensor or an
            unreadable file.
    """
    directory = Path(directory)
    files = _shard_files(directory)
    specs = tensor_specs(cfg)
    expected = {s.hf_name for s in specs}
    missing = [s.hf_name for s in specs if s.hf_name not in files]
    if missing:
        where = INDEX_FILE if (directory / INDEX_FILE).exists() else SINGLE_FILE
        raise HubError(f"{directory / where}: missing tensor(s) {missing[:5]} ({len(missing)})")
    extra = sorted(
        n
        for n in files
        if n not in expected
        and not n.endswith(_IGNORED_SUFFIXES)
        and not (cfg.tie_embeddings and n == "lm_head.weight")
    )
    if extra:
        raise HubError(f"{files[extra[0]]}: unexpected tensor(s) {extra[:5]} for config.json")
    out_dtype = np.dtype(dtype or cfg.param_dtype)
    shardings = None if mesh is None else param_shardings(cfg, mesh, rules)["params"]
    tree: dict[str, Any] = {}
    stacks: dict[tuple[str, ...], list] = {}  # path -> [buffer, slices still to fill]

    def place(path: tuple[str, ...], host: np.ndarray) -> None:
        node, where = tree, shardings
        for key in path[:-1]:
            node = node.setdefault(key, {})
            where = None if where is None else where[key]
        if where is None:
            node[path[-1]] = jnp.asarray(host)
        else:
            node[path[-1]] = jax.make_array_from_callback(
                host.shape, where[path[-1]], lambda index, host=host: host[index]
            )

    for spec, value in _read(files, specs):
        host = spec.to_jax(value).astype(out_dtype)
        if spec.index is None:
            place(spec.path, host)
            continue
        if spec.path not in stacks:
            stacks[spec.path] = [np.empty((spec.stack, *host.shape), out_dtype), spec.stack]
        entry = stacks[spec.path]
        entry[0][spec.index] = host
        entry[1] -= 1
        if entry[1] == 0:  # every expert read: place the stacked tensor, free the buffer
            place(spec.path, stacks.pop(spec.path)[0])
    return {"params": tree}


def load_hf(
    directory: str | Path,
    *,
    max_len: int | None = None,
    dtype: str = "float32",
    param_dtype: str = "float32",
    mesh: Mesh | None = None,
) -> HFModel:
    """Loads a Hugging Face Llama, OLMoE or OLMo-2 model directory (``config.json`` +
    safetensors).

    Args:
        directory: the model directory.
        max_len: context length of the decoder (default ``max_position_embeddings``).
        dtype: computation dtype.
        param_dtype: parameter dtype.
        mesh: place the parameters on this mesh by the default logical-axis rules.

    Returns:
        The :class:`HFModel` (``Decoder(m.cfg).apply(m.params, tokens)`` gives its logits).

    Raises:
        HubError: naming the file and the field or tensor that does not fit.
    """
    directory = Path(directory)
    config_file = directory / "config.json"
    if not config_file.exists():
        raise HubError(f"{config_file}: missing (expected a Hugging Face model directory)")
    try:
        config = json.loads(config_file.read_text())
    except json.JSONDecodeError as e:
        raise HubError(f"{config_file}: not valid JSON ({e})") from None
    cfg = decoder_config_from_hf(
        config, path=config_file, max_len=max_len, dtype=dtype, param_dtype=param_dtype
    )
    return HFModel(cfg, load_params(directory, cfg, mesh=mesh), config, directory)


def save_hf(
    directory: str | Path,
    cfg: DecoderConfig,
    params: dict[str, Any],
    *,
    max_shard_bytes: int | None = None,
    tokenizer_file: str | Path | None = None,
    **token_ids: int | None,
) -> Path:
    """Writes a ``Decoder(cfg)`` parameter tree as a model directory ``transformers`` loads
    (Llama; OLMoE for QK-norm with an MoE FFN in every layer; OLMo-2 for QK-norm with post-norm
    blocks).

    Args:
        directory: the output directory (created).
        cfg: the decoder configuration.
        params: ``{"params": ...}`` (plain or logically partitioned arrays).
        max_shard_bytes: split into ``model-0000i-of-0000n.safetensors`` plus the index when the
            tensors exceed this size (default: one ``model.safetensors``).
        tokenizer_file: a ``tokenizer.json`` to copy beside the weights.
        **token_ids: ``bos_token_id``, ``eos_token_id``, ``pad_token_id`` for ``config.json``.

    Returns:
        The directory.
    """
    directory = Path(directory)
    config = hf_config_from_decoder(cfg, torch_dtype=str(np.dtype(cfg.param_dtype)), **token_ids)
    tree = nn.meta.unbox(params)["params"]
    tensors = {}
    for spec in tensor_specs(cfg):
        node = tree
        for key in spec.path:
            if key not in node:
                raise HubError(f"params: {'/'.join(spec.path)} missing for {spec.hf_name!r}")
            node = node[key]
        value = np.asarray(node) if spec.index is None else np.asarray(node[spec.index])
        tensors[spec.hf_name] = spec.to_hf(value)
    directory.mkdir(parents=True, exist_ok=True)
    shards = _shards(tensors, max_shard_bytes)
    metadata = {"format": "pt"}
    if len(shards) == 1:
        save_file(shards[0], str(directory / SINGLE_FILE), metadata=metadata)
    else:
        weight_map = {}
        for i, shard in enumerate(shards):
            name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            save_file(shard, str(directory / name), metadata=metadata)
            weight_map.update(dict.fromkeys(shard, name))
        total = sum(t.nbytes for t in tensors.values())
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (directory / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if tokenizer_file is not None:
        (directory / "tokenizer.json").write_bytes(Path(tokenizer_file).read_bytes())
    return directory


def _shards(tensors: dict[str, np.ndarray], max_bytes: int | None) -> list[dict[str, np.ndarray]]:
    """Greedy split of ``tensors`` (in order) into groups of at most ``max_bytes``."""
    shards: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for name, t in tensors.items():
        if max_bytes is not None and shards[-1] and size + t.nbytes > max_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += t.nbytes
    return shards
