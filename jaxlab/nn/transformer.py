"""Pre-norm (or OLMo-2's post-norm) transformer block with an injectable feed-forward network."""

from collections.abc import Callable
from typing import Literal

import flax.linen as nn
import jax.numpy as jnp
from jax.typing import DTypeLike
from jaxtyping import Array, Bool, Float, Int

from jaxlab.nn.attention import KVCache, MultiHeadAttention
from jaxlab.nn.mlp import SwiGLU
from jaxlab.nn.norms import RMSNorm
from jaxlab.nn.quantization import QuantConfig

FFNFactory = Callable[[], nn.Module]
"""A zero-argument callable returning an *unbound* flax module ``ffn`` with
``ffn(x: [batch, seq, embed]) -> [batch, seq, embed]``. It is called inside the block's
``setup``, so the returned module becomes the block's child named ``"ffn"``. Auxiliary losses
(e.g. MoE load balancing) are reported with ``self.sow(collection, name, value)`` and collected
by applying the model with ``mutable=[collection]`` (the MoE layer uses ``"moe_aux_loss"``)."""


class TransformerBlock(nn.Module):
    """Pre-norm residual block (OLMo/OLMoE, LLaMA):

        ``h = x + Attn(RMSNorm(x))``
        ``y = h + FFN(RMSNorm(h))``

    or, with ``norm_position="post"``, OLMo-2's reordered norms (the sublayer outputs are
    normalised before they join the residual stream):

        ``h = x + RMSNorm(Attn(x))``
        ``y = h + RMSNorm(FFN(h))``

    The FFN defaults to :class:`jaxlab.nn.mlp.SwiGLU` of width ``d_ff``; pass ``ffn_factory`` to
    use any other module with the same call signature (a mixture of experts).

    Attributes:
        n_heads: attention heads.
        head_dim: per-head size.
        d_ff: width of the default SwiGLU FFN (ignored when ``ffn_factory`` is given).
        ffn_factory: optional :data:`FFNFactory` replacing the default FFN.
        causal: causal self-attention.
        qk_norm: RMSNorm on queries and keys (OLMoE).
        rope_base: RoPE wavelength base.
        norm_eps: RMSNorm epsilon (OLMoE 1e-5).
        init_std: ``None`` for LeCun-normal kernels, else the std of a ±3σ truncated normal.
        dtype: computation dtype (``None``: the input's).
        param_dtype: parameter dtype.
        quant: fake quantisation of the attention and of the default SwiGLU
            (:class:`jaxlab.nn.quantization.QuantConfig`); a custom ``ffn_factory`` handles its own.
        n_kv_heads: key/value heads of grouped-query attention (``None``: ``n_heads``).
        rope_inverse_frequencies: RoPE inverse frequencies replacing the default ones (see
            :class:`jaxlab.nn.attention.MultiHeadAttention`).
        norm_position: ``"pre"`` (default) or ``"post"`` (OLMo-2); the norms keep their names
            ``attn_norm`` and ``ffn_norm`` either way.
    """

    n_heads: int
    head_dim: int
    d_ff: int = 0
    ffn_factory: FFNFactory | None = None
    causal: bool = True
    qk_norm: bool = False
    rope_base: float = 10_000.0
    norm_eps: float = 1e-5
    init_std: float | None = 0.02
    dtype: DTypeLike | None = None
    param_dtype: DTypeLike = jnp.float32
    quant: QuantConfig | None = None
    n_kv_heads: int | None = None
    rope_inverse_frequencies: tuple[float, ...] | None = None
    norm_position: Literal["pre", "post"] = "pre"

    def setup(self) -> None:
        """Creates ``attn_norm``, ``attn``, ``ffn_norm`` and ``ffn``."""
        self.attn_norm = RMSNorm(eps=self.norm_eps, dtype=self.dtype, param_dtype=self.param_dtype)
        self.attn = MultiHeadAttention(
            n_heads=self.n_heads,
            head_dim=self.head_dim,
            causal=self.causal,
            qk_norm=self.qk_norm,
            rope_base=self.rope_base,
            norm_eps=self.norm_eps,
            init_std=self.init_std,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            quant=self.quant,
            n_kv_heads=self.n_kv_heads,
            rope_inverse_frequencies=self.rope_inverse_frequencies,
        )
        self.ffn_norm = RMSNorm(eps=self.norm_eps, dtype=self.dtype, param_dtype=self.param_dtype)
        if self.ffn_factory is None:
            if self.d_ff <= 0:
                raise ValueError(
                    f"d_ff={self.d_ff!r}: expected a positive int when ffn_factory is None"
                )
            self.ffn = SwiGLU(
                d_ff=self.d_ff,
                init_std=self.init_std,
                dtype=self.dtype,
                param_dtype=self.param_dtype,
                quant=self.quant,
            )
        else:
            self.ffn = self.ffn_factory()

    def __call__(
        self,
        x: Float[Array, "batch seq embed"],
        *,
        padding_mask: Bool[Array, "batch seq"] | None = None,
        positions: Int[Array, "batch seq"] | None = None,
        cache: KVCache | None = None,
    ) -> tuple[Float[Array, "batch seq embed"], KVCache | None]:
        """Applies attention and the FFN with pre-norm (or post-norm) residuals.

        Args:
            x: residual stream ``[batch, seq, embed]``.
            padding_mask: ``[batch, seq]`` True for real tokens (see ``MultiHeadAttention``).
            positions: RoPE positions ``[batch, seq]`` (see ``MultiHeadAttention``).
            cache: optional KV cache of this layer.

        Returns:
            ``(y, new_cache)``; ``new_cache`` is None when ``cache`` is None.
        """
        if self.norm_position == "post":
            attn_out, new_cache = self.attn(
                x, padding_mask=padding_mask, positions=positions, cache=cache
            )
            h = x + self.attn_norm(attn_out).astype(x.dtype)
            y = h + self.ffn_norm(self.ffn(h)).astype(h.dtype)
            return nn.with_logical_constraint(y, ("batch", "seq", "embed")), new_cache
        attn_out, new_cache = self.attn(
            self.attn_norm(x), padding_mask=padding_mask, positions=positions, cache=cache
        )
        h = x + attn_out.astype(x.dtype)
        y = h + self.ffn(self.ffn_norm(h)).astype(h.dtype)
        return nn.with_logical_constraint(y, ("batch", "seq", "embed")), new_cache
