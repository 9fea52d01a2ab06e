"""Resuming: a refused resume changes nothing, the NaN hint tells the truth (--allow-change),
a damaged checkpoint is named with an older complete one, unusable run directories are refused."""

import json
import os
import shlex
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
    nan = ["lr=10.0", "nan_state_min_lr=2.0", "nan_state_at_step=13"]
    error, hint = one_error(*train(capsys, tmp_path, *nan)[::2])
    assert "after step 13" in error and "last finite checkpoint: step 10" in error
    assert "last healthy checkpoint: step 10" in error
    assert error.endswith("Likely causes, most evident first: lr=10 is 200x the default 0.05.")
    assert hint.endswith("lr=1.0 --allow-change lr --resume-from 10; or check the data")
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

    # Following the hint resumes from step 10 with a tenth of the lr and finishes.
    code, out, err = follow(capsys, hint)
    assert code == 0, err
    assert '"step": 20' in out
    assert "lr: 1.0" in (tmp_path / "config.yaml").read_text()
    steps = [r["step"] for r in read_metrics(tmp_path) if "loss" in r]
    assert steps == [5, 10, 15, 20]


def follow(capsys, hint):
    """Runs the ``jaxlab train ...`` command a non-finite hint prints, word for word."""
    command = hint[hint.index("jaxlab train") : hint.rindex("; or check the data")]
    argv = shlex.split(command)[1:]
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


#: lr 0.5 is stable; from step 12 the weights are scaled by 1e4 (finite, far from healthy) and
#: after step 18 they are NaN; both only while lr >= 0.1, so a tenth of the rate avoids them.
BLOWUP = ["lr=0.5", "nan_state_min_lr=0.1", "blowup_at_step=12", "nan_state_at_step=18"]


def test_following_the_nan_hint_skips_a_finite_but_blown_up_checkpoint(capsys, tmp_path):
    every5 = ["loop.checkpoint_every=5", "loop.keep_checkpoints=1"]  # step 10 kept: healthy
    error, hint = one_error(*train(capsys, tmp_path, *BLOWUP, *every5)[::2])
    assert "after step 18" in error and "last finite checkpoint: step 15" in error
    assert "last healthy checkpoint: step 10 (its loss" in error
    assert "lr=0.05 --allow-change lr --resume-from 10; or check the data" in hint
    health = json.loads((tmp_path / "checkpoint_health.json").read_text())
    assert [health["steps"][s]["healthy"] for s in ("5", "10", "15")] == [True, True, False]
    before = snapshot(tmp_path)

    # A resume that fails again in its first chunk changes nothing (config.yaml included), and
    # the run still evaluates.
    code, _, err = train(
        capsys, tmp_path, *BLOWUP, *every5, "lr=0.2", "--allow-change", "lr", "--resume-from", "15"
    )
    assert code == 2 and "after step 18" in err
    assert snapshot(tmp_path) == before
    assert cli.main(["eval", "toy", "--run-dir", str(tmp_path)]) == 0
    capsys.readouterr()

    code, out, err = follow(capsys, hint)
    assert code == 0, err
    assert '"step": 20' in out and "lr: 0.05" in (tmp_path / "config.yaml").read_text()
    assert (tmp_path / "checkpoints" / "15.abandoned").is_dir()  # set aside, not deleted
    assert [r["step"] for r in read_metrics(tmp_path) if "loss" in r] == [5, 10, 15, 20]
    assert cli.main(["eval", "toy", "--run-dir", str(tmp_path)]) == 0
    w_err = json.loads(capsys.readouterr().out)["w_err"]
    assert w_err < 5.0  # trained on from the healthy step (blown-up weights are ~1e4)


def test_with_no_healthy_checkpoint_the_hint_starts_over_in_place(capsys, tmp_path):
    early = [*BLOWUP, "blowup_at_step=3", "nan_state_at_step=8", "loop.checkpoint_every=5"]
    error, hint = one_error(*train(capsys, tmp_path, *early)[::2])
    assert "no healthy checkpoint (step 5: max |" in error and "initial scale" in error
    assert hint.endswith("lr=0.05 --resume-from 0; or check the data")
    code, out, err = follow(capsys, hint)
    assert code == 0, err
    assert (tmp_path / "checkpoints" / "5.abandoned").is_dir()
    health = json.loads((tmp_path / "checkpoint_health.json").read_text())
    assert all(r["healthy"] for r in health["steps"].values())


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
        lambda d: (d / "meta" / "metadata").write_text('{"step": 20}'),
    ],
    ids=["truncated-array", "no-manifest", "no-data-state", "meta-without-config"],
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


def test_a_binary_recipe_file_is_named(capsys, tmp_path):
    (tmp_path / "config.yaml").write_text("seed: 0\n")
    (tmp_path / "recipe.txt").write_bytes(b"\xff\xfe\x00")
    error, _ = one_error(
        cli.main(["eval", "toy", "--run-dir", str(tmp_path)]), capsys.readouterr().err
    )
    assert f"{tmp_path / 'recipe.txt'}: not a recipe name" in error


def test_a_full_disk_stops_training_in_one_line_and_keeps_the_last_checkpoint(
    capsys, tmp_path, monkeypatch
):
    import errno

    from jaxlab.core.checkpoint import Checkpointer

    save = Checkpointer.save

    def full_after_step_10(self, step, *args, **kwargs):
        if step > 10:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.directory / str(step)))
        return save(self, step, *args, **kwargs)

    monkeypatch.setattr(Checkpointer, "save", full_after_step_10)
    code, _, err = train(capsys, tmp_path)
    lines = err.strip().splitlines()
    assert code == 1 and "Traceback" not in err, err
    assert lines[-2] == f"error: no space left on the device writing {tmp_path}/checkpoints/20"
    assert lines[-1].endswith(
        f"{tmp_path} keeps its checkpoints (newest: step 10); run the same command to resume "
        "from it"
    )
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["10"]
