"""Behaviour cloning from demonstrations: the supervised baseline D-TSN is compared against.

``bc_loss(params, batch, apply_fn)`` is the weighted cross-entropy ``-log softmax(f(s))[a*]`` of
the demonstrated action under the policy network ``apply_fn(params, obs) -> logits``
(``jaxlab.rl.search.models.MazeBC`` / ``Game24BC``: the same encoder as D-TSN, width matched to
its parameter count).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import optax
from jaxtyping import Array, Float

from jaxlab.rl.search.dtsn import Transitions


def bc_loss(
    params: Any, batch: Transitions, apply_fn: Callable[[Any, Any], Array]
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """Weighted cross-entropy of the demonstrated actions; metrics: loss, accuracy."""
    logits = apply_fn(params, batch.obs)
    act = batch.action.astype(jnp.int32)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, act)
    w = batch.weight.astype(jnp.float32)
    denom = jnp.maximum(jnp.sum(w), 1.0)
    loss = jnp.sum(w * ce) / denom
    acc = jnp.sum(w * (jnp.argmax(logits, -1) == act)) / denom
    return loss, {"loss_q": loss, "accuracy": acc, "objective": loss}


def bc_action(params: Any, obs: Any, apply_fn: Callable[[Any, Any], Array]) -> Array:
    """Greedy action of the cloned policy for one observation."""
    return jnp.argmax(apply_fn(params, obs)).astype(jnp.int32)


__all__ = ["bc_action", "bc_loss"]
