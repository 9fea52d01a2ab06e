"""Softmax top-k routing and the router's auxiliary losses (OLMoE §2, arXiv 2409.02060).

For ``T`` tokens with router logits ``z [T, E]`` (``z_t = x_t W_r``)::

    p_t = softmax(z_t)                              router probabilities, [T, E]
    S_t = top_k(p_t)                                chosen experts, |S_t| = k
    g_ti = p_ti (OLMoE; ``normalize_topk=False``)   combine weights, [T, k]
           or p_ti / sum_{j in S_t} p_tj (renormalised)

    L_LB = E * sum_i f_i P_i,  f_i = count_i / (T k),  P_i = mean_t p_ti     (= 1 for uniform routing)
    L_RZ = mean_t (logsumexp_j z_tj)^2

``L_LB`` uses the megablocks (OLMoE) normalisation: ``f`` divides the counts by ``T k``, so uniform
routing gives exactly 1 (the MaxText and Hugging Face forms omit the ``1/k`` and give ``k``,
allenai/OLMoE#45). Both losses are batch-level (global over all ``T`` tokens of the batch); ``f``
carries no gradient.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jaxlab.lm.routing_stats import expert_counts


@flax.struct.dataclass
class Routing:
    """A routing decision for ``T`` tokens.

    Attributes:
        logits: ``[T, E]`` router logits ``z`` (float32).
        probs: ``[T, E]`` ``softmax(z)``.
        weights: ``[T, k]`` combine weights ``g`` of the chosen experts.
        experts: ``[T, k]`` chosen expert ids, in decreasing probability order.
        lse: ``[T]`` ``logsumexp_j z_j``, the softmax normaliser (reused by the z-loss and the
            router entropy ``H(p_t) = lse_t - sum_j p_tj z_tj``, so the layer takes one ``exp``
            per logit and no ``log`` per probability).
    """

    logits: Float[Array, "tokens expert"]
    probs: Float[Array, "tokens expert"]
    weights: Float[Array, "tokens k"]
    experts: Int[Array, "tokens k"]
    lse: Float[Array, " tokens"]


def route(logits: Float[Array, "tokens expert"], *, top_k: int, normalize: bool = False) -> Routing:
    """Softmax top-k routing: ``p = softmax(z)``, ``S = top_k(p)``, ``g = p_S`` (or renormalised).

    Args:
        logits: ``[T, E]`` router logits.
        top_k: ``k``.
        normalize: divide the chosen probabilities by their sum (OLMoE: no).

    Returns:
        A :class:`Routing`; ties are broken towards the lower expert id.
    """
    if not 1 <= top_k <= logits.shape[-1]:
        raise ValueError(f"top_k: got {top_k}, expected an integer in [1, {logits.shape[-1]}]")
    logits = logits.astype(jnp.float32)
    m = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
    e = jnp.exp(logits - m)
    total = jnp.sum(e, axis=-1, keepdims=True)
    probs = e / total
    weights, experts = top_k_by_max(probs, top_k)
    if normalize:
        weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
    return Routing(
        logits=logits,
        probs=probs,
        weights=weights,
        experts=experts.astype(jnp.int32),
        lse=(m + jnp.log(total))[..., 0],
    )


def top_k_by_max(
    p: Float[Array, "tokens n"], k: int
) -> tuple[Float[Array, "tokens k"], Int[Array, "tokens k"]]:
    """``jax.lax.top_k`` over the last axis, as ``k`` rounds of (max, first index of the max).

    Same values, indices, order and tie-breaking (towards the lower index) as ``lax.top_k``, and
    the same gradient (only the chosen entries receive it). It exists for speed: XLA:CPU lowers
    ``lax.top_k`` to a per-row sort, and two plain reductions per round are faster for the small
    ``k`` of a router (the ``router+losses+stats`` lines of ``benchmarks/bench_moe.py --breakdown``
    compare the layer's router with the textbook one). Rows with NaN pick index ``n - 1``.
    """
    n = p.shape[-1]
    ids = jax.lax.broadcasted_iota(jnp.int32, p.shape, p.ndim - 1)
    rest = p
    experts = []
    for _ in range(k):
        m = jnp.max(rest, axis=-1, keepdims=True)
        i = jnp.min(jnp.where(rest == m, ids, n - 1), axis=-1)
        experts.append(i)
        rest = jnp.where(ids == i[..., None], -jnp.inf, rest)
    experts = jnp.stack(experts, axis=-1)
    # gather from p (not the running max) so that the gradient goes to exactly the chosen entries
    return jnp.take_along_axis(p, experts, axis=-1), experts


def load_balancing_loss(
    probs: Float[Array, "tokens expert"], experts: Int[Array, "tokens k"]
) -> Float[Array, ""]:
    """``L_LB = E sum_i f_i P_i`` with ``f_i = count_i / (T k)`` and ``P_i = mean_t p_ti``.

    The megablocks (OLMoE) normalisation: exactly 1 when either ``f`` or ``P`` is uniform, ``E/k``
    when every token picks the same ``k`` experts with probability ``1/k`` each. ``f`` is a count
    and carries no gradient; the gradient flows through ``P``.
    """
    num_tokens, num_experts = probs.shape
    top_k = experts.shape[-1]
    f = expert_counts(experts, num_experts=num_experts).astype(jnp.float32) / (num_tokens * top_k)
    p_mean = jnp.mean(probs.astype(jnp.float32), axis=0)
    return num_experts * jnp.sum(jax.lax.stop_gradient(f) * p_mean)


def router_z_loss(logits: Float[Array, "tokens expert"]) -> Float[Array, ""]:
    """``L_RZ = mean_t (logsumexp_j z_tj)^2`` (ST-MoE router z-loss, used by OLMoE)."""
    return _z_loss_from_lse(jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1))


def _z_loss_from_lse(lse: Float[Array, " tokens"]) -> Float[Array, ""]:
    return jnp.mean(jnp.square(lse))


def _token_entropy(routing: Routing) -> Float[Array, " tokens"]:
    """``H(p_t) = -sum_j p_tj log p_tj = lse_t - sum_j p_tj z_tj`` (no ``log`` per probability)."""
    return routing.lse - jnp.sum(routing.probs * routing.logits, axis=-1)
