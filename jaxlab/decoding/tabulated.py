"""Tabulated n-gram language models: exact, cheap stand-ins for decoding tests and benchmarks.

Their next-token distributions are table look-ups, so the exact distribution of any decoded
sequence can be enumerated and compared with what an algorithm produces.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray

from jaxlab.decoding.interface import CausalLM, from_logits_fn


def _bigram_init(params: Float[Array, "vocab vocab"], batch_size: int, capacity: int):
    del params, capacity
    return jnp.zeros((batch_size,), jnp.int32)


def _bigram_apply(
    params: Float[Array, "vocab vocab"],
    state: Int[Array, " batch"],
    tokens: Int[Array, "batch chunk"],
    start: Int[Array, " batch"],
) -> tuple[Float[Array, "batch chunk vocab"], Int[Array, " batch"]]:
    del start
    return params[tokens], state


def bigram_lm(vocab_size: int) -> CausalLM:
    """A stateless bigram model: ``logits(x_{t+1} | x_{<=t}) = params[x_t]``.

    ``params`` is a ``[V, V]`` table of logits (row = current token). The state is a dummy
    ``[B]`` array (the contract wants a leading batch axis).

    Args:
        vocab_size: ``V``.

    Returns:
        The model.
    """
    return CausalLM(apply=_bigram_apply, init_state=_bigram_init, vocab_size=vocab_size)


def _trigram_logits(
    params: Float[Array, "vocab vocab vocab"], tokens: Int[Array, "batch length"]
) -> Float[Array, "batch length vocab"]:
    prev = jnp.concatenate([tokens[:, :1], tokens[:, :-1]], axis=1)
    return params[prev, tokens]


def trigram_lm(vocab_size: int) -> CausalLM:
    """A trigram model ``logits(x_{t+1} | x_{<=t}) = params[x_{t-1}, x_t]`` run without a cache.

    Built with :func:`jaxlab.decoding.interface.from_logits_fn`, so its state is the token buffer
    and every call recomputes the whole sequence; position 0 uses ``x_{-1} := x_0``. Being
    stateful and two-token deep, it catches rollback and position bugs a bigram would hide.

    Args:
        vocab_size: ``V``.

    Returns:
        The model (``params`` is a ``[V, V, V]`` logit table).
    """
    return from_logits_fn(_trigram_logits, vocab_size)


def random_table(
    key: PRNGKeyArray, shape: tuple[int, ...], *, scale: float = 1.0
) -> Float[Array, "..."]:
    """Random next-token log-probabilities ``log_softmax(scale · z)``, ``z ~ N(0, I)``.

    Args:
        key: PRNG key.
        shape: ``(*contexts, V)``; each trailing row is one next-token distribution.
        scale: logit scale; large values give peaked (low-entropy) rows.

    Returns:
        Normalised log-probabilities, shape ``shape``.
    """
    return jax.nn.log_softmax(scale * jax.random.normal(key, shape), axis=-1)


def mix_tables(
    target: Float[Array, "*ctx vocab"], other: Float[Array, "*ctx vocab"], weight: float
) -> Float[Array, "*ctx vocab"]:
    """``log((1 - weight) * exp(target) + weight * exp(other))``: a draft of tunable quality.

    Args:
        target: log-probability table.
        other: log-probability table of the same shape.
        weight: mixing weight of ``other`` in ``[0, 1]`` (0 gives ``target``).

    Returns:
        The mixed log-probability table.
    """
    probs = (1.0 - weight) * jnp.exp(target) + weight * jnp.exp(other)
    return jnp.log(jnp.maximum(probs, 1e-30))
