"""SAC on point-mass-2d: learning to reach a fixed goal, seeds vmapped, bad config."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig
from jaxlab.rl.off_policy import OffPolicyConfig
from jaxlab.rl.sac import SACConfig, SACOptim, make_train

# Episodes of 20 steps from near the origin to the goal (0.5, 0.5) at 0.2 per step and axis.
# A uniformly random policy scores about -14 (measured: the warm-up episodes below); reaching
# the goal in 3 steps and staying scores about -0.6. 4 envs x 2500 iterations = 10k env steps.
OFF = OffPolicyConfig(
    env="point-mass-2d", num_envs=4, buffer_size=10_000, batch_size=64, learning_starts=25
)
CFG = SACConfig(hidden=(64, 64), gamma=0.9, tau=0.01, init_alpha=0.1)
ADAM = OptimConfig(name="adam", lr=1e-3)
OPTIM = SACOptim(actor=ADAM, critic=ADAM, alpha=ADAM)
ENV_OPTIONS = {"max_steps": 20, "goal": (0.5, 0.5)}
ITERATIONS = 2500
THRESHOLD = -2.0


@pytest.fixture(scope="module")
def trained():
    keys = jax.random.split(jax.random.key(0), 2)
    state, metrics = jax.jit(jax.vmap(make_train(CFG, OFF, OPTIM, ITERATIONS, ENV_OPTIONS)))(keys)
    return state, jax.device_get(metrics)


def test_sac_reaches_the_goal_for_every_seed(trained):
    _, m = trained
    ret = np.asarray(m["episode_return"])  # [seed, iteration]: mean of each env's last episode
    warm = ret[:, OFF.learning_starts - 1]  # the first episodes (uniform random actions)
    assert np.all(warm < -8.0), warm
    assert np.all(ret[:, -1] > THRESHOLD), ret[:, -1]
    assert not np.any(np.asarray(m["learning"])[:, : OFF.learning_starts])
    assert np.all(np.asarray(m["learning"])[:, -1])
    assert np.all(np.isfinite(np.asarray(m["critic_loss"])))
    # Automatic temperature: the entropy is driven towards -dim(A) = -2 and alpha shrinks.
    assert np.all(np.asarray(m["alpha"])[:, -1] < CFG.init_alpha)


def test_seeds_differ_and_targets_trail_the_critics(trained):
    state, _ = trained
    a = jax.tree.leaves(state.actor)[0]
    assert not np.allclose(a[0], a[1])
    c, t = jax.tree.leaves(state.critic)[0], jax.tree.leaves(state.target_critic)[0]
    assert not np.array_equal(c, t) and np.allclose(c, t, atol=0.5)


@pytest.mark.parametrize(
    ("cfg", "off", "field"),
    [
        ({}, {"buffer_size": 32, "batch_size": 64}, "buffer_size"),
        ({}, {"num_envs": 0}, "num_envs"),
        ({"tau": 0.0}, {}, "tau"),
        ({}, {"env": "point-mass"}, "env"),
    ],
)
def test_bad_config_names_the_field(cfg, off, field):
    import dataclasses

    with pytest.raises(ConfigError, match=field):
        make_train(
            dataclasses.replace(CFG, **cfg), dataclasses.replace(OFF, **off), OPTIM, ITERATIONS
        )
