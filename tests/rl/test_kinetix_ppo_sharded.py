"""kinetix-ppo on a data-sharded mesh equals one device.

A module of its own: the 4-device program shares nothing with ``test_kinetix_ppo.py``'s tiny
run (an MLP on flat observations, not the tiny preset's transformer), and under ``--dist
loadfile`` xdist can give the two compile-heavy modules to different workers.
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
