"""Quantisation of decoder LMs: quantisation-aware training config and post-training quantisation.

Training-time ("Scaling Laws for Precision", Kumar et al. ICLR 2025, §2): set
``DecoderConfig.quant = QuantConfig(w_bits=P_w, a_bits=P_a, kv_bits=P_kv)``; the shared layers
(:mod:`jaxlab.nn.quantization`) then fake-quantise, forward only (straight-through gradients),
at the granularities of ``QuantConfig.{w,a,kv}_granularity``: by default the paper's, weights per
output channel, activations per tensor and keys/values per head.

Post-training (§4, App. F): a trained full-precision parameter tree is quantised to ``P_post``
bits, weights only, per output channel (or, with ``group_size=g``, per output channel and group
of ``g`` consecutive inputs, as GPTQ's users group weights), either by

* round-to-nearest (:func:`rtn_quantize`): ``W ← Q_b(W)`` column-group by column-group, or
* GPTQ (:func:`gptq_quantize`; Frantar et al. 2023, Alg. 1): for each linear map ``y = x W``
  with calibration inputs ``X [n, d_in]`` and Hessian of the layer-wise squared error
  ``H = 2 XᵀX / n`` (dampened by ``λ·mean(diag H)``), the input rows of ``W`` are quantised one at
  a time and the error of each row is spread over the not-yet-quantised rows with the upper
  Cholesky factor ``U`` of ``H⁻¹`` (``H⁻¹ = UᵀU``):
  ``e = (w_i - Q(w_i)) / U_ii``, ``W_{j,:} -= U_ij e`` for ``j > i``; updates beyond the current
  block of ``B`` rows are applied lazily, once per block (``W_{rest} -= U_{blk,rest}ᵀ E``).
  Layers are quantised in network order and each layer's calibration inputs are recomputed with
  the already-quantised earlier layers, as in the GPTQ paper. ``desc_act`` ("act-order",
  IST-DASLab/gptq) takes the rows in decreasing order of ``diag H`` and undoes the permutation
  afterwards; GPTQ's groups are consecutive in that processing order.

Weights are returned dequantised (float, on the ``2^b``-level grid) so the quantised model runs
through the unchanged :class:`jaxlab.lm.model.Decoder`. MoE experts are quantised by
round-to-nearest in both functions (their per-expert calibration inputs are not collected).

Why not qwix or AQT: qwix (0.1.8) quantises by intercepting einsums and supports integer types of
2-8 bits with a symmetric bound ``2^{b-1} - 0.5``, while the paper's grid ``[-2^{b-1}, 2^{b-1}-1]``
spans 3-12+ bits and quantises the KV cache as a tensor of its own; AQT is in maintenance and
pinned to older flax. The fake quantiser is ten lines (:func:`jaxlab.nn.quantization.fake_quant`)
and GPTQ one jit-compiled ``scan`` below, so the project keeps its own.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int

from jaxlab.core.config import ConfigError
from jaxlab.lm.model import Decoder, DecoderConfig
from jaxlab.nn.quantization import (
    CALIBRATION_COLLECTION,
    QuantConfig,
    check_bits,
    fake_quant,
    quantize_dequantize,
)

__all__ = [
    "QuantConfig",
    "check_group_size",
    "check_group_size_fits",
    "fake_quant",
    "gptq_matrix",
    "gptq_quantize",
    "kernel_input_dims",
    "linear_layers",
    "quantize_dequantize",
    "quantize_groups",
    "rtn_quantize",
]


def _group_and_axes(names: tuple[str, ...], moe_ffn: bool) -> tuple[str, tuple[int, ...]] | None:
    """(layer group, per-output-channel reduction axes) of a Decoder parameter, else None."""
    if names and names[0] == "head" and names[-1] == "kernel":
        return "head", (0,)
    if len(names) < 3 or not names[0].startswith("blocks_"):
        return None
    sub, leaf = names[1], names[-1]
    if sub == "attn" and leaf in ("wq", "wk", "wv"):
        return "attention", (0,)
    if sub == "attn" and leaf == "wo":
        return "attention", (0, 1)
    if sub == "ffn" and moe_ffn and leaf in ("w1", "w2", "w3"):
        return "experts", (1,)
    if sub == "ffn" and not moe_ffn and leaf in ("wi_gate", "wi_up", "wo"):
        return "mlp", (0,)
    return None


def _names(path: tuple[Any, ...]) -> tuple[str, ...]:
    out = []
    for k in path:
        if isinstance(k, jax.tree_util.DictKey):
            out.append(str(k.key))
    return tuple(n for n in out if n != "params")


def linear_layers(cfg: DecoderConfig, params: Any) -> dict[tuple[str, ...], tuple[str, tuple]]:
    """The quantisable kernels of a :class:`Decoder` parameter tree.

    Args:
        cfg: the model's configuration.
        params: (unboxed) parameters as returned by ``Decoder(cfg).init``.

    Returns:
        ``{name path: (group, reduction axes)}`` where the reduction axes make
        :func:`quantize_dequantize` per output channel.
    """
    found = {}
    for path, _ in jax.tree_util.tree_leaves_with_path(params):
        names = _names(path)
        moe = bool(names) and names[0].startswith("blocks_")
        moe = moe and cfg.is_moe_layer(int(names[0].split("_")[1]))
        ga = _group_and_axes(names, moe)
        if ga is not None:
            found[names] = ga
    return found


def _check_targets(cfg: DecoderConfig, targets: tuple[str, ...] | None) -> QuantConfig:
    spec = QuantConfig(targets=targets)  # validates names
    DecoderConfig(**{**cfg.__dict__, "quant": spec})  # validates presence in the model
    return spec


def _map_kernels(cfg: DecoderConfig, params: Any, fn: Callable, targets) -> Any:
    spec = _check_targets(cfg, targets)
    params = nn.meta.unbox(params)
    layers = linear_layers(cfg, params)

    def visit(path, leaf):
        ga = layers.get(_names(path))
        if ga is None or not spec.applies_to(ga[0]):
            return leaf
        return fn(_names(path), ga, leaf)

    return jax.tree_util.tree_map_with_path(visit, params)


def _input_dim(w_shape: tuple[int, ...], axes: tuple[int, ...]) -> int:
    """``d_in`` of a kernel whose input axes are ``axes`` (leading, or axis 1 of an expert stack)."""
    return math.prod(w_shape[a] for a in axes)


def quantize_groups(
    w: Float[Array, "... d_in d_out"], bits: int, group_size: int
) -> Float[Array, "... d_in d_out"]:
    """Round-to-nearest with one absmax scale per output column and group of ``group_size``
    consecutive input rows (``-1``: one group, per output channel), returned dequantised."""
    if group_size == -1:
        return quantize_dequantize(w, bits, w.ndim - 2)
    *lead, d_in, d_out = w.shape
    check_group_size("group_size", group_size, d_in)
    grouped = w.reshape(*lead, d_in // group_size, group_size, d_out)
    return quantize_dequantize(grouped, bits, grouped.ndim - 2).reshape(w.shape)


def _as_matrix(w: Array, axes: tuple[int, ...]) -> Array:
    """A kernel as ``[d_in, d_out]`` (or ``[experts, d_in, d_out]`` for input axis 1)."""
    if axes == (1,) and w.ndim == 3:
        return w
    return w.reshape(_input_dim(w.shape, axes), -1)


def rtn_quantize(
    cfg: DecoderConfig,
    params: Any,
    bits: int,
    *,
    targets: tuple[str, ...] | None = None,
    group_size: int = -1,
) -> Any:
    """Round-to-nearest post-training quantisation of the weights, per output channel.

    Args:
        cfg: the model's configuration.
        params: trained parameters (boxed or not).
        bits: ``P_post`` in [2, 32].
        targets: layer groups (see :class:`QuantConfig`; default: every block's linear maps).
        group_size: ``-1`` (one scale per output channel) or ``g``: one scale per output channel
            and group of ``g`` consecutive inputs (must divide every targeted kernel's ``d_in``).

    Returns:
        Unboxed parameters with the targeted kernels replaced by ``Q_b(W)``.
    """
    check_bits("bits", bits)
    check_group_size("group_size", group_size)
    if group_size != -1:
        check_group_size_fits(cfg, group_size, "group_size", targets)

    def quantise(_, ga, w):
        w = jnp.asarray(w)
        if group_size == -1:
            return quantize_dequantize(w, bits, ga[1])
        return quantize_groups(_as_matrix(w, ga[1]), bits, group_size).reshape(w.shape)

    return _map_kernels(cfg, params, quantise, targets)


def kernel_input_dims(
    cfg: DecoderConfig, targets: tuple[str, ...] | None = None
) -> dict[tuple[str, ...], int]:
    """``{name path: d_in}`` of the quantisable kernels of ``Decoder(cfg)`` in ``targets``, from
    abstract shapes (nothing is initialised or compiled)."""
    spec = _check_targets(cfg, targets)
    shapes = jax.eval_shape(
        Decoder(cfg).init, jax.random.key(0), jax.ShapeDtypeStruct((1, 1), jnp.int32)
    )
    shapes = nn.meta.unbox(shapes)
    dims = {}
    for names, (group, axes) in linear_layers(cfg, shapes).items():
        if spec.applies_to(group):
            dims[names] = _input_dim(_get(shapes, ("params", *names)).shape, axes)
    return dims


def check_group_size_fits(
    cfg: DecoderConfig, group_size: int, field: str, targets: tuple[str, ...] | None = None
) -> None:
    """Raises :class:`ConfigError` naming ``field`` unless ``group_size`` is -1 or divides the
    input dimension of every targeted kernel of ``Decoder(cfg)``."""
    check_group_size(field, group_size)
    if group_size == -1:
        return
    dims = sorted(set(kernel_input_dims(cfg, targets).values()))
    if any(d % group_size for d in dims):
        raise ConfigError(
            field, group_size, f"-1 or a divisor of every quantised input dimension {dims}"
        )


def check_group_size(field: str, group_size: object, d_in: int | None = None) -> None:
    """Raises :class:`ConfigError` naming ``field`` unless ``group_size`` is -1 (one group: per
    output channel) or a positive int that divides ``d_in`` (when given)."""
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise ConfigError(field, group_size, "-1 or a positive integer")
    if group_size == -1:
        return
    if group_size <= 0:
        raise ConfigError(field, group_size, "-1 (per output channel) or a positive integer")
    if d_in is not None and d_in % group_size:
        raise ConfigError(field, group_size, f"a divisor of the input dimension {d_in}")


def _group_block_rows(block: int, group_size: int) -> int:
    """Rows per lazy block so that every group starts at a block start or lies inside one block:
    the largest multiple of ``group_size`` up to ``block``, or the largest divisor of
    ``group_size`` up to ``block`` (lazy batching is exact, so the block size only changes speed)."""
    if group_size <= block:
        return block // group_size * group_size
    return max(d for d in range(1, block + 1) if group_size % d == 0)


@functools.partial(jax.jit, static_argnames=("block_size", "group_size", "desc_act"))
def gptq_matrix(
    w: Float[Array, "d_in d_out"],
    hessian: Float[Array, "d_in d_in"],
    *,
    bits: int | Int[Array, ""],
    block_size: int = 128,
    damp: float | Float[Array, ""] = 0.01,
    group_size: int = -1,
    desc_act: bool = False,
) -> Float[Array, "d_in d_out"]:
    """GPTQ of one linear map ``y = x W`` (Frantar et al. 2023, Alg. 1, lazy block updates).

    Symmetric absmax grid per output channel (column of ``W``): with ``group_size=-1`` one scale
    per column, fixed from the original ``W``; with ``group_size=g`` one scale per column and
    group of ``g`` consecutive input rows *in processing order*, computed from the weights as
    updated so far when the quantiser reaches the group's first row (IST-DASLab/gptq
    ``fasterquant(groupsize=g)`` reads them before the current lazy block's own updates; the two
    agree whenever its block size divides ``g``). ``desc_act`` ("act-order") processes the input
    rows in decreasing order of ``diag H`` (stable: ties keep their order) and undoes the
    permutation afterwards, so rows with large activations are quantised while many rows remain
    to absorb their error.

    Args:
        w: ``[d_in, d_out]`` weights (the GPTQ paper's ``Wᵀ``: its columns are our rows).
        hessian: ``[d_in, d_in]`` ``2 XᵀX / n`` of the calibration inputs.
        bits: ``P_post`` (traced inside: one compilation serves every bit width).
        block_size: rows quantised per lazy block ``B`` (static; with groups, lowered to fit
            them: a multiple or a divisor of ``group_size``).
        damp: ``λ``, the dampening ``H + λ mean(diag H) I``.
        group_size: ``-1`` (per output channel) or a divisor of ``d_in`` (static).
        desc_act: act-order (static).

    Returns:
        ``[d_in, d_out]`` dequantised weights on the per-column (per-group) ``2^b`` grid.

    Raises:
        ConfigError: ``group_size`` neither -1 nor a positive divisor of ``d_in``.
    """
    d_in, d_out = w.shape
    check_group_size("group_size", group_size, d_in)
    dtype = w.dtype
    w = w.astype(jnp.float32)
    h = hessian.astype(jnp.float32)
    qmax = 2.0 ** (jnp.asarray(bits, jnp.float32) - 1.0) - 1.0

    def scale_of(rows):  # [k, d_out] -> [d_out]
        amax = jnp.max(jnp.abs(rows), axis=0)
        return jnp.where(amax > 0, amax / qmax, 1.0)

    scale0 = scale_of(w)
    dead = jnp.diag(h) == 0
    h = h + jnp.diag(jnp.where(dead, 1.0, 0.0))
    w = jnp.where(dead[:, None], 0.0, w)
    if desc_act:
        perm = jnp.argsort(-jnp.diag(h), stable=True)
        w, h = w[perm], h[perm][:, perm]
    h = h + damp * jnp.mean(jnp.diag(h)) * jnp.eye(d_in)
    g = group_size
    bsz = min(block_size, d_in)
    if g > 0:
        bsz = _group_block_rows(bsz, g)
    n_blocks = -(-d_in // bsz)
    pad = n_blocks * bsz - d_in
    w = jnp.pad(w, ((0, pad), (0, 0)))
    h = jnp.pad(h, ((0, pad), (0, pad))) + jnp.diag(jnp.r_[jnp.zeros(d_in), jnp.ones(pad)])
    u = jnp.linalg.cholesky(jnp.linalg.inv(h)).T  # upper, H^-1 = U^T U
    n = d_in + pad
    rows = jnp.arange(n)

    def block(carry, b):
        w, scale = carry
        start = b * bsz
        wb = jax.lax.dynamic_slice_in_dim(w, start, bsz, 0)
        ub = jax.lax.dynamic_slice(u, (start, start), (bsz, bsz))
        if g > bsz:  # groups start at block starts, where w is up to date
            block_group = scale_of(jax.lax.dynamic_slice_in_dim(w, start, g, 0))

        def step(i, carry):
            wb, qb, eb, scale = carry
            if g > 0:
                if g <= bsz:
                    fresh = scale_of(jax.lax.dynamic_slice_in_dim(wb, i, g, 0))
                else:
                    fresh = block_group
                scale = jnp.where((start + i) % g == 0, fresh, scale)
            q = jnp.clip(jnp.round(wb[i] / scale), -qmax - 1.0, qmax) * scale
            err = (wb[i] - q) / ub[i, i]
            later = (jnp.arange(bsz) > i)[:, None]
            wb = wb - jnp.where(later, ub[i][:, None] * err[None, :], 0.0)
            return wb, qb.at[i].set(q), eb.at[i].set(err), scale

        zeros = jnp.zeros_like(wb)
        _, qb, eb, scale = jax.lax.fori_loop(0, bsz, step, (wb, zeros, zeros, scale))
        u_rows = jax.lax.dynamic_slice_in_dim(u, start, bsz, 0)  # [B, n]
        rest = (rows >= start + bsz)[:, None]
        w = w - jnp.where(rest, u_rows.T @ eb, 0.0)
        w = jax.lax.dynamic_update_slice_in_dim(w, qb, start, 0)
        return (w, scale), None

    (w, _), _ = jax.lax.scan(block, (w, scale0), jnp.arange(n_blocks))
    w = w[:d_in]
    if desc_act:
        w = w[jnp.argsort(perm)]
    return w.astype(dtype)


_CALIB_INPUT = {
    "wq": "qkv_in",
    "wk": "qkv_in",
    "wv": "qkv_in",
    "wi_gate": "up_in",
    "wi_up": "up_in",
}


def _calib_name(names: tuple[str, ...]) -> str:
    if names[0] == "head":
        return "head_in"
    if names[-1] == "wo":
        return "o_in" if names[1] == "attn" else "down_in"
    return _CALIB_INPUT[names[-1]]


def _set(tree: Any, names: tuple[str, ...], value: Array) -> Any:
    key = names[0]
    if len(names) == 1:
        return {**tree, key: value}
    return {**tree, key: _set(tree[key], names[1:], value)}


def _get(tree: Any, names: tuple[str, ...]) -> Any:
    for n in names:
        tree = tree[n]
    return tree


@functools.partial(jax.jit, static_argnums=0)
def _capture(model: Decoder, params: Any, tokens: Array) -> Any:
    """The inputs of every linear map of ``model`` on ``tokens`` (one compilation per model)."""
    _, state = model.apply(params, tokens, mutable=[CALIBRATION_COLLECTION])
    return state[CALIBRATION_COLLECTION]


def gptq_quantize(
    cfg: DecoderConfig,
    params: Any,
    calibration_tokens: Int[ArrayLike, "batch seq"],
    bits: int,
    *,
    block_size: int = 128,
    damp: float = 0.01,
    targets: tuple[str, ...] | None = None,
    group_size: int = -1,
    desc_act: bool = False,
) -> Any:
    """GPTQ post-training quantisation of a :class:`Decoder`, layer by layer in network order.

    For every targeted linear map (same input = same Hessian: ``q/k/v``; ``gate/up``), the
    calibration inputs are recomputed with the earlier layers already quantised, ``H = 2XᵀX/n`` is
    formed from all ``batch·seq`` tokens and :func:`gptq_matrix` quantises each kernel reshaped to
    ``[d_in, d_out]``. MoE experts fall back to round-to-nearest.

    Args:
        cfg: the model's configuration (its own ``quant`` is ignored: PTQ of the trained weights).
        params: trained parameters (boxed or not).
        calibration_tokens: ``[batch, seq]`` token ids, e.g. training windows (NumPy or JAX).
        bits: ``P_post`` in [2, 32].
        block_size: GPTQ lazy block size ``B``.
        damp: GPTQ dampening ``λ``.
        targets: layer groups (see :class:`QuantConfig`).
        group_size: ``-1`` (per output channel) or a divisor of every targeted kernel's
            ``d_in`` (one scale per group of inputs, see :func:`gptq_matrix`).
        desc_act: act-order: inputs in decreasing order of ``diag H`` (see :func:`gptq_matrix`).

    Returns:
        Unboxed parameters with the targeted kernels GPTQ-quantised.
    """
    check_bits("bits", bits)
    check_group_size_fits(cfg, group_size, "group_size", targets)
    calibration_tokens = jnp.asarray(calibration_tokens)
    if calibration_tokens.ndim != 2:
        raise ValueError(
            f"calibration_tokens.shape={calibration_tokens.shape}: expected [batch, seq]"
        )
    spec = _check_targets(cfg, targets)
    fp_cfg = DecoderConfig(**{**cfg.__dict__, "quant": QuantConfig()})
    model = Decoder(fp_cfg)
    params = nn.meta.unbox(params)
    layers = {k: v for k, v in linear_layers(cfg, params).items() if spec.applies_to(v[0])}
    # only the parameters: a stale calibration collection would be appended to, not replaced

    capture = functools.partial(_capture, model, tokens=calibration_tokens)
    order = []
    for i in range(cfg.n_layers):
        for sub, leaves in (("attn", ("wq", "wk", "wv")), ("attn", ("wo",))):
            order.append([(f"blocks_{i}", sub, n) for n in leaves])
        order.append([(f"blocks_{i}", "ffn", n) for n in ("wi_gate", "wi_up")])
        order.append([(f"blocks_{i}", "ffn", "wo")])
        order.append([(f"blocks_{i}", "ffn", n) for n in ("w1", "w3", "w2")])
    order.append([("head", "kernel")])
    root = params["params"]
    for group in order:
        group = [n for n in group if n in layers]
        if not group:
            continue
        if layers[group[0]][0] == "experts":
            for names in group:
                w = jnp.asarray(_get(root, names))  # parameters may arrive as NumPy
                wq = quantize_groups(_as_matrix(w, layers[names][1]), bits, group_size)
                root = _set(root, names, wq.reshape(w.shape))
            continue
        calib = capture({"params": root})
        where = calib if group[0][0] == "head" else calib[group[0][0]][group[0][1]]
        x = where[_calib_name(group[0])][0]  # [batch, seq, d_in] or [batch, seq, heads, kv]
        x = x.reshape(x.shape[0] * x.shape[1], -1).astype(jnp.float32)
        hessian = 2.0 * x.T @ x / x.shape[0]
        for names in group:
            w = _get(root, names)
            d_in = hessian.shape[0]
            wq = gptq_matrix(
                w.reshape(d_in, -1),
                hessian,
                bits=bits,
                block_size=block_size,
                damp=damp,
                group_size=group_size,
                desc_act=desc_act,
            )
            root = _set(root, names, wq.reshape(w.shape))
    return {**params, "params": root}


def validate_bits_list(field: str, bits: Any) -> tuple[int, ...]:
    """A tuple of bit widths, each checked to be in [2, 32] (error names ``field``)."""
    if isinstance(bits, int):
        bits = (bits,)
    out = tuple(bits)
    if not out:
        raise ConfigError(field, bits, "a non-empty list of bit widths")
    for b in out:
        check_bits(field, b)
    return out
