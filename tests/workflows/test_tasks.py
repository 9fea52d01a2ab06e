"""Word problems, the 1:4 split, and task files."""

import json
import re

import numpy as np
import pytest

from jaxlab.workflows import tasks
from jaxlab.workflows.programmer import safe_eval


def test_word_problems_have_exact_answers_in_the_arithmetic_grammar():
    probs = tasks.make_problems(3, 300)
    assert len(set(probs.questions)) > 290
    for q, e, a in zip(probs.questions, probs.expressions, probs.answers, strict=True):
        # decoding.arithmetic's language at depth 0: <= 2-digit numbers, binary + and -
        assert re.fullmatch(r"(0|[1-9][0-9]?)([+-](0|[1-9][0-9]?))+", e), e
        assert safe_eval(e) == a >= 0
        assert all(n in q for n in re.findall(r"\d+", e))
    again = tasks.make_problems(3, 300)
    assert again.questions == probs.questions


def test_split_is_one_to_four_and_disjoint():
    probs = tasks.make_problems(0, 500)
    val, test = tasks.split(probs, seed=1)
    assert (len(val), len(test)) == (100, 400)
    assert not set(val.questions) & set(test.questions)


def test_task_file_round_trip_and_missing_answer_error(tmp_path):
    probs = tasks.make_problems(0, 5)
    path = tmp_path / "t.jsonl"
    tasks.save_task_file(path, probs)
    back = tasks.load_task_file(path)
    assert back.questions == probs.questions
    np.testing.assert_array_equal(back.answers, probs.answers)
    lines = path.read_text().splitlines()
    item = json.loads(lines[3])
    del item["answer"]
    lines[3] = json.dumps(item)
    path.write_text("\n".join(lines))
    with pytest.raises(tasks.TaskFileError, match=r"t\.jsonl:4: item .* has no 'answer'"):
        tasks.load_task_file(path)


def test_a_binary_task_file_is_named(tmp_path):
    path = tmp_path / "task.jsonl"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(tasks.TaskFileError, match=r"task.jsonl: not UTF-8 text"):
        tasks.load_task_file(path)
