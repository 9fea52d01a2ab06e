"""Deterministic finite automata over characters, built on the host and lifted to token tables.

A :class:`CharDFA` is a complete DFA over a finite character alphabet (NumPy arrays; built once,
outside ``jit``). :meth:`CharDFA.token_transitions` lifts it to a language model's vocabulary,
where a token is a string of zero or more characters: ``delta_tok(s, t) = delta*(s, chars(t))``.
The result is a ``[states, vocab]`` integer table that jitted code indexes with
``table[state, token]``. Characters outside the alphabet lead to a dead sink state.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True, eq=False)
class CharDFA:
    """A complete DFA ``(alphabet, delta, F, s0)``.

    Attributes:
        alphabet: the characters, column ``c`` of ``transitions`` reads ``alphabet[c]``.
        transitions: ``[S, C]`` int array, ``delta(s, c)``.
        accepting: ``[S]`` bool array, ``s ∈ F``.
        start: start state ``s0``.
    """

    alphabet: tuple[str, ...]
    transitions: np.ndarray
    accepting: np.ndarray
    start: int = 0

    def __post_init__(self) -> None:
        num_states = self.transitions.shape[0]
        if self.transitions.ndim != 2 or self.transitions.shape[1] != len(self.alphabet):
            raise ValueError(
                f"transitions.shape={self.transitions.shape}: expected [states, "
                f"{len(self.alphabet)}] (one column per alphabet character)"
            )
        if self.accepting.shape != (num_states,):
            raise ValueError(f"accepting.shape={self.accepting.shape}: expected ({num_states},)")
        if not 0 <= self.start < num_states:
            raise ValueError(f"start={self.start}: expected 0 <= start < {num_states}")
        if num_states and (self.transitions.min() < 0 or self.transitions.max() >= num_states):
            raise ValueError("transitions: every entry must be a state index in [0, states)")
        if len(set(self.alphabet)) != len(self.alphabet) or any(len(c) != 1 for c in self.alphabet):
            raise ValueError(f"alphabet={self.alphabet!r}: expected distinct single characters")

    @property
    def num_states(self) -> int:
        """Number of states ``S``."""
        return int(self.transitions.shape[0])

    def run(self, string: str, state: int | None = None) -> int | None:
        """State reached after reading ``string`` (``None`` if a character is not in the alphabet)."""
        index = {c: i for i, c in enumerate(self.alphabet)}
        state = self.start if state is None else state
        for char in string:
            if char not in index:
                return None
            state = int(self.transitions[state, index[char]])
        return state

    def accepts(self, string: str) -> bool:
        """Whether the DFA accepts ``string``."""
        state = self.run(string)
        return state is not None and bool(self.accepting[state])

    def live(self) -> np.ndarray:
        """``[S]`` bool: states from which some accepting state is reachable (co-accessible)."""
        predecessors: dict[int, set[int]] = collections.defaultdict(set)
        for s in range(self.num_states):
            for t in self.transitions[s]:
                predecessors[int(t)].add(s)
        live = self.accepting.copy()
        frontier = list(np.flatnonzero(live))
        while frontier:
            state = frontier.pop()
            for prev in predecessors[int(state)]:
                if not live[prev]:
                    live[prev] = True
                    frontier.append(prev)
        return live

    def minimize(self) -> CharDFA:
        """Equivalent DFA with unreachable states removed and equivalent states merged (Moore)."""
        reachable = [self.start]
        seen = {self.start}
        for state in reachable:
            for t in self.transitions[state]:
                if int(t) not in seen:
                    seen.add(int(t))
                    reachable.append(int(t))
        order = np.asarray(sorted(seen))
        remap = -np.ones(self.num_states, np.int64)
        remap[order] = np.arange(order.size)
        trans = remap[self.transitions[order]]
        accepting = self.accepting[order]
        classes = accepting.astype(np.int64)
        while True:
            signature = np.concatenate([classes[:, None], classes[trans]], axis=1)
            refined = _row_classes(signature)
            if refined.max() == classes.max():
                classes = refined
                break
            classes = refined
        num_classes = int(classes.max()) + 1
        representative = np.zeros(num_classes, np.int64)
        representative[classes] = np.arange(classes.size)
        new_trans = classes[trans[representative]]
        start_class = int(classes[remap[self.start]])
        # Renumber so that the start state is 0 (a canonical, readable layout).
        perm = np.concatenate([[start_class], np.delete(np.arange(num_classes), start_class)])
        inverse = np.empty_like(perm)
        inverse[perm] = np.arange(num_classes)
        return CharDFA(
            alphabet=self.alphabet,
            transitions=inverse[new_trans[perm]].astype(np.int32),
            accepting=accepting[representative][perm],
            start=0,
        )

    def token_transitions(self, token_strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Lifts the DFA to a token vocabulary (host-side precompilation).

        A fresh dead sink (index ``S``) is appended for characters outside the alphabet.

        Args:
            token_strings: ``V`` strings; token ``t`` reads ``token_strings[t]`` (may be empty).

        Returns:
            ``(table [S + 1, V] int32, accepting [S + 1] bool)``.
        """
        num_states, num_chars = self.transitions.shape
        sink = num_states
        char_table = np.concatenate(
            [self.transitions, np.full((1, num_chars), sink)], axis=0
        ).astype(np.int64)
        index = {c: i for i, c in enumerate(self.alphabet)}
        table = np.empty((num_states + 1, len(token_strings)), np.int32)
        states = np.arange(num_states + 1)
        for t, string in enumerate(token_strings):
            current = states
            for char in string:
                current = (
                    char_table[current, index[char]]
                    if char in index
                    else np.full_like(states, sink)
                )
            table[:, t] = current
        return table, np.concatenate([self.accepting, [False]])


def _row_classes(rows: np.ndarray) -> np.ndarray:
    """``[N]`` rank of each row among the distinct rows in lexicographic order: the inverse of
    ``np.unique(rows, axis=0)``, through an integer ``lexsort`` (sorting rows as one opaque
    type is far slower for the thousands of states of a program grammar)."""
    order = np.lexsort(rows.T[::-1])
    ordered = rows[order]
    new = np.concatenate([[True], np.any(ordered[1:] != ordered[:-1], axis=1)])
    classes = np.empty(rows.shape[0], np.int64)
    classes[order] = np.cumsum(new) - 1
    return classes


def dfa_alphabet(strings: Sequence[str]) -> tuple[str, ...]:
    """Sorted distinct characters appearing in ``strings`` (an alphabet for token lifting)."""
    return tuple(sorted(set("".join(strings))))
