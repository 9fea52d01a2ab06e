"""The ``gnn`` recipe end to end on the shared loop (tiny preset), and the phi sweep command."""

import json

import numpy as np
import pytest

from jaxlab.core import loop
from jaxlab.graph import sweep
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
    k = gnn.RECIPE.config("karate", ["model=gprgnn", "rewire=digl"])
    assert k.graph.name == "karate" and k.model == "gprgnn"
    c = gnn.RECIPE.config(None, ["graph.phi=0.25", "rewire=jdr"])
    assert c.graph.phi == 0.25 and c.rewire == "jdr"


def test_sweep_main_prints_table(capsys, tmp_path):
    out_json = tmp_path / "cells.json"
    status = sweep.main(
        [
            "gnn",
            "--phis=-0.5,0.5",
            "--methods=none,digl",
            "--preset=tiny",
            f"--json={out_json}",
            "graph.layout=dense",
            "num_seeds=2",
            "loop.total_steps=5",
        ]
    )
    assert status == 0
    text = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(text) if line.startswith("phi"))
    assert text[header].split() == ["phi", "none", "digl"]
    body = text[header + 1 :]
    assert [line.split()[0] for line in body] == ["-0.500", "+0.500"]
    cells = json.loads(out_json.read_text())
    assert len(cells) == 4 and all(len(c["test_acc_at_best"]) == 2 for c in cells)
