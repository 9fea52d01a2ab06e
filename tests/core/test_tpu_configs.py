"""Every tpu_configs/*.yaml validates, and its train step lowers and compiles for its mesh on as
many simulated CPU devices as the slice has chips (smaller depth/width), catching sharding errors
without a TPU."""

import subprocess
import sys
from pathlib import Path

import pytest

from jaxlab.core import config as config_lib
from jaxlab.core import recipe as recipe_lib
from jaxlab.core import tpu_config
from jaxlab.core.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "tpu_configs").glob("*.yaml"))


def test_there_are_configs_for_v5e_8_and_v5p_128():
    names = {p.name for p in CONFIGS}
    assert {"lm-tiny-v5e-8.yaml", "lm-tiny-v5p-128.yaml", "olmoe-1b-7b-v5p-128.yaml"} <= names


def test_olmoe_config_has_an_expert_axis():
    run = tpu_config.load(ROOT / "tpu_configs" / "olmoe-1b-7b-v5p-128.yaml")
    moe = run.config.model.moe
    assert run.config.mesh.expert > 1 and moe.num_experts % run.config.mesh.expert == 0
    assert (moe.num_experts, moe.top_k, run.config.model.d_model) == (64, 8, 2048)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_resolves(path):
    run = tpu_config.load(path)
    batch_key = config_lib.load_yaml(path).get("batch_key", "data.batch_size")
    assert recipe_lib.config_value(run.config, batch_key) % run.slice.chips == 0
    assert "{run_dir}" in run.launch
    assert run.smoke_overrides, "a smoke size for the lowering test"


def test_bad_mesh_is_refused(tmp_path):
    text = (ROOT / "tpu_configs" / "lm-tiny-v5e-8.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("mesh: {data: 2, fsdp: 4", "mesh: {data: 3, fsdp: 4"))
    with pytest.raises(ConfigError, match="product is chips=8"):
        tpu_config.load(bad)


# the configs are lowered in a few subprocesses so that pytest-xdist can spread them over workers
CHUNKS = 3


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_train_step_lowers_for_every_slice(chunk):
    worker = Path(__file__).parent / "tpu_lowering_worker.py"
    configs = CONFIGS[chunk::CHUNKS]
    out = subprocess.run(
        [sys.executable, str(worker), *map(str, configs)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("OK")]
    assert len(lines) == len(configs), out.stdout
