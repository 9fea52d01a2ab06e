"""``jaxlab workflows search`` end to end (stand-in) and its bad-input errors."""

import json
import shutil

import pytest

from jaxlab import cli
from jaxlab.core import run_lock
from jaxlab.workflows import search, tasks


def test_search_command_writes_table_code_plot_and_summary(tmp_path, capsys):
    run = tmp_path / "run"
    args = [
        "workflows",
        "search",
        "--executor",
        "standin",
        "--rounds",
        "5",
        "--run-dir",
        str(run),
        "--num-problems",
        "200",
    ]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "round  score parent  edit" in out and "initial workflow" in out
    assert (run / "scores.png").read_bytes()[:4] == b"\x89PNG"
    assert (run / "best_workflow.py").read_text().splitlines()[1] == "def workflow(problem):"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rounds"] == 5 and (summary["val_size"], summary["test_size"]) == (40, 160)
    # rerunning resumes: nothing new is evaluated, same summary
    assert cli.main(args) == 0
    assert json.loads((run / "summary.json").read_text()) == summary


def test_task_file_with_missing_answer_is_a_clear_error_and_keeps_the_state(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    state = search.SearchState({"x": 1})
    search.save_state(run, state)
    before = (run / search.STATE_FILE).read_bytes()
    path = tmp_path / "task.jsonl"
    tasks.save_task_file(path, tasks.make_problems(0, 3))
    path.write_text(path.read_text() + json.dumps({"question": "How many?"}) + "\n")
    args = ["workflows", "search", "--task", str(path), "--run-dir", str(run)]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "task.jsonl:4: item 'How many?' has no 'answer'" in err and "unchanged" in err
    assert (run / search.STATE_FILE).read_bytes() == before


def test_lm_executor_without_a_trained_run_is_a_clear_error(tmp_path, capsys):
    base = ["workflows", "search", "--executor", "lm", "--run-dir", str(tmp_path / "run")]
    assert cli.main(base) == 2
    assert "--executor lm needs --lm-run-dir" in capsys.readouterr().err
    assert cli.main([*base, "--lm-run-dir", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert "nothing: no run there (missing config.yaml)" in err and "hint: train first" in err
    assert not (tmp_path / "run" / "state.json").exists()


def _search(run, *extra):
    """A two-round stand-in search on 20 problems in ``run``."""
    args = ["workflows", "search", "--rounds", "2", "--num-problems", "20", "--run-dir", str(run)]
    return cli.main([*args, *extra])


def _files(run):
    return {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}


def test_a_second_search_on_a_locked_directory_is_refused_and_writes_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    with run_lock.RunLock(run):  # a search in progress holds the directory
        assert _search(run, "--seed", "1") == 2
        err = capsys.readouterr().err
        assert f"run directory {run} is in use by another run (pid" in err
        assert sorted(p.name for p in run.iterdir()) == [run_lock.LOCK_NAME]
    assert not run.exists()  # the holder wrote nothing; its folder is gone with its lock


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """A finished two-round search (seed 0), copied by the tests that damage or extend it."""
    run = tmp_path_factory.mktemp("searched") / "run"
    assert _search(run, "--seed", "0") == 0
    return run


def test_a_search_with_another_seed_is_refused_and_the_first_stays_intact(
    tmp_path, capsys, searched
):
    run = tmp_path / "run"
    shutil.copytree(searched, run)
    before = _files(run)
    assert _search(run, "--seed", "1") == 2
    err = capsys.readouterr().err
    assert "state.json belongs to a search with other settings (config" in err
    assert _files(run) == before
    assert _search(run, "--seed", "0") == 0  # the same search resumes
    assert json.loads(_files(run)["summary.json"]) == json.loads(before["summary.json"])


def test_a_directory_with_other_files_is_not_taken_for_a_search(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 0\n")
    assert _search(run) == 2
    assert "holds config.yaml but no state.json" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml"]


def test_a_split_without_test_problems_is_refused_before_any_file(tmp_path, capsys):
    run = tmp_path / "run"
    args = ["workflows", "search", "--num-problems", "1", "--run-dir", str(run)]
    assert cli.main(args) == 2
    assert "1 problems give 1 validation and 0 test problems" in capsys.readouterr().err
    assert not run.exists()


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda d: d.pop("settings"), "state.json: missing key 'settings'"),
        (lambda d: d["rounds"][0].pop("score"), "state.json: rounds[0] lacks key 'score'"),
        (None, "state.json: not valid JSON (Expecting"),
    ],
    ids=["no-settings", "round-without-score", "truncated"],
)
def test_a_damaged_state_file_is_named_with_its_key(tmp_path, capsys, searched, damage, expected):
    run = tmp_path / "run"
    shutil.copytree(searched, run)
    path = run / search.STATE_FILE
    if damage is None:
        path.write_text(path.read_text()[:50])
    else:
        data = json.loads(path.read_text())
        damage(data)
        path.write_text(json.dumps(data))
    before = path.read_bytes()
    assert _search(run) == 2
    err = capsys.readouterr().err
    assert expected in err and str(path) in err and "Traceback" not in err
    assert path.read_bytes() == before


def test_ctrl_c_mid_search_keeps_the_finished_rounds_and_resumes(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    save = search.save_state

    def save_then_interrupt(run_dir, state):
        save(run_dir, state)
        if len(state.rounds) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(search, "save_state", save_then_interrupt)
    assert _search(run, "--rounds", "3") == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (
        f"jaxlab: interrupted; {run / search.STATE_FILE} keeps rounds 1-2; run the same command "
        "to resume"
    )
    assert "Traceback" not in err
    assert sorted(p.name for p in run.iterdir()) == [search.STATE_FILE]  # no lock, no temp file
    assert len(json.loads((run / search.STATE_FILE).read_text())["rounds"]) == 2
    monkeypatch.setattr(search, "save_state", save)
    assert _search(run, "--rounds", "3") == 0  # the same command resumes
    assert json.loads((run / "summary.json").read_text())["rounds"] == 3


def test_a_full_disk_names_the_file_and_what_was_kept(tmp_path, capsys, monkeypatch, searched):
    """The disk fills up as the resumed search rewrites ``state.json``: the file is not left
    half-written (nor a temporary file beside it), and the message says what was kept."""
    import errno

    from jaxlab.core import atomic

    run = tmp_path / "run"
    shutil.copytree(searched, run)
    before = _files(run)

    def write_half(self, text, **kw):
        with open(self, "w") as f:
            f.write(text[:10])
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(atomic.Path, "write_text", write_half)
    assert _search(run) == 1
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert lines[-2] == f"error: no space left on the device writing {run / search.STATE_FILE}"
    assert "Traceback" not in err
    assert lines[-1] == (
        f"hint: free some space and run the same command again; {run / search.STATE_FILE} keeps "
        "rounds 1-2; run the same command to resume"
    )
    assert _files(run) == before


def test_a_stale_lock_of_a_dead_search_is_taken_over(tmp_path, capsys, searched):
    import socket
    import subprocess
    import sys

    run = tmp_path / "run"
    shutil.copytree(searched, run)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True
    )
    holder = {"pid": int(dead.stdout), "host": socket.gethostname(), "started": 0.0}
    (run / run_lock.LOCK_NAME).write_text(json.dumps(holder))  # killed: its flock is gone
    assert _search(run, "--seed", "0") == 0
    assert not (run / run_lock.LOCK_NAME).exists()
