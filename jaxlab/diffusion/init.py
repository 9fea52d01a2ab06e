"""Parameter initialisation of the diffusion networks from an RBG key derived from any key.

Flax draws one random tensor per parameter. With the default threefry PRNG each draw is its own
hashing computation in the compiled program, which dominates the compile time of a small
network's ``init``; XLA's RngBitGenerator ("rbg" keys) is one op per draw and compiles much
faster. The RBG key is derived deterministically from
the given key, so the same key gives the same parameters (on the same backend).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp


def init_params(module: nn.Module, key: jax.Array, *inputs: Any) -> Any:
    """``module.init`` with an RBG key derived from ``key`` (a raw or typed threefry key)."""
    bits = jax.random.bits(key, (4,), jnp.uint32)
    return module.init(jax.random.wrap_key_data(bits, impl="rbg"), *inputs)
