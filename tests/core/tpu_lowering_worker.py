"""Lowers the train step of each given tpu_configs/*.yaml (``jaxlab.core.lowering``) on as many
simulated CPU devices as the slice has chips, at the file's ``smoke_overrides`` size, and
compiles it (the SPMD partitioner) unless the file is given after ``--lower-only`` (subprocess of
test_tpu_configs.py, which says which those are). No per-recipe code: the recipe's parts give the
abstract batch and the state shardings."""

import os
import re
import sys

# Nothing compiled here ever runs: LLVM's optimisation passes (a third of the compile time) are
# skipped; the SPMD partitioner and the HLO passes, which catch sharding errors, all run.
os.environ["XLA_FLAGS"] = (
    "--xla_force_host_platform_device_count=64 --xla_backend_optimization_level=0"
)
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import numpy as np  # noqa: E402

from jaxlab.core import recipe as recipe_lib  # noqa: E402
from jaxlab.core import run as run_lib  # noqa: E402
from jaxlab.core import tpu_config  # noqa: E402
from jaxlab.core.lowering import lower_step  # noqa: E402


def lower_file(path: str, compile_it: bool = True) -> str:
    run = tpu_config.load(path, smoke=True)
    recipe = recipe_lib.get(run.recipe)
    devices = jax.devices()[: run.slice.chips]
    mesh = run_lib.mesh_for(run.config, devices)
    assert mesh.devices.size == run.slice.chips
    parts = recipe.parts(run.config, mesh)  # the interface fills in the default state sharding
    state = run_lib.abstract_state(parts, jax.random.PRNGKey(run.config.seed))
    lowered = lower_step(recipe, run.config, mesh, parts=parts, state=state)
    leaves = jax.tree.leaves(state)
    split = [x for x in leaves if x.sharding.shard_shape(x.shape) != tuple(x.shape)]
    # the work really is split over the chips: the batch is sharded, or a state leaf (RL env
    # states, per-seed states, stored pairs), or, for a batch sampled inside the step and
    # constrained over the data axes, the gradients are all-reduced across the chips
    if parts.abstract_batch is not None:
        b = jax.tree.leaves(parts.abstract_batch)[0]
        shard = b.sharding.shard_shape(b.shape)
        assert np.prod(b.shape) // np.prod(shard) > 1, (b.shape, shard)
    # the lowered step names a mesh axis in a sharding or constraint (Shardy: {"data"}, ...;
    # GSPMD: devices=[...]): the work is laid out over the slice before any compilation
    text = lowered.as_text()
    assert re.search(r'\{"(data|fsdp|tensor|expert)"|devices=\[', text), "nothing is sharded"
    if compile_it:
        # data parallelism: gradients (and metrics) are reduced across the chips
        text = lowered.compile().as_text()
        assert "all-reduce" in text or "reduce-scatter" in text, "no cross-chip reduction"
    how = "compiled" if compile_it else "lowered"
    return (
        f"OK {os.path.basename(path)} recipe={recipe.name} devices={run.slice.chips} {how} "
        f"sharded_leaves={len(split)}/{len(leaves)}"
    )


if __name__ == "__main__":
    args = sys.argv[1:]
    cut = args.index("--lower-only") if "--lower-only" in args else len(args)
    for p in args[:cut]:
        print(lower_file(p), flush=True)
    for p in args[cut + 1 :]:
        print(lower_file(p, compile_it=False), flush=True)
