"""Benchmark task files in the layouts AFlow evaluates on, with their official scoring.

Each format reads a JSON-lines file of its benchmark's published layout and scores a
prediction (a model's text) against one item:

* ``gsm8k``: ``question``, ``answer`` (ends ``#### N``); right when the prediction's last number
  equals N.
* ``math``: ``problem``, ``solution`` (holds ``\\boxed{}``); right when the last ``\\boxed{}``
  of each, normalised, are equal (or equal numbers).
* ``humaneval``: ``task_id``, ``prompt``, ``entry_point``, ``test``; pass@1: the program passes
  ``check(entry_point)`` in the sandbox (:mod:`jaxlab.workflows.sandbox`).
* ``mbpp``: ``task_id``, ``text``, ``test_list``; pass@1: the program passes every assert of
  ``test_list`` in the sandbox.
* ``hotpotqa``: ``question``, ``answer``; token F1 after SQuAD normalisation.

A missing or mistyped field raises :class:`~jaxlab.workflows.tasks.TaskFileError` naming the
file, the line and the field. Each format has a tiny sample this package ships
(:func:`sample_path`, written for these tests, not taken from the benchmarks). AFlow searches on
a validation part and reports a held-out test part, 1:4 (:func:`split_indices`).
"""

from __future__ import annotations

import collections
import dataclasses
import re
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from jaxlab.workflows.tasks import TaskFileError, read_json_lines

SAMPLES = Path(__file__).parent / "samples"

FIELDS: dict[str, tuple[str, ...]] = {
    "gsm8k": ("question", "answer"),
    "math": ("problem", "solution"),
    "humaneval": ("task_id", "prompt", "entry_point", "test"),
    "mbpp": ("task_id", "text", "test_list"),
    "hotpotqa": ("question", "answer"),
}
"""Required fields of each format (strings; ``task_id`` may be an int, MBPP's ``test_list`` is a
list of assert strings)."""

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


@dataclasses.dataclass(frozen=True)
class TaskSet:
    """The items of one task file.

    Attributes:
        format: a key of :data:`FIELDS`.
        items: the JSON objects, in file order.
        questions: the text a workflow gets per item (the problem statement; for HumanEval the
            function prompt).
    """

    format: str
    items: tuple[dict[str, Any], ...]
    questions: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.items)

    def score(self, prediction: str, i: int, sandbox: Any = None) -> float:
        """The official score of ``prediction`` for item ``i`` (code formats need a
        :class:`~jaxlab.workflows.sandbox.Sandbox`)."""
        return SCORERS[self.format](prediction, self.items[i], sandbox)

    def reference(self, i: int) -> str:
        """The item's reference answer text (code formats: the reference program, if any)."""
        item = self.items[i]
        if self.format == "gsm8k":
            return gsm8k_answer(item["answer"])
        if self.format == "math":
            return last_boxed(item["solution"]) or ""
        if self.format == "humaneval":
            return item["prompt"] + item.get("canonical_solution", "")
        if self.format == "mbpp":
            return item.get("code", "")
        return item["answer"]


def gsm8k_answer(text: str) -> str:
    """The number after ``####`` of a GSM8K answer, commas removed."""
    return text.rsplit("####", 1)[-1].strip().replace(",", "")


def last_number(text: str) -> float | None:
    """The last number in ``text`` (commas removed), or ``None``."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def score_gsm8k(prediction: str, item: dict, sandbox: Any = None) -> float:
    got, want = last_number(prediction), float(gsm8k_answer(item["answer"]))
    return float(got is not None and abs(got - want) < 1e-6)


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (braces balanced), or ``None``."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j]
    return None


def normalize_math(answer: str) -> str:
    """MATH answer normalisation: spacing, ``\\left``/``\\right``, ``dfrac``/``tfrac``, dollars,
    ``\\text{}`` wrappers, a trailing period and a leading ``x=`` removed."""
    s = answer.strip().strip("$").rstrip(".")
    for old, new in (("\\left", ""), ("\\right", ""), ("\\!", ""), ("dfrac", "frac")):
        s = s.replace(old, new)
    s = s.replace("tfrac", "frac").replace("^\\circ", "").replace("^{\\circ}", "")
    s = re.sub(r"\\text\{(.*?)\}", r"\1", s)
    s = re.sub(r"\s+", "", s)
    s = re.sub(r"^[a-z]=", "", s)
    return s


def score_math(prediction: str, item: dict, sandbox: Any = None) -> float:
    got, want = last_boxed(prediction), last_boxed(item["solution"])
    if got is None or want is None:
        return 0.0
    a, b = normalize_math(got), normalize_math(want)
    if a == b:
        return 1.0
    try:
        return float(abs(float(a) - float(b)) < 1e-6)
    except ValueError:
        return 0.0


def _run_code(program: str, tests: str, sandbox: Any) -> float:
    if sandbox is None:
        raise ValueError("pass@1 scoring runs code: pass a workflows.sandbox.Sandbox")
    return float(sandbox.run(program, tests).passed)


def score_humaneval(prediction: str, item: dict, sandbox: Any = None) -> float:
    """pass@1: a full program (one that defines the entry point), else the prompt plus the
    prediction as a completion, then ``check(entry_point)``."""
    entry = item["entry_point"]
    program = prediction if f"def {entry}(" in prediction else item["prompt"] + prediction
    return _run_code(program, f"{item['test']}\ncheck({entry})\n", sandbox)


def score_mbpp(prediction: str, item: dict, sandbox: Any = None) -> float:
    tests = item.get("test_setup_code", "") + "\n" + "\n".join(item["test_list"]) + "\n"
    return _run_code(prediction, tests, sandbox)


def normalize_answer(text: str) -> str:
    """SQuAD/HotpotQA normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def f1(prediction: str, truth: str) -> float:
    """HotpotQA's token F1 (``yes``/``no``/``noanswer`` must match exactly)."""
    p, t = normalize_answer(prediction), normalize_answer(truth)
    if (p in ("yes", "no", "noanswer") or t in ("yes", "no", "noanswer")) and p != t:
        return 0.0
    pt, tt = p.split(), t.split()
    common = sum((collections.Counter(pt) & collections.Counter(tt)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pt), common / len(tt)
    return 2 * precision * recall / (precision + recall)


def score_hotpotqa(prediction: str, item: dict, sandbox: Any = None) -> float:
    return f1(prediction, item["answer"])


SCORERS: dict[str, Callable[[str, dict, Any], float]] = {
    "gsm8k": score_gsm8k,
    "math": score_math,
    "humaneval": score_humaneval,
    "mbpp": score_mbpp,
    "hotpotqa": score_hotpotqa,
}


def _check_item(item: Any, fmt: str, where: str) -> None:
    if not isinstance(item, dict):
        raise TaskFileError(f"{where}: {item!r:.60}: expected a JSON object")
    for field in FIELDS[fmt]:
        if field not in item:
            raise TaskFileError(f"{where}: missing field {field!r} ({fmt} needs {FIELDS[fmt]})")
        value = item[field]
        if field == "test_list":
            ok = isinstance(value, list) and value and all(isinstance(v, str) for v in value)
            expected = "a non-empty list of assert strings"
        elif field == "task_id":
            ok, expected = isinstance(value, str | int), "a string or an int"
        else:
            ok, expected = isinstance(value, str) and bool(value.strip()), "a non-empty string"
        if not ok:
            raise TaskFileError(f"{where}: {field}={value!r:.60}: expected {expected}")
    if fmt == "gsm8k" and last_number(gsm8k_answer(item["answer"])) is None:
        raise TaskFileError(f"{where}: answer={item['answer'][-40:]!r}: expected '#### NUMBER'")
    if fmt == "math" and last_boxed(item["solution"]) is None:
        raise TaskFileError(f"{where}: solution has no \\boxed{{...}} answer")


def load_task(fmt: str, path: str | Path) -> TaskSet:
    """Reads a task file of format ``fmt``.

    Raises:
        TaskFileError: an unknown format, or naming the file, line and field of a bad item.
    """
    if fmt not in FIELDS:
        raise TaskFileError(f"format={fmt!r}: expected one of {sorted(FIELDS)}")
    path = Path(path)
    items = []
    for where, item in read_json_lines(path):
        _check_item(item, fmt, where)
        items.append(item)
    if not items:
        raise TaskFileError(f"{path}: no items")
    key = {"gsm8k": "question", "math": "problem", "humaneval": "prompt", "mbpp": "text"}
    questions = tuple(it[key.get(fmt, "question")] for it in items)
    return TaskSet(fmt, tuple(items), questions)


def sample_path(fmt: str) -> Path:
    """The shipped sample file of ``fmt``."""
    if fmt not in FIELDS:
        raise ValueError(f"format={fmt!r}: expected one of {sorted(FIELDS)}")
    return SAMPLES / f"{fmt}.jsonl"


def split_indices(n: int, seed: int, val_fraction: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    """AFlow's seeded 1:4 validation/test split of ``n`` items: ``(val, test)`` indices."""
    if n < 2:
        raise ValueError(f"n={n}: a split needs at least 2 items")
    order = np.random.default_rng(seed).permutation(n)
    n_val = min(n - 1, max(1, int(round(val_fraction * n))))
    return np.sort(order[:n_val]), np.sort(order[n_val:])
