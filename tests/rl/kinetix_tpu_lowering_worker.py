"""Lowers and compiles the PPO update of each tpu_configs/kinetix-ppo-*.yaml for its mesh on as
many simulated CPU devices as the slice has chips (run as a subprocess by test_kinetix_tpu_configs.py).

Sizes shrink (one env per chip, 2-step rollouts, a toy transformer) and the level is the shipped
s/h2_one_wheel_car; the mesh, the shard_map over ``data`` and the gradient averaging are the real
ones. Prints ``OK <file> ...`` per config."""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=64"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402

from jaxlab.core import tpu_config  # noqa: E402


def shrink(chips: int) -> tuple[str, ...]:
    return (
        "env.train_levels=s/h2_one_wheel_car",
        f"ppo.num_envs={chips}",
        "ppo.num_steps=2",
        "ppo.update_epochs=1",
        "ppo.num_minibatches=1",
        "network.encoder_size=8",
        "network.num_heads=4",
        "network.qkv_features=4",
        "network.depth=1",
        "network.width=8",
        "network.actor_depth=1",
        "network.critic_depth=1",
        f"curriculum.sfl.batch_size={2 * chips}",
        "curriculum.sfl.num_batches=1",
        "curriculum.sfl.rollout_steps=2",
        f"curriculum.sfl.buffer_size={chips}",
    )


def lower(path: str) -> str:
    from jaxlab.recipes import kinetix_ppo as kp

    run = tpu_config.load(path)  # the real file validates as written
    assert run.config.ppo.num_envs % run.slice.chips == 0
    chips = run.slice.chips
    run = tpu_config.load(path, shrink(chips))
    cfg = run.config
    parts = kp.build_parts(cfg, jax.devices()[:chips])
    assert parts.mesh.shape["data"] == chips
    abstract = jax.eval_shape(parts.init, jax.random.PRNGKey(0))
    shardings = parts.state_sharding(abstract)
    abstract = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings
    )
    step = jax.jit(parts.train_step, out_shardings=(shardings, None), donate_argnums=0)
    compiled = step.lower(abstract).compile()
    env_leaf = jax.tree.leaves(abstract.env_state)[0]
    shard = env_leaf.sharding.shard_shape(env_leaf.shape)
    assert shard[0] * chips == env_leaf.shape[0], shard
    buf = jax.tree.leaves(abstract.curriculum)[0]
    assert buf.sharding.shard_shape(buf.shape)[0] * chips == buf.shape[0]
    text = compiled.as_text()
    assert "all-reduce" in text  # gradients (and metrics) are averaged across chips
    return f"OK {os.path.basename(path)} devices={chips} env_shard={shard}"


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(lower(p), flush=True)
