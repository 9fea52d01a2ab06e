"""`jaxlab generate --method speculative|cascade|smc` on trained lm-tiny runs: speculative decoding
at temperature 0 equals greedy decoding with the large model, a cascade reports its statistics,
and the SMC regex/grammar constraint holds for every particle."""

import json
import re

import pytest

from jaxlab import cli
from jaxlab.core import recipe as recipe_lib
from jaxlab.core.sweep import sweep

RECIPE = recipe_lib.get("lm-tiny")
PROMPT = "def "


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny lm-tiny runs (seeds 0 and 1) trained in one vmapped sweep: target and drafter."""
    out = tmp_path_factory.mktemp("gen") / "sw"
    cfg = RECIPE.config("tiny", ["loop.total_steps=16", "loop.checkpoint_every=0"])
    res = sweep(RECIPE, cfg, {}, seeds=2, out_dir=out)
    return [r["run_dir"] for r in res.rows]


def _gen(capsys, run_dir, *extra):
    code = cli.main(
        [
            "generate",
            "lm-tiny",
            "--run-dir",
            run_dir,
            "--prompt",
            PROMPT,
            "--max-new-tokens",
            "10",
            *extra,
        ]
    )
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    return out


def test_speculative_at_temperature_zero_is_greedy(runs, capsys):
    target, draft = runs
    greedy = _gen(capsys, target, "--temperature", "0")
    spec = _gen(
        capsys,
        target,
        "--temperature",
        "0",
        "--method",
        "speculative",
        "--draft-run-dir",
        draft,
        "--gamma",
        "3",
    )
    assert spec[0] == greedy[0]
    stats = json.loads(spec[-1])
    assert stats["method"] == "speculative" and 0.0 <= stats["acceptance_rate"] <= 1.0
    # the drafter differs from the target, so not every draft is accepted, and the verifier is
    # called less than once per token only if drafts are accepted
    assert 0.0 < stats["large_model_calls_per_token"] <= 1.0


def test_cascade_prints_statistics(runs, capsys):
    target, draft = runs
    out = _gen(
        capsys,
        target,
        "--method",
        "cascade",
        "--draft-run-dir",
        draft,
        "--rule",
        "token-v2",
        "--alpha",
        "0.3",
    )
    stats = json.loads(out[-1])
    assert stats["method"] == "cascade" and stats["generated_tokens"] >= 1
    assert out[0].startswith(PROMPT)


@pytest.mark.parametrize(
    "constraint", [["--regex", "[0-9]+;"], ["--grammar", "G"]], ids=["regex", "grammar"]
)
def test_smc_constraint_always_holds(runs, capsys, tmp_path, constraint):
    if constraint[0] == "--grammar":
        g = tmp_path / "g.json"
        g.write_text(json.dumps({"start": "S", "rules": {"S": [["(", "S", ")"], ["x"]]}}))
        constraint = ["--grammar", str(g)]
        pattern = re.compile(r"(\(*)x(\)*)")
    else:
        pattern = re.compile(r"[0-9]+;")
    out = _gen(capsys, runs[0], "--method", "smc", "--particles", "8", *constraint)
    stats = json.loads(out[-1])
    assert stats["particles"] == 8 and stats["ess_final"] > 0
    lines = out[:-1]
    assert lines
    for line in lines:
        weight, text = line.split("\t")
        body = text[len(PROMPT) :]
        m = pattern.fullmatch(body)
        assert m, body
        if constraint[0] == "--grammar":
            assert len(m.group(1)) == len(m.group(2))
    assert sum(float(line.split("\t")[0]) for line in lines) == pytest.approx(1.0, abs=1e-2)


def test_bad_method_input(runs, capsys):
    code = cli.main(
        ["generate", "lm-tiny", "--run-dir", runs[0], "--prompt", "x", "--method", "speculative"]
    )
    assert code == 2 and "--draft-run-dir" in capsys.readouterr().err
