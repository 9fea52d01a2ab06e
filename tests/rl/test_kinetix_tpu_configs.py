"""tpu_configs/kinetix-ppo-*.yaml validate, and their sharded PPO update lowers and compiles for
the slice's mesh on simulated CPU devices (envs split over `data`, gradients all-reduced)."""

import subprocess
import sys
from pathlib import Path

import pytest

from jaxlab.core import tpu_config

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "tpu_configs").glob("kinetix-ppo-*.yaml"))


def test_there_are_kinetix_configs():
    assert {p.name for p in CONFIGS} >= {"kinetix-ppo-s-v5e-8.yaml", "kinetix-ppo-l-v5p-128.yaml"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_resolves(path):
    run = tpu_config.load(path)
    cfg = run.config
    assert cfg.mesh.data == run.slice.chips
    assert cfg.ppo.num_envs % run.slice.chips == 0
    assert cfg.curriculum.kind == "sfl" and cfg.network.kind == "transformer"
    assert "{run_dir}" in run.launch


@pytest.mark.slow
def test_sharded_update_lowers_for_every_slice():
    worker = Path(__file__).parent / "kinetix_tpu_lowering_worker.py"
    out = subprocess.run(
        [sys.executable, str(worker), *map(str, CONFIGS)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("OK")]
    assert len(lines) == len(CONFIGS), out.stdout
