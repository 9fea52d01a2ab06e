"""JSON written by jaxlab is valid JSON: a NaN is refused by key, or written as null with a
reason; a damaged JSON file is named with its line, or with the missing key."""

import json
import math

import numpy as np
import pytest

from jaxlab.core import json_files


def test_a_nan_anywhere_is_refused_by_its_dotted_key_and_nothing_is_written(tmp_path):
    doc = {"best": {"val": 0.5, "test": [1.0, np.float32("nan")]}, "n": 3}
    with pytest.raises(json_files.NonFiniteJSONError, match=r"summary.json: best.test\[1\] is nan"):
        json_files.write(tmp_path / "summary.json", doc)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(json_files.NonFiniteJSONError, match="out: x is inf"):
        json_files.dumps({"x": math.inf}, where="out")


def test_finite_values_and_numpy_scalars_round_trip(tmp_path):
    doc = {"a": np.float32(0.25), "b": np.int64(3), "c": [True, None, "s"]}
    json_files.write(tmp_path / "r.json", doc)
    assert json.loads((tmp_path / "r.json").read_text()) == {
        "a": 0.25,
        "b": 3,
        "c": [True, None, "s"],
    }


def test_a_diverged_row_is_written_as_null_with_its_reason():
    row = json_files.null_if_non_finite({"lr": 1.0, "loss": float("nan")}, "diverged")
    text = json_files.dumps(row, where="sweep.jsonl")
    assert json.loads(text) == {"lr": 1.0, "loss": None, "null_reason": {"loss": "diverged"}}
    assert "NaN" not in text


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            b'{"a": 1,',
            "not valid JSON (Expecting property name enclosed in double quotes at line 1",
        ),
        (b"\xff\xfe", "not UTF-8 text"),
        (b"[1]", "expected a JSON object, got list"),
        (b'{"b": 1}', "missing key 'a'"),
    ],
    ids=["truncated", "binary", "not-an-object", "missing-key"],
)
def test_a_damaged_file_is_named_with_the_problem(tmp_path, content, expected):
    path = tmp_path / "state.json"
    path.write_bytes(content)
    with pytest.raises(json_files.RunFileError) as e:
        json_files.read_json(path, keys=("a",))
    assert str(e.value).startswith(f"{path}: ") and expected in str(e.value)
