"""Compile a small regular-expression subset to a :class:`~jaxlab.decoding.dfa.CharDFA` (host side).

Full-match semantics (like ``re.fullmatch``). Supported syntax:

* literals and escaped metacharacters (``\\.``, ``\\(``, ``\\\\`` …), ``\\n \\t \\r \\f \\v``;
* ``.`` (any alphabet character except newline), classes ``[abc]``, ranges ``[a-z0-9]``,
  negation ``[^…]``, shorthands ``\\d \\D \\w \\W \\s \\S`` (also inside classes);
* groups ``( … )`` and ``(?: … )``, alternation ``|`` (empty branches allowed);
* quantifiers ``* + ?``, ``{m}``, ``{m,}``, ``{m,n}``.

Anchors, back-references and look-arounds raise ``ValueError``. Sets such as ``.`` and ``[^…]`` are
resolved against the alphabet the DFA is built for (e.g. every character of a tokenizer's
vocabulary). Pipeline: recursive-descent parse -> Thompson NFA -> subset construction -> Moore
minimisation.
"""

from __future__ import annotations

import dataclasses
import string as string_lib
from collections.abc import Sequence

import numpy as np

from jaxlab.decoding.dfa import CharDFA

_DIGITS = frozenset(string_lib.digits)
_SPACE = frozenset(" \t\n\r\f\v")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}
_UNSUPPORTED = {"^": "anchor '^'", "$": "anchor '$'"}


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


@dataclasses.dataclass(frozen=True)
class _CharSet:
    """A character predicate: explicit members, shorthand classes, optional negation."""

    chars: frozenset[str] = frozenset()
    classes: frozenset[str] = frozenset()  # subset of "dDwWsS"
    negated: bool = False

    def contains(self, char: str) -> bool:
        hit = char in self.chars or any(_class_contains(k, char) for k in self.classes)
        return hit != self.negated


def _class_contains(kind: str, char: str) -> bool:
    base = {"d": char in _DIGITS, "w": _is_word(char), "s": char in _SPACE}[kind.lower()]
    return base if kind.islower() else not base


class _Parser:
    """Recursive-descent parser producing a tuple AST."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        self.pos = 0

    def error(self, what: str) -> ValueError:
        return ValueError(f"pattern={self.pattern!r}: {what} at position {self.pos}")

    def peek(self) -> str | None:
        return self.pattern[self.pos] if self.pos < len(self.pattern) else None

    def take(self) -> str:
        char = self.peek()
        if char is None:
            raise self.error("unexpected end of pattern")
        self.pos += 1
        return char

    def parse(self):
        node = self.alternation()
        if self.peek() is not None:
            raise self.error(f"unexpected {self.peek()!r}")
        return node

    def alternation(self):
        branches = [self.concatenation()]
        while self.peek() == "|":
            self.take()
            branches.append(self.concatenation())
        return branches[0] if len(branches) == 1 else ("alt", tuple(branches))

    def concatenation(self):
        items = []
        while self.peek() not in (None, "|", ")"):
            items.append(self.repetition())
        return ("cat", tuple(items))

    def repetition(self):
        node = self.atom()
        while self.peek() in ("*", "+", "?", "{"):
            char = self.take()
            if char == "*":
                node = ("repeat", node, 0, None)
            elif char == "+":
                node = ("repeat", node, 1, None)
            elif char == "?":
                node = ("repeat", node, 0, 1)
            else:
                node = ("repeat", node, *self.braces())
        return node

    def braces(self) -> tuple[int, int | None]:
        end = self.pattern.find("}", self.pos)
        if end < 0:
            raise self.error("unterminated '{'")
        body = self.pattern[self.pos : end]
        self.pos = end + 1
        parts = body.split(",")
        try:
            if len(parts) == 1:
                low = high = int(parts[0])
            elif len(parts) == 2:
                low = int(parts[0]) if parts[0] else 0
                high = int(parts[1]) if parts[1] else None
            else:
                raise ValueError(body)
        except ValueError as err:
            raise self.error(f"bad repetition '{{{body}}}'") from err
        if high is not None and high < low:
            raise self.error(f"bad repetition '{{{body}}}' (max < min)")
        return low, high

    def atom(self):
        char = self.take()
        if char == "(":
            if self.pattern.startswith("?:", self.pos):
                self.pos += 2
            elif self.peek() == "?":
                raise self.error("unsupported group extension '(?'")
            node = self.alternation()
            if self.peek() != ")":
                raise self.error("missing ')'")
            self.take()
            return node
        if char == "[":
            return ("set", self.char_class())
        if char == ".":
            return ("set", _CharSet(chars=frozenset("\n"), negated=True))
        if char == "\\":
            return ("set", self.escape())
        if char in _UNSUPPORTED:
            self.pos -= 1
            raise self.error(f"unsupported {_UNSUPPORTED[char]}")
        if char in "*+?{":
            self.pos -= 1
            raise self.error(f"nothing to repeat before {char!r}")
        if char == ")":
            self.pos -= 1
            raise self.error("unbalanced ')'")
        return ("set", _CharSet(chars=frozenset(char)))

    def escape(self) -> _CharSet:
        char = self.take()
        if char in "dDwWsS":
            return _CharSet(classes=frozenset(char))
        if char in _ESCAPES:
            return _CharSet(chars=frozenset(_ESCAPES[char]))
        if char.isalnum():
            self.pos -= 1
            raise self.error(f"unsupported escape '\\{char}'")
        return _CharSet(chars=frozenset(char))

    def char_class(self) -> _CharSet:
        negated = self.peek() == "^"
        if negated:
            self.take()
        chars: set[str] = set()
        classes: set[str] = set()
        first = True
        while True:
            char = self.take()
            if char == "]" and not first:
                break
            first = False
            if char == "\\":
                member = self.escape()
                if member.classes:
                    classes |= member.classes
                    continue
                (char,) = member.chars
            if self.peek() == "-" and self.pos + 1 < len(self.pattern):
                if self.pattern[self.pos + 1] != "]":
                    self.take()
                    high = self.take()
                    if high == "\\":
                        (high,) = self.escape().chars
                    if ord(high) < ord(char):
                        raise self.error(f"bad range {char}-{high}")
                    chars |= {chr(o) for o in range(ord(char), ord(high) + 1)}
                    continue
            chars.add(char)
        return _CharSet(chars=frozenset(chars), classes=frozenset(classes), negated=negated)


class _NFA:
    """Thompson NFA: ``eps[s]`` epsilon successors, ``edges[s]`` (char-index set, target)."""

    def __init__(self, alphabet: Sequence[str]):
        self.alphabet = alphabet
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[frozenset[int], int]]] = []

    def state(self) -> int:
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def build(self, node) -> tuple[int, int]:
        kind = node[0]
        if kind == "set":
            start, end = self.state(), self.state()
            members = frozenset(i for i, c in enumerate(self.alphabet) if node[1].contains(c))
            self.edges[start].append((members, end))
            return start, end
        if kind == "cat":
            start = end = self.state()
            for item in node[1]:
                s, e = self.build(item)
                self.eps[end].append(s)
                end = e
            return start, end
        if kind == "alt":
            start, end = self.state(), self.state()
            for branch in node[1]:
                s, e = self.build(branch)
                self.eps[start].append(s)
                self.eps[e].append(end)
            return start, end
        _, child, low, high = node
        start = end = self.state()
        for _ in range(low):
            s, e = self.build(child)
            self.eps[end].append(s)
            end = e
        if high is None:
            s, e = self.build(child)
            loop_end = self.state()
            self.eps[end] += [s, loop_end]
            self.eps[e] += [s, loop_end]
            return start, loop_end
        final = self.state()
        for _ in range(high - low):
            s, e = self.build(child)
            self.eps[end] += [s, final]
            end = e
        self.eps[end].append(final)
        return start, final

    def closure(self, states) -> frozenset[int]:
        stack = list(states)
        seen = set(stack)
        while stack:
            for t in self.eps[stack.pop()]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        return frozenset(seen)


def compile_regex(pattern: str, alphabet: Sequence[str], *, max_states: int = 50_000) -> CharDFA:
    """Compiles ``pattern`` into a minimal complete DFA over ``alphabet`` (full-match semantics).

    Args:
        pattern: regular expression in the supported subset (module docstring).
        alphabet: distinct single characters the DFA reads.
        max_states: bound on subset-construction states (``ValueError`` beyond it).

    Returns:
        The minimised :class:`CharDFA`.
    """
    alphabet = tuple(alphabet)
    nfa = _NFA(alphabet)
    start, accept = nfa.build(_Parser(pattern).parse())
    initial = nfa.closure([start])
    index = {initial: 0}
    order = [initial]
    rows: list[list[int]] = []
    for subset in order:
        row = []
        for c in range(len(alphabet)):
            targets = [t for s in subset for members, t in nfa.edges[s] if c in members]
            nxt = nfa.closure(targets)
            if nxt not in index:
                if len(order) >= max_states:
                    raise ValueError(
                        f"max_states={max_states}: the DFA of pattern={pattern!r} is larger"
                    )
                index[nxt] = len(order)
                order.append(nxt)
            row.append(index[nxt])
        rows.append(row)
    transitions = np.asarray(rows, np.int32).reshape(len(order), len(alphabet))
    accepting = np.asarray([accept in subset for subset in order], bool)
    return CharDFA(alphabet, transitions, accepting, 0).minimize()
