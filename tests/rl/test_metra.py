"""METRA on point-mass-2d: the temporal-distance constraint holds in training (``||phi(s') -
phi(s)|| <= ~1``, the dual variable relaxes), the skills cover more cells than a random and the
zero policy and reach goals zero-shot; the penalty against NumPy; bad configs name the field."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig
from jaxlab.rl.off_policy import OffPolicyConfig
from jaxlab.rl.skills import metra
from jaxlab.rl.skills.evaluate import SkillEvalConfig, make_evaluate
from jaxlab.rl.skills.training import SkillConfig, SkillOptim, make_train, sample_skills

# 8 envs x 400 iterations = 3200 env steps, 20-step skills at 0.2 per step in a 10 x 10 arena.
OFF = OffPolicyConfig(
    env="point-mass-2d", num_envs=8, buffer_size=4000, batch_size=64, learning_starts=10
)
CFG = SkillConfig(skill_dim=2, hidden=(32, 32), tau=0.01)
ADAM = OptimConfig(name="adam", lr=1e-3)
OPTIM = SkillOptim(ADAM, ADAM, ADAM, ADAM, ADAM)
ENV_OPTIONS = {"max_steps": 20, "size": 5.0}
ITERATIONS = 400
EVAL = SkillEvalConfig(num_skills=16, cell=0.5, num_goals=16, goal_radius=0.5)


@pytest.fixture(scope="module")
def trained():
    parts = metra.make_parts(CFG, OFF, OPTIM, env_options=ENV_OPTIONS)
    state, metrics = jax.jit(make_train(parts, ITERATIONS))(jax.random.key(0))
    res = jax.jit(make_evaluate(parts, EVAL, ENV_OPTIONS["max_steps"]))(state, jax.random.key(1))
    return parts, state, jax.device_get(metrics), jax.device_get(res)


def test_constraint_keeps_phi_steps_near_or_below_one(trained):
    _, _, m, _ = trained
    late = slice(-100, None)
    # Per-batch maxima of ||phi(s') - phi(s)||: about 1.1 at most (measured 1.09 on 3 seeds).
    assert np.mean(m["delta_norm_max"][late]) < 1.1, m["delta_norm_max"][late].mean()
    assert np.max(m["delta_norm_max"][late]) < 1.25, m["delta_norm_max"][late].max()
    assert 0.2 < np.mean(m["delta_norm"][late]) <= 1.0
    # The constraint is satisfied on average, so dual descent lowers lambda from 30.
    assert m["dual_lambda"][-1] < CFG.dual_lam_init
    # The reward (phi(s') - phi(s))^T z grows as phi and the policy align with z.
    assert np.mean(m["reward"][late]) > 2 * np.mean(m["reward"][20:60])


def test_skills_cover_more_than_random_and_zero_and_reach_goals(trained):
    _, _, _, res = trained
    assert res["coverage"] > 1.5 * res["coverage_random"] > res["coverage_zero"], res
    assert res["directions"] >= 4 > res["directions_zero"], res  # skills spread (measured 5)
    assert res["goal_success"] >= 0.25, res


def test_penalty_matches_numpy():
    delta = np.array([[0.3, 0.4], [1.0, 1.0], [0.0, 0.01]], np.float32)
    ref = np.minimum(1.0 - (delta**2).sum(-1), 1e-3)
    np.testing.assert_allclose(metra.constraint_penalty(jnp.asarray(delta), 1e-3), ref, rtol=1e-6)
    z = np.asarray(sample_skills(jax.random.key(0), 3, 2))
    obj, pen = metra.metra_objective(jnp.asarray(delta), jnp.asarray(z), jnp.float32(30.0), 1e-3)
    np.testing.assert_allclose(obj, np.mean((delta * z).sum(-1) + 30.0 * ref), rtol=1e-5)
    np.testing.assert_allclose(pen, ref.mean(), rtol=1e-5)


@pytest.mark.parametrize(
    ("cfg", "off", "field"),
    [
        ({"skill_dim": 0}, {}, "skill_dim"),
        ({}, {"buffer_size": 32, "batch_size": 64}, "buffer_size"),
        ({"gamma": 1.0}, {}, "gamma"),
        ({"infonce_coef": -1.0}, {}, "infonce_coef"),
        ({}, {"env": "point-mass"}, "env"),
    ],
)
def test_bad_config_names_the_field(cfg, off, field):
    with pytest.raises(ConfigError, match=field):
        metra.make_parts(dataclasses.replace(CFG, **cfg), dataclasses.replace(OFF, **off), OPTIM)
