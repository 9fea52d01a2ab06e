"""Compile a small context-free grammar with a bounded stack to a :class:`CharDFA` (host side).

A CFG is recognised by a nondeterministic pushdown automaton whose stack holds the sentential
suffix still to be derived (top first): a nonterminal on top may be replaced by any of its
right-hand sides (an epsilon move), a terminal on top must equal the next character and is
popped; the input is accepted when the stack is empty. If the stack may hold at most
``max_stack`` symbols, there are finitely many configurations, so the automaton is an NFA and the
subset construction turns it into a DFA. The compiled language is therefore

    L_bounded = { w : w has a leftmost derivation whose pending stack never exceeds max_stack },

a regular subset of ``L(G)`` that equals ``L(G)`` for grammars whose derivations are
stack-bounded, e.g. :func:`arithmetic_grammar` (expressions with parenthesis nesting at most
``max_depth``; its stack needs at most ``3 * max_depth + 4`` symbols) or any grammar with a
depth limit compiled with a large enough bound. Left recursion is allowed (expansions beyond the
bound are pruned). The jit-friendly form is the DFA lifted to tokens
(:meth:`CharDFA.token_transitions`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from jaxlab.decoding.dfa import CharDFA


@dataclasses.dataclass(frozen=True)
class Grammar:
    """A context-free grammar; symbols that appear as a left-hand side are nonterminals.

    Attributes:
        rules: ``(lhs, rhs)`` productions; ``rhs`` is a tuple of symbols, terminal symbols are
            strings whose characters are read one by one (``()`` is an epsilon production).
        start: start nonterminal.
    """

    rules: tuple[tuple[str, tuple[str, ...]], ...]
    start: str

    def __post_init__(self) -> None:
        nonterminals = {lhs for lhs, _ in self.rules}
        if self.start not in nonterminals:
            raise ValueError(f"start={self.start!r}: expected a nonterminal (a rule's left side)")
        for lhs, rhs in self.rules:
            if not isinstance(rhs, tuple) or any(not isinstance(s, str) or not s for s in rhs):
                raise ValueError(
                    f"rules[{lhs!r}]={rhs!r}: expected a tuple of non-empty symbol strings"
                )

    @classmethod
    def from_dict(cls, rules: Mapping[str, Sequence[Sequence[str]]], start: str) -> Grammar:
        """``Grammar.from_dict({"S": [["(", "S", ")", "S"], []]}, start="S")``."""
        flat = tuple((lhs, tuple(rhs)) for lhs, alts in rules.items() for rhs in alts)
        return cls(rules=flat, start=start)

    @property
    def nonterminals(self) -> frozenset[str]:
        """Symbols with at least one production."""
        return frozenset(lhs for lhs, _ in self.rules)

    def terminal_alphabet(self) -> tuple[str, ...]:
        """Sorted characters of all terminal symbols."""
        chars = {c for _, rhs in self.rules for s in rhs if s not in self.nonterminals for c in s}
        return tuple(sorted(chars))


def compile_grammar(
    grammar: Grammar,
    *,
    max_stack: int,
    alphabet: Sequence[str] | None = None,
    max_states: int = 50_000,
) -> CharDFA:
    """Compiles ``grammar`` with a stack bound into a minimal complete DFA (module docstring).

    Args:
        grammar: the CFG.
        max_stack: most pending symbols the pushdown stack may hold.
        alphabet: characters of the DFA (default: the grammar's terminal characters; extra
            characters only lead to the dead state).
        max_states: bound on subset-construction states (``ValueError`` beyond it).

    Returns:
        The minimised :class:`CharDFA` of ``L_bounded``.
    """
    if not isinstance(max_stack, int) or max_stack < 1:
        raise ValueError(f"max_stack={max_stack!r}: expected an int >= 1")
    alphabet = tuple(grammar.terminal_alphabet() if alphabet is None else alphabet)
    missing = set(grammar.terminal_alphabet()) - set(alphabet)
    if missing:
        raise ValueError(f"alphabet: missing terminal characters {sorted(missing)}")
    char_id = {c: i for i, c in enumerate(alphabet)}
    nonterminals = sorted(grammar.nonterminals)
    nt_id = {name: len(alphabet) + i for i, name in enumerate(nonterminals)}
    productions: dict[int, list[tuple[int, ...]]] = {i: [] for i in nt_id.values()}
    for lhs, rhs in grammar.rules:
        symbols: list[int] = []
        for s in rhs:
            symbols.extend([nt_id[s]] if s in nt_id else [char_id[c] for c in s])
        productions[nt_id[lhs]].append(tuple(symbols))
    num_chars = len(alphabet)

    def closure(configs) -> frozenset[tuple[int, ...]]:
        """Expands nonterminals on top; keeps configurations with a terminal on top or empty."""
        stack = list(configs)
        seen = set(stack)
        stable = set()
        while stack:
            config = stack.pop()
            if not config or config[0] < num_chars:
                stable.add(config)
                continue
            for rhs in productions[config[0]]:
                expanded = rhs + config[1:]
                if len(expanded) <= max_stack and expanded not in seen:
                    seen.add(expanded)
                    stack.append(expanded)
        return frozenset(stable)

    initial = closure([(nt_id[grammar.start],)])
    index = {initial: 0}
    order = [initial]
    rows = []
    for subset in order:
        row = []
        for c in range(num_chars):
            nxt = closure([config[1:] for config in subset if config and config[0] == c])
            if nxt not in index:
                if len(order) >= max_states:
                    raise ValueError(
                        f"max_states={max_states}: the bounded grammar needs more DFA states"
                    )
                index[nxt] = len(order)
                order.append(nxt)
            row.append(index[nxt])
        rows.append(row)
    transitions = np.asarray(rows, np.int32).reshape(len(order), num_chars)
    accepting = np.asarray([() in subset for subset in order], bool)
    return CharDFA(alphabet, transitions, accepting, 0).minimize()


def arithmetic_grammar(
    max_depth: int, *, digits: str = "0123456789", operators: str = "+-*"
) -> Grammar:
    """Arithmetic expressions with parenthesis nesting at most ``max_depth``.

    ``E_d -> F_d | F_d op E_d``, ``F_d -> N | ( E_{d-1} )`` (``F_0 -> N``),
    ``N -> digit | digit N``. Compile with ``max_stack >= 3 * max_depth + 4`` to get the whole
    language: each open parenthesis leaves at most ``)``, an operator and ``E_d`` pending, and
    reading a number inside the innermost one needs ``D N O E_0``.

    Args:
        max_depth: maximum parenthesis nesting (``>= 0``).
        digits: digit characters.
        operators: binary operator characters.

    Returns:
        The grammar, start symbol ``E{max_depth}``.
    """
    if not isinstance(max_depth, int) or max_depth < 0:
        raise ValueError(f"max_depth={max_depth!r}: expected an int >= 0")
    rules: dict[str, list[list[str]]] = {
        "N": [["D"], ["D", "N"]],
        "D": [[d] for d in digits],
        "O": [[o] for o in operators],
    }
    for d in range(max_depth + 1):
        rules[f"E{d}"] = [[f"F{d}"], [f"F{d}", "O", f"E{d}"]]
        rules[f"F{d}"] = [["N"]] + ([["(", f"E{d - 1}", ")"]] if d > 0 else [])
    return Grammar.from_dict(rules, start=f"E{max_depth}")
