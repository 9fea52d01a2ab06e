"""The loop's guard against non-finite train states: one flag per step, computed on the device.

``with_state_flag(train_step)`` returns a step that also reports ``_state_finite``, the AND of
``isfinite`` over every element of every floating leaf of the *new* state (parameters, optimizer
moments, running statistics), reduced to one boolean scalar inside the compiled step. The loop
reads the ``[n]`` flags of a chunk on the host with the metrics, so a state that became NaN or Inf
at step ``s`` is named exactly, even when the loss (computed before the update) was still finite,
and such a state is never written to a checkpoint.

Cost: one read of the state per step (the optimizer update already reads and writes all of it);
integer leaves and PRNG keys are skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool

#: The metric name the flag travels under (popped by the loop before logging).
FLAG = "_state_finite"


def all_finite(tree: Any) -> Bool[Array, ""]:
    """``True`` iff every element of every floating (real or complex) leaf of ``tree`` is finite.

    Non-floating leaves (integers, booleans, typed PRNG keys) are ignored; an empty tree is finite.
    """
    flags = [
        jnp.all(jnp.isfinite(x))
        for x in jax.tree.leaves(tree)
        if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.inexact)
    ]
    if not flags:
        return jnp.bool_(True)
    return jnp.all(jnp.stack(flags))


def with_state_flag(train_step: Callable[[Any, Any], tuple[Any, dict]]) -> Callable:
    """``(state, batch) -> (state, metrics | {FLAG: all_finite(state)})``."""

    def step(state, batch):
        state, metrics = train_step(state, batch)
        return state, {**metrics, FLAG: all_finite(state)}

    return step


def first_bad_step(metrics: dict[str, Any], n: int) -> tuple[int | None, str]:
    """The 0-based index within a chunk of ``n`` steps of the first step whose new state is not
    finite or whose loss is not finite, and which of the two it was (``"state"``/``"loss"``).

    ``(None, "")`` when every step is fine. ``metrics`` are host arrays with leading axis ``n``.
    """
    bad = np.zeros(n, bool)
    what = np.full(n, "", object)
    if "loss" in metrics:
        loss_bad = ~np.all(np.isfinite(np.asarray(metrics["loss"]).reshape(n, -1)), axis=1)
        what[loss_bad] = "loss"
        bad |= loss_bad
    if FLAG in metrics:
        state_bad = ~np.asarray(metrics[FLAG]).reshape(n).astype(bool)
        what[state_bad & ~bad] = "state"
        bad |= state_bad
    if not bad.any():
        return None, ""
    i = int(np.argmax(bad))
    return i, str(what[i])


#: a clipping threshold above this is as good as none (global gradient norms rarely reach it)
LOOSE_CLIP = 1e3


def likely_causes(flat_cfg: dict[str, Any], flat_default: dict[str, Any] | None) -> list[str]:
    """The config's likely causes of a non-finite run, most evident first: each learning rate
    above the recipe's default (with the factor), each clipping threshold that is off or loose,
    then the learning rates at their defaults.

    Args:
      flat_cfg: the run's config as dotted keys (``{"optim.lr": 1e6, ...}``).
      flat_default: the recipe's default config the same way (None: unknown).
    """
    above, at_default, clipping = [], [], []
    for key, value in flat_cfg.items():
        leaf = key.rsplit(".", 1)[-1]
        if not isinstance(value, float | int) or isinstance(value, bool):
            continue
        if leaf in ("lr", "learning_rate"):
            default = (flat_default or {}).get(key)
            if isinstance(default, float | int) and default > 0 and value > default:
                above.append(f"{key}={value:g} is {value / default:.3g}x the default {default:g}")
            else:
                at_default.append(f"the learning rate {key}={value:g}")
        elif leaf in ("clip_norm", "grad_clip", "max_grad_norm"):
            if value <= 0:
                clipping.append(f"gradient clipping is off ({key}={value:g})")
            elif value > LOOSE_CLIP:
                clipping.append(f"gradient clipping is loose ({key}={value:g})")
    return above + clipping + at_default
