"""A checkpoint is healthy when its state's scale and the loss computed from it are near the
run's start; finite alone is not enough (a normalised model hides a 5e5 weight from its loss)."""

import jax.numpy as jnp
import pytest

from jaxlab.core import health
from jaxlab.core.json_files import RunFileError


def _run(tmp_path):
    h = health.Health(tmp_path)
    h.start({"w": jnp.full(3, 0.5), "count": jnp.int32(7)})
    h.observe(0, 5.0, first_step_of_run=True)
    return h


def test_a_grown_state_is_unhealthy_even_when_its_loss_looks_fine(tmp_path):
    h = _run(tmp_path)
    h.saved(2, {"w": jnp.full(3, 5.5e5), "count": jnp.int32(9)})
    h.observe(2, 5.1, first_step_of_run=False)
    assert not h.steps[2]["healthy"]
    assert "max |['w']| = 5.5e+05 is 5.5e+05x its initial scale" in h.describe(2)


def test_a_blown_up_or_nan_loss_is_unhealthy_and_a_calm_one_healthy(tmp_path):
    h = _run(tmp_path)
    for step, loss in ((2, 4.0), (4, 51.0), (6, float("nan"))):
        h.saved(step, {"w": jnp.full(3, 2.0), "count": jnp.int32(0)})
        h.observe(step, loss, first_step_of_run=False)
    assert [h.steps[s]["healthy"] for s in (2, 4, 6)] == [True, False, False]
    assert "over 10x the first step's 5" in h.describe(4) and "nan" in h.describe(6)
    assert h.last_healthy([2, 4, 6]) == 2 and h.last_healthy([4, 6]) is None


def test_records_survive_a_restart_and_nan_is_written_as_null(tmp_path):
    h = _run(tmp_path)
    h.saved(2, {"w": jnp.full(3, 1.0), "count": jnp.int32(0)})
    h.observe(2, float("nan"), first_step_of_run=False)
    h.save()
    again = health.Health(tmp_path)
    assert again.steps[2]["loss"] is None and not again.steps[2]["healthy"]
    assert again.reference_loss == 5.0 and again.reference_scale == {"['w']": 0.5}


def test_a_run_without_records_counts_its_finite_checkpoints_as_healthy(tmp_path):
    h = health.Health(tmp_path)
    assert h.last_healthy([3]) is None
    h.resumed_without_records()
    assert h.last_healthy([3, 6]) == 6


@pytest.mark.parametrize(
    ("text", "expected"),
    [("{", "not valid JSON"), ('{"steps": {}}', "missing key 'reference_loss'")],
    ids=["truncated", "no-reference"],
)
def test_a_damaged_health_file_names_itself(tmp_path, text, expected):
    (tmp_path / health.HEALTH_FILE).write_text(text)
    with pytest.raises(RunFileError, match=expected) as e:
        health.Health(tmp_path)
    assert health.HEALTH_FILE in str(e.value)
