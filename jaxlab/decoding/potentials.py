"""Potentials: non-negative weights on token sequences, in log space, jit- and vmap-friendly.

A potential ``Phi`` over a vocabulary of ``V`` tokens (ids ``0 … V-1``; id ``V`` stands for EOS)
has (genlm-control's contract, Lipkin/Loula et al. 2025, in log space):

* ``complete(x) = log Phi(x)`` for a finished sequence ``x``;
* ``prefix(x)``, a log weight on unfinished prefixes with ``prefix(x) = -inf`` implying that every
  extension has ``prefix = complete = -inf``;
* next-token weights over ``vocab ∪ {EOS}``:
  ``logw_next(x)[v] = prefix(x v) - prefix(x)`` and ``logw_next(x)[EOS] = complete(x) - prefix(x)``
  (all ``-inf`` when ``prefix(x) = -inf``);

so that the autoregressive factorisation holds:
``complete(x) - prefix(ε) = logw_next(x)[EOS] + Σ_t logw_next(x_{<t})[x_t]``.

For jit, a potential is an automaton over a pytree state: ``initial_state()`` is the empty
context, ``step(state, token)`` extends it, and the weights are functions of the state. Concrete
potentials are ``flax.struct`` dataclasses (tables are traced leaves, functions static), so a
potential is itself a pytree argument of jitted code; vmap ``step`` / ``logw_next`` over
particles. Sequence-level ``prefix`` / ``complete`` replay a padded token array.

Provided: :class:`BoolDFAPotential` (regular expressions via :func:`regex_potential`, bounded
context-free grammars via :func:`grammar_potential`), :class:`SequencePotential` (arbitrary
jittable functions of the whole sequence: the "expensive" semantic checks), :class:`Product`
(``p1 * p2``) and :class:`Coerced` (a character-level potential seen through a tokenizer,
:func:`coerce`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxtyping import Array, Bool, Float, Int

from jaxlab.decoding.dfa import CharDFA, dfa_alphabet
from jaxlab.decoding.grammar import Grammar, compile_grammar
from jaxlab.decoding.regex import compile_regex

State = Any
NEG_INF = -jnp.inf


def log_ratio(numerator: Float[Array, "..."], denominator: Float[Array, "..."]) -> Array:
    """``numerator - denominator`` with ``-inf`` whenever ``denominator = -inf`` (no NaN)."""
    finite = denominator > NEG_INF
    return jnp.where(finite, numerator - jnp.where(finite, denominator, 0.0), NEG_INF)


def _tree_where(condition: Bool[Array, ""], new: State, old: State) -> State:
    return jax.tree.map(lambda a, b: jnp.where(condition, a, b), new, old)


class Potential(abc.ABC):
    """The potential contract (module docstring); subclasses define the five state functions."""

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int:
        """``V``, the number of non-EOS tokens (EOS is id ``V``)."""

    @abc.abstractmethod
    def initial_state(self) -> State:
        """State of the empty context ``ε``."""

    @abc.abstractmethod
    def step(self, state: State, token: Int[Array, ""]) -> State:
        """State of ``x v`` from the state of ``x`` (``0 <= v < V``; never called with EOS)."""

    @abc.abstractmethod
    def log_prefix(self, state: State) -> Float[Array, ""]:
        """``prefix(x)``."""

    @abc.abstractmethod
    def log_complete(self, state: State) -> Float[Array, ""]:
        """``complete(x)``."""

    def logw_next(self, state: State) -> Float[Array, " vocab_plus_eos"]:
        """``[V + 1]`` next-token log weights (EOS last), by default by stepping every token."""
        here = self.log_prefix(state)
        nxt = jax.vmap(lambda v: self.log_prefix(self.step(state, v)))(
            jnp.arange(self.vocab_size, dtype=jnp.int32)
        )
        eos = log_ratio(self.log_complete(state), here)
        return jnp.concatenate([log_ratio(nxt, here), eos[None]])

    def token_logw(self, state: State, token: Int[Array, ""]) -> Float[Array, ""]:
        """``logw_next(state)[token]`` for one token (EOS = ``V``) without scoring the vocabulary."""
        here = self.log_prefix(state)
        is_eos = token == self.vocab_size
        stepped = self.step(state, jnp.minimum(token, self.vocab_size - 1))
        extended = jnp.where(is_eos, self.log_complete(state), self.log_prefix(stepped))
        return log_ratio(extended, here)

    def final_state(self, tokens: Int[Array, " length"], length: int | Int[Array, ""]) -> State:
        """State after the first ``length`` entries of ``tokens`` (a padded sequence)."""

        def body(state, inputs):
            token, position = inputs
            return _tree_where(position < length, self.step(state, token), state), None

        positions = jnp.arange(tokens.shape[0])
        state, _ = jax.lax.scan(body, self.initial_state(), (tokens.astype(jnp.int32), positions))
        return state

    def prefix(
        self, tokens: Int[Array, " length"], length: int | Int[Array, ""]
    ) -> Float[Array, ""]:
        """``prefix(tokens[:length])``."""
        return self.log_prefix(self.final_state(tokens, length))

    def complete(
        self, tokens: Int[Array, " length"], length: int | Int[Array, ""]
    ) -> Float[Array, ""]:
        """``complete(tokens[:length])``."""
        return self.log_complete(self.final_state(tokens, length))

    def __mul__(self, other: Potential) -> Product:
        return product(self, other)


@struct.dataclass
class BoolDFAPotential(Potential):
    """Boolean potential of a token-level DFA: weights are ``0`` (allowed) or ``-inf``.

    ``complete(x) = 0`` iff the DFA accepts ``x``; ``prefix(x) = 0`` iff the state reached is
    live (in ``live``). Transition look-ups are ``transitions[state, token]``.

    Attributes:
        transitions: ``[S, V]`` int32 next state.
        accepting: ``[S]`` accepting states.
        live: ``[S]`` states with a weight-one completion.
        start: initial state (static).
    """

    transitions: Int[Array, "states vocab"]
    accepting: Bool[Array, " states"]
    live: Bool[Array, " states"]
    start: int = struct.field(pytree_node=False, default=0)

    @property
    def vocab_size(self) -> int:
        return int(self.transitions.shape[1])

    def initial_state(self) -> Int[Array, ""]:
        return jnp.asarray(self.start, jnp.int32)

    def step(self, state: Int[Array, ""], token: Int[Array, ""]) -> Int[Array, ""]:
        return self.transitions[state, token]

    def log_prefix(self, state: Int[Array, ""]) -> Float[Array, ""]:
        return jnp.where(self.live[state], 0.0, NEG_INF)

    def log_complete(self, state: Int[Array, ""]) -> Float[Array, ""]:
        return jnp.where(self.accepting[state], 0.0, NEG_INF)

    def logw_next(self, state: Int[Array, ""]) -> Float[Array, " vocab_plus_eos"]:
        allowed = self.live[self.transitions[state]] & self.live[state]
        eos = self.accepting[state] & self.live[state]
        return jnp.where(jnp.concatenate([allowed, eos[None]]), 0.0, NEG_INF)

    def refusing(self, tokens: Sequence[int]) -> BoolDFAPotential:
        """The same potential with ``tokens`` never allowed (e.g. a tokenizer's special tokens,
        which stand for no text): their transitions go to a dead state, and liveness is
        recomputed at the token level (host side).

        Args:
            tokens: ids in ``[0, V)``.

        Returns:
            The potential.
        """
        table = np.asarray(self.transitions)
        accepting = np.concatenate([np.asarray(self.accepting), [False]])
        dead = table.shape[0]
        table = np.concatenate([table, np.full((1, table.shape[1]), dead, table.dtype)])
        table[:, np.asarray(list(tokens), np.int64)] = dead
        return BoolDFAPotential(
            transitions=jnp.asarray(table, jnp.int32),
            accepting=jnp.asarray(accepting),
            live=jnp.asarray(_co_accessible(table, accepting)),
            start=self.start,
        )

    @classmethod
    def from_char_dfa(
        cls, dfa: CharDFA, token_strings: Sequence[str], *, token_level_liveness: bool = True
    ) -> BoolDFAPotential:
        """Lifts a character DFA to a token vocabulary (host-side precompilation).

        Args:
            dfa: the character DFA.
            token_strings: ``V`` token strings (EOS excluded; it is id ``V``).
            token_level_liveness: a state is live iff some *token* sequence reaches acceptance
                (``True``, prunes dead ends the vocabulary cannot complete) or iff some character
                string does (``False``, the semantics of :func:`coerce`).

        Returns:
            The token-level potential.
        """
        table, accepting = dfa.token_transitions(token_strings)
        if token_level_liveness:
            live = _co_accessible(table, accepting)
        else:
            live = np.concatenate([dfa.live(), [False]])
        return cls(
            transitions=jnp.asarray(table, jnp.int32),
            accepting=jnp.asarray(accepting),
            live=jnp.asarray(live),
            start=dfa.start,
        )


def _co_accessible(table: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    """States of a ``[S, V]`` transition table from which an accepting state is reachable."""
    live = accepting.copy()
    while True:
        grown = live | np.any(live[table], axis=1)
        if np.array_equal(grown, live):
            return live
        live = grown


def regex_potential(
    pattern: str, token_strings: Sequence[str], *, token_level_liveness: bool = True
) -> BoolDFAPotential:
    """Boolean potential ``1[concat(x) fully matches pattern]`` over a token vocabulary.

    Args:
        pattern: regular expression (subset of :mod:`jaxlab.decoding.regex`).
        token_strings: ``V`` token strings (EOS excluded).
        token_level_liveness: see :meth:`BoolDFAPotential.from_char_dfa`.

    Returns:
        The potential.
    """
    dfa = compile_regex(pattern, dfa_alphabet(token_strings))
    return BoolDFAPotential.from_char_dfa(
        dfa, token_strings, token_level_liveness=token_level_liveness
    )


def grammar_potential(
    grammar: Grammar,
    token_strings: Sequence[str],
    *,
    max_stack: int,
    token_level_liveness: bool = True,
) -> BoolDFAPotential:
    """Boolean potential of a stack-bounded CFG (:func:`jaxlab.decoding.grammar.compile_grammar`).

    Args:
        grammar: the grammar.
        token_strings: ``V`` token strings (EOS excluded).
        max_stack: pushdown stack bound.
        token_level_liveness: see :meth:`BoolDFAPotential.from_char_dfa`.

    Returns:
        The potential.
    """
    alphabet = tuple(sorted(set(dfa_alphabet(token_strings)) | set(grammar.terminal_alphabet())))
    dfa = compile_grammar(grammar, max_stack=max_stack, alphabet=alphabet)
    return BoolDFAPotential.from_char_dfa(
        dfa, token_strings, token_level_liveness=token_level_liveness
    )


SequenceFn = Callable[[Any, Int[Array, " max_len"], Int[Array, ""]], Float[Array, ""]]


@struct.dataclass
class SequencePotential(Potential):
    """A potential given by jittable functions of the whole (padded) sequence.

    ``prefix_fn(params, tokens[L], length)`` and ``complete_fn(params, tokens[L], length)`` see
    the ``length`` valid tokens of a ``[max_len]`` buffer. Sequences longer than ``max_len`` have
    weight ``-inf``. ``logw_next`` re-evaluates ``prefix_fn`` for all ``V`` tokens, which is
    what makes such potentials expensive; SMC therefore uses them as critics through
    :meth:`token_logw`.

    Attributes:
        params: traced parameters passed to the functions.
        prefix_fn: ``prefix``.
        complete_fn: ``complete``.
        max_len: buffer length (static).
        num_tokens: ``V`` (static).
    """

    params: Any
    prefix_fn: SequenceFn = struct.field(pytree_node=False)
    complete_fn: SequenceFn = struct.field(pytree_node=False)
    max_len: int = struct.field(pytree_node=False)
    num_tokens: int = struct.field(pytree_node=False)

    @property
    def vocab_size(self) -> int:
        return self.num_tokens

    def initial_state(self) -> tuple[Int[Array, " max_len"], Int[Array, ""]]:
        return jnp.zeros((self.max_len,), jnp.int32), jnp.asarray(0, jnp.int32)

    def step(self, state, token):
        tokens, length = state
        tokens = tokens.at[jnp.minimum(length, self.max_len - 1)].set(
            jnp.where(length < self.max_len, token, tokens[self.max_len - 1])
        )
        return tokens, jnp.minimum(length + 1, self.max_len + 1)

    def log_prefix(self, state) -> Float[Array, ""]:
        tokens, length = state
        value = self.prefix_fn(self.params, tokens, jnp.minimum(length, self.max_len))
        return jnp.where(length <= self.max_len, value, NEG_INF)

    def log_complete(self, state) -> Float[Array, ""]:
        tokens, length = state
        value = self.complete_fn(self.params, tokens, jnp.minimum(length, self.max_len))
        return jnp.where(length <= self.max_len, value, NEG_INF)


@struct.dataclass
class Product(Potential):
    """``(Phi_1 · Phi_2)(x)``: log weights add, states pair up (build with ``p1 * p2``).

    Attributes:
        left: first factor.
        right: second factor (same vocabulary).
    """

    left: Potential
    right: Potential

    @property
    def vocab_size(self) -> int:
        return self.left.vocab_size

    def initial_state(self):
        return self.left.initial_state(), self.right.initial_state()

    def step(self, state, token):
        return self.left.step(state[0], token), self.right.step(state[1], token)

    def log_prefix(self, state) -> Float[Array, ""]:
        return self.left.log_prefix(state[0]) + self.right.log_prefix(state[1])

    def log_complete(self, state) -> Float[Array, ""]:
        return self.left.log_complete(state[0]) + self.right.log_complete(state[1])

    def logw_next(self, state) -> Float[Array, " vocab_plus_eos"]:
        return self.left.logw_next(state[0]) + self.right.logw_next(state[1])

    def token_logw(self, state, token) -> Float[Array, ""]:
        return self.left.token_logw(state[0], token) + self.right.token_logw(state[1], token)


def product(left: Potential, right: Potential) -> Product:
    """``left * right`` after checking that both use the same token vocabulary.

    Unlike genlm-control (which intersects vocabularies), factors must share token ids; coerce a
    character-level factor first (:func:`coerce`).
    """
    if left.vocab_size != right.vocab_size:
        raise ValueError(
            f"product: left.vocab_size={left.vocab_size} != right.vocab_size="
            f"{right.vocab_size}; expected one token vocabulary (coerce character potentials)"
        )
    return Product(left=left, right=right)


@struct.dataclass
class Coerced(Potential):
    """A potential over characters seen through a tokenizer: ``Phi_tok(x) = Phi_char(join(x))``.

    Stepping a token steps the inner potential through the token's characters; tokens with a
    character outside the inner alphabet lead to ``-inf``.

    Attributes:
        inner: character-level potential (its vocabulary is the alphabet).
        token_chars: ``[V, Lmax]`` character ids of each token (padding ignored).
        token_lengths: ``[V]`` number of characters of each token.
        token_known: ``[V]`` whether every character of the token is in the alphabet.
    """

    inner: Potential
    token_chars: Int[Array, "vocab max_chars"]
    token_lengths: Int[Array, " vocab"]
    token_known: Bool[Array, " vocab"]

    @property
    def vocab_size(self) -> int:
        return int(self.token_chars.shape[0])

    def initial_state(self):
        return self.inner.initial_state(), jnp.asarray(True)

    def step(self, state, token):
        inner_state, alive = state

        def body(i, s):
            return _tree_where(
                i < self.token_lengths[token], self.inner.step(s, self.token_chars[token, i]), s
            )

        inner_state = jax.lax.fori_loop(0, self.token_chars.shape[1], body, inner_state)
        return inner_state, alive & self.token_known[token]

    def log_prefix(self, state) -> Float[Array, ""]:
        return jnp.where(state[1], self.inner.log_prefix(state[0]), NEG_INF)

    def log_complete(self, state) -> Float[Array, ""]:
        return jnp.where(state[1], self.inner.log_complete(state[0]), NEG_INF)


def coerce(inner: Potential, token_strings: Sequence[str], alphabet: Sequence[str]) -> Coerced:
    """Coerces a character-level potential to a token vocabulary (``f = "".join``).

    Args:
        inner: potential whose token ``i`` is the character ``alphabet[i]``.
        token_strings: ``V`` token strings (EOS excluded).
        alphabet: the inner potential's characters, in id order.

    Returns:
        The token-level potential.
    """
    if len(alphabet) != inner.vocab_size:
        raise ValueError(
            f"alphabet has {len(alphabet)} characters but inner.vocab_size={inner.vocab_size}"
        )
    index = {c: i for i, c in enumerate(alphabet)}
    width = max(1, max((len(s) for s in token_strings), default=1))
    chars = np.zeros((len(token_strings), width), np.int32)
    for t, s in enumerate(token_strings):
        chars[t, : len(s)] = [index.get(c, 0) for c in s]
    return Coerced(
        inner=inner,
        token_chars=jnp.asarray(chars),
        token_lengths=jnp.asarray([len(s) for s in token_strings], jnp.int32),
        token_known=jnp.asarray([all(c in index for c in s) for s in token_strings]),
    )


def char_regex_potential(pattern: str, alphabet: Sequence[str]) -> BoolDFAPotential:
    """Character-level regex potential (token ``i`` is ``alphabet[i]``), e.g. to :func:`coerce`."""
    dfa = compile_regex(pattern, alphabet)
    return BoolDFAPotential.from_char_dfa(dfa, list(alphabet), token_level_liveness=False)
