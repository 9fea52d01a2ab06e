"""game24: rules, the exhaustive oracle (against the stored solvable pool), oracle demonstrations
and bad instances."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.envs import demonstrations, game24, make


def action(i, op, j):
    pair = [tuple(p) for p in game24.PAIRS].index((i, j))
    return jnp.int32(pair * game24.NUM_OPS + "+-*/".index(op))


def test_a_known_solution_reaches_24_with_reward_1():
    env, params = make("game24", instances=[[3, 3, 8, 8]])
    _, s = env.reset(jax.random.key(0), params)
    # 8 / (3 - 8 / 3) = 24

    def body(s, a):
        _, s, r, term, trunc, _ = env.step_env(jax.random.key(0), s, a, params)
        return s, (r, term, trunc)

    acts = jnp.array([action(2, "/", 0), action(1, "-", 2), action(3, "/", 1)])
    s, (r, term, trunc) = jax.jit(lambda s: jax.lax.scan(body, s, acts))(s)
    assert np.asarray(r).tolist() == [0.0, 0.0, 1.0]
    assert np.asarray(term).tolist() == [False, False, True] and not np.asarray(trunc).any()
    assert int(s.alive.sum()) == 1


def test_invalid_actions_terminate_without_reward():
    env, params = make("game24", instances=[[1, 2, 3, 4]])
    _, s = env.reset(jax.random.key(0), params)
    _, s, r, term, _, info = env.step_env(jax.random.key(0), s, action(0, "-", 0 + 0 + 1), params)
    assert not bool(term) and float(r) == 0.0  # 1 - 2: valid
    # slot 1 is dead now: using it is invalid
    _, _, r, term, _, info = env.step_env(jax.random.key(0), s, action(2, "+", 1), params)
    assert bool(term) and float(r) == 0.0 and bool(info["invalid"])
    # division by zero is invalid
    z = game24.Game24State(jnp.array([5.0, 0.0, 3.0, 4.0]), jnp.ones(4, bool), jnp.int32(0))
    _, _, valid = game24.apply_action(z.numbers, z.alive, action(0, "/", 1))
    assert not bool(valid)


def test_oracle_agrees_with_the_stored_pool_on_a_sample():
    allm = game24.all_multisets()
    pool = {tuple(x) for x in game24.solvable_instances()}
    assert len(allm) == 1820 and len(pool) == 1362
    rng = np.random.default_rng(0)
    sample = allm[rng.choice(len(allm), 24, replace=False)]
    got = np.asarray(game24._solvable_batch(jnp.asarray(sample)))
    want = np.array([tuple(x) in pool for x in sample])
    assert 0 < want.sum() < len(want)
    np.testing.assert_array_equal(got, want)


def test_stored_solutions_replayed_as_demonstrations_reach_24():
    inst, sol = game24.solvable_instances(), game24.stored_solutions()
    env, params = make("game24", auto_reset=False)
    starts = jax.vmap(env.init_state)(jnp.asarray(inst))
    demo = jax.jit(
        lambda k: demonstrations.replay_demonstrations(
            k, env, params, starts, jnp.asarray(sol), num_episodes=256
        )
    )(jax.random.key(0))
    np.testing.assert_array_equal(np.asarray(demo.reward.sum(1)), np.ones(256))
    assert bool(demo.mask.all()) and bool(demo.terminated[:, -1].all())


@pytest.mark.parametrize("bad", [[[1, 2, 3, 14]], [[0, 2, 3, 4]], [[1, 2, 3]], []])
def test_bad_instances_name_the_field(bad):
    with pytest.raises(ConfigError) as e:
        make("game24", instances=bad)
    assert e.value.key == "instances"
