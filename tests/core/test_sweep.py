"""``core.sweep.summarize`` and ``format_table`` against hand-computed means and deviations."""

from __future__ import annotations

import math

import pytest

from jaxlab.core import sweep


def rows():
    # two points of the swept key ``lr``; three seeds at 0.1, two at 0.2; ``run_dir`` is not a metric
    return [
        {"lr": 0.1, "seed": 0, "run_dir": "a", "eval/acc": 0.5, "ce_loss": 2.0},
        {"lr": 0.1, "seed": 1, "run_dir": "b", "eval/acc": 0.7, "ce_loss": 4.0},
        {"lr": 0.1, "seed": 2, "run_dir": "c", "eval/acc": 0.9, "ce_loss": 9.0},
        {"lr": 0.2, "seed": 0, "run_dir": "d", "eval/acc": 0.25, "ce_loss": 1.0},
        {"lr": 0.2, "seed": 1, "run_dir": "e", "eval/acc": 0.75, "ce_loss": 3.0},
    ]


def test_summarize_gives_mean_and_population_std_per_point():
    summary = sweep.summarize(rows(), ["lr"])
    assert [s["lr"] for s in summary] == [0.1, 0.2]
    first, second = summary
    assert set(first) == {"lr", "seeds", "eval/acc", "eval/acc_std", "ce_loss", "ce_loss_std"}
    assert first["seeds"] == 3 and second["seeds"] == 2
    # by hand: mean(0.5, 0.7, 0.9) = 0.7, std = sqrt((0.04 + 0 + 0.04) / 3)
    assert first["eval/acc"] == pytest.approx(0.7)
    assert first["eval/acc_std"] == pytest.approx(math.sqrt(0.08 / 3))
    # mean(2, 4, 9) = 5, deviations -3, -1, 4 -> std = sqrt(26 / 3)
    assert first["ce_loss"] == pytest.approx(5.0)
    assert first["ce_loss_std"] == pytest.approx(math.sqrt(26 / 3))
    assert second["eval/acc"] == pytest.approx(0.5)
    assert second["eval/acc_std"] == pytest.approx(0.25)
    assert second["ce_loss"] == pytest.approx(2.0) and second["ce_loss_std"] == pytest.approx(1.0)


def test_summarize_groups_by_every_swept_key():
    data = [{**r, "wd": r["seed"] % 2} for r in rows()]
    summary = sweep.summarize(data, ["lr", "wd"])
    by_point = {(s["lr"], s["wd"]): s for s in summary}
    assert set(by_point) == {(0.1, 0), (0.1, 1), (0.2, 0), (0.2, 1)}
    assert by_point[(0.1, 0)]["seeds"] == 2
    assert by_point[(0.1, 0)]["ce_loss"] == pytest.approx(5.5)  # seeds 0 and 2: (2 + 9) / 2
    assert by_point[(0.1, 0)]["ce_loss_std"] == pytest.approx(3.5)
    assert by_point[(0.1, 1)]["ce_loss_std"] == 0.0


def test_format_table_prints_mean_plus_minus_std_eval_metrics_first():
    summary = sweep.summarize(rows(), ["lr"])
    table = sweep.format_table(summary, ["lr"])
    lines = table.rstrip("\n").split("\n")
    assert lines[0].split() == ["lr", "seeds", "eval/acc", "ce_loss"]
    assert lines[1].split() == [
        "0.1",
        "3",
        f"0.7±{math.sqrt(0.08 / 3):.2g}",
        f"5±{math.sqrt(26 / 3):.2g}",
    ]
    assert lines[2].split() == ["0.2", "2", "0.5±0.25", "2±1"]
    assert sweep.format_table(summary, ["lr"], max_metrics=1).split("\n")[0].split() == [
        "lr",
        "seeds",
        "eval/acc",
    ]
    nan = [{"lr": 0.1, "seed": 0, "ce_loss": float("nan")}]
    assert sweep.format_table(sweep.summarize(nan, ["lr"]), ["lr"]).split("\n")[1].split() == [
        "0.1",
        "1",
        "nan",
    ]
    assert sweep.format_table([], ["lr"]) == "(no points)\n"


# --- the sweep's own checks: one sweep per folder, nothing run or overwritten on bad input ---


def _toy():
    from tests.core.toy_recipe import TOY

    return TOY, TOY.config(overrides=["loop.total_steps=2", "loop.steps_per_call=2"])


def test_a_second_sweep_on_a_folder_in_use_is_refused_with_the_holders_pid(tmp_path, monkeypatch):
    import os

    from jaxlab.core.run_lock import RunLock, RunLockedError

    toy, cfg = _toy()
    out = tmp_path / "sweep"
    with RunLock(out):  # the first sweep, running
        with pytest.raises(RunLockedError) as e:
            sweep.sweep(toy, cfg, {"lr": [0.1, 0.2]}, seeds=1, out_dir=out)
    assert f"pid {os.getpid()}" in str(e.value) and " since " in str(e.value)
    assert not any(out.iterdir()) if out.exists() else True  # the refused sweep wrote nothing
    held, real = [], sweep._write_point

    def write(recipe, cfg_p, run_dir, *args):  # each point is written under its own run lock
        with pytest.raises(RunLockedError, match=f"pid {os.getpid()}"):
            RunLock(run_dir).acquire()  # (a train resuming this point now is refused)
        held.append(run_dir.relative_to(out).as_posix())
        real(recipe, cfg_p, run_dir, *args)

    monkeypatch.setattr(sweep, "_write_point", write)
    result = sweep.sweep(toy, cfg, {"lr": [0.1, 0.2]}, seeds=2, out_dir=out)  # the lock is free
    assert len(result.rows) == 4 and result.compiles == 1
    assert held == ["lr=0.1/seed0", "lr=0.1/seed1", "lr=0.2/seed0", "lr=0.2/seed1"]
    assert not list(out.rglob(".lock"))
    from jaxlab.core.config import ConfigError

    with pytest.raises(ConfigError, match="new or empty directory"):  # finished: kept intact
        sweep.sweep(toy, cfg, {"lr": [0.1]}, seeds=1, out_dir=out)
    assert (out / "sweep.jsonl").read_text().count("\n") == 4


def test_a_point_held_by_another_run_is_refused_naming_the_point_and_holder(tmp_path):
    import os

    from jaxlab.core.run_lock import RunLock, RunLockedError

    with RunLock(tmp_path / "lr=0.1" / "seed0"):
        with pytest.raises(RunLockedError) as e:
            with sweep.point_locks(tmp_path, ["lr=0.2/seed0", "lr=0.1/seed0"]):
                pass
    assert "sweep point lr=0.1/seed0" in str(e.value) and f"pid {os.getpid()}" in str(e.value)
    assert not (tmp_path / "lr=0.2").exists()  # the points it had locked are let go, unwritten


@pytest.mark.parametrize(
    ("axes", "message"),
    [
        ({"lr": [0.1, 0.1]}, "each value once"),
        ({"seed": [0, 1]}, "--seeds"),
        ({"lr": []}, "at least one value"),
    ],
    ids=["repeated-value", "seed-as-key", "no-values"],
)
def test_bad_axes_are_refused_before_anything_is_written(tmp_path, axes, message):
    from jaxlab.core.config import ConfigError

    toy, cfg = _toy()
    with pytest.raises(ConfigError, match=message):
        sweep.sweep(toy, cfg, axes, seeds=1, out_dir=tmp_path / "s")
    assert not (tmp_path / "s").exists()


def test_a_file_as_the_sweep_folder_is_refused(tmp_path):
    from jaxlab.core.config import ConfigError

    toy, cfg = _toy()
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="this path is a file"):
        sweep.sweep(toy, cfg, {"lr": [0.1]}, seeds=1, out_dir=tmp_path / "f")
    assert (tmp_path / "f").read_text() == "x"


def test_a_static_key_is_announced_as_a_sequence_of_programs(tmp_path):
    import io

    toy, cfg = _toy()
    log = io.StringIO()
    result = sweep.sweep(toy, cfg, {"dim": [2, 3]}, seeds=1, out_dir=tmp_path / "s", log=log)
    assert "dim is not a traced hyper-parameter of toy (traced: lr)" in log.getvalue()
    assert result.compiles == 2
