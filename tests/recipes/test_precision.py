"""precision recipe: the tiny preset trains end to end with fake quantisation and reports PTQ."""

import math

import numpy as np
import pytest

from jaxlab.core import config as C
from jaxlab.core import loop
from jaxlab.core import recipe as recipe_lib
from jaxlab.core.config import ConfigError

RECIPE = recipe_lib.get("precision")


def test_tiny_preset_runs_end_to_end(tmp_path):
    cfg = RECIPE.config("tiny")
    assert cfg.model.quant.w_bits == 4 and cfg.model.quant.kv_bits == 8
    result = loop.run(RECIPE, cfg, tmp_path)
    ev = result.eval_metrics
    assert result.step == cfg.loop.total_steps
    assert np.isfinite(ev["val_loss"]) and ev["val_loss"] < math.log(cfg.model.vocab_size)
    assert ev["D"] == cfg.tokens and ev["P_w"] == 4 and ev["P_a"] == math.inf
    assert 0 < ev["N"] < 30_000  # non-embedding parameters only
    assert "ptq_gptq_4_delta" not in ev
    # PTQ at the training precision changes nothing (Q_4 is idempotent); 3 bits is measured
    assert abs(ev["ptq_rtn_4_delta"]) < 1e-6
    assert np.isfinite(ev["ptq_rtn_3_delta"]) and abs(ev["ptq_rtn_3_delta"]) > 1e-4
    assert (ev["w_granularity"], ev["a_granularity"], ev["kv_granularity"]) == (
        "channel",
        "tensor",
        "head",
    )
    assert (tmp_path / "checkpoints").exists()


def test_bad_config_names_the_field():
    base = RECIPE.config("tiny")
    with pytest.raises(ConfigError, match="'ptq.bits'"):
        C.replace(base, **{"ptq.bits": (4, 1)})
    with pytest.raises(ConfigError, match="'ptq.methods'"):
        C.replace(base, **{"ptq.methods": ("awq",)})
    with pytest.raises(ConfigError, match="'model.quant.w_bits'"):
        C.replace(base, **{"model.quant.w_bits": 40})
    with pytest.raises(ConfigError, match="'model.quant.kv_granularity'"):
        C.replace(base, **{"model.quant.kv_granularity": "channel"})
    for bad in (0, -2, 64):  # 64 divides d_ff=64, not d_model=32
        with pytest.raises(ConfigError, match="'ptq.group_size'"):
            C.replace(base, **{"ptq.group_size": bad})
    with pytest.raises(ConfigError, match="'model.quant.w_format'"):
        C.replace(base, **{"model.quant.w_format": "fp6_e3m2"})
    with pytest.raises(ConfigError, match="'model.quant.w_bits'"):
        C.replace(base, **{"model.quant.w_format": "fp8_e4m3"})  # the preset's w_bits is 4
    grouped = C.replace(base, **{"ptq.group_size": 16, "ptq.desc_act": True})
    assert (grouped.ptq.group_size, grouped.ptq.desc_act) == (16, True)


def test_tiny_preset_lowers_with_float_formats():
    """FP4 weights, FP8 E4M3 activations and an FP8 E5M2 KV cache: the train step lowers with
    casts to each format (lowered, not compiled or run)."""
    import jax

    from jaxlab.core import run as run_lib
    from jaxlab.core.lowering import lower_step

    formats = {"w_format": "fp4_e2m1", "a_format": "fp8_e4m3", "kv_format": "fp8_e5m2"}
    cfg = C.replace(RECIPE.config("tiny"), **{f"model.quant.{k}": v for k, v in formats.items()})
    assert (cfg.model.quant.w_bits, cfg.model.quant.a_bits, cfg.model.quant.kv_bits) == (4, 8, 8)
    text = lower_step(RECIPE, cfg, run_lib.mesh_for(cfg, jax.devices())).as_text()
    for dtype in ("f4E2M1FN", "f8E4M3FN", "f8E5M2"):
        assert dtype in text, dtype
