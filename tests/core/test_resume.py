"""Resuming: a refused resume changes nothing, the NaN hint tells the truth (--allow-change),
a damaged checkpoint is named with an older complete one, unusable run directories are refused."""

import os
import shutil
from pathlib import Path

import pytest

from jaxlab import cli
from jaxlab.core import recipe as recipe_lib
from jaxlab.core.tracking import read_metrics
from tests.core.toy_recipe import TOY

BASE = ["loop.total_steps=20", "loop.checkpoint_every=10", "loop.steps_per_call=5"]


@pytest.fixture(autouse=True)
def toy_recipe(monkeypatch):
    real = recipe_lib.get
    monkeypatch.setattr(recipe_lib, "get", lambda name: TOY if name == "toy" else real(name))


def train(capsys, run_dir, *args):
    code = cli.main(["train", "toy", "--run-dir", str(run_dir), *BASE, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def snapshot(run_dir):
    return {
        p.relative_to(run_dir): p.read_bytes()
        for p in sorted(Path(run_dir).rglob("*"))
        if p.is_file()
    }


def one_error(code, err):
    lines = err.strip().splitlines()
    assert code == 2 and "Traceback" not in err, err
    assert lines[-2].startswith("error:") and lines[-1].startswith("hint:"), err
    return lines[-2], lines[-1]


def test_nan_hint_is_true_and_refused_resume_changes_nothing(capsys, tmp_path):
    nan = ["lr=10.0", "nan_state_min_lr=1.0", "nan_state_at_step=13"]
    error, hint = one_error(*train(capsys, tmp_path, *nan)[::2])
    assert "after step 13" in error and "last finite checkpoint: step 10" in error
    assert "lr=SMALLER --allow-change lr" in hint and "step 10" in hint
    before = snapshot(tmp_path)

    # A changed lr without --allow-change is refused by name, and nothing in the run changes.
    error, _ = one_error(*train(capsys, tmp_path, "lr=0.05", *nan[1:])[::2])
    assert "lr: saved 10.0 vs now 0.05" in error
    assert snapshot(tmp_path) == before
    # Nor may a shape-defining field be allowed to change.
    error, _ = one_error(*train(capsys, tmp_path, "dim=5", "--allow-change", "dim")[::2])
    assert "allow_change" in error and "dim" in error
    assert snapshot(tmp_path) == before
    # The original run still evaluates.
    assert cli.main(["eval", "toy", "--run-dir", str(tmp_path)]) == 0
    capsys.readouterr()

    # Following the hint resumes from step 10 with the new lr and finishes.
    code, out, err = train(capsys, tmp_path, "lr=0.05", *nan[1:], "--allow-change", "lr")
    assert code == 0, err
    assert '"step": 20' in out
    assert "lr: 0.05" in (tmp_path / "config.yaml").read_text()
    steps = [r["step"] for r in read_metrics(tmp_path) if "loss" in r]
    assert steps == [5, 10, 15, 20]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("done")
    real = recipe_lib.get
    recipe_lib.get = lambda name: TOY if name == "toy" else real(name)
    try:
        assert cli.main(["train", "toy", "--run-dir", str(run_dir), *BASE]) == 0
    finally:
        recipe_lib.get = real
    return run_dir


def _truncate_arrays(step_dir):
    for f in (step_dir / "state" / "d").iterdir():
        f.write_bytes(f.read_bytes()[:10])


@pytest.mark.parametrize(
    "damage",
    [
        _truncate_arrays,
        lambda d: (d / "state" / "manifest.ocdbt").unlink(),
        lambda d: next((d / "data").glob("*.json")).unlink(),
    ],
    ids=["truncated-array", "no-manifest", "no-data-state"],
)
def test_damaged_checkpoint_is_named_with_an_older_complete_one(
    capsys, tmp_path, finished_run, damage
):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    damage(run_dir / "checkpoints" / "20")
    before = snapshot(run_dir)
    error, hint = one_error(*train(capsys, run_dir, "loop.total_steps=30")[::2])
    assert "checkpoint step 20" in error and "damaged" in error
    assert "step 10 is complete" in hint and "20.damaged" in hint
    assert snapshot(run_dir) == before
    if damage is _truncate_arrays:
        # Eval names it too; following the hint resumes from step 10.
        error, _ = one_error(
            cli.main(["eval", "toy", "--run-dir", str(run_dir)]), capsys.readouterr().err
        )
        assert "checkpoint step 20" in error
        ck = run_dir / "checkpoints"
        (ck / "20").rename(ck / "20.damaged")
        code, out, err = train(capsys, run_dir, "loop.total_steps=30")
        assert code == 0, err
        steps = [r["step"] for r in read_metrics(run_dir) if "loss" in r]
        assert steps == [5, 10, 15, 20, 25, 30]


def test_unusable_run_directory_is_refused(capsys, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    error, _ = one_error(*train(capsys, a_file)[::2])
    assert "is a file" in error
    error, _ = one_error(*train(capsys, a_file / "sub")[::2])
    assert "is a file" in error
    if os.geteuid() == 0:  # root writes anywhere but on a read-only file system such as sysfs
        if not Path("/sys/kernel").is_dir():
            pytest.skip("no read-only location to test with")
        unwritable = Path("/sys/jaxlab-test-run")
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        unwritable = ro / "run"
    error, _ = one_error(*train(capsys, unwritable)[::2])
    assert "not writable" in error and str(unwritable) in error
    assert not unwritable.exists()
