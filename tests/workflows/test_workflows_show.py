"""``jaxlab workflows show`` and ``search --optimizer lm`` with a Hugging Face fixture model."""

import json
from pathlib import Path

import pytest

from jaxlab import cli
from jaxlab.workflows import search
from jaxlab.workflows.parse import parse_workflow
from jaxlab.workflows.program import initial_workflow

HF = Path(__file__).parents[1] / "lm" / "fixtures" / "tiny_llama"


def _round(r, workflow, score, calls):
    return {
        "round": r,
        "parent": None if r == 1 else 1,
        "modification": "m",
        "kind": "lm",
        "workflow": workflow.to_json(),
        "scores": [score, score],
        "score": score,
        "std": 0.0,
        "failures": {},
        "cost": {"calls": calls, "prompt_tokens": 10.0 * calls, "generated_tokens": 8.0 * calls},
        "optimizer_cost": {"calls": 2, "prompt_tokens": 100, "generated_tokens": 20},
    }


def test_show_prints_the_best_workflow_with_scores_cost_and_front(tmp_path, capsys):
    run = tmp_path / "run"
    ensemble = parse_workflow(
        "def workflow(problem):\n"
        '    answer = sc_ensemble([generate(problem, prompt="plain") for _ in range(5)])\n'
        "    return answer\n"
    )
    rounds = [
        _round(1, initial_workflow(), 0.6, 1.0),
        _round(2, ensemble, 0.7, 5.0),
        _round(3, ensemble, 0.65, 6.0),  # dominated: lower score, more calls than round 2
    ]
    state = search.SearchState({"x": 1}, rounds, stopped="round limit 3")
    state.rejected = [{"round": 2, "reason": "syntax", "detail": "d", "parent": 1}]
    state.timing = {str(r): {"evaluation_s": 0.5, "round_s": 1.0} for r in (1, 2, 3)}
    search.save_state(run, state)
    assert cli.main(["workflows", "show", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# best: round 2 of 3 (round limit 3)\n# validation 0.7000")
    assert "# cost per problem: 5.00 calls, 50.0 prompt tokens, 40.0 generated tokens" in out
    assert "\n" + ensemble.to_code() in out
    assert "per problem):\n#   1: 0.6000 @ 1.00\n#   2: 0.7000 @ 5.00\n# optimizer" in out
    assert "# optimizer: 6 calls, 300 prompt tokens, 60 generated tokens" in out
    assert "rejected: {'syntax': 1}" in out and "# wall time: 3.00 s over 3 rounds" in out


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


def test_a_model_that_cannot_write_a_workflow_is_refused_for_constrained_decoding(tmp_path, capsys):
    run = tmp_path / "run"
    args = ["workflows", "search", "--optimizer", "lm", "--optimizer-hf-dir", str(HF)]
    assert cli.main([*args, "--optimizer-constrained", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert "--optimizer-constrained with" in err and "cannot write a workflow reply" in err
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
