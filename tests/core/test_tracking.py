"""Tracker: strict JSON lines always (scalars only, NaN as null with its reason), TensorBoard events
optionally."""

import json
import math
import struct

import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.tracking import Tracker, read_metrics


def test_jsonl_rows(tmp_path):
    t = Tracker(tmp_path)
    t.log(1, {"loss": jnp.float32(0.5), "vec": np.ones(3), "flag": True})
    t.log(2, {"loss": math.nan}, prefix="eval/")
    t.close()
    rows = read_metrics(tmp_path)
    assert rows[0]["step"] == 1 and rows[0]["loss"] == 0.5 and rows[0]["flag"] == 1
    assert "vec" not in rows[0]
    assert math.isnan(rows[1]["eval/loss"]) and "null_reason" not in rows[1]


def _refuse(token):
    raise ValueError(f"{token} is not JSON")


def test_a_non_finite_metric_is_null_with_its_reason_in_strict_json(tmp_path):
    t = Tracker(tmp_path)
    t.log(3, {"acc": np.float32("nan"), "ret": -math.inf, "loss": 0.25}, prefix="eval/")
    t.close()
    line = (tmp_path / "metrics.jsonl").read_text().splitlines()[0]
    row = json.loads(line, parse_constant=_refuse)
    assert row["eval/acc"] is None and row["eval/ret"] is None and row["eval/loss"] == 0.25
    assert row["null_reason"] == {
        "eval/acc": "non-finite (nan): JSON has no NaN or infinity",
        "eval/ret": "non-finite (-inf): JSON has no NaN or infinity",
    }
    back = read_metrics(tmp_path)[0]
    assert math.isnan(back["eval/acc"]) and back["eval/ret"] == -math.inf


def test_metrics_files_of_earlier_versions_read_the_same(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 1, "loss": NaN, "acc": Infinity}\n{"step": 2, "loss": "nan", "acc": "-inf"}\n'
    )
    rows = read_metrics(tmp_path)
    assert math.isnan(rows[0]["loss"]) and rows[0]["acc"] == math.inf
    assert math.isnan(rows[1]["loss"]) and rows[1]["acc"] == -math.inf


def test_tensorboard_backend_writes_events(tmp_path):
    t = Tracker(tmp_path, tensorboard=True)
    t.log(3, {"loss": 1.25})
    t.close()
    files = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert len(files) == 1
    # parse the TFRecord stream: the scalar event carries the tag, the value and the step
    from tensorboardX.proto import event_pb2

    data, pos, scalars = files[0].read_bytes(), 0, []
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos : pos + 8])
        event = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + length])
        pos += 12 + length + 4
        for v in event.summary.value:
            scalars.append((v.tag, v.simple_value, event.step))
    assert scalars == [("loss", 1.25, 3)]


def test_a_damaged_metrics_row_names_the_file_and_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "lo\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not a JSON metrics row"):
        read_metrics(tmp_path)
