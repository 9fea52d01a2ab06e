"""distill recipe: the tiny preset trains the teacher through the shared loop and writes its plots."""

import json

import numpy as np
import pytest

from jaxlab import cli
from jaxlab.core import config as C
from jaxlab.core import loop
from jaxlab.core import recipe as recipe_lib
from jaxlab.core.config import ConfigError

RECIPE = recipe_lib.get("distill")


def test_tiny_preset_runs_end_to_end(tmp_path, capsys):
    cfg = RECIPE.config("tiny")
    result = loop.run(RECIPE, cfg, tmp_path)
    assert result.step == cfg.loop.total_steps
    assert 0.0 <= result.eval_metrics["teacher_accuracy"] <= 1.0
    out = json.loads((tmp_path / "results.json").read_text())
    n_ckpt = cfg.loop.total_steps // cfg.teacher.checkpoint_every
    assert out["checkpoint_steps"] == [
        cfg.teacher.checkpoint_every * (i + 1) for i in range(n_ckpt)
    ]
    assert set(out["samples_to_95"]) == {"progressive", "two_shot", "one_shot", "labels"}
    assert np.asarray(out["student_accuracy"]["labels"]).shape == (cfg.student.seeds, 2)
    for name in ("teacher_loss.png", "teacher_probes.png", "students.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    # `jaxlab eval` prints the teacher's accuracy and the students by method
    capsys.readouterr()
    assert cli.main(["eval", "distill", "--run-dir", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "teacher accuracy" in printed and "samples to 95% acc" in printed
    for method in ("progressive", "two_shot", "one_shot", "labels"):
        assert f"\n{method} " in printed, printed
    assert cli.main(["eval", "distill", "--run-dir", str(tmp_path), "--json"]) == 0
    row = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(c))
    assert row["step"] == cfg.loop.total_steps and set(row["samples_to_95"]) == set(
        out["samples_to_95"]
    )


def test_config_needs_intermediate_checkpoints():
    with pytest.raises(ConfigError, match="checkpoint_every"):
        C.replace(RECIPE.config("tiny"), **{"teacher.checkpoint_every": 100})
    with pytest.raises(ConfigError, match="parity.k"):
        C.replace(RECIPE.config("tiny"), **{"parity.k": 9})


@pytest.mark.parametrize(
    "key,value",
    [("student.tau", 0.0), ("student.tau", -2.0), ("student.tau_min", 0.0),
     ("student.tau_anneal", "cosine"), ("student.kl", "both"), ("student.schedule", "fast")],
)  # fmt: skip
def test_bad_distillation_term_names_the_key(key, value):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        C.replace(RECIPE.config("tiny"), **{key: value})


def test_teacher_step_data_parallel_equals_one_device():
    """The teacher batch split over 8 simulated devices: two SGD steps equal one device
    (parameters, snapshots, losses)."""
    from jaxlab.core.testing import sharded_step_matches

    sharded_step_matches(RECIPE, RECIPE.config("tiny"), {"mesh.data": 8}, steps=2)


def test_pcfg_tiny_preset_runs_end_to_end(tmp_path):
    """task: pcfg trains the masked-LM teacher through the loop, probes its checkpoints, distils."""
    cfg = RECIPE.config("pcfg-tiny")
    result = loop.run(RECIPE, cfg, tmp_path)
    assert result.step == cfg.loop.total_steps
    assert 0.0 <= result.eval_metrics["teacher_accuracy"] <= 1.0
    out = json.loads((tmp_path / "results.json").read_text())
    assert out["task"] == "pcfg" and out["checkpoint_steps"] == [20, 40]
    assert out["transition_checkpoint"] == 0  # the only intermediate checkpoint
    assert set(out["probes"]) >= {"m_robust_3gram", "m_close_3gram", "constituent_probe"}
    assert np.asarray(out["student_accuracy"]["two_shot"]).shape == (1, 4)
    assert np.isfinite(np.asarray(out["probes"]["m_robust_3gram"])).all()
    # every method's student (2-shot follows checkpoint 0 then the final one) lowers its loss
    for method, loss in out["student_loss"].items():
        assert loss[0][-1] < loss[0][0] - 0.05, (method, loss)
    for name in ("teacher_loss.png", "teacher_probes.png", "students.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ConfigError, match="teacher.width"):
        C.replace(cfg, **{"teacher.width": 12})


def test_pcfg_next_token_objective_lowers():
    """``pcfg.objective=next_token``: the teacher step of the causal LM lowers (not run); an
    unknown objective is refused by key."""
    import jax

    from jaxlab.core import run as run_lib
    from jaxlab.core.lowering import lower_step
    from jaxlab.lm import distill_pipeline as dp

    cfg = C.replace(RECIPE.config("pcfg-tiny"), **{"pcfg.objective": "next_token"})
    task = dp.make_task(
        cfg.task, cfg.parity, cfg.pcfg, cfg.teacher, cfg.student, seed=cfg.seed,
        student_optim=cfg.optim.student,
    )  # fmt: skip
    assert task.model.causal
    lowered = lower_step(RECIPE, cfg, run_lib.mesh_for(cfg, jax.devices()))
    assert lowered.as_text()
    with pytest.raises(ConfigError, match="'pcfg.objective'"):
        C.replace(cfg, **{"pcfg.objective": "causal"})
