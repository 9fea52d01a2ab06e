"""Symmetric integer and floating-point absmax fake quantisation with a straight-through estimator.

"Scaling Laws for Precision" (Kumar et al., ICLR 2025, §2 and App. B) trains with *forward-only*
fake quantisation: in the forward pass a tensor ``x`` is replaced by its ``b``-bit integer
approximation

    s = max|x| / (2^{b-1} - 1)          (absmax over the reduction axes; one scale per group)
    Q_b(x) = s · clip(round(x / s), -2^{b-1}, 2^{b-1} - 1)

and the backward pass is the identity (straight-through estimator, ``∂Q_b(x)/∂x := I``), so
gradients are computed in high precision. Floating-point formats (``QuantConfig.{w,a,kv}_format``:
FP8 E4M3 and E5M2, FP4 E2M1, the OCP formats) scale the same way onto the format's largest finite
value, ``s = max|x| / max_fmt``, and round ``x / s`` to the nearest representable value, ties to
even, by the dtype's own cast (``jnp.float8_e4m3fn``, ``float8_e5m2``, ``float4_e2m1fn``);
absmax scaling keeps ``|x / s|`` within round-off of ``max_fmt``, far inside the half step above
it where a cast would overflow.

The granularity (which elements share one scale) is selectable per kind of tensor; the defaults
are the paper's: weights per output channel (the absmax runs over the input axes), activations
per tensor, the KV cache per head (one scale per head over batch, tokens and ``head_dim``). With ``kv_granularity: token_head`` (one scale per token
and head) incremental decoding with a cache gives the same numbers as the full pass; with the
per-head default a cached decode scales each call's new keys and values by their own absmax.

:class:`QuantConfig` is the static (hashable) choice of bit widths and target layers consumed by
:class:`jaxlab.nn.attention.MultiHeadAttention`, :class:`jaxlab.nn.mlp.SwiGLU`,
:class:`jaxlab.nn.embeddings.OutputHead` and the MoE experts. All bit widths ``None`` (the
default) means no quantisation anywhere: the layers compute exactly what they computed before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.core.config import ConfigError

MIN_BITS = 2
MAX_BITS = 32
#: layer groups a :class:`QuantConfig` may target.
TARGETS = ("attention", "mlp", "experts", "head")
#: collection into which the layers ``sow`` the inputs of their linear maps (GPTQ calibration).
CALIBRATION_COLLECTION = "quant_calibration"
#: granularities each kind of tensor accepts (which elements share one absmax scale).
GRANULARITIES = {
    "w_granularity": ("channel", "tensor"),
    "a_granularity": ("tensor", "token"),
    "kv_granularity": ("head", "token_head", "token", "tensor"),
}
#: floating-point number formats: dtype (its cast rounds to nearest, ties to even) and bit width.
FLOAT_FORMATS = {
    "fp8_e4m3": (jnp.float8_e4m3fn, 8),
    "fp8_e5m2": (jnp.float8_e5m2, 8),
    "fp4_e2m1": (jnp.float4_e2m1fn, 4),
}
#: number formats each kind of tensor accepts: symmetric integers of ``bits`` bits, or a float.
FORMATS = ("int", *FLOAT_FORMATS)
#: reduction axes of a ``[batch, seq, heads, head_dim]`` key or value per KV granularity.
_KV_AXES = {"head": (0, 1, 3), "token_head": (3,), "token": (2, 3), "tensor": None}


def check_bits(field: str, bits: object) -> None:
    """Raises :class:`ConfigError` naming ``field`` unless ``bits`` is None or an int in [2, 32].

    A validator: it takes whatever a user wrote (``bits: object``) and says what is wrong."""
    if bits is None:
        return
    if isinstance(bits, bool) or not isinstance(bits, int) or not MIN_BITS <= bits <= MAX_BITS:
        raise ConfigError(field, bits, f"None or an integer bit width in [{MIN_BITS}, {MAX_BITS}]")


@dataclasses.dataclass(frozen=True)
class QuantConfig:
    """Which tensors are fake-quantised during training, and at how many bits.

    Attributes:
        w_bits: ``P_w``, bits of the weights (per output channel); ``None`` = full precision.
        a_bits: ``P_a``, bits of the activations entering every quantised linear map (per
            tensor); ``None`` = full precision.
        kv_bits: ``P_kv``, bits of the attention keys and values (the KV cache); ``None`` = full
            precision.
        targets: layer groups whose linear maps are quantised, a subset of
            ``("attention", "mlp", "experts", "head")``; ``None`` = every linear map of the
            transformer blocks (attention, dense MLP, experts) and not the output head, as in the
            paper. The router of an MoE layer and the embedding are never quantised.
        w_granularity: ``"channel"`` (one scale per output channel, the paper's) or ``"tensor"``.
        a_granularity: ``"tensor"`` (the paper's) or ``"token"`` (one scale per token).
        kv_granularity: ``"head"`` (one scale per head, the paper's), ``"token_head"`` (per token
            and head), ``"token"`` (per token, all heads) or ``"tensor"``.
        w_format: ``"int"`` (symmetric integers, the paper's) or a float format of
            :data:`FLOAT_FORMATS` (``"fp8_e4m3"``, ``"fp8_e5m2"``, ``"fp4_e2m1"``); with a float
            format ``w_bits`` is its width (set to it when ``None``, refused when different).
        a_format: the activations' format, as ``w_format``.
        kv_format: the keys' and values' format, as ``w_format``.
    """

    w_bits: int | None = None
    a_bits: int | None = None
    kv_bits: int | None = None
    targets: tuple[str, ...] | None = None
    w_granularity: str = "channel"
    a_granularity: str = "tensor"
    kv_granularity: str = "head"
    w_format: str = "int"
    a_format: str = "int"
    kv_format: str = "int"

    def __post_init__(self) -> None:
        for name in ("w_bits", "a_bits", "kv_bits"):
            check_bits(name, getattr(self, name))
        for kind in ("w", "a", "kv"):
            fmt, bits = getattr(self, f"{kind}_format"), getattr(self, f"{kind}_bits")
            if fmt not in FORMATS:
                raise ConfigError(f"{kind}_format", fmt, f"one of {FORMATS}")
            if fmt in FLOAT_FORMATS:
                width = FLOAT_FORMATS[fmt][1]
                if bits is None:
                    object.__setattr__(self, f"{kind}_bits", width)
                elif bits != width:
                    raise ConfigError(
                        f"{kind}_bits", bits, f"None or {width} with {kind}_format {fmt}"
                    )
        for name, allowed in GRANULARITIES.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(name, getattr(self, name), f"one of {allowed}")
        if self.targets is not None:
            if isinstance(self.targets, str) or not isinstance(self.targets, Sequence):
                raise ConfigError("targets", self.targets, f"None or a tuple from {TARGETS}")
            object.__setattr__(self, "targets", tuple(self.targets))
            bad = [t for t in self.targets if t not in TARGETS]
            if bad:
                raise ConfigError("targets", self.targets, f"names from {TARGETS}")

    @property
    def enabled(self) -> bool:
        """Whether any tensor is quantised."""
        return any(b is not None for b in (self.w_bits, self.a_bits, self.kv_bits))

    def applies_to(self, group: str) -> bool:
        """Whether layer group ``group`` (one of :data:`TARGETS`) quantises its linear maps."""
        if group not in TARGETS:
            raise ConfigError("quant group", group, f"one of {TARGETS}")
        if self.targets is None:
            return group != "head"
        return group in self.targets

    def weight_bits(self, group: str) -> int | None:
        """``w_bits`` if ``group`` is targeted, else None."""
        return self.w_bits if self.applies_to(group) else None

    def act_bits(self, group: str) -> int | None:
        """``a_bits`` if ``group`` is targeted, else None."""
        return self.a_bits if self.applies_to(group) else None

    def cache_bits(self) -> int | None:
        """``kv_bits`` if attention is targeted, else None."""
        return self.kv_bits if self.applies_to("attention") else None

    def weights(self, group: str, w: Array, input_axes: tuple[int, ...]) -> Array:
        """``w`` fake-quantised at ``weight_bits(group)`` and ``w_granularity`` (``input_axes``:
        the kernel's input axes, reduced for per-output-channel scales).

        Raises:
          ConfigError: ``quant.w_granularity`` "channel" on a kernel with no output axis left.
        """
        if self.w_granularity == "tensor":
            return fake_quant(w, self.weight_bits(group), fmt=self.w_format)
        axes = tuple(a % w.ndim for a in input_axes)
        if not axes or len(set(axes)) >= w.ndim:
            raise ConfigError(
                "quant.w_granularity", "channel", f"a kernel with output axes, got shape {w.shape}"
            )
        return fake_quant(w, self.weight_bits(group), axes, fmt=self.w_format)

    def activations(self, group: str, x: Array, features: int = 1) -> Array:
        """``x`` fake-quantised at ``act_bits(group)`` and ``a_granularity`` (``x``: ``[batch, seq,
        *features]`` with ``features`` trailing feature axes, reduced for per-token scales).

        Raises:
          ConfigError: ``quant.a_granularity`` "token" on an array without token axes.
        """
        if self.a_granularity == "tensor":
            return fake_quant(x, self.act_bits(group), fmt=self.a_format)
        if x.ndim <= features:
            raise ConfigError(
                "quant.a_granularity", "token", f"an array with token axes, got shape {x.shape}"
            )
        axes = tuple(range(x.ndim - features, x.ndim))
        return fake_quant(x, self.act_bits(group), axes, fmt=self.a_format)

    def cache(self, kv: Float[Array, "batch seq heads head_dim"]) -> Array:
        """Keys or values fake-quantised at ``cache_bits()`` and ``kv_granularity``.

        Raises:
          ConfigError: ``quant.kv_granularity`` on an array that is not ``[batch, seq, heads,
            head_dim]``.
        """
        if kv.ndim != 4:
            raise ConfigError(
                "quant.kv_granularity",
                self.kv_granularity,
                f"keys/values of shape [batch, seq, heads, head_dim], got {kv.shape}",
            )
        return fake_quant(kv, self.cache_bits(), _KV_AXES[self.kv_granularity], fmt=self.kv_format)


def sow_calibration(module: nn.Module, name: str, x: Array) -> None:
    """Records ``x`` (the input of a linear map) in :data:`CALIBRATION_COLLECTION`.

    Only when the caller asked for it (``apply(..., mutable=[CALIBRATION_COLLECTION])``) and never
    during ``init``, so parameter trees and train states never carry activations.
    """
    if module.is_mutable_collection(CALIBRATION_COLLECTION) and not module.is_initializing():
        module.sow(CALIBRATION_COLLECTION, name, x)


def quantize_dequantize(
    x: Float[Array, "..."],
    bits: int,
    reduce_axes: int | tuple[int, ...] | None = None,
    *,
    fmt: str = "int",
) -> Float[Array, "..."]:
    """``Q_b(x)``: symmetric absmax rounding onto a ``b``-bit grid, returned dequantised.

    Integers (``fmt="int"``): ``s = max_{reduce_axes} |x| / (2^{b-1} - 1)``, ``Q_b(x) = s ·
    clip(round(x/s), -2^{b-1}, 2^{b-1}-1)``. Float formats (:data:`FLOAT_FORMATS`):
    ``s = max |x| / max_fmt`` and ``Q(x) = s · fmt(x/s)``, the cast rounding to the nearest
    representable value, ties to even. Computed in float32 and cast back to ``x.dtype``.
    An all-zero group has scale 1 (it stays zero). No gradient convention: use
    :func:`fake_quant` for training.

    Args:
        x: any array.
        bits: bit width ``b`` in [2, 32] (static); a float format's own width.
        reduce_axes: axes over which one scale is shared (``None``: the whole tensor). Weights
            ``[in, out]`` use ``0`` (per output channel).
        fmt: ``"int"`` or a key of :data:`FLOAT_FORMATS`.

    Returns:
        Array of ``x``'s shape and dtype on the grid of its group.
    """
    check_bits("bits", bits)
    if fmt not in FORMATS:
        raise ConfigError("format", fmt, f"one of {FORMATS}")
    xf = x.astype(jnp.float32)
    amax = jnp.max(jnp.abs(xf), axis=reduce_axes, keepdims=True)
    if fmt == "int":
        qmax = float(2 ** (bits - 1) - 1)
        scale = jnp.where(amax > 0, amax / qmax, 1.0)
        q = jnp.clip(jnp.round(xf / scale), -qmax - 1.0, qmax)
        return (q * scale).astype(x.dtype)
    dtype, width = FLOAT_FORMATS[fmt]
    if bits != width:
        raise ConfigError("bits", bits, f"{width}, the width of {fmt}")
    fmax = float(jnp.finfo(dtype).max)
    scale = jnp.where(amax > 0, amax / fmax, 1.0)
    q = (xf / scale).astype(dtype).astype(jnp.float32)
    return (q * scale).astype(x.dtype)


def fake_quant(
    x: Float[Array, "..."],
    bits: int | None,
    reduce_axes: int | tuple[int, ...] | None = None,
    *,
    fmt: str = "int",
) -> Float[Array, "..."]:
    """Forward ``Q_b(x)``, backward identity (straight-through estimator).

    ``x + stop_gradient(Q_b(x) - x)``; ``bits=None`` returns ``x`` unchanged.

    Args:
        x: any array.
        bits: bit width in [2, 32] or None.
        reduce_axes: see :func:`quantize_dequantize`.
        fmt: ``"int"`` or a key of :data:`FLOAT_FORMATS` (see :func:`quantize_dequantize`).

    Returns:
        ``Q_b(x)`` with ``∂/∂x = I``.
    """
    if bits is None:
        return x
    return x + jax.lax.stop_gradient(quantize_dequantize(x, bits, reduce_axes, fmt=fmt) - x)
