"""kinetix-ppo on a data-sharded mesh equals one device.

Kept out of ``test_kinetix_ppo.py`` on purpose: that module turns on JAX's persistent compilation
cache, and writing this test's 4-device executables into it crashed an xdist worker once
(segfault inside ``compilation_cache.put_executable_and_time``); nothing here reuses a program,
so the cache buys nothing.
"""

from jaxlab.core import recipe as recipe_lib
from jaxlab.core.testing import sharded_step_matches

RECIPE = recipe_lib.get("kinetix-ppo")


def test_data_sharded_updates_equal_one_device():
    """Two PPO updates with the envs split over 4 simulated devices (``shard_map`` over ``data``)
    equal the same updates on one device: metrics, parameters, Adam moments, env states, keys.
    ``ppo.shard_invariant`` keys each env's randomness by its global index, averages the
    advantage statistics over devices and stratifies minibatches per env (an MLP on flat
    observations keeps the compile short; the sharding is the transformer's too)."""
    cfg = RECIPE.config(
        "tiny",
        [
            "ppo.shard_invariant=true",
            "network.kind=mlp",
            "env.observation_type=symbolic_flat",
            "network.width=16",
        ],
    )
    single, sharded = sharded_step_matches(RECIPE, cfg, {"mesh.data": 4}, steps=2)
    assert int(single.update) == int(sharded.update) == 2
