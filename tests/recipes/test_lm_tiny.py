"""lm-tiny end to end: it learns, its sharded step equals the single-device step, tiny preset runs."""

import jax
import numpy as np
import pytest

from jaxlab.core import config as C
from jaxlab.core import loop, run
from jaxlab.core import recipe as recipe_lib
from jaxlab.core.testing import sharded_step_matches
from jaxlab.recipes.lm_tiny import LmTinyConfig

RECIPE = recipe_lib.get("lm-tiny")


def test_tiny_preset_runs_end_to_end(tmp_path):
    cfg = RECIPE.config("tiny")
    result = loop.run(RECIPE, cfg, tmp_path)
    assert result.step == cfg.loop.total_steps
    assert np.isfinite(result.eval_metrics["val_loss"])
    assert (tmp_path / "checkpoints").exists()


@pytest.mark.slow
def test_learns_below_unigram_entropy(tmp_path):
    """A short run (d=64, 2 layers, 200 steps of 16x64 tokens) must beat the corpus' byte unigram entropy
    (3.30 nats/byte) by a clear margin: validation loss < 0.85 x H."""
    cfg = C.replace(
        RECIPE.config("tiny"),
        **{
            "model.d_model": 64,
            "model.d_ff": 128,
            "model.n_heads": 4,
            "model.max_len": 64,
            "data.seq_len": 64,
            "data.batch_size": 16,
            "optim.lr": 3e-3,
            "optim.warmup_steps": 10,
            "val_batches": 8,
            "loop.total_steps": 200,
            "loop.steps_per_call": 20,
            "loop.checkpoint_every": 0,
            "loop.eval_every": 0,
        },
    )
    result = loop.run(RECIPE, cfg, tmp_path)
    h = result.eval_metrics["unigram_entropy"]
    assert 3.0 < h < 3.6
    assert result.eval_metrics["val_loss"] < 0.85 * h, result.eval_metrics


def test_sharded_step_equals_single_device():
    """Two AdamW steps (gradient clipping included) on an 8-device data x fsdp mesh equal one
    device: loss, metrics, updated parameters and optimizer moments (rtol 1e-5)."""
    base = C.replace(RECIPE.config("tiny"), **{"data.batch_size": 8})
    _, s8 = sharded_step_matches(
        RECIPE, base, {"mesh.data": 2, "mesh.fsdp": 4}, steps=2, rtol=2e-5, atol=2e-6
    )
    assert int(s8.step) == 2


def test_fsdp_splits_the_embedding():
    cfg = C.replace(RECIPE.config("tiny"), **{"data.batch_size": 8, "mesh.data": 2, "mesh.fsdp": 4})
    parts = run.build(RECIPE, cfg)
    state = run.init_state(parts, jax.random.PRNGKey(0))
    emb = jax.tree.leaves(state.params)[0]
    assert len({str(sh.index) for sh in emb.addressable_shards}) > 1


def test_config_errors():
    with pytest.raises(C.ConfigError, match="data.seq_len"):
        RECIPE.config("tiny", ["data.seq_len=64"])
    with pytest.raises(C.ConfigError, match="head_dim"):
        RECIPE.config("tiny", ["model.head_dim=3"])
    assert isinstance(RECIPE.config(None), LmTinyConfig)
    with pytest.raises(C.ConfigError, match="did you mean 'tiny'"):
        RECIPE.config("tiyn")
