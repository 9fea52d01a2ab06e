"""The ``gnn`` recipe end to end on the shared loop (tiny preset), the phi sweep through
``jaxlab sweep``, 8 devices equal one, traced learning rate."""

import json

import numpy as np
import pytest

from jaxlab.core import loop
from jaxlab.core.testing import sharded_step_matches
from jaxlab.recipes import gnn


def test_tiny_preset_end_to_end(tmp_path):
    cfg = gnn.RECIPE.config("tiny")
    assert cfg.rewire == "jdr" and cfg.num_seeds == 2
    result = loop.run(gnn.RECIPE, cfg, tmp_path)
    assert result.step == cfg.loop.total_steps
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert len(losses) >= 2 and all(np.isfinite(losses))
    ev = result.eval_metrics
    for key in ("best_val_acc", "test_acc_at_best", "val_acc", "test_acc", "active_seeds"):
        assert key in ev
    assert 0.0 <= ev["test_acc_at_best"] <= 1.0
    res = json.loads((tmp_path / "results.json").read_text())
    assert len(res["per_seed"]["test_acc_at_best"]) == 2 and res["rewire"] == "jdr"
    assert res["summary"]["test_acc_at_best"] == pytest.approx(ev["test_acc_at_best"])
    assert res["per_seed"]["test_acc_at_best"] == pytest.approx(
        [float(v) for v in result.state.seeds.test_acc_at_best]
    )
    assert int(result.state.step) == cfg.loop.total_steps


def test_presets_resolve():
    assert set(gnn.RECIPE.presets()) >= {"tiny", "karate", "csbm-paper"}
    k = gnn.RECIPE.config("karate", ["trainer.model=gprgnn", "rewire=digl"])
    assert k.graph.name == "karate" and k.trainer.model == "gprgnn"
    c = gnn.RECIPE.config(None, ["graph.phi=0.25", "rewire=jdr"])
    assert c.graph.phi == 0.25 and c.rewire == "jdr"


def test_sweep_over_phi_and_rewiring_prints_one_row_per_cell(capsys, tmp_path):
    """``jaxlab sweep gnn graph.phi=... rewire=... optim.lr=... --seeds N``: phi and the rewiring
    make the data in ``init`` (static keys: one program per cell), the traced ``optim.lr`` and the
    seeds are vmapped in that program."""
    from jaxlab import cli

    status = cli.main(
        [
            "sweep",
            "gnn",
            "--preset=tiny",
            "graph.phi=-0.5,0.5",
            "rewire=none,digl",
            "optim.lr=0.01,0.05",
            "graph.layout=dense",
            "loop.total_steps=5",
            "--seeds=2",
            f"--run-dir={tmp_path / 'sweep'}",
        ]
    )
    assert status == 0
    captured = capsys.readouterr()
    assert "16 runs, 4 compiled programs" in captured.err
    text = captured.out.splitlines()
    assert text[0].split()[:4] == ["graph.phi", "rewire", "optim.lr", "graph.layout"]
    cells = [line.split()[:3] for line in text[1:]]
    assert len(cells) == 8 and {tuple(c[:2]) for c in cells} == {
        ("-0.5", "none"),
        ("-0.5", "digl"),
        ("0.5", "none"),
        ("0.5", "digl"),
    }
    rows = [
        json.loads(line) for line in (tmp_path / "sweep" / "sweep.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 16 and {r["seed"] for r in rows} == {0, 1}
    assert all(0.0 <= r["eval/test_acc_at_best"] <= 1.0 for r in rows)
    summary = [
        json.loads(r) for r in (tmp_path / "sweep" / "summary.jsonl").read_text().splitlines()
    ]
    assert len(summary) == 8 and all(r["seeds"] == 2 for r in summary)
    # optim.lr is traced: the two rates give different parameters inside one program
    by_lr = {
        r["optim.lr"]: r["loss"]
        for r in rows
        if r["rewire"] == "none" and r["seed"] == 0 and r["graph.phi"] == 0.5
    }
    assert len(set(by_lr.values())) == 2


def test_eight_devices_equal_one():
    """Two epochs with the seeds split over 8 devices equal one device (params, Adam moments,
    early-stopping state, metrics)."""
    cfg = gnn.RECIPE.config("tiny", ["num_seeds=8", "rewire=none", "graph.layout=dense"])
    s1, s8 = sharded_step_matches(gnn.RECIPE, cfg, {"mesh.data": 8}, steps=2)
    assert int(s8.step) == 2 and s8.seeds.best_val_acc.shape == (8,)
    assert set(s8.hparams) == set(gnn.TRACED) == {"optim.lr", "optim.weight_decay"}
