"""2-D convolutions written as one matmul over shifted windows (im2col), for training in loops.

``Conv`` and ``ConvTranspose`` have the parameters (``kernel`` ``(kh, kw, C_in, F)``, ``bias``
``(F,)``) and the results of ``flax.linen.Conv`` / ``flax.linen.ConvTranspose`` with ``"SAME"`` or
``"VALID"`` padding (``transpose_kernel=False``), so checkpoints and initialisations carry over.

Why: XLA:CPU lowers the weight-gradient convolution of a step inside a ``lax.scan``/``while`` body
to its generic loop emitter, not to the fused library kernel it uses at top level: a gradient step
of the 8x8/4 pixel encoder plus a transposed-conv decoder on 256 32x32 images takes 0.07 s alone
and 0.82 s per iteration of a ``scan`` (``benchmarks/bench_nn.py --only conv``). Every training
run of the project is one scan, so the world models, pixel PPO, the U-Net and the search models
all hit it. Strided slices, pads, a concatenation and one ``dot`` have no such path: their
gradients are pads, slices and a ``dot`` again, on every backend.

Leading axes are free: inputs are ``[..., H, W, C]`` (``vmap``-ed models need no reshape).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float

PADDINGS = ("SAME", "VALID")


def _pair(v: int | Sequence[int], name: str) -> tuple[int, int]:
    t = (v, v) if isinstance(v, int) else tuple(v)
    if len(t) != 2 or not all(isinstance(i, int) and i >= 1 for i in t):
        raise ValueError(f"{name}={v!r}: expected an int >= 1 or a pair of them")
    return t  # type: ignore[return-value]


def conv_pads(n: int, k: int, s: int, padding: str) -> tuple[int, int, int]:
    """``(pad_lo, pad_hi, out)`` of a strided convolution along one axis, as XLA pads it."""
    if padding == "SAME":
        out = -(-n // s)
        total = max((out - 1) * s + k - n, 0)
        return total // 2, total - total // 2, out
    if padding == "VALID":
        return 0, 0, (n - k) // s + 1
    raise ValueError(f"padding={padding!r}: expected one of {PADDINGS}")


def transpose_pads(k: int, s: int, padding: str) -> tuple[int, int]:
    """Padding of the stride-1 correlation over the ``s``-dilated input that a transposed
    convolution is (``lax.conv_transpose``'s rule)."""
    if padding == "SAME":
        total = k + s - 2
        lo = k - 1 if s > k - 1 else int(np.ceil(total / 2))
    elif padding == "VALID":
        total = k + s - 2 + max(k - s, 0)
        lo = k - 1
    else:
        raise ValueError(f"padding={padding!r}: expected one of {PADDINGS}")
    return lo, total - lo


def windows(
    x: Float[Array, "*b h w c"],
    kernel_size: tuple[int, int],
    strides: tuple[int, int],
    pads: tuple[tuple[int, int], tuple[int, int]],
    out: tuple[int, int],
) -> Float[Array, "*b ho wo kc"]:
    """im2col: the ``kh x kw`` windows of ``x`` (padded by ``pads``) at stride ``strides``,
    concatenated on the channel axis in ``(i, j, c)`` order (``kernel.reshape(-1, F)``'s)."""
    (kh, kw), (sh, sw), (ho, wo) = kernel_size, strides, out
    xp = jnp.pad(x, [(0, 0)] * (x.ndim - 3) + [pads[0], pads[1], (0, 0)])
    cols = [
        xp[..., i : i + sh * (ho - 1) + 1 : sh, j : j + sw * (wo - 1) + 1 : sw, :]
        for i in range(kh)
        for j in range(kw)
    ]
    return cols[0] if len(cols) == 1 else jnp.concatenate(cols, axis=-1)


class _ConvBase(nn.Module):
    features: int
    kernel_size: int | tuple[int, int] = 3
    strides: int | tuple[int, int] = 1
    padding: str = "SAME"
    use_bias: bool = True
    kernel_init: Callable = nn.initializers.lecun_normal()
    bias_init: Callable = nn.initializers.zeros_init()
    kernel_axes: tuple[str | None, ...] | None = None  # logical partitioning of the kernel

    def _params(self, c_in: int):
        k = _pair(self.kernel_size, "kernel_size")
        init = self.kernel_init
        if self.kernel_axes is not None:
            init = nn.with_logical_partitioning(init, self.kernel_axes)
        kernel = self.param("kernel", init, (*k, c_in, self.features))
        bias = self.param("bias", self.bias_init, (self.features,)) if self.use_bias else None
        return k, kernel, bias

    def _matmul(self, cols, kernel, bias):
        y = jnp.einsum("...i,io->...o", cols, kernel.reshape(-1, self.features))
        return y if bias is None else y + bias.reshape((1,) * (y.ndim - 1) + (-1,))


class Conv(_ConvBase):
    """``flax.linen.Conv`` (``"SAME"``/``"VALID"``, strides, no dilation) as im2col + matmul."""

    @nn.compact
    def __call__(self, x: Float[Array, "*b h w c"]) -> Float[Array, "*b ho wo f"]:
        k, kernel, bias = self._params(x.shape[-1])
        s = _pair(self.strides, "strides")
        (lo_h, hi_h, ho), (lo_w, hi_w, wo) = (
            conv_pads(x.shape[-3], k[0], s[0], self.padding),
            conv_pads(x.shape[-2], k[1], s[1], self.padding),
        )
        cols = windows(x, k, s, ((lo_h, hi_h), (lo_w, hi_w)), (ho, wo))
        return self._matmul(cols, kernel, bias)


def _phase_taps(k: int, s: int, lo: int) -> tuple[int, np.ndarray]:
    """For a transposed convolution along one axis: output ``o = s q + r`` (phase ``r``) sums
    ``x[q + d] K[lo - r + s d]`` over the taps that exist. Returns ``d_min`` and the tap index
    table ``[D, s]`` (``k`` where phase ``r`` has no tap at offset ``d``: a zero row)."""
    pairs = [(d, r) for r in range(s) for d in range(-k, k + 1) if 0 <= lo - r + s * d < k]
    d_min = min(d for d, _ in pairs)
    d_max = max(d for d, _ in pairs)
    table = np.full((d_max - d_min + 1, s), k, np.int32)
    for d, r in pairs:
        table[d - d_min, r] = lo - r + s * d
    return d_min, table


class ConvTranspose(_ConvBase):
    """``flax.linen.ConvTranspose`` (``transpose_kernel=False``) by sub-pixel phases.

    ``lax.conv_transpose`` correlates the kernel with the input dilated by the stride (``s - 1``
    zeros between pixels) and padded by ``(lo, hi)`` (``transpose_pads``); so output ``s q + r``
    sums ``x[q + d] K[lo - r + s d]``. All ``s_h s_w`` phases are one stride-1 im2col of the
    undilated input (window ``D`` = the tap offsets' span, ``_phase_taps``) times a kernel
    gathered per phase (zeros where a phase has no tap), then interleaved (depth-to-space):
    no multiplications by the dilation's zeros, and only pads, slices and one ``dot``."""

    @nn.compact
    def __call__(self, x: Float[Array, "*b h w c"]) -> Float[Array, "*b ho wo f"]:
        (kh, kw), kernel, bias = self._params(x.shape[-1])
        (sh, sw), f, c = _pair(self.strides, "strides"), self.features, x.shape[-1]
        (lo_h, hi_h), (lo_w, hi_w) = (
            transpose_pads(kh, sh, self.padding),
            transpose_pads(kw, sw, self.padding),
        )
        h, w = x.shape[-3], x.shape[-2]
        ho, wo = (h - 1) * sh + lo_h + hi_h - kh + 2, (w - 1) * sw + lo_w + hi_w - kw + 2
        (dh0, th), (dw0, tw) = _phase_taps(kh, sh, lo_h), _phase_taps(kw, sw, lo_w)
        qh, qw = -(-ho // sh), -(-wo // sw)
        big_d_h, big_d_w = th.shape[0], tw.shape[0]
        # x[t + d_min] at padded index t, for t < q + D - 1 (negative pads crop)
        cfg = [(0, 0, 0)] * (x.ndim - 3) + [
            (-dh0, qh + big_d_h - 1 - h + dh0, 0),
            (-dw0, qw + big_d_w - 1 - w + dw0, 0),
            (0, 0, 0),
        ]
        xp = lax.pad(x, jnp.zeros((), x.dtype), cfg)
        cols = windows(xp, (big_d_h, big_d_w), (1, 1), ((0, 0), (0, 0)), (qh, qw))
        padded = jnp.pad(kernel, ((0, 1), (0, 1), (0, 0), (0, 0)))  # index k: a zero tap
        # [Dh, Dw, C, sh, sw, F]: tap (th[dh, rh], tw[dw, rw]) of the kernel
        k_ph = padded[th[:, None, :, None], tw[None, :, None, :]]  # [Dh, Dw, sh, sw, C, F]
        k_ph = jnp.moveaxis(k_ph, 4, 2).reshape(big_d_h * big_d_w * c, sh * sw * f)
        y = jnp.einsum("...i,io->...o", cols, k_ph)
        lead = y.shape[:-3]
        y = y.reshape(lead + (qh, qw, sh, sw, f))
        y = jnp.moveaxis(y, -3, -4).reshape(lead + (qh * sh, qw * sw, f))[..., :ho, :wo, :]
        return y if bias is None else y + bias.reshape((1,) * (y.ndim - 1) + (-1,))
