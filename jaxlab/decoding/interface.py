"""The injected causal language model contract shared by every decoding algorithm.

Decoding algorithms in :mod:`jaxlab.decoding` never import a model. They receive a
:class:`CausalLM`, a frozen (hashable, hence static) bundle of two pure functions, and the model's
parameters as a separate pytree, in the style of ``mctx.RecurrentFn``:

* ``init_state(params, batch_size, capacity) -> state`` builds an empty decoding state (a KV cache,
  a token buffer, or an empty placeholder) able to hold positions ``0 … capacity-1``.
* ``apply(params, state, tokens, start) -> (logits, state)`` feeds a chunk ``tokens[b, c]`` at
  positions ``start[b] + c`` and returns ``logits[b, c]``, the next-token logits after position
  ``start[b] + c``, i.e. for the sequence made of everything written before ``start[b]`` followed
  by ``tokens[b, :c+1]``.

Contract (what the algorithms rely on):

1. Causality: ``logits[b, c]`` depends only on positions ``<= start[b] + c``.
2. Rollback is free: entries of ``state`` at positions ``>= start[b]`` are never read before being
   rewritten, so calling ``apply`` again with an earlier ``start`` discards rejected tokens. A KV
   cache with a per-row fill index satisfies this by setting the index to ``start`` before
   writing.
3. Every leaf of ``state`` has a leading ``batch`` axis, so particle methods can reorder rows with
   ``jax.tree.map(lambda x: x[idx], state)``.

A model that only offers a full-sequence ``logits_fn(params, tokens[B, L]) -> logits[B, L, V]``
(no cache) fits through :func:`from_logits_fn`, which keeps the token buffer as the state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

Params = Any
State = Any
ApplyFn = Callable[
    [Params, State, Int[Array, "batch chunk"], Int[Array, " batch"]],
    tuple[Float[Array, "batch chunk vocab"], State],
]
InitStateFn = Callable[[Params, int, int], State]
LogitsFn = Callable[[Params, Int[Array, "batch length"]], Float[Array, "batch length vocab"]]


@dataclasses.dataclass(frozen=True)
class CausalLM:
    """An injected causal LM: ``apply`` and ``init_state`` as described in the module docstring.

    Attributes:
        apply: ``(params, state, tokens[B, C], start[B]) -> (logits[B, C, V], state)``.
        init_state: ``(params, batch_size, capacity) -> state`` for positions ``< capacity``.
        vocab_size: ``V``, the number of logits per position.
    """

    apply: ApplyFn
    init_state: InitStateFn
    vocab_size: int

    def __post_init__(self) -> None:
        if not callable(self.apply):
            raise ValueError(f"CausalLM.apply={self.apply!r}: expected a callable")
        if not callable(self.init_state):
            raise ValueError(f"CausalLM.init_state={self.init_state!r}: expected a callable")
        if not isinstance(self.vocab_size, int) or self.vocab_size < 1:
            raise ValueError(f"CausalLM.vocab_size={self.vocab_size!r}: expected an int >= 1")


def from_logits_fn(logits_fn: LogitsFn, vocab_size: int) -> CausalLM:
    """Wraps a full-sequence ``logits_fn(params, tokens[B, L]) -> logits[B, L, V]`` as a CausalLM.

    The state is the ``[B, capacity]`` token buffer. Each ``apply`` writes the chunk into the
    buffer, reruns ``logits_fn`` over the whole buffer (cost ``O(capacity)`` per call, no cache)
    and gathers the logits at positions ``start[b] + c``. ``logits_fn`` must be causal.

    Args:
        logits_fn: causal full-sequence model, position ``t`` predicting token ``t + 1``.
        vocab_size: ``V``.

    Returns:
        The adapted model.
    """

    def init_state(params: Params, batch_size: int, capacity: int) -> Int[Array, "batch cap"]:
        del params
        return jnp.zeros((batch_size, capacity), jnp.int32)

    def apply(
        params: Params,
        state: Int[Array, "batch cap"],
        tokens: Int[Array, "batch chunk"],
        start: Int[Array, " batch"],
    ) -> tuple[Float[Array, "batch chunk vocab"], Int[Array, "batch cap"]]:
        chunk = tokens.shape[1]
        buffer = jax.vmap(lambda row, tok, s: jax.lax.dynamic_update_slice(row, tok, (s,)))(
            state, tokens.astype(jnp.int32), start
        )
        logits = logits_fn(params, buffer)
        idx = start[:, None] + jnp.arange(chunk)[None, :]
        out = jnp.take_along_axis(logits, idx[:, :, None], axis=1)
        return out, buffer

    return CausalLM(apply=apply, init_state=init_state, vocab_size=vocab_size)


def with_eos_last(lm: CausalLM, eos_id: int) -> CausalLM:
    """Renumbers a model's vocabulary so that its EOS token becomes the last id ``V - 1``.

    Potentials and SMC in this package use the convention "EOS is the last id". Token ``j`` of the
    wrapped model is token ``perm[j]`` of ``lm`` with ``perm = [0 … eos-1, eos+1 … V-1, eos]``;
    logits are permuted the same way.

    Args:
        lm: model whose EOS id is ``eos_id``.
        eos_id: EOS id in ``lm``'s numbering, ``0 <= eos_id < V``.

    Returns:
        The renumbered model.
    """
    v = lm.vocab_size
    if not 0 <= eos_id < v:
        raise ValueError(f"eos_id={eos_id}: expected 0 <= eos_id < vocab_size={v}")
    perm = [i for i in range(v) if i != eos_id] + [eos_id]

    def apply(params, state, tokens, start):
        perm_arr = jnp.asarray(perm, jnp.int32)
        logits, state = lm.apply(params, state, perm_arr[tokens], start)
        return logits[..., perm_arr], state

    return CausalLM(apply=apply, init_state=lm.init_state, vocab_size=v)
