"""A token DFA potential intersected with a length limit: ``Phi(x) = 1[x ∈ L] · 1[|x| <= T]``.

:class:`jaxlab.decoding.potentials.BoolDFAPotential` marks a state live when *some* completion
reaches acceptance, however long. Under a token budget (SMC's ``max_tokens``) that is not enough:
a locally constrained sampler may open three parentheses with one token left and then have no
admissible token. Here the state is the pair ``(s, t)`` of DFA state and tokens read, and

    prefix(x) = 0  iff  dist(s) <= T - t,        complete(x) = 0  iff  s ∈ F and t <= T,

where ``dist(s)`` is the fewest tokens leading from ``s`` to an accepting state (a breadth-first
search on the token table, done once on the host). ``prefix(x) = 0`` exactly when ``x`` has a
completion of total length at most ``T`` in the language, so this is the potential of the finite
language ``L ∩ V^{<=T}`` and the constrained proposal never gets stuck.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxtyping import Array, Bool, Float, Int

from jaxlab.decoding.potentials import NEG_INF, BoolDFAPotential, Potential

UNREACHABLE = np.iinfo(np.int32).max // 2
"""``dist`` of states from which no accepting state can be reached."""


def distance_to_accept(
    transitions: Int[np.ndarray, "states vocab"], accepting: Bool[np.ndarray, " states"]
) -> Int[np.ndarray, " states"]:
    """Fewest tokens from each state to an accepting one (``UNREACHABLE`` if none).

    Args:
        transitions: ``[S, V]`` token transition table.
        accepting: ``[S]`` accepting states.

    Returns:
        ``[S]`` int32 distances (``0`` on accepting states).
    """
    transitions = np.asarray(transitions)
    dist = np.where(np.asarray(accepting), 0, UNREACHABLE).astype(np.int64)
    while True:
        through = np.min(dist[transitions], axis=1) + 1
        updated = np.minimum(dist, through)
        if np.array_equal(updated, dist):
            return np.minimum(dist, UNREACHABLE).astype(np.int32)
        dist = updated


@struct.dataclass
class LengthBoundedDFAPotential(Potential):
    """Boolean potential of ``L(DFA) ∩ V^{<=max_tokens}`` (module docstring).

    The state is ``(dfa_state, tokens_read)``, two int32 scalars.

    Attributes:
        transitions: ``[S, V]`` int32 next DFA state.
        accepting: ``[S]`` accepting states.
        distance: ``[S]`` fewest tokens to acceptance (:func:`distance_to_accept`).
        max_tokens: the length limit ``T`` (static).
        start: initial DFA state (static).
    """

    transitions: Int[Array, "states vocab"]
    accepting: Bool[Array, " states"]
    distance: Int[Array, " states"]
    max_tokens: int = struct.field(pytree_node=False)
    start: int = struct.field(pytree_node=False, default=0)

    @property
    def vocab_size(self) -> int:
        return int(self.transitions.shape[1])

    def initial_state(self) -> tuple[Int[Array, ""], Int[Array, ""]]:
        return jnp.asarray(self.start, jnp.int32), jnp.asarray(0, jnp.int32)

    def step(self, state, token):
        dfa_state, count = state
        return self.transitions[dfa_state, token], jnp.minimum(count + 1, self.max_tokens + 1)

    def log_prefix(self, state) -> Float[Array, ""]:
        dfa_state, count = state
        return jnp.where(self.distance[dfa_state] <= self.max_tokens - count, 0.0, NEG_INF)

    def log_complete(self, state) -> Float[Array, ""]:
        dfa_state, count = state
        return jnp.where(self.accepting[dfa_state] & (count <= self.max_tokens), 0.0, NEG_INF)

    def logw_next(self, state) -> Float[Array, " vocab_plus_eos"]:
        """``[V + 1]`` weights from one row of the table (no per-token stepping)."""
        dfa_state, count = state
        here = self.distance[dfa_state] <= self.max_tokens - count
        allowed = (self.distance[self.transitions[dfa_state]] <= self.max_tokens - count - 1) & here
        eos = self.accepting[dfa_state] & (count <= self.max_tokens) & here
        return jnp.where(jnp.concatenate([allowed, eos[None]]), 0.0, NEG_INF)


def bound_length(potential: BoolDFAPotential, max_tokens: int) -> LengthBoundedDFAPotential:
    """Intersects a token DFA potential with ``|x| <= max_tokens`` (host-side precompilation).

    Args:
        potential: the unbounded token DFA potential.
        max_tokens: most tokens before EOS (``>= 0``).

    Returns:
        The length-bounded potential over the same vocabulary.
    """
    if not isinstance(max_tokens, int) or max_tokens < 0:
        raise ValueError(f"max_tokens={max_tokens!r}: expected an int >= 0")
    transitions = np.asarray(potential.transitions)
    accepting = np.asarray(potential.accepting)
    return LengthBoundedDFAPotential(
        transitions=jnp.asarray(transitions, jnp.int32),
        accepting=jnp.asarray(accepting),
        distance=jnp.asarray(distance_to_accept(transitions, accepting)),
        max_tokens=max_tokens,
        start=potential.start,
    )
