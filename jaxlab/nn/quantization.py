"""Symmetric integer absmax fake quantisation with a straight-through estimator.

"Scaling Laws for Precision" (Kumar et al., ICLR 2025, §2 and App. B) trains with *forward-only*
fake quantisation: in the forward pass a tensor ``x`` is replaced by its ``b``-bit integer
approximation

    s = max|x| / (2^{b-1} - 1)          (absmax over the reduction axes; one scale per group)
    Q_b(x) = s · clip(round(x / s), -2^{b-1}, 2^{b-1} - 1)

and the backward pass is the identity (straight-through estimator, ``∂Q_b(x)/∂x := I``), so
gradients are computed in high precision. Granularities used by the paper and by the layers here:
weights per output channel (the absmax runs over the input axes), activations per tensor, the KV
cache per head (the absmax runs over ``head_dim`` of each token and head, so incremental decoding
with a cache gives the same numbers as the full pass).

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
        kv_bits: ``P_kv``, bits of the attention keys and values (the KV cache; per token and
            head); ``None`` = full precision.
        targets: layer groups whose linear maps are quantised, a subset of
            ``("attention", "mlp", "experts", "head")``; ``None`` = every linear map of the
            transformer blocks (attention, dense MLP, experts) and not the output head, as in the
            paper. The router of an MoE layer and the embedding are never quantised.
    """

    w_bits: int | None = None
    a_bits: int | None = None
    kv_bits: int | None = None
    targets: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("w_bits", "a_bits", "kv_bits"):
            check_bits(name, getattr(self, name))
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


def sow_calibration(module: nn.Module, name: str, x: Array) -> None:
    """Records ``x`` (the input of a linear map) in :data:`CALIBRATION_COLLECTION`.

    Only when the caller asked for it (``apply(..., mutable=[CALIBRATION_COLLECTION])``) and never
    during ``init``, so parameter trees and train states never carry activations.
    """
    if module.is_mutable_collection(CALIBRATION_COLLECTION) and not module.is_initializing():
        module.sow(CALIBRATION_COLLECTION, name, x)


def quantize_dequantize(
    x: Float[Array, "..."], bits: int, reduce_axes: int | tuple[int, ...] | None = None
) -> Float[Array, "..."]:
    """``Q_b(x)``: symmetric absmax rounding to ``b``-bit integers, returned dequantised.

    ``s = max_{reduce_axes} |x| / (2^{b-1} - 1)``, ``Q_b(x) = s · clip(round(x/s), -2^{b-1},
    2^{b-1}-1)`` computed in float32 and cast back to ``x.dtype``. An all-zero group has scale 1
    (it stays zero). No gradient convention: use :func:`fake_quant` for training.

    Args:
        x: any array.
        bits: integer bit width ``b`` in [2, 32] (static).
        reduce_axes: axes over which one scale is shared (``None``: the whole tensor). Weights
            ``[in, out]`` use ``0`` (per output channel).

    Returns:
        Array of ``x``'s shape and dtype on the ``2^b``-level grid of its group.
    """
    check_bits("bits", bits)
    qmax = float(2 ** (bits - 1) - 1)
    xf = x.astype(jnp.float32)
    amax = jnp.max(jnp.abs(xf), axis=reduce_axes, keepdims=True)
    scale = jnp.where(amax > 0, amax / qmax, 1.0)
    q = jnp.clip(jnp.round(xf / scale), -qmax - 1.0, qmax)
    return (q * scale).astype(x.dtype)


def fake_quant(
    x: Float[Array, "..."], bits: int | None, reduce_axes: int | tuple[int, ...] | None = None
) -> Float[Array, "..."]:
    """Forward ``Q_b(x)``, backward identity (straight-through estimator).

    ``x + stop_gradient(Q_b(x) - x)``; ``bits=None`` returns ``x`` unchanged.

    Args:
        x: any array.
        bits: bit width in [2, 32] or None.
        reduce_axes: see :func:`quantize_dequantize`.

    Returns:
        ``Q_b(x)`` with ``∂/∂x = I``.
    """
    if bits is None:
        return x
    return x + jax.lax.stop_gradient(quantize_dequantize(x, bits, reduce_axes) - x)
