"""The command line: --help everywhere, list, config, one-line errors with a hint (exit 2)."""

import subprocess
import sys

import pytest

from jaxlab import cli


def run(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_module_entry_point_help():
    """``python -m jaxlab.cli --help`` (every sub-command's ``--help``: tests/test_cli_help.py)."""
    p = subprocess.run(
        [sys.executable, "-m", "jaxlab.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0 and "usage: jaxlab" in p.stdout


def test_list_shows_recipes_and_presets(capsys):
    code, out, _ = run(capsys, "list")
    assert code == 0 and "lm-tiny" in out and "tiny" in out


def test_config_prints_resolved_yaml(capsys):
    code, out, _ = run(capsys, "config", "lm-tiny", "--preset", "tiny", "optim.lr=0.5")
    assert code == 0 and "lr: 0.5" in out and "d_model: 32" in out


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["config", "lm-tiyn"], "did you mean 'lm-tiny'"),
        (["config", "lm-tiny", "optim.lrr=1"], "did you mean 'lr'"),
        (["config", "lm-tiny", "--preset", "nope"], "preset"),
        (["config", "lm-tiny", "model.n_layers=two"], "model.n_layers"),
        (["eval", "lm-tiny", "--run-dir", "/nonexistent/run"], "no run in"),
        (["bench", "nosuch"], "no benchmark named"),
    ],
)
def test_errors_are_one_line_plus_hint(capsys, argv, fragment):
    code, out, err = run(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2
    assert len(lines) == 2 and lines[0].startswith("error:") and lines[1].startswith("hint:")
    assert fragment in err
    assert "Traceback" not in err


def test_bench_from_an_install_says_benchmarks_need_a_checkout(capsys, monkeypatch):
    monkeypatch.setattr(cli, "checkout_root", lambda: None)
    code, _, err = run(capsys, "bench", "core")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 2
    assert lines[0].startswith("error: benchmarks run from a source checkout")
    assert lines[1].startswith("hint:") and "python -m benchmarks.bench_AREA" in lines[1]


def test_bench_runs_the_checkout_module(capsys, monkeypatch):
    """``jaxlab bench AREA`` runs ``benchmarks.bench_AREA`` of the checkout as ``__main__``."""
    ran = {}
    monkeypatch.setattr(cli.runpy, "run_module", lambda m, **kw: ran.update(module=m, **kw))
    monkeypatch.setattr(cli.sys, "argv", list(cli.sys.argv))
    code, _, _ = run(capsys, "bench", "core", "--quick")
    assert code == 0 and ran["module"] == "benchmarks.bench_core"
    assert ran["run_name"] == "__main__" and cli.sys.argv[1:] == ["--quick"]


@pytest.mark.parametrize("flag", ["--run-dir", "--out"])
def test_sweep_writes_to_run_dir_and_accepts_the_old_spelling(flag):
    args = cli.build_parser().parse_args(["sweep", "lm-tiny", flag, "runs/s"])
    assert args.run_dir == "runs/s"


def test_sweep_help_names_run_dir_only(capsys):
    with pytest.raises(SystemExit):
        cli.main(["sweep", "--help"])
    out = capsys.readouterr().out
    assert "--run-dir" in out and "--out" not in out
