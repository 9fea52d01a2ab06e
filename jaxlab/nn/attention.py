"""Multi-head dot-product attention: self- or cross-attention, RoPE, masks, QK-norm, a KV cache."""

from __future__ import annotations

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike
from jaxtyping import Array, Bool, Float, Int

from jaxlab.nn.initializers import kernel_init
from jaxlab.nn.norms import RMSNorm
from jaxlab.nn.quantization import QuantConfig, sow_calibration
from jaxlab.nn.rope import apply_rope


@flax.struct.dataclass
class KVCache:
    """Fixed-size key/value cache of one attention layer for incremental decoding.

    Slots ``[0, index[b])`` of row ``b`` hold the keys and values of the tokens seen so far; the
    next call writes its ``t`` new tokens at slots ``index[b] … index[b]+t-1``. Slots at or beyond
    ``index`` are ignored by attention, so rolling a row back (e.g. after rejected speculative
    tokens) is just lowering its ``index``.

    Attributes:
        key: ``[batch, max_len, heads, head_dim]`` cached (RoPE-rotated, QK-normed) keys.
        value: ``[batch, max_len, heads, head_dim]`` cached values.
        mask: ``[batch, max_len]`` True where the slot holds a real (non-padding) token.
        index: ``[batch]`` int32, number of slots filled so far in each row.
    """

    key: Float[Array, "batch max_len heads head_dim"]
    value: Float[Array, "batch max_len heads head_dim"]
    mask: Bool[Array, "batch max_len"]
    index: Int[Array, " batch"]

    @classmethod
    def init(
        cls,
        batch_size: int,
        max_len: int,
        n_heads: int,
        head_dim: int,
        dtype: DTypeLike = jnp.float32,
    ) -> KVCache:
        """Returns an empty cache (all slots free, ``index = 0``).

        Args:
            batch_size: rows.
            max_len: number of slots (maximum prompt + generated length).
            n_heads: attention heads.
            head_dim: per-head feature size.
            dtype: storage dtype of keys and values.

        Returns:
            The empty cache.

        Raises:
            ValueError: if any size is not a positive int.
        """
        for name, value in (
            ("batch_size", batch_size),
            ("max_len", max_len),
            ("n_heads", n_heads),
            ("head_dim", head_dim),
        ):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name}={value!r}: expected a positive int")
        shape = (batch_size, max_len, n_heads, head_dim)
        return cls(
            key=jnp.zeros(shape, dtype),
            value=jnp.zeros(shape, dtype),
            mask=jnp.zeros((batch_size, max_len), jnp.bool_),
            index=jnp.zeros((batch_size,), jnp.int32),
        )

    @property
    def max_len(self) -> int:
        """Number of slots."""
        return self.key.shape[1]


def dot_product_attention(
    query: Float[Array, "batch q heads head_dim"],
    key: Float[Array, "batch k heads head_dim"],
    value: Float[Array, "batch k heads head_dim"],
    mask: Bool[Array, "batch q k"],
) -> Float[Array, "batch q heads head_dim"]:
    """Masked scaled dot-product attention (Vaswani et al. 2017, eq. 1).

    ``softmax(Q Kᵀ / sqrt(d) + M) V`` per head, where ``M = 0`` where ``mask`` is True and the
    most negative float32 elsewhere (not ``-inf``, so a fully masked row gives a finite uniform
    average instead of NaN). Logits and softmax are computed in float32.

    Args:
        query: ``[batch, q, heads, head_dim]``.
        key: ``[batch, k, heads, head_dim]``.
        value: ``[batch, k, heads, head_dim]``.
        mask: ``[batch, q, k]`` True where query ``i`` may attend to key ``j`` (shared by heads).

    Returns:
        ``[batch, q, heads, head_dim]`` in the dtype of ``value``.
    """
    scale = 1.0 / jnp.sqrt(jnp.float32(query.shape[-1]))
    logits = jnp.einsum("bqhd,bkhd->bhqk", query, key, preferred_element_type=jnp.float32) * scale
    logits = jnp.where(mask[:, None, :, :], logits, jnp.finfo(jnp.float32).min)
    weights = jax.nn.softmax(logits, axis=-1).astype(value.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, value)


def causal_padding_mask(
    query_slots: Int[Array, "batch q"],
    key_slots: Int[Array, "batch k"],
    key_valid: Bool[Array, "batch k"],
    *,
    causal: bool,
) -> Bool[Array, "batch q k"]:
    """Combines a causal mask on sequence slots with a key padding mask.

    Args:
        query_slots: slot (sequence index) of every query.
        key_slots: slot of every key.
        key_valid: True for real keys, False for padding (or unfilled cache slots).
        causal: if True, query at slot ``i`` sees keys at slots ``j <= i`` only.

    Returns:
        ``[batch, q, k]`` boolean mask.
    """
    mask = jnp.broadcast_to(
        key_valid[:, None, :], (key_valid.shape[0], query_slots.shape[1], key_valid.shape[1])
    )
    if causal:
        mask = mask & (key_slots[:, None, :] <= query_slots[:, :, None])
    return mask


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention with rotary positions and an optional KV cache.

    ``q, k, v = x W_q, x W_k, x W_v`` (``W: [embed, heads, kv]``, no biases), optional QK-norm
    (OLMoE: RMSNorm of ``q`` and ``k`` over all heads jointly, applied before RoPE), RoPE on
    ``q`` and ``k``, masked softmax attention, output ``o W_o`` with ``W_o: [heads, kv, embed]``.

    Without a cache the layer attends within ``x``. With a cache it appends ``x``'s keys and
    values at the cache's ``index`` and attends over all filled slots; a prefill of ``n`` tokens
    followed by one-token steps equals recomputing the full sequence.

    Cross-attention: with ``context`` the keys and values are projected from ``context``
    (``[batch, ctx, ctx_embed]``, any width) instead of ``x``; ``context_mask`` is the key padding
    mask over the context tokens. Cross-attention has no positions (RoPE is skipped), no causal
    mask and no cache.

    Grouped-query attention (Ainslie et al. 2023; Llama 2/3): with ``n_kv_heads < n_heads`` the
    keys and values have ``n_kv_heads`` heads (``W_k, W_v: [embed, kv_heads, kv]``, and so has the
    cache); query head ``i`` attends with key/value head ``i // (n_heads / n_kv_heads)``.

    Attributes:
        n_heads: number of (query) heads.
        head_dim: per-head size (even when ``use_rope``).
        causal: mask future slots.
        qk_norm: apply RMSNorm to queries and keys (over ``[heads, kv]`` jointly, as OLMoE).
        use_rope: rotate queries and keys by their positions.
        rope_base: RoPE wavelength base.
        norm_eps: epsilon of the QK-norm.
        init_std: ``None`` for LeCun-normal kernels, else the std of a ±3σ truncated normal.
        dtype: computation dtype (``None``: the input's).
        param_dtype: parameter dtype.
        n_kv_heads: key/value heads, dividing ``n_heads`` (``None``: ``n_heads``, plain MHA).
        rope_inverse_frequencies: ``[head_dim / 2]`` RoPE inverse frequencies replacing
            ``base^(-2i/d)`` (e.g. Llama 3's scaled ones, :func:`jaxlab.nn.rope.llama3_inverse_frequencies`);
            a tuple so the module stays hashable. ``None``: the plain RoFormer frequencies.
        quant: fake quantisation (:class:`jaxlab.nn.quantization.QuantConfig`, group
            ``"attention"``): the four kernels per output channel, the inputs of the ``q/k/v`` and
            output projections per tensor, keys and values (the cache) per token and head.
            ``None`` or all bits ``None``: exact full precision. The inputs of the projections
            are also ``sow``n into ``quant_calibration`` (``qkv_in``, ``o_in``) for GPTQ.
    """

    n_heads: int
    head_dim: int
    causal: bool = True
    qk_norm: bool = False
    use_rope: bool = True
    rope_base: float = 10_000.0
    norm_eps: float = 1e-5
    init_std: float | None = 0.02
    dtype: DTypeLike | None = None
    param_dtype: DTypeLike = jnp.float32
    quant: QuantConfig | None = None
    n_kv_heads: int | None = None
    rope_inverse_frequencies: tuple[float, ...] | None = None

    @nn.compact
    def __call__(
        self,
        x: Float[Array, "batch seq embed"],
        *,
        padding_mask: Bool[Array, "batch seq"] | None = None,
        positions: Int[Array, "batch seq"] | None = None,
        cache: KVCache | None = None,
        context: Float[Array, "batch ctx ctx_embed"] | None = None,
        context_mask: Bool[Array, "batch ctx"] | None = None,
    ) -> tuple[Float[Array, "batch seq embed"], KVCache | None]:
        """Attends from every token of ``x`` to the visible keys.

        Args:
            x: input ``[batch, seq, embed]``.
            context: cross-attention source ``[batch, ctx, ctx_embed]``; keys and values come
                from it. ``None``: self-attention over ``x``.
            context_mask: ``[batch, ctx]`` True for real context tokens (only with ``context``).
                Default: all real. A query whose context is entirely masked gets a finite
                uniform average over the context (callers should gate such rows).
            padding_mask: ``[batch, seq]`` True for real tokens; padded tokens are never attended
                to (their own outputs are finite but meaningless). Default: all real.
            positions: RoPE positions ``[batch, seq]``. Default: the slot index, ``0 … seq-1``
                without a cache and ``cache.index + 0 … seq-1`` with one. Left-padded batches
                should pass ``cumsum(padding_mask) - 1``.
            cache: optional KV cache; the caller must keep ``cache.index + seq <= max_len``
                (beyond it the write is clamped by ``lax.dynamic_update_slice``).

        Returns:
            ``(y, new_cache)`` with ``y: [batch, seq, embed]``; ``new_cache`` is None when no
            cache was given, else the cache with ``x`` appended and ``index += seq``.
        """
        _check_call(self, x, cache, context, context_mask)
        batch, seq, d_model = x.shape
        dtype = self.dtype or x.dtype
        x = nn.with_logical_constraint(x.astype(dtype), ("batch", "seq", "embed"))
        kv_source = x if context is None else context.astype(dtype)
        w_q, w_k, w_v, w_o = _projection_kernels(self, d_model, kv_source.shape[-1], dtype)
        quant = self.quant or QuantConfig()
        w_q, w_k, w_v = (quant.weights("attention", w, (0,)) for w in (w_q, w_k, w_v))
        w_o = quant.weights("attention", w_o, (0, 1))
        x = quant.activations("attention", x)
        kv_source = x if context is None else quant.activations("attention", kv_source)
        sow_calibration(self, "qkv_in", x)

        q = jnp.einsum("bsd,dhk->bshk", x, w_q)
        k = jnp.einsum("bsd,dhk->bshk", kv_source, w_k)
        v = jnp.einsum("bsd,dhk->bshk", kv_source, w_v)
        if self.qk_norm:
            norm_kwargs = dict(num_axes=2, axis_names=("heads", "kv"), eps=self.norm_eps)
            q = RMSNorm(name="q_norm", dtype=dtype, param_dtype=self.param_dtype, **norm_kwargs)(q)
            k = RMSNorm(name="k_norm", dtype=dtype, param_dtype=self.param_dtype, **norm_kwargs)(k)

        if context is not None:
            k, v = quant.cache(k), quant.cache(v)
            n_ctx = context.shape[1]
            if context_mask is None:
                context_mask = jnp.ones((batch, n_ctx), jnp.bool_)
            mask = jnp.broadcast_to(context_mask[:, None, :], (batch, seq, n_ctx))
            out = quant.activations("attention", dot_product_attention(q, k, v, mask), 2)
            sow_calibration(self, "o_in", out)
            y = jnp.einsum("bshk,hkd->bsd", out, w_o)
            return nn.with_logical_constraint(y, ("batch", "seq", "embed")), None

        offsets = jnp.arange(seq, dtype=jnp.int32)[None, :]
        start = jnp.zeros((batch,), jnp.int32) if cache is None else cache.index
        slots = start[:, None] + offsets  # [b, s]
        if positions is None:
            positions = slots
        if padding_mask is None:
            padding_mask = jnp.ones((batch, seq), jnp.bool_)
        if self.use_rope:
            inv_freq = self.rope_inverse_frequencies
            inv_freq = None if inv_freq is None else jnp.asarray(inv_freq, jnp.float32)
            q = apply_rope(q, positions, base=self.rope_base, inv_freq=inv_freq)
            k = apply_rope(k, positions, base=self.rope_base, inv_freq=inv_freq)
        k, v = quant.cache(k), quant.cache(v)
        q = nn.with_logical_constraint(q, ("batch", "seq", "heads", "kv"))
        k = nn.with_logical_constraint(k, ("batch", "seq", "heads", "kv"))
        v = nn.with_logical_constraint(v, ("batch", "seq", "heads", "kv"))

        if cache is None:
            mask = causal_padding_mask(slots, slots, padding_mask, causal=self.causal)
            out = dot_product_attention(q, *_repeat_kv(k, v, self.n_heads), mask)
            new_cache = None
        else:
            out, new_cache = _cached_attention(
                q, k, v, cache, padding_mask, slots, causal=self.causal, dtype=dtype
            )
        out = quant.activations("attention", out, 2)
        sow_calibration(self, "o_in", out)
        y = jnp.einsum("bshk,hkd->bsd", out, w_o)
        return nn.with_logical_constraint(y, ("batch", "seq", "embed")), new_cache


def _check_call(
    module: MultiHeadAttention,
    x: Array,
    cache: KVCache | None,
    context: Array | None,
    context_mask: Array | None,
) -> None:
    """Raises ValueError on bad sizes or a bad combination of cache, causal mask and context."""
    if module.n_heads <= 0 or module.head_dim <= 0:
        raise ValueError(
            f"n_heads={module.n_heads!r}, head_dim={module.head_dim!r}: expected positive ints"
        )
    n_kv = module.n_heads if module.n_kv_heads is None else module.n_kv_heads
    if n_kv <= 0 or module.n_heads % n_kv:
        raise ValueError(
            f"n_kv_heads={module.n_kv_heads!r}: expected a positive divisor of "
            f"n_heads={module.n_heads}"
        )
    if module.use_rope and module.head_dim % 2:
        raise ValueError(f"head_dim={module.head_dim!r}: expected an even size for RoPE")
    batch = x.shape[0]
    if context is None and context_mask is not None:
        raise ValueError("context_mask: given without context (cross-attention needs both)")
    if context is not None:
        if cache is not None or module.causal:
            raise ValueError(
                f"context: cross-attention takes no cache and no causal mask "
                f"(cache={'given' if cache is not None else None}, causal={module.causal})"
            )
        if context.ndim != 3 or context.shape[0] != batch:
            raise ValueError(
                f"context: got shape {tuple(context.shape)}, expected ({batch}, ctx, ctx_embed)"
            )
        if context_mask is not None and tuple(context_mask.shape) != tuple(context.shape[:2]):
            raise ValueError(
                f"context_mask: got shape {tuple(context_mask.shape)}, "
                f"expected {tuple(context.shape[:2])}"
            )


def _projection_kernels(
    module: MultiHeadAttention, d_model: int, kv_width: int, dtype: DTypeLike
) -> tuple[Array, Array, Array, Array]:
    """``module``'s kernels ``wq [d, h, kv]``, ``wk``/``wv [kv_width, h, kv]``, ``wo [h, kv, d]``."""
    qkv_init = nn.with_logical_partitioning(
        kernel_init(module.init_std, in_axis=0, out_axis=(1, 2)), ("embed", "heads", "kv")
    )
    n_kv = module.n_heads if module.n_kv_heads is None else module.n_kv_heads
    shape = (d_model, module.n_heads, module.head_dim)
    kv_shape = (kv_width, n_kv, module.head_dim)
    w_q = module.param("wq", qkv_init, shape, module.param_dtype).astype(dtype)
    w_k = module.param("wk", qkv_init, kv_shape, module.param_dtype).astype(dtype)
    w_v = module.param("wv", qkv_init, kv_shape, module.param_dtype).astype(dtype)
    w_o = module.param(
        "wo",
        nn.with_logical_partitioning(
            kernel_init(module.init_std, in_axis=(0, 1), out_axis=2), ("heads", "kv", "embed")
        ),
        (module.n_heads, module.head_dim, d_model),
        module.param_dtype,
    ).astype(dtype)
    return w_q, w_k, w_v, w_o


def _cached_attention(
    q: Array,
    k: Array,
    v: Array,
    cache: KVCache,
    padding_mask: Array,
    slots: Array,
    *,
    causal: bool,
    dtype: DTypeLike,
) -> tuple[Array, KVCache]:
    """Appends ``k, v`` at ``cache.index`` and attends from ``q`` over every filled cache slot."""
    batch, seq = k.shape[:2]
    write = jax.vmap(lambda buf, new, i: jax.lax.dynamic_update_slice_in_dim(buf, new, i, 0))
    new_cache = KVCache(
        key=write(cache.key, k.astype(cache.key.dtype), cache.index),
        value=write(cache.value, v.astype(cache.value.dtype), cache.index),
        mask=write(cache.mask, padding_mask, cache.index),
        index=cache.index + seq,
    )
    key_slots = jnp.broadcast_to(
        jnp.arange(cache.max_len, dtype=jnp.int32)[None, :], (batch, cache.max_len)
    )
    key_valid = new_cache.mask & (key_slots < new_cache.index[:, None])
    mask = causal_padding_mask(slots, key_slots, key_valid, causal=causal)
    k, v = _repeat_kv(new_cache.key.astype(dtype), new_cache.value.astype(dtype), q.shape[2])
    out = dot_product_attention(q, k, v, mask)
    return out, new_cache


def _repeat_kv(
    k: Float[Array, "batch k kv_heads head_dim"],
    v: Float[Array, "batch k kv_heads head_dim"],
    n_heads: int,
) -> tuple[Float[Array, "batch k heads head_dim"], Float[Array, "batch k heads head_dim"]]:
    """Repeats each key/value head ``n_heads / kv_heads`` times (grouped-query attention)."""
    groups = n_heads // k.shape[2]
    if groups == 1:
        return k, v
    return jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)
