"""Synthetic arithmetic word problems with exact answers, the validation/test protocol and task
files.

Each problem is a short story whose quantities follow an expression of the bounded arithmetic
language of :mod:`jaxlab.decoding.arithmetic` (numbers of at most two digits, binary ``+``/``-``,
no parentheses: ``expression_grammar(0, max_digits=2)``), so the programmer operator of an LM
executor can be constrained to that grammar and its output checked by the same evaluator.
Answers are exact integers (``safe_eval`` of the expression). AFlow splits each benchmark into
validation and test at 1:4 and searches on validation only (:func:`split`).

Task files are JSON lines ``{"question": str, "answer": int}`` (``expression`` optional).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from jaxlab.workflows.programmer import safe_eval

NAMES = ("Ann", "Ben", "Cara", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jo")
ITEMS = ("apples", "marbles", "coins", "books", "stamps", "shells", "cards", "pens")
_MORE = ("{n} gets {x} more.", "{n} finds {x} more.", "{n} buys {x} more.")
_LESS = ("{n} gives away {x}.", "{n} loses {x}.", "{n} sells {x}.")


class TaskFileError(ValueError):
    """A task file item that cannot be used; the message names the file, line and field."""


@dataclasses.dataclass(frozen=True)
class Problems:
    """A batch of problems (host data; the executors batch over it).

    Attributes:
        questions: ``P`` question texts.
        answers: ``[P]`` int32 exact answers.
        expressions: ``P`` reference expressions (``""`` where unknown).
    """

    questions: tuple[str, ...]
    answers: np.ndarray
    expressions: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.questions)

    def take(self, idx: np.ndarray) -> Problems:
        idx = np.asarray(idx, np.int64)
        return Problems(
            tuple(self.questions[i] for i in idx),
            self.answers[idx],
            tuple(self.expressions[i] for i in idx),
        )


def word_problem(rng: np.random.Generator, *, max_terms: int = 3) -> tuple[str, str, int]:
    """One story ``(question, expression, answer)``; quantities never go negative."""
    name, item = NAMES[rng.integers(len(NAMES))], ITEMS[rng.integers(len(ITEMS))]
    start = int(rng.integers(2, 60))
    sentences, expr, total = [f"{name} has {start} {item}."], str(start), start
    for _ in range(int(rng.integers(1, max_terms))):
        if total > 5 and rng.random() < 0.5:
            x = int(rng.integers(1, min(total, 99)))
            sentences.append(_LESS[rng.integers(len(_LESS))].format(n=name, x=x))
            expr, total = f"{expr}-{x}", total - x
        else:
            x = int(rng.integers(1, 60))
            sentences.append(_MORE[rng.integers(len(_MORE))].format(n=name, x=x))
            expr, total = f"{expr}+{x}", total + x
    sentences.append(f"How many {item} does {name} have?")
    answer = safe_eval(expr)
    assert answer == total
    return " ".join(sentences), expr, answer


def make_problems(seed: int, num: int, *, max_terms: int = 3) -> Problems:
    """``num`` seeded word problems (:func:`word_problem`)."""
    if not isinstance(num, int) or num < 1:
        raise ValueError(f"num={num!r}: expected an int >= 1")
    if not isinstance(max_terms, int) or max_terms < 2:
        raise ValueError(f"max_terms={max_terms!r}: expected an int >= 2")
    rng = np.random.default_rng(seed)
    items = [word_problem(rng, max_terms=max_terms) for _ in range(num)]
    return Problems(
        tuple(q for q, _, _ in items),
        np.asarray([a for _, _, a in items], np.int32),
        tuple(e for _, e, _ in items),
    )


def split(problems: Problems, seed: int, *, val_fraction: float = 0.2) -> tuple[Problems, Problems]:
    """Seeded validation/test split, AFlow's 1:4 by default: ``(validation, test)``."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction={val_fraction!r}: expected a float in (0, 1)")
    order = np.random.default_rng(seed).permutation(len(problems))
    n_val = max(1, int(round(val_fraction * len(problems))))
    return problems.take(np.sort(order[:n_val])), problems.take(np.sort(order[n_val:]))


def save_task_file(path: str | Path, problems: Problems) -> None:
    """Writes ``problems`` as JSON lines."""
    with open(path, "w", encoding="utf-8") as f:
        for q, a, e in zip(problems.questions, problems.answers, problems.expressions, strict=True):
            f.write(json.dumps({"question": q, "answer": int(a), "expression": e}) + "\n")


def read_json_lines(path: str | Path) -> list[tuple[str, Any]]:
    """``(where, item)`` for every non-blank line of a JSON-lines file, ``where`` =
    ``"file:line"``; raises ``TaskFileError`` naming the file (not UTF-8, a directory) or the
    line (not JSON)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise TaskFileError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except IsADirectoryError:
        raise TaskFileError(f"{path}: a directory, expected a JSON-lines task file") from None
    out = []
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{line_no}"
        try:
            out.append((where, json.loads(line)))
        except json.JSONDecodeError as e:
            raise TaskFileError(f"{where}: not JSON ({e.msg})") from None
    return out


def load_task_file(path: str | Path) -> Problems:
    """Reads a JSON-lines task file.

    Raises:
        TaskFileError: naming the file, the line and the missing or malformed field.
        FileNotFoundError: if the file does not exist.
    """
    questions, answers, expressions = [], [], []
    for where, item in read_json_lines(path):
        if not isinstance(item, dict):
            raise TaskFileError(f"{where}: {item!r}: expected an object")
        question = item.get("question")
        if not isinstance(question, str) or not question:
            raise TaskFileError(f"{where}: question={question!r}: expected a non-empty string")
        if "answer" not in item:
            raise TaskFileError(f"{where}: item {question[:40]!r} has no 'answer'")
        answer = item["answer"]
        if isinstance(answer, bool) or not isinstance(answer, int) or abs(answer) >= 2**31:
            raise TaskFileError(f"{where}: answer={answer!r}: expected an int32 integer")
        expression = item.get("expression", "")
        if not isinstance(expression, str):
            raise TaskFileError(f"{where}: expression={expression!r}: expected a string")
        questions.append(question)
        answers.append(answer)
        expressions.append(expression)
    if not questions:
        raise TaskFileError(f"{path}: no problems")
    return Problems(tuple(questions), np.asarray(answers, np.int32), tuple(expressions))
