"""Lowers and compiles each tpu_configs/*.yaml train step on simulated CPU devices (subprocess)."""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=64"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from jaxlab.core import sharding, tpu_config  # noqa: E402

SHRINK = (
    "model.n_layers=2",
    "model.d_model=64",
    "model.d_ff=128",
    "model.max_len=64",
    "data.seq_len=64",
    "model.head_dim=16",
)
#: olmoe configs also shrink the experts (their number stays, so the expert axis still divides it)
SHRINK_MOE = ("model.moe.expert_ff=32", "model.vocab_size=512")


def lower(path: str) -> str:
    run = tpu_config.load(path, SHRINK)
    if run.recipe == "olmoe":
        run = tpu_config.load(path, SHRINK + SHRINK_MOE)
        from jaxlab.recipes.olmoe import build_parts
    else:
        from jaxlab.recipes.lm_tiny import build_parts

    cfg = run.config
    devices = jax.devices()[: run.slice.chips]
    parts = build_parts(cfg, devices)
    abstract = jax.eval_shape(parts.init, jax.random.PRNGKey(0))
    state_sh = sharding.state_shardings(abstract, parts.mesh)
    batch_sh = {"tokens": sharding.batch_sharding(parts.mesh, 2)}
    abstract_state = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, state_sh
    )
    abstract_batch = {
        "tokens": jax.ShapeDtypeStruct(
            (cfg.data.batch_size, cfg.data.seq_len + 1), jnp.int32, sharding=batch_sh["tokens"]
        )
    }
    step = jax.jit(
        parts.train_step,
        in_shardings=(state_sh, batch_sh),
        out_shardings=(state_sh, None),
        donate_argnums=0,
    )
    compiled = step.lower(abstract_state, abstract_batch).compile()
    # The batch really is split over every chip, and FSDP really splits the embedding.
    shard = batch_sh["tokens"].shard_shape(abstract_batch["tokens"].shape)
    assert shard[0] * run.slice.chips == cfg.data.batch_size, shard
    emb = jax.tree.leaves(state_sh["params"] if isinstance(state_sh, dict) else state_sh.params)
    assert compiled is not None
    return (
        f"OK {os.path.basename(path)} devices={len(devices)} batch_shard={shard} leaves={len(emb)}"
    )


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(lower(p), flush=True)
