"""Decoder-only transformer language model (OLMo/OLMoE architecture, dense FFN by default).

Architecture (OLMoE §2 / its config): token embedding -> ``n_layers`` pre-norm blocks
(RMSNorm -> RoPE multi-head attention [-> optional QK-norm] -> residual, RMSNorm -> FFN ->
residual) -> final RMSNorm -> untied output head (or the transposed embedding when tied). No
biases. Parameters are initialised from a ±3σ truncated normal with std 0.02 by default.

The FFN of every layer is chosen by the ``layer_ffn`` hook of :class:`Decoder`, so a
mixture-of-experts configuration can put an MoE in some or all layers without touching this file.
Without a hook, :func:`config_ffn` follows the config: ``DecoderConfig.moe`` puts the OLMoE
:class:`jaxlab.lm.moe.MoEFeedForward` in the layers ``moe_layers`` (default: every layer, as in
OLMoE); see :data:`OLMOE_1B_7B`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Literal

import flax.linen as nn
import jax.numpy as jnp
import optax
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxlab.core.config import ConfigError
from jaxlab.lm.moe import MoEConfig, MoEFeedForward
from jaxlab.lm.tokenizer import VOCAB_SIZE
from jaxlab.nn.attention import KVCache
from jaxlab.nn.embeddings import OutputHead, TokenEmbedding
from jaxlab.nn.mlp import SwiGLU
from jaxlab.nn.norms import RMSNorm
from jaxlab.nn.quantization import QuantConfig
from jaxlab.nn.rope import Llama3RopeScaling
from jaxlab.nn.transformer import TransformerBlock

DecoderCache = tuple[KVCache, ...]
"""One :class:`jaxlab.nn.attention.KVCache` per layer."""

LayerFFN = Callable[[int], nn.Module]
"""``layer_ffn(layer_index) -> unbound flax module`` with ``ffn(x: [b, s, embed]) -> [b, s, embed]``.
Called inside each block's ``setup`` (the module becomes ``blocks_<i>/ffn``)."""

_DTYPES = ("float32", "bfloat16", "float16")


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
    """Static (shape-defining) configuration of :class:`Decoder`.

    Attributes:
        vocab_size: number of token ids (default: the byte tokenizer's 259).
        d_model: residual width (``embed`` axis).
        n_layers: transformer blocks.
        n_heads: attention heads.
        head_dim: per-head size (even; ``n_heads * head_dim`` need not equal ``d_model``).
        d_ff: hidden width of the dense SwiGLU FFN.
        max_len: longest sequence (prompt + generation) the model is used with.
        qk_norm: RMSNorm on queries and keys (OLMoE's HF implementation).
        tie_embeddings: use the transposed embedding as output head (OLMoE: False).
        dtype: computation dtype name ("float32", "bfloat16", "float16"); logits are float32.
        param_dtype: parameter dtype name.
        rope_base: RoPE ``θ`` base (OLMoE 10000).
        norm_eps: RMSNorm epsilon (OLMoE 1e-5).
        init: "trunc_normal" (std ``init_std``, truncated at ±3σ; OLMoE) or "lecun_normal".
        init_std: std of the truncated-normal initialiser.
        moe: mixture-of-experts FFN configuration (``None``: dense SwiGLU in every layer). The MoE
            layers use ``moe.init_std`` and add auxiliary losses (see :func:`jaxlab.lm.moe.aux_loss`).
        moe_layers: indices of the layers whose FFN is the MoE (``None``: every layer, OLMoE).
        n_kv_heads: key/value heads of grouped-query attention, dividing ``n_heads`` (Llama 2/3;
            ``None``: ``n_heads``, plain multi-head attention as OLMoE).
        rope_scaling: Llama 3.1's RoPE frequency scaling (``None``: plain RoPE).
        norm_position: ``"pre"`` (RMSNorm before each sublayer) or ``"post"`` (OLMo-2: RMSNorm on
            each sublayer's output before the residual add).
        quant: forward-only fake quantisation for quantisation-aware training ("Scaling Laws for
            Precision"; :class:`jaxlab.nn.quantization.QuantConfig`): bits of weights,
            activations and KV cache and the targeted layer groups. Default: off (exact).
    """

    vocab_size: int = VOCAB_SIZE
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    head_dim: int = 16
    d_ff: int = 128
    max_len: int = 256
    qk_norm: bool = False
    tie_embeddings: bool = False
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    param_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    rope_base: float = 10_000.0
    norm_eps: float = 1e-5
    init: Literal["trunc_normal", "lecun_normal"] = "trunc_normal"
    init_std: float = 0.02
    moe: MoEConfig | None = None
    moe_layers: tuple[int, ...] | None = None
    quant: QuantConfig = QuantConfig()
    n_kv_heads: int | None = None
    rope_scaling: Llama3RopeScaling | None = None
    norm_position: Literal["pre", "post"] = "pre"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "head_dim", "d_ff", "max_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"DecoderConfig.{name}={value!r}: expected a positive int")
        if self.head_dim % 2:
            raise ValueError(
                f"DecoderConfig.head_dim={self.head_dim!r}: expected an even int (RoPE pairs)"
            )
        for name in ("dtype", "param_dtype"):
            if getattr(self, name) not in _DTYPES:
                raise ValueError(
                    f"DecoderConfig.{name}={getattr(self, name)!r}: expected one of {_DTYPES}"
                )
        if self.norm_position not in ("pre", "post"):
            raise ValueError(
                f"DecoderConfig.norm_position={self.norm_position!r}: expected 'pre' or 'post'"
            )
        if self.init not in ("trunc_normal", "lecun_normal"):
            raise ValueError(
                f"DecoderConfig.init={self.init!r}: expected 'trunc_normal' or 'lecun_normal'"
            )
        for name in ("init_std", "norm_eps", "rope_base"):
            if not getattr(self, name) > 0:
                raise ValueError(
                    f"DecoderConfig.{name}={getattr(self, name)!r}: expected a positive float"
                )
        if self.n_kv_heads is not None and (
            isinstance(self.n_kv_heads, bool)
            or not isinstance(self.n_kv_heads, int)
            or self.n_kv_heads <= 0
            or self.n_heads % self.n_kv_heads
        ):
            raise ValueError(
                f"DecoderConfig.n_kv_heads={self.n_kv_heads!r}: expected None or a positive "
                f"divisor of n_heads={self.n_heads}"
            )
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, Llama3RopeScaling):
            raise ConfigError("rope_scaling", self.rope_scaling, "None or a Llama3RopeScaling")
        if self.moe_layers is not None:
            if self.moe is None:
                raise ValueError(
                    f"DecoderConfig.moe_layers={self.moe_layers!r}: expected None when moe is None"
                )
            layers = tuple(self.moe_layers)
            if len(set(layers)) != len(layers) or not all(
                isinstance(i, int) and 0 <= i < self.n_layers for i in layers
            ):
                raise ValueError(
                    f"DecoderConfig.moe_layers={self.moe_layers!r}: expected distinct layer "
                    f"indices in [0, n_layers={self.n_layers})"
                )

        if not isinstance(self.quant, QuantConfig):
            raise ConfigError("quant", self.quant, "a QuantConfig")
        has_dense = any(not self.is_moe_layer(i) for i in range(self.n_layers))
        present = {"attention": True, "mlp": has_dense, "experts": self.moe is not None}
        present["head"] = not self.tie_embeddings
        for target in self.quant.targets or ():
            if not present[target]:
                raise ConfigError(
                    "quant.targets",
                    self.quant.targets,
                    f"layer groups present in this model ({[k for k, v in present.items() if v]})",
                )

    def is_moe_layer(self, layer: int) -> bool:
        """Whether layer ``layer``'s FFN is the MoE (``moe`` set and ``layer`` in ``moe_layers``)."""
        if self.moe is None:
            return False
        return self.moe_layers is None or layer in self.moe_layers

    @property
    def kernel_std(self) -> float | None:
        """The ``init_std`` passed to the layers (``None`` selects LeCun normal)."""
        return self.init_std if self.init == "trunc_normal" else None

    @property
    def kv_heads(self) -> int:
        """Key/value heads (``n_kv_heads``, or ``n_heads`` when unset)."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def rope_frequencies(self) -> tuple[float, ...] | None:
        """The scaled RoPE inverse frequencies (``None`` without ``rope_scaling``)."""
        if self.rope_scaling is None:
            return None
        return self.rope_scaling.inverse_frequencies(self.head_dim, self.rope_base)

    @property
    def compute_dtype(self) -> jnp.dtype:
        """``dtype`` as a numpy dtype."""
        return jnp.dtype(self.dtype)

    @property
    def weight_dtype(self) -> jnp.dtype:
        """``param_dtype`` as a numpy dtype."""
        return jnp.dtype(self.param_dtype)


def dense_ffn(cfg: DecoderConfig) -> SwiGLU:
    """The default FFN of every layer: a SwiGLU of width ``cfg.d_ff``.

    Args:
        cfg: the decoder configuration.

    Returns:
        An unbound :class:`jaxlab.nn.mlp.SwiGLU` (for use inside a ``layer_ffn`` hook).
    """
    return SwiGLU(
        d_ff=cfg.d_ff,
        init_std=cfg.kernel_std,
        dtype=cfg.compute_dtype,
        param_dtype=cfg.weight_dtype,
        quant=cfg.quant,
    )


def config_ffn(cfg: DecoderConfig, layer: int) -> nn.Module:
    """The FFN of layer ``layer`` as the config says: MoE if ``cfg.is_moe_layer(layer)``, else dense.

    Args:
        cfg: the decoder configuration.
        layer: layer index.

    Returns:
        An unbound :class:`jaxlab.lm.moe.MoEFeedForward` or :func:`dense_ffn` module.
    """
    if cfg.is_moe_layer(layer):
        return MoEFeedForward(
            cfg.moe, dtype=cfg.compute_dtype, param_dtype=cfg.weight_dtype, quant=cfg.quant
        )
    return dense_ffn(cfg)


OLMOE_1B_7B = DecoderConfig(
    vocab_size=50304,
    d_model=2048,
    n_layers=16,
    n_heads=16,
    head_dim=128,
    d_ff=1024,
    max_len=4096,
    qk_norm=True,
    tie_embeddings=False,
    rope_base=10_000.0,
    norm_eps=1e-5,
    init="trunc_normal",
    init_std=0.02,
    moe=MoEConfig(
        num_experts=64,
        top_k=8,
        expert_ff=1024,
        normalize_topk=False,
        dispatch="dropless",
        lb_loss_weight=0.01,
        z_loss_weight=0.001,
        init_std=0.02,
    ),
)
"""OLMoE-1B-7B (arXiv 2409.02060; HF ``allenai/OLMoE-1B-7B-0924`` config): 16 layers, all MoE with
64 SwiGLU experts of width 1024, top-8 without renormalisation, QK-norm, vocab 50304 (padded),
aux losses 0.01 L_LB + 0.001 L_RZ. ~6.9B parameters, ~1.3B active per token."""


class Decoder(nn.Module):
    """Decoder-only language model returning next-token logits.

    ``model.apply(params, tokens)`` gives ``[batch, seq, vocab]`` float32 logits where position
    ``t`` predicts token ``t+1``. ``model.apply(params, tokens, cache, method=Decoder.decode)``
    runs the same computation incrementally with a per-layer KV cache (see :func:`init_cache`).

    Attributes:
        cfg: the static configuration.
        layer_ffn: optional hook ``layer_index -> unbound FFN module``; ``None`` uses
            :func:`config_ffn` (dense SwiGLU, or the MoE where ``cfg.moe`` says so).
    """

    cfg: DecoderConfig
    layer_ffn: LayerFFN | None = None

    def setup(self) -> None:
        """Creates ``embed``, ``blocks_<i>``, ``final_norm`` and (untied) ``head``."""
        cfg = self.cfg
        dtype, param_dtype = cfg.compute_dtype, cfg.weight_dtype
        self.embed = TokenEmbedding(
            vocab_size=cfg.vocab_size,
            d_model=cfg.d_model,
            init_std=cfg.kernel_std,
            dtype=dtype,
            param_dtype=param_dtype,
        )
        hook = self.layer_ffn if self.layer_ffn is not None else functools.partial(config_ffn, cfg)
        self.blocks = [
            TransformerBlock(
                n_heads=cfg.n_heads,
                head_dim=cfg.head_dim,
                ffn_factory=functools.partial(hook, i),
                causal=True,
                qk_norm=cfg.qk_norm,
                rope_base=cfg.rope_base,
                norm_eps=cfg.norm_eps,
                init_std=cfg.kernel_std,
                dtype=dtype,
                param_dtype=param_dtype,
                quant=cfg.quant,
                n_kv_heads=cfg.n_kv_heads,
                rope_inverse_frequencies=cfg.rope_frequencies,
                norm_position=cfg.norm_position,
            )
            for i in range(cfg.n_layers)
        ]
        self.final_norm = RMSNorm(eps=cfg.norm_eps, dtype=dtype, param_dtype=param_dtype)
        if not cfg.tie_embeddings:
            self.head = OutputHead(
                vocab_size=cfg.vocab_size,
                init_std=cfg.kernel_std,
                param_dtype=param_dtype,
                quant=cfg.quant,
            )

    def _forward(
        self,
        tokens: Int[Array, "batch seq"],
        padding_mask: Bool[Array, "batch seq"] | None,
        positions: Int[Array, "batch seq"] | None,
        cache: DecoderCache | None,
    ) -> tuple[Float[Array, "batch seq vocab"], DecoderCache | None]:
        if tokens.ndim != 2:
            raise ValueError(f"tokens.shape={tokens.shape}: expected [batch, seq]")
        limit = self.cfg.max_len if cache is None else cache[0].max_len
        if tokens.shape[1] > limit:
            raise ValueError(
                f"tokens.shape[1]={tokens.shape[1]}: expected at most {limit} "
                f"({'cfg.max_len' if cache is None else 'the cache length'})"
            )
        if cache is not None and len(cache) != self.cfg.n_layers:
            raise ValueError(
                f"len(cache)={len(cache)}: expected one KVCache per layer ({self.cfg.n_layers})"
            )
        h = self.embed(tokens)
        new_cache = []
        for i, block in enumerate(self.blocks):
            h, layer_cache = block(
                h,
                padding_mask=padding_mask,
                positions=positions,
                cache=None if cache is None else cache[i],
            )
            new_cache.append(layer_cache)
        h = self.final_norm(h)
        logits = self.embed.attend(h) if self.cfg.tie_embeddings else self.head(h)
        return logits, None if cache is None else tuple(new_cache)

    def __call__(
        self,
        tokens: Int[ArrayLike, "batch seq"],
        *,
        padding_mask: Bool[Array, "batch seq"] | None = None,
        positions: Int[Array, "batch seq"] | None = None,
    ) -> Float[Array, "batch seq vocab"]:
        """Full-sequence forward pass.

        Args:
            tokens: ``[batch, seq]`` ids, ``seq <= cfg.max_len``.
            padding_mask: ``[batch, seq]`` True for real tokens (default all real).
            positions: RoPE positions (default ``0 … seq-1``; pass ``cumsum(mask)-1`` for
                left-padded prompts).

        Returns:
            ``[batch, seq, vocab]`` float32 logits.
        """
        logits, _ = self._forward(jnp.asarray(tokens), padding_mask, positions, None)
        return logits

    def decode(
        self,
        tokens: Int[Array, "batch t"],
        cache: DecoderCache,
        *,
        padding_mask: Bool[Array, "batch t"] | None = None,
        positions: Int[Array, "batch t"] | None = None,
    ) -> tuple[Float[Array, "batch t vocab"], DecoderCache]:
        """Incremental forward pass: appends ``tokens`` to the cache and returns their logits.

        Prefill with the prompt (``t = prompt length``), then call with ``t = 1`` per generated
        token; the logits equal those of :meth:`__call__` on the concatenated sequence.

        Args:
            tokens: ``[batch, t]`` new ids; the caller keeps ``cache index + t <= max_len``.
            cache: per-layer caches from :func:`init_cache` or a previous ``decode``.
            padding_mask: ``[batch, t]`` True for real tokens.
            positions: RoPE positions (default ``cache index + 0 … t-1``).

        Returns:
            ``(logits [batch, t, vocab], new_cache)``.
        """
        logits, new_cache = self._forward(tokens, padding_mask, positions, cache)
        return logits, new_cache


def init_cache(cfg: DecoderConfig, batch_size: int, max_len: int | None = None) -> DecoderCache:
    """Empty per-layer KV caches for :meth:`Decoder.decode`.

    Args:
        cfg: the decoder configuration.
        batch_size: rows.
        max_len: cache slots (default ``cfg.max_len``).

    Returns:
        ``cfg.n_layers`` empty :class:`KVCache` of shape ``[batch, max_len, kv_heads, head_dim]``
        in the computation dtype.

    Raises:
        ValueError: if ``max_len`` exceeds ``cfg.max_len`` or sizes are not positive.
    """
    length = cfg.max_len if max_len is None else max_len
    if length > cfg.max_len:
        raise ValueError(f"max_len={length!r}: expected at most cfg.max_len={cfg.max_len}")
    return tuple(
        KVCache.init(batch_size, length, cfg.kv_heads, cfg.head_dim, cfg.compute_dtype)
        for _ in range(cfg.n_layers)
    )


def next_token_loss(
    logits: Float[Array, "batch seq vocab"],
    targets: Int[ArrayLike, "batch seq"],
    weights: Float[ArrayLike, "batch seq"] | None = None,
) -> Float[Array, ""]:
    """Mean token cross-entropy ``-Σ w_t log softmax(logits_t)[y_t] / Σ w_t`` in nats.

    With a packed batch ``tokens: [batch, seq+1]`` use
    ``next_token_loss(model.apply(params, tokens[:, :-1]), tokens[:, 1:])``.

    Args:
        logits: ``[batch, seq, vocab]``.
        targets: ``[batch, seq]`` ids.
        weights: optional ``[batch, seq]`` token weights (e.g. 0 on padding).

    Returns:
        Scalar float32 loss.
    """
    losses = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), targets)
    if weights is None:
        return jnp.mean(losses)
    weights = weights.astype(jnp.float32)
    return jnp.sum(losses * weights) / jnp.maximum(jnp.sum(weights), 1.0)
