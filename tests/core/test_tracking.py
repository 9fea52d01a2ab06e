"""Tracker: JSON lines always (scalars only, NaN kept visible), TensorBoard events optionally."""

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
    assert rows[1]["eval/loss"] == "nan"


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
