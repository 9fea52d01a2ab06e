"""Wrappers on the tiny point-mass env: episode statistics, the legacy five-value step and the
vectorised helpers (vmap equals a loop of single envs)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab import envs
from jaxlab.envs.wrappers import EpisodeStatistics, LegacyStep, VecEnv, vmap_reset, vmap_step


def _env():
    return envs.make("point-mass", max_steps=3)


def test_episode_statistics_match_a_manual_count():
    env, params = _env()
    w = EpisodeStatistics(env)
    obs, state = w.reset(jax.random.key(0), params)
    step = jax.jit(w.step)
    ret, length, finished = 0.0, 0, []
    for t in range(7):
        obs, state, r, term, trunc, info = step(jax.random.key(t + 1), state, jnp.int32(1), params)
        ret += float(r)
        length += 1
        if bool(term | trunc):
            finished.append((ret, length))
            ret, length = 0.0, 0
            assert bool(info["returned_episode"])
            assert np.isclose(float(info["returned_episode_returns"]), finished[-1][0], atol=1e-6)
            assert int(info["returned_episode_lengths"]) == finished[-1][1]
        assert int(info["timestep"]) == t + 1
    assert [n for _, n in finished] == [3, 3]
    assert np.isclose(float(state.episode_return), ret, atol=1e-6)
    assert int(state.episode_length) == length


def test_episode_statistics_solved_flag_follows_info():
    """Ends at the centre: solved; ends away from it: not solved (the flag follows the final
    step's info["solved"], it is not stuck at either value)."""
    env, params = _env()
    w = EpisodeStatistics(env)

    def episode(x0: float, action: int) -> tuple[bool, bool, bool]:
        _, state = w.reset(jax.random.key(0), params)
        state = state.replace(env_state=state.env_state.replace(x=jnp.float32(x0)))
        for t in range(3):
            _, state, _, _, trunc, info = w.step(
                jax.random.key(t), state, jnp.int32(action), params
            )
        return bool(trunc), bool(info["solved"]), bool(info["returned_episode_solved"])

    assert episode(0.0, 1) == (True, True, True)  # action 1 holds still at the centre
    trunc, solved, flag = episode(0.9, 1)
    assert trunc and not solved and not flag


def test_legacy_step_returns_five_values_with_done_flag():
    env, params = _env()
    legacy = LegacyStep(env)
    obs, state = legacy.reset(jax.random.key(0), params)
    dones = []
    for t in range(3):
        out = legacy.step(jax.random.key(t), state, jnp.int32(1), params)
        assert len(out) == 5
        obs, state, reward, done, info = out
        assert bool(done) == bool(info["terminated"] | info["truncated"])
        dones.append(bool(done))
    assert dones == [False, False, True]


def test_vmap_helpers_equal_a_loop_of_single_envs():
    env, params = _env()
    n = 4
    obs, state = jax.jit(vmap_reset(env, n))(jax.random.key(0), params)
    keys = jax.random.split(jax.random.key(0), n)
    for i in range(n):
        o, s = env.reset(keys[i], params)
        np.testing.assert_allclose(np.asarray(obs[i]), np.asarray(o), rtol=1e-6)
    actions = jnp.arange(n, dtype=jnp.int32) % 3
    out = jax.jit(vmap_step(env, n))(jax.random.key(5), state, actions, params)
    step_keys = jax.random.split(jax.random.key(5), n)
    for i in range(n):
        single = env.step(
            step_keys[i], jax.tree.map(lambda x, i=i: x[i], state), actions[i], params
        )
        for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(out), strict=True):
            np.testing.assert_allclose(np.asarray(b[i]), np.asarray(a), rtol=1e-6)


def test_vec_env_samples_one_action_per_copy_and_forwards_attributes():
    env, params = _env()
    vec = VecEnv(env, 3)
    obs, state = vec.reset(jax.random.key(0), params)
    assert obs.shape == (3, 3)
    acts = vec.sample_actions(jax.random.key(1), params)
    assert acts.shape == (3,)
    obs, state, r, term, trunc, info = vec.step(jax.random.key(2), state, acts, params)
    assert r.shape == (3,) and info["final_observation"].shape == (3, 3)
    assert vec.unwrapped is env and vec.auto_reset is True
