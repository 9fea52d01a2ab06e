"""lm-tiny end to end: it learns, its sharded step equals the single-device step, tiny preset runs."""

import jax
import numpy as np
import pytest

from jaxlab.core import config as C
from jaxlab.core import loop
from jaxlab.core import recipe as recipe_lib
from jaxlab.core.sharding import MeshConfig, shard_batch, state_shardings
from jaxlab.lm.data import train_iterator
from jaxlab.recipes.lm_tiny import LmTinyConfig, build_parts

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
            "model.d_model": 64, "model.d_ff": 128, "model.n_heads": 4, "model.max_len": 64,
            "data.seq_len": 64, "data.batch_size": 16, "optim.lr": 3e-3,
            "optim.warmup_steps": 10, "val_batches": 8, "loop.total_steps": 200,
            "loop.steps_per_call": 20, "loop.checkpoint_every": 0, "loop.eval_every": 0,
        },
    )
    result = loop.run(RECIPE, cfg, tmp_path)
    h = result.eval_metrics["unigram_entropy"]
    assert 3.0 < h < 3.6
    assert result.eval_metrics["val_loss"] < 0.85 * h, result.eval_metrics


def test_sharded_step_equals_single_device():
    """Loss and gradients on an 8-device data x fsdp mesh equal one device (rtol 1e-5)."""
    base = C.replace(RECIPE.config("tiny"), **{"data.batch_size": 8})
    single = build_parts(C.replace(base, **{"mesh.data": 1}), devices=jax.devices()[:1])
    multi = build_parts(C.replace(base, **{"mesh.data": 2, "mesh.fsdp": 4}))
    batch = next(train_iterator(base.data))
    key = jax.random.PRNGKey(0)

    s1 = jax.jit(single.init)(key)
    sh = state_shardings(jax.eval_shape(multi.init, key), multi.mesh)
    s8 = jax.jit(multi.init, out_shardings=sh)(key)
    b8 = shard_batch(batch, multi.mesh)
    # the embedding really is split over fsdp
    emb = jax.tree.leaves(s8.params)[0]
    assert len({str(sh.index) for sh in emb.addressable_shards}) > 1

    def loss_and_grads(parts, state, b):
        from jaxlab.recipes.lm_tiny import loss_fn
        return jax.jit(jax.value_and_grad(lambda p: loss_fn(parts.model, p, b["tokens"])))(
            state.params)

    l1, g1 = loss_and_grads(single, s1, batch)
    l8, g8 = loss_and_grads(multi, s8, b8)
    np.testing.assert_allclose(float(l8), float(l1), rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b),
                                                         rtol=1e-4, atol=1e-6), g8, g1)
    n1, m1 = jax.jit(single.train_step)(s1, batch)
    n8, m8 = jax.jit(multi.train_step)(s8, b8)
    np.testing.assert_allclose(float(m8["loss"]), float(m1["loss"]), rtol=1e-5)


def test_config_errors():
    with pytest.raises(C.ConfigError, match="data.seq_len"):
        RECIPE.config("tiny", ["data.seq_len=64"])
    with pytest.raises(C.ConfigError, match="head_dim"):
        RECIPE.config("tiny", ["model.head_dim=3"])
    assert isinstance(RECIPE.config(None), LmTinyConfig)
    with pytest.raises(C.ConfigError, match="did you mean 'tiny'"):
        RECIPE.config("tiyn")
