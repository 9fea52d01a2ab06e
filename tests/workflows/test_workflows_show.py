"""``jaxlab workflows show`` and ``search --optimizer lm`` with a Hugging Face fixture model."""

import json
from pathlib import Path

import pytest

from jaxlab import cli
from jaxlab.workflows import search, tasks
from jaxlab.workflows.optimizer import EditOptimizer
from jaxlab.workflows.program import initial_workflow
from jaxlab.workflows.standin import StandInExecutor

HF = Path(__file__).parents[1] / "lm" / "fixtures" / "tiny_llama"


def test_show_prints_the_best_workflow_with_scores_cost_and_front(tmp_path, capsys):
    run = tmp_path / "run"
    val = tasks.make_problems(0, 40)
    config = search.SearchConfig(seed=0, max_rounds=4, check_convergence=False)
    state = search.run_search(
        initial_workflow(), StandInExecutor(), val, EditOptimizer(), config, run_dir=run
    )
    best = state.best()
    assert cli.main(["workflows", "show", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"# best: round {best['round']} of 4" in out
    assert f"# validation {best['score']:.4f}" in out
    assert f"# cost per problem: {best['cost']['calls']:.2f} calls" in out
    assert "\n" + state.workflow(best["round"]).to_code() in out
    front = [
        f"#   {r['round']}: {r['score']:.4f} @ {r['cost']['calls']:.2f}" for r in state.front()
    ]
    assert "# score/cost front (round: score @ calls per problem):\n" + "\n".join(front) in out
    assert "# optimizer: 0 calls" in out and "# wall time:" in out


def test_show_without_a_search_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["workflows", "show", str(tmp_path)]) == 2
    assert "no search there (no state.json)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--optimizer", "lm"], "needs exactly one of --optimizer-hf-dir and --optimizer-run-dir"),
        (["--standin-config", "nope"], "--standin-config: stand-in config 'nope': expected one of"),
    ],
)
def test_bad_optimizer_and_standin_settings_are_refused_before_any_file(
    tmp_path, capsys, extra, message
):
    run = tmp_path / "run"
    assert cli.main(["workflows", "search", "--run-dir", str(run), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not (run / "state.json").exists()


def test_a_hugging_face_model_runs_the_operators_and_the_optimizer_on_a_format(tmp_path):
    run = tmp_path / "run"
    args = [
        *("workflows", "search", "--format", "gsm8k", "--executor", "text"),
        *("--executor-hf-dir", str(HF), "--executor-max-new-tokens", "8"),
        *("--optimizer", "lm", "--optimizer-hf-dir", str(HF), "--optimizer-max-new-tokens", "8"),
        *("--rounds", "2", "--expansion-tries", "1", "--validation-runs", "1"),
        *("--run-dir", str(run)),
    ]
    assert cli.main(args) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["val_size"], summary["test_size"]) == (1, 4)
    assert summary["best_cost"]["generated_tokens"] > 0
    usage = summary["optimizer_usage"]
    assert usage["calls"] == sum(summary["rejections"].values()) + summary["rounds"] - 1
    assert usage["prompt_tokens"] > 0 and 0 < usage["generated_tokens"] <= 8 * usage["calls"]


def test_a_format_file_with_a_missing_field_is_named_by_line_before_any_model_loads(
    tmp_path, capsys
):
    path = tmp_path / "gsm.jsonl"
    path.write_text('{"question": "1+1?", "answer": "#### 2"}\n{"question": "2+2?"}\n')
    base = ["workflows", "search", "--format", "gsm8k", "--task", str(path)]
    args = [
        *base,
        "--executor",
        "text",
        "--executor-hf-dir",
        str(HF),
        "--run-dir",
        str(tmp_path / "r"),
    ]
    assert cli.main(args) == 2
    assert "gsm.jsonl:2: missing field 'answer'" in capsys.readouterr().err
    assert not (tmp_path / "r" / "state.json").exists()
    assert cli.main([*base, "--run-dir", str(tmp_path / "s")]) == 2
    assert "a benchmark format runs on the text executor" in capsys.readouterr().err
