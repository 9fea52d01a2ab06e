"""Benchmark task formats: shipped samples, official scoring, and bad files named by line."""

import json

import pytest

from jaxlab.workflows import formats
from jaxlab.workflows.sandbox import Sandbox
from jaxlab.workflows.tasks import TaskFileError


@pytest.fixture(scope="module")
def sandbox():
    return Sandbox(timeout_s=2.0)


@pytest.mark.parametrize("fmt", sorted(formats.FIELDS))
def test_every_sample_loads_and_its_references_score_one(fmt, sandbox):
    task = formats.load_task(fmt, formats.sample_path(fmt))
    assert len(task) == 5 and all(task.questions)
    for i in range(len(task)):
        ref = task.reference(i)
        pred = f"So the answer is \\boxed{{{ref}}}." if fmt == "math" else ref
        assert task.score(pred, i, sandbox) == 1.0
        assert task.score("I do not know.", i, sandbox) == 0.0


@pytest.mark.parametrize(
    "fmt, i, prediction, score",
    [
        ("gsm8k", 3, "125 tickets at $8 cost 1,000 dollars.", 1.0),
        ("gsm8k", 3, "1000.0", 1.0),
        ("gsm8k", 3, "1000 dollars, or 999?", 0.0),
        ("math", 0, "\\boxed{\\dfrac{5}{6}}", 1.0),
        ("math", 2, "The angle is $\\boxed{120^\\circ}$.", 1.0),
        ("math", 1, "\\boxed{x = 4}", 1.0),
        ("math", 1, "\\boxed{4.0}", 1.0),
        ("math", 4, "\\boxed{5 \\sqrt{3}}", 0.0),
        ("humaneval", 0, "    return a + b\n", 1.0),
        ("humaneval", 0, "def add(a, b):\n    return b + a\n", 1.0),
        ("humaneval", 0, "    return a - b\n", 0.0),
        ("mbpp", 3, "def triangular(n):\n    return n * n\n", 0.0),
        ("hotpotqa", 0, "The Seine river", 2 / 3),
        ("hotpotqa", 1, "yes, both", 0.0),
        ("hotpotqa", 4, "Nile", 1.0),
    ],
)
def test_official_scoring_rules(fmt, i, prediction, score, sandbox):
    task = formats.load_task(fmt, formats.sample_path(fmt))
    assert task.score(prediction, i, sandbox) == pytest.approx(score)


@pytest.mark.parametrize("fmt", sorted(formats.FIELDS))
def test_a_missing_field_is_named_with_its_line(fmt, tmp_path):
    lines = formats.sample_path(fmt).read_text().splitlines()
    field = formats.FIELDS[fmt][-1]
    item = json.loads(lines[2])
    del item[field]
    lines[2] = json.dumps(item)
    path = tmp_path / f"{fmt}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TaskFileError, match=rf"{fmt}\.jsonl:3: missing field '{field}'"):
        formats.load_task(fmt, path)


def test_code_scoring_without_a_sandbox_refuses_to_run_code():
    task = formats.load_task("mbpp", formats.sample_path("mbpp"))
    with pytest.raises(ValueError, match="pass a workflows.sandbox.Sandbox"):
        task.score(task.reference(0), 0)


def test_the_split_is_one_to_four_and_seeded():
    val, test = formats.split_indices(10, 0)
    assert (len(val), len(test)) == (2, 8) and set(val) | set(test) == set(range(10))
    assert (formats.split_indices(10, 0)[0] == val).all()
