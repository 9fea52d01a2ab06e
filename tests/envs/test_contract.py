"""The env contract, on every registered env (parametrised over ``jaxlab.envs.names()``).

For each env (built with its registry ``test_options``), a batch of ``B`` episodes of ``T``
steps runs through one jitted, vmapped ``lax.scan`` program. Checks:

* jit + vmap equals a plain Python loop of eager ``step`` calls per env. An eager Kinetix step
  compiles its physics substep like a jitted one (as expensive as the jit itself), so this runs
  on the point mass and the S-sized Kinetix env; M and L run the same code at other sizes, and
  ``kinetix-level`` on the demo S level is an env equal to ``kinetix-s``;
* vmap equals a loop, on every env: each row of the batched program depends only on its own
  inputs (permuting the batch permutes the results; a batch of copies of row ``b`` reproduces
  row ``b``), within the one compiled program;
* determinism: the same keys give bit-identical results, fresh resets with one key agree;
* auto-reset: after ``terminated | truncated`` the returned state/observation are a fresh
  episode's and ``info["final_observation"]`` is the pre-reset one (else equal to ``obs``);
  ``terminated`` and ``truncated`` are never both true;
* spaces: every observation and the sampled actions are contained in their spaces; a value
  outside the space is not.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import envs
from tests.envs.env_probes import B, T, probe, tree_allclose

NAMES = envs.names()
EAGER_CHECKED = [
    n for n in NAMES if n in ("point-mass", "point-mass-2d", "point-maze", "kinetix-s")
]


def test_kinetix_level_is_the_eager_checked_kinetix_s_env():
    """``kinetix-level`` on the demo S level is the same env as ``kinetix-s`` (equal
    configuration, one compiled program), so the eager comparison of ``kinetix-s`` covers it;
    its reset and rollout still go through every other contract check."""
    assert probe("kinetix-level").env == probe("kinetix-s").env


@pytest.fixture(scope="module", params=NAMES)
def run(request):
    p = probe(request.param)
    obs0, states = p.reset_batch(seed=0)
    actions = p.actions(seed=1)
    keys = p.step_keys(seed=2)
    out = p.rollout(states, actions, keys)
    return p, obs0, states, actions, keys, out


def _row(tree, b, t=None):
    return jax.tree.map(lambda x: x[b] if t is None else x[b, t], tree)


def test_registry_lists_the_kinetix_sizes_and_a_tiny_env():
    for name in ("kinetix-s", "kinetix-m", "kinetix-l", "kinetix-level", "point-mass"):
        assert name in NAMES


@pytest.mark.parametrize("name", EAGER_CHECKED)
def test_jit_vmap_equals_eager_loop(name):
    p = probe(name)
    obs0, states = p.reset_batch(seed=0)
    actions, keys = p.actions(seed=1), p.step_keys(seed=2)
    out = p.rollout(states, actions, keys)
    reset_keys = jax.random.split(jax.random.key(0), B)
    for b in range(B):
        eager = p.env.reset(reset_keys[b], p.params)
        assert tree_allclose(eager, _row((obs0, states), b), rtol=1e-6, atol=1e-6)
    for b in range(B):
        s = _row(states, b)
        for t in range(T):
            obs, s, r, term, trunc, info = p.env.step(keys[b, t], s, _row(actions, b, t), p.params)
            want = (obs, s, r, term, trunc, info)
            got = _row(out, b, t)
            assert tree_allclose(got, want, rtol=1e-4, atol=1e-4), (p.name, b, t)


def test_vmap_rows_are_independent(run):
    p, _, states, actions, keys, out = run
    host = jax.device_get(out)

    def take(tree, idx):
        idx = np.asarray(idx)
        return jax.tree.map(lambda x: x[idx], tree)

    flipped = p.rollout(*take((states, actions, keys), [1, 0]))
    assert tree_allclose(flipped, take(host, [1, 0]), rtol=1e-6, atol=1e-6)
    for b in range(B):
        again = jax.device_get(p.rollout(*take((states, actions, keys), [b] * B)))
        for c in range(B):
            assert tree_allclose(_row(again, c), _row(host, b), rtol=1e-6, atol=1e-6), (b, c)


def test_deterministic_under_fixed_keys(run):
    p, obs0, states, actions, keys, out = run
    again = p.rollout(states, actions, keys)
    for x, y in zip(jax.tree.leaves(out), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    obs_a, state_a = p.reset(jax.random.key(7), p.params)
    obs_b, state_b = p.reset(jax.random.key(7), p.params)
    assert tree_allclose((obs_a, state_a), (obs_b, state_b), rtol=0, atol=0)


def test_auto_reset_semantics(run):
    p, obs0, states, actions, keys, out = run
    obs, st, reward, term, trunc, info = out
    term, trunc = np.asarray(term), np.asarray(trunc)
    assert not np.any(term & trunc)
    done = term | trunc
    assert done.any(), f"{p.name}: the test options must end an episode within {T} steps"
    assert reward.dtype == jnp.float32 and term.dtype == bool and trunc.dtype == bool
    for b in range(B):
        for t in range(T):
            o, fo = _row(obs, b, t), _row(info["final_observation"], b, t)
            if not done[b, t]:
                assert tree_allclose(o, fo, rtol=0, atol=0)
                continue
            # A fresh episode: the observation is that of the reset state, which is a valid
            # reset (fixed-level envs: exactly the initial observation of the episode).
            s = _row(st, b, t)
            assert tree_allclose(o, p.get_obs(s, p.params), rtol=1e-5, atol=1e-5)
            if hasattr(s, "timestep"):
                assert int(s.timestep) == 0 and float(s.last_distance) == -1.0
                assert tree_allclose(o, _row(obs0, b), rtol=1e-5, atol=1e-5)
            else:
                assert int(s.t) == 0
            assert not tree_allclose(o, fo, rtol=0, atol=0)


def test_spaces_contain_what_the_env_emits(run):
    p, obs0, states, actions, keys, out = run
    obs_space = p.env.observation_space(p.params)
    act_space = p.env.action_space(p.params)
    contains_obs = jax.vmap(jax.vmap(obs_space.contains))
    assert bool(jnp.all(contains_obs(out[0])))
    assert bool(jnp.all(contains_obs(out[5]["final_observation"])))
    assert bool(jnp.all(jax.vmap(obs_space.contains)(obs0)))
    assert bool(jnp.all(jax.vmap(jax.vmap(act_space.contains))(actions)))
    # Something outside the space is rejected.
    bad_obs = jax.tree.map(lambda x: x.astype(jnp.float32) * 0 + jnp.nan, _row(obs0, 0))
    assert not bool(obs_space.contains(bad_obs))
    sample = act_space.sample(jax.random.key(3))
    too_big = jax.tree.map(lambda x: x + 100, sample)
    assert not bool(act_space.contains(too_big))


def test_rewards_are_finite(run):
    p, obs0, states, actions, keys, out = run
    assert np.all(np.isfinite(np.asarray(out[2])))
