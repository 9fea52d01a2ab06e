"""Tracker: JSON lines always (scalars only, NaN kept visible), TensorBoard events optionally."""

import math

import jax.numpy as jnp
import numpy as np

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
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
