"""tpu_configs/kinetix-ppo-*.yaml validate as RL slices (envs split over `data`); their sharded
PPO update is lowered and compiled for the slice's mesh by the generic worker of
tests/core/test_tpu_configs.py (at the files' ``smoke_overrides`` size)."""

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
    smoke = tpu_config.load(path, smoke=True).config
    assert smoke.mesh.data == run.slice.chips and smoke.ppo.num_envs == run.slice.chips
