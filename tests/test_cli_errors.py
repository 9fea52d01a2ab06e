"""Bad input at the command line: one `error:` line naming the key, file or value, a `hint:` line,
exit status 2, no traceback and nothing written."""

from pathlib import Path

import pytest

from jaxlab import cli
from jaxlab.rl.evaluate import resolve_level_files

ROOT = Path(__file__).resolve().parents[1]


def one_error(capsys, *argv):
    code = cli.main(list(argv))
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and "Traceback" not in err, err
    assert lines[-2].startswith("error:") and lines[-1].startswith("hint:"), err
    return lines[-2]


def test_batch_the_mesh_does_not_divide_is_an_error_and_writes_nothing(capsys, tmp_path):
    run_dir = tmp_path / "run"
    error = one_error(
        capsys,
        "train",
        "lm-tiny",
        "--preset",
        "tiny",
        "--run-dir",
        str(run_dir),
        "mesh.data=8",
        "data.batch_size=3",
    )
    assert "batch" in error and "3" in error
    assert not run_dir.exists()


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (("hosts: 1", "hosts: 0"), "tpu.hosts': got 0, expected an integer >= 1"),
        (("data: 2,", "data: 2.5,"), "mesh.data': got 2.5, expected an integer >= 1"),
        (("data: 2,", "data: two,"), "mesh.data': got 'two'"),
        (("chips: 8", "chips: 8.0"), "tpu.chips'"),
        (("recipe: lm-tiny", "recipe: [lm-tiny"), "config file"),
    ],
)
def test_bad_tpu_config_files(capsys, tmp_path, edit, fragment):
    text = (ROOT / "tpu_configs" / "lm-tiny-v5e-8.yaml").read_text()
    assert edit[0] in text
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace(edit[0], edit[1], 1))
    error = one_error(
        capsys, "train", "lm-tiny", "--tpu-config", str(bad), "--run-dir", str(tmp_path / "run")
    )
    assert fragment in error
    assert "'preset'" not in error
    assert not (tmp_path / "run").exists()


def test_generate_prompt_longer_than_the_context(capsys, tmp_path):
    assert cli.main(["config", "lm-tiny", "--preset", "tiny"]) == 0
    (tmp_path / "config.yaml").write_text(capsys.readouterr().out)
    error = one_error(
        capsys, "generate", "lm-tiny", "--run-dir", str(tmp_path), "--prompt", "x" * 500
    )
    assert "--prompt is 501 tokens" in error and "model.max_len=" in error


def test_moe_error_names_the_full_key(capsys):
    error = one_error(capsys, "config", "olmoe", "--preset", "tiny", "model.moe.top_k=0")
    assert "'model.moe.top_k'" in error


def test_level_specs_may_not_escape_the_library():
    for spec in ("library/..", "library/../../..", "../recipes/kinetix_ppo"):
        with pytest.raises(ValueError, match="outside the level library|expected an existing"):
            resolve_level_files(spec)
    assert resolve_level_files("library/s")


def _command(body):
    import argparse

    return argparse.Namespace(command="x", fn=body)


def test_ctrl_c_and_sigterm_end_in_one_line_naming_what_was_kept(capsys):
    import os
    import signal
    import time

    from jaxlab.core.errors import keeping

    def interrupted(args):
        with keeping("out/a.json is kept"):
            raise KeyboardInterrupt

    def killed(args):
        with keeping(lambda: "out/b.json is kept"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)

    before = signal.getsignal(signal.SIGTERM)
    assert cli._dispatch(_command(interrupted)) == 130
    assert capsys.readouterr().err == "jaxlab: interrupted; out/a.json is kept\n"
    assert cli._dispatch(_command(killed)) == 143
    assert capsys.readouterr().err == "jaxlab: terminated (SIGTERM); out/b.json is kept\n"
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_full_disk_is_one_error_naming_the_file(capsys):
    import errno

    def full(args):
        raise RuntimeError("save failed") from OSError(errno.ENOSPC, "No space left", "ck/2")

    assert cli._dispatch(_command(full)) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "error: no space left on the device writing ck/2",
        "hint: free some space and run the same command again; nothing was written",
    ]


@pytest.mark.parametrize(
    "flag, value, expected",
    [
        ("--temperature", "-1", "--temperature -1.0: expected a finite value >= 0"),
        ("--temperature", "nan", "--temperature nan: expected a finite value >= 0"),
        ("--top-p", "1.5", "--top-p 1.5: expected a value in (0, 1]"),
        ("--top-p", "0", "--top-p 0.0: expected a value in (0, 1]"),
        ("--top-k", "-1", "--top-k -1: expected an integer >= 0"),
        ("--max-new-tokens", "0", "--max-new-tokens 0: expected an integer >= 1"),
        ("--gamma", "0", "--gamma 0: expected an integer >= 1"),
        ("--particles", "0", "--particles 0: expected an integer >= 1"),
    ],
)
def test_generate_sampling_flags_are_checked_before_the_model_is_read(
    capsys, tmp_path, flag, value, expected
):
    error = one_error(
        capsys, "generate", "lm-tiny", "--run-dir", str(tmp_path / "no-run"), "--prompt", "a",
        flag, value,
    )  # fmt: skip
    assert error == f"error: {expected}" or error.startswith(f"error: {expected} ")


@pytest.mark.parametrize("recipe", ["lm-tiny", "olmoe", "precision"])
def test_a_vocabulary_smaller_than_the_tokenizer_is_refused_before_training(
    capsys, tmp_path, recipe
):
    run_dir = tmp_path / "run"
    error = one_error(
        capsys, "train", recipe, "--preset", "tiny", "--run-dir", str(run_dir),
        "model.vocab_size=100",
    )  # fmt: skip
    assert error.startswith("error: config key 'model.vocab_size': got 100, expected at least 259")
    assert not run_dir.exists()


def test_a_token_file_with_ids_past_the_vocabulary_is_refused_before_training(capsys, tmp_path):
    import numpy as np

    np.save(tmp_path / "tokens.npy", (np.arange(5000) % 300).astype(np.int32))
    run_dir = tmp_path / "run"
    error = one_error(
        capsys, "train", "lm-tiny", "--preset", "tiny", "--run-dir", str(run_dir),
        f"data.source={tmp_path / 'tokens.npy'}",
    )  # fmt: skip
    assert error == (
        f"error: {tmp_path / 'tokens.npy'}: holds id 299, expected ids in [0, model.vocab_size=259)"
    )
    assert not run_dir.exists()


def test_xla_own_log_lines_are_hidden_unless_asked_for(monkeypatch):
    from jax._src.lib import utils

    levels = []
    monkeypatch.setattr(utils, "absl_set_min_log_level", levels.append)
    assert cli.quiet_xla_logs({}) and levels == [3]  # below FATAL: the slow-compile alarms
    assert cli.quiet_xla_logs({"JAXLAB_VERBOSE_XLA": "0"}) and levels == [3, 3]
    assert not cli.quiet_xla_logs({"JAXLAB_VERBOSE_XLA": "1"})
    assert not cli.quiet_xla_logs({"TF_CPP_MIN_LOG_LEVEL": "0"})  # the user's own setting wins
    assert levels == [3, 3]
    assert cli.quiet_xla_logs({"TF_CPP_MIN_LOG_LEVEL": "1"}) and levels == [3, 3, 3]  # jax's
