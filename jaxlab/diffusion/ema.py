"""The exponential moving average of a diffusion model's weights, the copy used for sampling.

At optimiser step ``k`` (counted from 0, before the increment) the decay is
``min(max_decay, (1 + k) / (10 + k))``: the warm-up of TensorFlow's
``ExponentialMovingAverage(num_updates=k)``, used by the score-SDE and EDM code, so the average
follows the weights closely while they move fast and settles at ``max_decay`` later.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax


def ema_update(params: Any, ema_params: Any, step: jax.Array, max_decay: jax.Array) -> Any:
    """``decay * ema_params + (1 - decay) * params`` with the warm-up decay of step ``step``
    (an int scalar); ``max_decay`` may be traced (a swept ``ema_decay``)."""
    k = jnp.asarray(step).astype(jnp.float32)
    decay = jnp.minimum(max_decay, (1.0 + k) / (10.0 + k))
    return optax.incremental_update(params, ema_params, 1.0 - decay)
