"""Next-token sampling from logits: greedy, temperature, top-k, top-p, and stop-token helpers.

All functions act on the last axis and broadcast over any leading (batch) axes. Sampling
hyper-parameters live in :class:`SamplingParams`, a traced pytree, so they can differ per row and
be vmapped over; ``top_k = 0`` and ``top_p = 1`` switch the corresponding filter off and
``temperature = 0`` means greedy decoding.

The filtered distribution (Holtzman et al. 2020 for top-p) is

    pi(v) ∝ exp(z_v / T) · 1[v ∈ TopK(z, k)] · 1[v ∈ Nucleus(softmax(z / T) restricted to TopK, p)],

where ``Nucleus(P, p)`` is the smallest set of most probable tokens whose mass reaches ``p``
(ties at the boundary are all kept). Speculative decoding must draw draft tokens from, and form
its acceptance ratios with, this same processed distribution for both models
(:func:`processed_log_probs`); otherwise the output is not exact.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray


@struct.dataclass
class SamplingParams:
    """Traced sampling hyper-parameters (scalars, or arrays shaped like the leading axes).

    Attributes:
        temperature: ``T >= 0``; ``0`` is greedy (arg-max, first index on ties).
        top_k: keep the ``k`` largest logits (ties at the boundary kept); ``0`` disables.
        top_p: nucleus mass in ``(0, 1]``; ``1`` disables.
    """

    temperature: Float[ArrayLike, "..."] = 1.0
    top_k: Int[ArrayLike, "..."] = 0
    top_p: Float[ArrayLike, "..."] = 1.0


def _per_row(value: ArrayLike, logits: Array) -> Array:
    """Broadcasts a scalar or leading-shaped parameter to ``logits.shape[:-1] + (1,)``."""
    return jnp.broadcast_to(jnp.asarray(value), logits.shape[:-1])[..., None]


def greedy(logits: Float[Array, "*batch vocab"]) -> Int[Array, "*batch"]:
    """Arg-max token (the first one on ties).

    Args:
        logits: ``[..., V]``.

    Returns:
        ``[...]`` int32 token ids.
    """
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)


def top_k_mask(
    logits: Float[Array, "*batch vocab"], k: Int[ArrayLike, "..."]
) -> Bool[Array, "..."]:
    """Mask of the ``k`` largest logits (``k <= 0`` or ``k >= V`` keeps everything).

    Args:
        logits: ``[..., V]``.
        k: scalar or ``[...]`` integer.

    Returns:
        ``[..., V]`` boolean keep-mask.
    """
    vocab = logits.shape[-1]
    k = _per_row(k, logits).astype(jnp.int32)
    ordered = -jnp.sort(-logits, axis=-1)
    kth = jnp.take_along_axis(ordered, jnp.clip(k - 1, 0, vocab - 1), axis=-1)
    return (logits >= kth) | (k <= 0)


def top_p_mask(
    log_probs: Float[Array, "*batch vocab"], p: Float[ArrayLike, "..."]
) -> Bool[Array, "*batch vocab"]:
    """Mask of the nucleus: the smallest most-probable set with mass ``>= p``.

    Token ``v`` is kept iff its probability is at least that of the last token needed to reach
    mass ``p`` in descending order (so boundary ties are kept). ``p >= 1`` keeps everything.

    Args:
        log_probs: ``[..., V]`` normalised log-probabilities.
        p: scalar or ``[...]`` nucleus mass in ``(0, 1]``.

    Returns:
        ``[..., V]`` boolean keep-mask.
    """
    p = _per_row(p, log_probs)
    probs = jnp.exp(log_probs)
    ordered = -jnp.sort(-probs, axis=-1)
    mass_before = jnp.cumsum(ordered, axis=-1) - ordered
    num_kept = jnp.sum(mass_before < p, axis=-1, keepdims=True)
    threshold = jnp.take_along_axis(ordered, jnp.maximum(num_kept - 1, 0), axis=-1)
    return (probs >= threshold) | (p >= 1.0)


def processed_log_probs(
    logits: Float[Array, "*batch vocab"], params: SamplingParams
) -> Float[Array, "*batch vocab"]:
    """Normalised log-probabilities after temperature, top-k and top-p (in that order).

    ``temperature = 0`` gives the one-hot distribution of :func:`greedy` (``log 1 = 0`` at the
    arg-max, ``-inf`` elsewhere).

    Args:
        logits: ``[..., V]`` raw logits (``-inf`` allowed, at least one finite).
        params: sampling parameters.

    Returns:
        ``[..., V]`` log-probabilities summing to one.
    """
    logits = logits.astype(jnp.float32)
    temperature = _per_row(params.temperature, logits).astype(jnp.float32)
    scaled = logits / jnp.where(temperature > 0, temperature, 1.0)
    scaled = jnp.where(top_k_mask(scaled, params.top_k), scaled, -jnp.inf)
    log_probs = jax.nn.log_softmax(scaled, axis=-1)
    log_probs = jnp.where(top_p_mask(log_probs, params.top_p), log_probs, -jnp.inf)
    log_probs = jax.nn.log_softmax(log_probs, axis=-1)
    one_hot = jax.nn.one_hot(greedy(logits), logits.shape[-1], dtype=jnp.bool_)
    greedy_log_probs = jnp.where(one_hot, 0.0, -jnp.inf)
    return jnp.where(temperature > 0, log_probs, greedy_log_probs)


def sample(
    key: PRNGKeyArray, logits: Float[Array, "*batch vocab"], params: SamplingParams
) -> Int[Array, "*batch"]:
    """Draws next tokens from :func:`processed_log_probs` (one independent draw per row).

    Args:
        key: PRNG key.
        logits: ``[..., V]``.
        params: sampling parameters.

    Returns:
        ``[...]`` int32 token ids.
    """
    log_probs = processed_log_probs(logits, params)
    return jax.random.categorical(key, log_probs, axis=-1).astype(jnp.int32)


def is_stop(
    tokens: Int[Array, "*batch"], stop_tokens: Int[Array, " num_stop"] | None
) -> Bool[Array, "*batch"]:
    """Whether each token is one of ``stop_tokens`` (negative entries are padding).

    Args:
        tokens: ``[...]`` token ids.
        stop_tokens: ``[S]`` stop ids, or ``None`` for no stop tokens.

    Returns:
        ``[...]`` booleans.
    """
    if stop_tokens is None:
        return jnp.zeros(tokens.shape, jnp.bool_)
    stop_tokens = jnp.asarray(stop_tokens, jnp.int32).reshape((1,) * tokens.ndim + (-1,))
    hits = (tokens[..., None] == stop_tokens) & (stop_tokens >= 0)
    return jnp.any(hits, axis=-1)


def truncate_at_stop(
    tokens: Int[Array, "batch length"],
    lengths: Int[Array, " batch"],
    start: Int[Array, " batch"],
    stop_tokens: Int[Array, " num_stop"] | None,
    *,
    pad_id: int = 0,
) -> tuple[Int[Array, "batch length"], Int[Array, " batch"]]:
    """Cuts each row just after its first stop token at or after ``start`` and pads the rest.

    Args:
        tokens: ``[B, L]`` sequences (prompt then generation).
        lengths: ``[B]`` valid lengths before truncation.
        start: ``[B]`` first position searched (the prompt length), so prompt stops are ignored.
        stop_tokens: ``[S]`` stop ids (negative entries ignored) or ``None``.
        pad_id: id written after the new end.

    Returns:
        ``(tokens, lengths)``: the stop token is kept; positions ``>= lengths`` hold ``pad_id``.
    """
    positions = jnp.arange(tokens.shape[1])[None, :]
    searchable = (positions >= start[:, None]) & (positions < lengths[:, None])
    hits = is_stop(tokens, stop_tokens) & searchable
    first = jnp.argmax(hits, axis=1).astype(jnp.int32)
    new_lengths = jnp.where(jnp.any(hits, axis=1), first + 1, lengths).astype(jnp.int32)
    return jnp.where(positions < new_lengths[:, None], tokens, pad_id), new_lengths
