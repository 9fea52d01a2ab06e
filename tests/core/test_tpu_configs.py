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


# Recipes whose own tests run data-parallel train steps on simulated devices and compare them with
# one device (``jaxlab.core.testing.sharded_step_matches``, in the file named): for their configs
# with a data-only mesh that test already compiles the same partitioning (pure data parallelism
# partitions alike on 4, 8 or 64 devices; a batch that does not divide fails at lowering), so
# here such a file is lowered (shapes, dtypes, shardings) and not compiled again (~90 s of the
# suite). Every other config (an fsdp/tensor/expert axis, or a recipe without such a test:
# cyberhost, ls-imagine, metra, precision) is compiled.
EQUALITY_TESTED = {
    "csf": "tests/recipes/test_skill_recipes.py",
    "diffusion": "tests/diffusion/test_recipes.py",
    "dept": "tests/recipes/test_dept_recipe.py",
    "distill": "tests/recipes/test_distill_recipe.py",
    "dreamer": "tests/recipes/test_dreamer_recipe.py",
    "dtsn": "tests/recipes/test_dtsn_recipe.py",
    "gnn": "tests/graph/test_recipe_gnn.py",
    "kinetix-ppo": "tests/rl/test_kinetix_ppo_sharded.py",
    "ld3": "tests/diffusion/test_recipes.py",
    "loopy": "tests/diffusion/video/test_recipes.py",
    "planner": "tests/diffusion/test_planner_recipe.py",
    "preference": "tests/diffusion/test_recipes.py",
    "sac": "tests/recipes/test_sac_recipe.py",
    "task-arithmetic": "tests/recipes/test_task_arithmetic_recipe.py",
}


def _lower_only(path: Path) -> bool:
    run = tpu_config.load(path)
    mesh = run.config.mesh
    data_only = mesh.fsdp == mesh.tensor == mesh.expert == 1
    return run.recipe in EQUALITY_TESTED and data_only


def test_lowered_only_configs_have_a_sharded_equality_test():
    for name, test_file in EQUALITY_TESTED.items():
        text = (ROOT / test_file).read_text()
        assert "sharded_step_matches(" in text, test_file
        assert recipe_lib.get(name).name == name
    assert any(_lower_only(p) for p in CONFIGS) and not all(_lower_only(p) for p in CONFIGS)


# one subprocess (64 simulated devices); the module runs on one xdist worker (--dist loadfile)
@pytest.mark.slow
def test_train_step_lowers_for_every_slice():
    worker = Path(__file__).parent / "tpu_lowering_worker.py"
    compiled = [str(p) for p in CONFIGS if not _lower_only(p)]
    lowered = [str(p) for p in CONFIGS if _lower_only(p)]
    out = subprocess.run(
        [sys.executable, str(worker), *compiled, "--lower-only", *lowered],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("OK")]
    assert len(lines) == len(CONFIGS), out.stdout
    assert sum(" compiled " in ln for ln in lines) == len(compiled), out.stdout
