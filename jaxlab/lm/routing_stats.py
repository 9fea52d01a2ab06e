"""Per-layer routing statistics of a mixture-of-experts layer (the analyses of OLMoE §4).

All quantities are computed from the router's softmax probabilities ``p[t, i]`` and its top-k
assignments, over the whole (global) batch of ``T`` tokens and ``E`` experts:

- ``load[i] = count_i / (T k)``: fraction of the ``T k`` routed assignments that chose expert ``i``
  (sums to 1; uniform routing gives ``1/E`` everywhere).
- ``router_entropy = mean_t H(p[t])``: how decisive the router is per token (``log E`` = uniform).
- ``usage_entropy = H(load)``: how evenly the experts are used (``log E`` = perfectly balanced;
  0 = a single expert takes everything). ``usage_entropy_ratio = usage_entropy / log E``.
- ``max_load_ratio = E max_i load[i]`` (max/mean load; 1 = balanced) and ``min_load_ratio``
  (0 means some expert is dead in this batch).
- ``dropped``: routed assignments that a capacity-limited dispatch could not place (always 0 for
  the dropless dispatch), and ``dropped_fraction = dropped / (T k)``.
"""

from __future__ import annotations

import math

import flax.struct
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int


@flax.struct.dataclass
class RoutingStats:
    """Routing statistics of one MoE layer for one batch.

    Attributes:
        load: ``[E]`` fraction of routed assignments per expert (sums to 1).
        dropped: scalar int, assignments dropped by a capacity limit.
        dropped_fraction: scalar, ``dropped / (T k)``.
        router_entropy: scalar, mean over tokens of the router distribution's entropy (nats).
        usage_entropy: scalar, entropy of ``load`` (nats).
        usage_entropy_ratio: scalar, ``usage_entropy / log E`` (1 = balanced; 1.0 when E = 1).
        max_load_ratio: scalar, ``E max(load)``.
        min_load_ratio: scalar, ``E min(load)``.
    """

    load: Float[Array, " expert"]
    dropped: Int[Array, ""]
    dropped_fraction: Float[Array, ""]
    router_entropy: Float[Array, ""]
    usage_entropy: Float[Array, ""]
    usage_entropy_ratio: Float[Array, ""]
    max_load_ratio: Float[Array, ""]
    min_load_ratio: Float[Array, ""]


def expert_counts(experts: Int[Array, "tokens k"], *, num_experts: int) -> Int[Array, " expert"]:
    """``count_i``: number of (token, slot) assignments routed to expert ``i``; shape ``[E]``."""
    return jnp.bincount(experts.reshape(-1), length=num_experts)


def _entropy(p: Float[Array, "... n"]) -> Float[Array, "..."]:
    """``H(p) = -sum_i p_i log p_i`` with ``0 log 0 = 0``."""
    return jnp.sum(jax.scipy.special.entr(p), axis=-1)


def routing_stats(
    probs: Float[Array, "tokens expert"],
    experts: Int[Array, "tokens k"],
    *,
    dropped: Int[Array, ""] | int = 0,
    token_entropy: Float[Array, " tokens"] | None = None,
) -> RoutingStats:
    """Statistics of one routing decision (see the module docstring for the definitions).

    Args:
        probs: ``[T, E]`` router softmax probabilities.
        experts: ``[T, k]`` chosen expert ids.
        dropped: number of assignments dropped by a capacity limit (0 for dropless).
        token_entropy: ``[T]`` ``H(p_t)`` if the caller has it (the MoE layer computes it from the
            softmax normaliser, :class:`jaxlab.lm.moe.Routing`); default: from ``probs``.

    Returns:
        A :class:`RoutingStats` of scalars and the ``[E]`` load vector.
    """
    num_tokens, num_experts = probs.shape
    top_k = experts.shape[-1]
    total = num_tokens * top_k
    load = expert_counts(experts, num_experts=num_experts).astype(jnp.float32) / total
    usage_entropy = _entropy(load)
    log_e = math.log(num_experts) if num_experts > 1 else 1.0
    dropped = jnp.asarray(dropped, jnp.int32)
    return RoutingStats(
        load=load,
        dropped=dropped,
        dropped_fraction=dropped.astype(jnp.float32) / total,
        router_entropy=jnp.mean(
            _entropy(probs.astype(jnp.float32)) if token_entropy is None else token_entropy
        ),
        usage_entropy=usage_entropy,
        usage_entropy_ratio=usage_entropy / log_e if num_experts > 1 else jnp.ones(()),
        max_load_ratio=num_experts * jnp.max(load),
        min_load_ratio=num_experts * jnp.min(load),
    )


def summarize(stats: RoutingStats, prefix: str = "moe/") -> dict[str, Float[Array, ""]]:
    """Scalar metrics of :class:`RoutingStats` (the ``[E]`` load vector is left out).

    Works on stats stacked over layers too (leading ``[L]`` axis): scalars are averaged over layers,
    except ``max_load_ratio`` (max over layers) and ``min_load_ratio`` (min over layers).
    """
    out = {
        "dropped_fraction": jnp.mean(stats.dropped_fraction),
        "router_entropy": jnp.mean(stats.router_entropy),
        "usage_entropy": jnp.mean(stats.usage_entropy),
        "usage_entropy_ratio": jnp.mean(stats.usage_entropy_ratio),
        "max_load_ratio": jnp.max(stats.max_load_ratio),
        "min_load_ratio": jnp.min(stats.min_load_ratio),
    }
    return {prefix + k: v for k, v in out.items()}
