"""Hugging Face ``config.json`` <-> :class:`jaxlab.lm.model.DecoderConfig` (Llama, OLMoE and
OLMo-2).

Every field that changes the model's math is checked: a value jaxlab does not implement (a bias,
another activation, another RoPE scaling type, sliding windows, ...) is refused by name instead of
being approximated. Purely informational fields (token ids, dtype, versions) are ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jaxlab.lm.model import DecoderConfig
from jaxlab.lm.moe import MoEConfig
from jaxlab.nn.quantization import QuantConfig
from jaxlab.nn.rope import Llama3RopeScaling

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM",)
"""The dense ``architectures`` entry :func:`hf_config_from_decoder` writes (OLMoE for an MoE)."""

READABLE = {"llama": "LlamaForCausalLM", "olmoe": "OlmoeForCausalLM", "olmo2": "Olmo2ForCausalLM"}
"""``model_type -> architecture`` that :func:`decoder_config_from_hf` reads."""

# fields whose only accepted value is the one jaxlab implements (absent means the HF default)
_FIXED = {
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "pretraining_tp": 1,
    "attention_dropout": 0.0,
    "sliding_window": None,
    "use_sliding_window": False,
    "clip_qkv": None,
}


class HubError(ValueError):
    """A model directory that jaxlab cannot read or write; the message names the file and field."""


def _field(config: dict[str, Any], name: str, path: Path, kind: type = int) -> Any:
    if name not in config:
        raise HubError(f"{path}: field {name!r} is missing (expected a {kind.__name__})")
    value = config[name]
    if isinstance(value, bool) or not isinstance(value, int | float if kind is float else kind):
        raise HubError(f"{path}: field {name}={value!r}: expected a {kind.__name__}")
    if value <= 0:
        raise HubError(f"{path}: field {name}={value!r}: expected a positive {kind.__name__}")
    return value


def _rope(config: dict[str, Any], path: Path) -> tuple[float, Llama3RopeScaling | None]:
    """``(rope_theta, scaling)`` from ``rope_theta``/``rope_scaling`` or ``rope_parameters``."""
    params = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or params
    theta = config.get("rope_theta", params.get("rope_theta", 10_000.0))
    if isinstance(theta, bool) or not isinstance(theta, int | float) or theta <= 0:
        raise HubError(f"{path}: field rope_theta={theta!r}: expected a positive number")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return float(theta), None
    if kind != "llama3":
        raise HubError(
            f"{path}: field rope_scaling.rope_type={kind!r} is not supported "
            "(expected 'default' or 'llama3')"
        )
    try:
        return float(theta), Llama3RopeScaling(
            factor=float(scaling["factor"]),
            low_freq_factor=float(scaling["low_freq_factor"]),
            high_freq_factor=float(scaling["high_freq_factor"]),
            original_max_position_embeddings=int(scaling["original_max_position_embeddings"]),
        )
    except (KeyError, ValueError, TypeError) as e:
        raise HubError(f"{path}: field rope_scaling={scaling!r}: {e}") from None


def _olmoe(config: dict[str, Any], path: Path) -> MoEConfig:
    """OLMoE's MoE FFN: ``num_experts`` SwiGLU experts of width ``intermediate_size``, top
    ``num_experts_per_tok`` of the router's softmax, renormalised only with ``norm_topk_prob``;
    dropless dispatch (every routed token is computed, as ``transformers`` does)."""
    try:
        return MoEConfig(
            num_experts=_field(config, "num_experts", path),
            top_k=_field(config, "num_experts_per_tok", path),
            expert_ff=_field(config, "intermediate_size", path),
            normalize_topk=bool(config.get("norm_topk_prob", False)),
            dispatch="dropless",
            lb_loss_weight=float(config.get("router_aux_loss_coef", 0.01)),
        )
    except ValueError as e:
        raise HubError(f"{path}: {e}") from None


def decoder_config_from_hf(
    config: dict[str, Any],
    *,
    path: str | Path = "config.json",
    max_len: int | None = None,
    dtype: str = "float32",
    param_dtype: str = "float32",
) -> DecoderConfig:
    """Reads a Llama, OLMoE or OLMo-2 ``config.json`` (as a dict) into a :class:`DecoderConfig`.

    Args:
        config: the parsed ``config.json``.
        path: the file, for error messages.
        max_len: context length (default: ``max_position_embeddings``).
        dtype: computation dtype of the decoder.
        param_dtype: parameter dtype of the decoder.

    Returns:
        The decoder configuration (``n_kv_heads``, ``rope_base``, ``rope_scaling``,
        ``tie_embeddings`` and ``norm_eps`` as the checkpoint says; for OLMoE also QK-norm and
        an MoE FFN in every layer, for OLMo-2 QK-norm and post-norm blocks).

    Raises:
        HubError: naming the file and the field, for an unsupported architecture or value.
    """
    path = Path(path)
    kind = config.get("model_type")
    archs = config.get("architectures") or [kind or "?"]
    if kind not in READABLE or any(a != READABLE[kind] for a in archs):
        raise HubError(
            f"{path}: architecture {archs!r} (model_type={kind!r}) is not supported: expected "
            + " or ".join(f"{a} (model_type {t!r})" for t, a in READABLE.items())
        )
    for name, expected in _FIXED.items():
        if name in config and config[name] != expected:
            raise HubError(
                f"{path}: field {name}={config[name]!r} is not supported (expected {expected!r})"
            )
    n_heads = _field(config, "num_attention_heads", path)
    d_model = _field(config, "hidden_size", path)
    head_dim = config.get("head_dim") or d_model // n_heads
    n_kv = config.get("num_key_value_heads") or n_heads
    theta, scaling = _rope(config, path)
    moe = _olmoe(config, path) if kind == "olmoe" else None
    try:
        return DecoderConfig(
            vocab_size=_field(config, "vocab_size", path),
            d_model=d_model,
            n_layers=_field(config, "num_hidden_layers", path),
            n_heads=n_heads,
            head_dim=head_dim,
            d_ff=_field(config, "intermediate_size", path),
            max_len=max_len or _field(config, "max_position_embeddings", path),
            tie_embeddings=bool(config.get("tie_word_embeddings", False)),
            rope_base=theta,
            norm_eps=float(_field(config, "rms_norm_eps", path, float)),
            n_kv_heads=None if n_kv == n_heads else n_kv,
            rope_scaling=scaling,
            qk_norm=kind in ("olmoe", "olmo2"),
            norm_position="post" if kind == "olmo2" else "pre",
            moe=moe,
            dtype=dtype,
            param_dtype=param_dtype,
        )
    except ValueError as e:
        raise HubError(f"{path}: {e}") from None


def hf_config_from_decoder(
    cfg: DecoderConfig, *, torch_dtype: str = "float32", **token_ids: int | None
) -> dict[str, Any]:
    """The ``config.json`` of a jaxlab decoder: Llama for a dense pre-norm one, OLMoE for QK-norm
    with an MoE FFN in every layer, OLMo-2 for QK-norm with post-norm blocks.

    Args:
        cfg: the decoder configuration (no fake quantisation).
        torch_dtype: the stored weights' dtype name.
        **token_ids: ``bos_token_id``, ``eos_token_id``, ``pad_token_id`` to record.

    Returns:
        A dict for ``json.dump`` that ``transformers``' ``LlamaForCausalLM``,
        ``OlmoeForCausalLM`` or ``Olmo2ForCausalLM`` loads.

    Raises:
        HubError: if ``cfg`` uses a feature neither format can hold.
    """
    olmoe, olmo2 = cfg.moe is not None, cfg.norm_position == "post"
    for name, bad, why in (
        ("qk_norm", cfg.qk_norm != (olmoe or olmo2), "QK-norm exactly with an MoE (OLMoE) or post-norm (OLMo-2)"),
        ("moe", olmoe and olmo2, "an MoE with pre-norm blocks only (OLMoE)"),
        ("moe_layers", cfg.moe_layers is not None, "an MoE FFN in every layer (OLMoE)"),
        ("quant", cfg.quant != QuantConfig(), "no fake quantisation"),
        ("rope_scaling", olmoe and cfg.rope_scaling is not None, "no RoPE scaling in OLMoE"),
        ("head_dim", (olmoe or olmo2) and cfg.n_heads * cfg.head_dim != cfg.d_model, "n_heads·head_dim = d_model with QK-norm"),
    ):  # fmt: skip
        if bad:
            raise HubError(
                f"DecoderConfig.{name}={getattr(cfg, name)!r}: the Llama, OLMoE and OLMo-2 "
                f"formats hold {why}"
            )
    config: dict[str, Any] = {
        "architectures": list(SUPPORTED_ARCHITECTURES),
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.d_ff,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_len,
        "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_base,
        "rope_scaling": None,
        "tie_word_embeddings": cfg.tie_embeddings,
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "pretraining_tp": 1,
        "torch_dtype": torch_dtype,
    }
    if cfg.rope_scaling is not None:
        s = cfg.rope_scaling
        config["rope_scaling"] = {
            "rope_type": "llama3",
            "factor": s.factor,
            "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor,
            "original_max_position_embeddings": s.original_max_position_embeddings,
        }
    if olmo2:
        for name in ("head_dim", "mlp_bias", "pretraining_tp"):
            del config[name]
        config.update(architectures=[READABLE["olmo2"]], model_type="olmo2")
    if olmoe:
        for name in ("head_dim", "mlp_bias", "pretraining_tp", "rope_scaling"):
            del config[name]
        config.update(
            architectures=[READABLE["olmoe"]],
            model_type="olmoe",
            intermediate_size=cfg.moe.expert_ff,
            num_experts=cfg.moe.num_experts,
            num_experts_per_tok=cfg.moe.top_k,
            norm_topk_prob=cfg.moe.normalize_topk,
            router_aux_loss_coef=cfg.moe.lb_loss_weight,
            clip_qkv=None,
        )
    config.update({k: v for k, v in token_ids.items() if v is not None})
    return config
