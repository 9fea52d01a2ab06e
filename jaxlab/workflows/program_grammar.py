"""The optimizer's reply as a regular language built from the operator set: parses by construction.

:func:`reply_pattern` is a regular expression (the subset of :mod:`jaxlab.decoding.regex`) of
replies ``<modification>TEXT</modification>\\n<graph>\\nCODE</graph>`` whose ``CODE`` is what
:meth:`~jaxlab.workflows.program.Workflow.to_code` prints, statement by statement, for the
operators of :data:`~jaxlab.workflows.program.OPERATORS` (:data:`PROMPTS`, :data:`SOLVERS`, the
ensemble sizes, loop bounds and conditions are read from there), with the grammar's ordering
rules written into the language:

* the first statement is a solver, and only it (a solver may also sit inside an ``if``);
* ``revise`` directly follows a ``review`` in the same block;
* ``if not feedback:`` comes after a top-level review or review/revise loop;
* ``if`` bodies are one level deep and non-empty; a loop is exactly review, break, revise.

Every string of the language is accepted by :func:`~jaxlab.workflows.parse.parse_workflow` (the
tests sample the automaton to check this); the language is a subset of what parses: free texts
(instructions, the modification) use :data:`TEXT_CHARS` and at most ``max_text`` characters.
:func:`reply_potential` compiles it for a token vocabulary, so constrained decoding
(:mod:`jaxlab.decoding.smc`) writes only replies that parse.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Sequence

import numpy as np

from jaxlab.decoding.dfa import CharDFA
from jaxlab.decoding.length_bound import UNREACHABLE, LengthBoundedDFAPotential, bound_length
from jaxlab.decoding.potentials import BoolDFAPotential
from jaxlab.decoding.regex import compile_regex
from jaxlab.workflows.program import (
    CONDITIONS,
    MAX_ENSEMBLE,
    MAX_INSTRUCTION,
    MAX_LOOP,
    MAX_TEST_LOOPS,
    PROMPTS,
    SOLVERS,
)

TEXT_CHARS = "A-Za-z0-9,.;:!?'()-"
"""Characters of free texts besides inner spaces (no quote or backslash: a Python literal as is)."""


def _alt(options: Sequence[str]) -> str:
    return "(?:" + "|".join(re.escape(o) for o in options) + ")"


def _text(max_text: int) -> str:
    """Printable text with no edge spaces, 1 to ``max_text`` characters."""
    c = f"[{TEXT_CHARS}]"
    return f"{c}(?:[ {TEXT_CHARS}]{{0,{max_text - 2}}}{c})?" if max_text > 1 else c


def _range(low: int, high: int) -> str:
    return f"[{low}-{high}]"


def statement_patterns(max_text: int) -> dict[str, str]:
    """One-line statements (no indentation, no newline) by kind, as regular expressions."""
    kw = f'prompt="{_alt(list(PROMPTS))}"(?:, instruction="{_text(max_text)}")?'
    call = f"{_alt(list(SOLVERS))}\\(problem, {kw}\\)"
    comp = f"\\[{call} for _ in range\\({_range(2, MAX_ENSEMBLE)}\\)\\]"
    single = _alt(["generate", "answer_generate", "programmer"])
    return {
        "solver": (
            f"answer = (?:{single}\\(problem, {kw}\\)"
            f'|custom\\(problem, instruction="{_text(max_text)}"\\)'
            f"|sc_ensemble\\({comp}\\)|md_ensemble\\(problem, {comp}\\))"
        ),
        "review": f"feedback = review\\(problem, answer, {kw}\\)",
        "revise": f"answer = revise\\(problem, answer, feedback, {kw}\\)",
        "format": "answer = format\\(problem, answer\\)",
        "test": f"answer = test\\(problem, answer, max_loops={_range(1, MAX_TEST_LOOPS)}\\)",
    }


def _line_patterns(max_text: int) -> dict[str, str]:
    """Every kind of line of a reply, without its indentation, ending in a newline (the last,
    ``graph_close``, ends the reply)."""
    lines = {k: v + "\\n" for k, v in statement_patterns(max_text).items()}
    return lines | {
        "modification": f"<modification>{_text(max_text)}</modification>\\n",
        "graph_open": "<graph>\\n",
        "def": "def workflow\\(problem\\):\\n",
        "if_invalid": "if not valid\\(answer\\):\\n",
        "if_rejected": "if not feedback:\\n",
        "for": f"for _ in range\\({_range(1, MAX_LOOP)}\\):\\n",
        "if_feedback": "if feedback:\\n",
        "break": "break\\n",
        "return": "return answer\\n",
        "graph_close": "</graph>",
    }


Item = tuple[int, str, "str | None"]  # (indentation depth, line kind, the next block state)


def block_machine() -> dict[str, list[Item]]:
    """Which lines may come next in each block state (module docstring's rules).

    ``A``/``B``: top level before/after a review; ``RB``: right after a top-level review (a
    revise may follow); ``L1..L4``: inside a loop; ``IX0``/``IX1``/``IXR``: an ``if`` body
    opened in ``X`` (its first line, later lines, right after a review in the body).
    """
    assert set(CONDITIONS) == {"invalid", "rejected"}

    def top(x: str, heads: tuple[str, ...]) -> list[Item]:
        return [
            (1, "format", x),
            (1, "test", x),
            *((1, h, f"I{x}0") for h in heads),
            (1, "review", "RB"),
            (1, "for", "L1"),
            (1, "return", "end"),
        ]

    machine = {
        "start": [(0, "modification", "graph")],
        "graph": [(0, "graph_open", "def")],
        "def": [(0, "def", "first")],
        "first": [(1, "solver", "A")],
        "A": top("A", ("if_invalid",)),
        "B": top("B", ("if_invalid", "if_rejected")),
        "L1": [(2, "review", "L2")],
        "L2": [(2, "if_feedback", "L3")],
        "L3": [(3, "break", "L4")],
        "L4": [(2, "revise", "B")],
        "end": [(0, "graph_close", None)],
    }
    machine["RB"] = machine["B"] + [(1, "revise", "B")]
    for x in ("A", "B"):
        body = [(2, k, f"I{x}1") for k in ("solver", "format", "test")]
        body.append((2, "review", f"I{x}R"))
        machine[f"I{x}0"] = body
        machine[f"I{x}1"] = body + machine[x]
        machine[f"I{x}R"] = machine[f"I{x}1"] + [(2, "revise", f"I{x}1")]
    return machine


@functools.lru_cache(maxsize=4)
def reply_dfa(max_text: int = 40) -> CharDFA:
    """A DFA of the reply language (module docstring), built from one small DFA per kind of
    line and :func:`block_machine`: a state is the set of lines still possible, each with its
    position (indentation read, then its own DFA's state); a line's newline moves to the next
    block state's line start. State 1 is the only accepting state; state 2 is dead."""
    if not isinstance(max_text, int) or not 1 <= max_text <= MAX_INSTRUCTION:
        raise ValueError(f"max_text={max_text!r}: expected an int in [1, {MAX_INSTRUCTION}]")
    alphabet = tuple(sorted(set(string.printable) - set("\t\r\x0b\x0c")))
    dfas = {k: compile_regex(p, alphabet) for k, p in _line_patterns(max_text).items()}
    machine = block_machine()
    items = {it for block in machine.values() for it in block}
    tables = {it: _positions(dfas[it[1]], it[0], alphabet) for it in items}
    ends = {it: np.concatenate([np.zeros(4 * it[0], bool), dfas[it[1]].accepting]) for it in items}

    final, sink = ("final",), ("sink",)
    index = {_line_start(machine, "start"): 0, final: 1, sink: 2}
    order, rows = list(index), []
    for state in order:
        row = np.full(len(alphabet), 2, np.int32)
        rows.append(row)
        if state in (final, sink):
            continue
        nexts = np.stack([tables[it][pos] for it, pos in state])
        for c in np.flatnonzero(np.any(nexts >= 0, axis=0)):
            moved = tuple(
                (it, int(n)) for (it, _), n in zip(state, nexts[:, c], strict=True) if n >= 0
            )
            done = [it for it, pos in moved if ends[it][pos]]
            if len(done) > 1 or (done and len(moved) > 1):
                raise AssertionError(f"ambiguous line end at {alphabet[c]!r}: {done}")
            nxt = moved
            if done:
                nxt = final if done[0][2] is None else _line_start(machine, done[0][2])
            if nxt not in index:
                index[nxt] = len(order)
                order.append(nxt)
            row[c] = index[nxt]
    accepting = np.zeros(len(order), bool)
    accepting[1] = True
    return CharDFA(alphabet, np.stack(rows), accepting, 0)


def _positions(dfa: CharDFA, depth: int, alphabet: tuple[str, ...]) -> np.ndarray:
    """``[4 depth + S, C]`` next position of one line (``4 depth`` spaces, then ``dfa``), -1
    where the line cannot go on."""
    spaces = np.full((4 * depth, len(alphabet)), -1, np.int64)
    spaces[:, alphabet.index(" ")] = np.arange(1, 4 * depth + 1)
    live = dfa.live()
    body = np.where(live[dfa.transitions], dfa.transitions + 4 * depth, -1)
    return np.concatenate([spaces, body])


def _line_start(machine: dict[str, list[Item]], block: str) -> tuple:
    """Every line of ``block`` at position 0 (minimised DFAs start in state 0)."""
    return tuple((item, 0) for item in machine[block])


def reply_potential(
    token_strings: Sequence[str], *, max_tokens: int, max_text: int = 40
) -> LengthBoundedDFAPotential:
    """The reply language over a token vocabulary, at most ``max_tokens`` tokens (so a
    constrained sampler always finishes within its budget).

    Args:
        token_strings: ``V`` token strings (EOS excluded; specials get strings outside the text).
        max_tokens: the generation budget.
        max_text: the longest instruction or modification text.

    Raises:
        ValueError: when no reply fits in ``max_tokens`` tokens (naming the shortest).
    """
    dfa = reply_dfa(max_text)
    lifted = BoolDFAPotential.from_char_dfa(dfa, token_strings, token_level_liveness=False)
    potential = bound_length(lifted, max_tokens)  # its distances are the token-level ones
    shortest = int(potential.distance[potential.start])
    if shortest >= UNREACHABLE:
        raise ValueError("the vocabulary cannot write a workflow reply (characters are missing)")
    if shortest > max_tokens:
        raise ValueError(
            f"max_tokens={max_tokens}: the shortest workflow reply takes {shortest} tokens"
        )
    return potential
