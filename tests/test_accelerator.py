"""``benchmarks/accelerator.sh --smoke`` end to end on the CPU, restricted to its cheapest step
(``--only moe``) so the suite stays within budget: argument parsing, the import check, the step
runner, the per-step JSON lines (with the machine, date and command from the harness) and the summary with its
exit status. The full ``--smoke`` (all six steps) takes minutes on 2 cores and is run by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "accelerator.sh"


@pytest.mark.slow
def test_smoke_run_writes_json_lines_and_a_summary(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    p = subprocess.run(
        ["bash", str(SCRIPT), "--smoke", "--only", "moe", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    summary = [json.loads(x) for x in (tmp_path / "summary.jsonl").read_text().splitlines()]
    assert [s["step"] for s in summary] == ["moe"] and summary[0]["rc"] == "0"
    rows = [json.loads(x) for x in (tmp_path / "moe.jsonl").read_text().splitlines()]
    assert rows and all(r["machine"]["backend"] == "cpu" for r in rows)
    assert all(r["command"].startswith("python -m benchmarks.bench_moe") for r in rows)
    assert all(r["date"].endswith("Z") for r in rows)
    assert "moe_layer/fwd/dense" in {r["what"] for r in rows}


def test_unknown_argument_is_refused(tmp_path):
    p = subprocess.run(["bash", str(SCRIPT), "--fast"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "unknown argument '--fast'" in p.stderr
