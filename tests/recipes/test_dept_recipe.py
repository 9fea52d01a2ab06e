"""dept recipe: the tiny preset trains through core.loop.run and evaluates; its round on 4
simulated devices (sources over the data axis) equals one device; config errors."""

import numpy as np
import pytest

from jaxlab.core import config as C
from jaxlab.core import loop
from jaxlab.core import recipe as recipe_lib
from jaxlab.core.testing import sharded_step_matches

RECIPE = recipe_lib.get("dept")


def test_tiny_preset_runs_end_to_end(tmp_path):
    cfg = C.replace(RECIPE.config("tiny"), **{"dept.variant": "trim"})
    result = loop.run(RECIPE, cfg, tmp_path)
    assert result.step == cfg.loop.total_steps
    m = result.eval_metrics
    assert all(np.isfinite(m[f"ppl/source{i}"]) for i in range(3))
    assert m["client_embedding_params_max"] < m["server_embedding_params"]
    assert 0 < m["bytes_communicated"] < m["bytes_dp_equal_tokens"]
    assert (tmp_path / "checkpoints").exists()
    assert (tmp_path / "dept_summary.json").exists()


def test_sharded_round_equals_single_device():
    cfg = C.replace(
        RECIPE.config("tiny"),
        **{"dept.variant": "spec", "data.n_sources": 4, "dept.sources_per_round": 4},
    )
    sharded_step_matches(RECIPE, cfg, {"mesh.data": 4}, steps=1, rtol=2e-5, atol=2e-6)


def test_config_errors():
    with pytest.raises(C.ConfigError, match="'dept.variant'"):
        RECIPE.config("tiny", ["dept.variant=global"])
    with pytest.raises(C.ConfigError, match="sources_per_round"):
        RECIPE.config("tiny", ["dept.sources_per_round=4"])
    for fewer in ("0", "-1"):  # fewer participating sources than one
        with pytest.raises(C.ConfigError, match="'dept.sources_per_round'"):
            RECIPE.config("tiny", [f"dept.sources_per_round={fewer}"])
    with pytest.raises(C.ConfigError, match="'optim.outer.momentum'"):
        RECIPE.config("tiny", ["optim.outer.momentum=1.0"])
    assert RECIPE.config("tiny", ["dept.variant=spec"]).dept.variant == "spec"
