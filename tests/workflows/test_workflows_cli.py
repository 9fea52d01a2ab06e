"""``jaxlab workflows search`` end to end (stand-in) and its bad-input errors."""

import json

from jaxlab import cli
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
