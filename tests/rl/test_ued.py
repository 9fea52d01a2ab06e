"""Level curricula: SFL keeps the top-learnability levels and mixes buffer and fresh levels; PLR's
replay distribution, insertion and score updates match hand computations; ACCEL mutates replayed
levels; both run inside PPO on the point mass."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.envs.point_mass import PointMass, PointMassState
from jaxlab.rl import ppo as ppo_mod
from jaxlab.rl.action_heads import head_for_space
from jaxlab.rl.networks import ActorCritic, NetworkConfig
from jaxlab.rl.ppo import OPTIM, PPO, PPOConfig
from jaxlab.rl.ued import (
    REPLAY,
    CurriculumConfig,
    PLRConfig,
    RolloutStats,
    SFLConfig,
    learnability,
    make_curriculum,
    max_returns,
    success_rate,
)

ENV = PointMass()


def sample_level(key):
    return ENV.reset(key)[1]


def test_scores_match_numpy():
    d = jnp.array([[0, 1], [1, 0], [0, 0], [1, 1]], bool)
    s = jnp.array([[0, 1], [0, 0], [0, 0], [1, 0]], bool)
    np.testing.assert_allclose(np.asarray(success_rate(d, s)), [0.5, 0.5])
    p = jnp.asarray([0.0, 0.5, 1.0])
    np.testing.assert_allclose(np.asarray(learnability(p)), [0.0, 0.2505, 0.001], rtol=1e-6)
    r = jnp.array([[1.0, 0.0], [2.0, 1.0], [-1.0, 1.0], [5.0, 1.0]], jnp.float32)
    # env 0: episodes [1, 2] -> 3, then [-1, 5] -> 4; env 1: [0, 1] -> 1, then running 2 (no end)
    d = jnp.array([[0, 0], [1, 1], [0, 0], [1, 0]], bool)
    np.testing.assert_allclose(np.asarray(max_returns(r, d)), [4.0, 1.0])
    np.testing.assert_allclose(np.asarray(max_returns(r, jnp.zeros_like(d))), [7.0, 3.0])


def test_sfl_keeps_top_learnability_and_mixes():
    cfg = CurriculumConfig(
        kind="sfl",
        sfl=SFLConfig(
            update_every=2, batch_size=16, num_batches=2, buffer_size=4, buffer_ratio=0.5
        ),
    )
    cur = make_curriculum(cfg, sample_level, num_envs=8)
    state = cur.init(jax.random.PRNGKey(0))
    seen = []

    def score_fn(key, levels):  # p = |x| / 0.5 in [0, 1]
        seen.append(levels.x.shape)
        return jnp.abs(levels.x) / 0.5

    levels, _, state, m = jax.jit(lambda k, s: cur.next_levels(k, s, jnp.int32(0), score_fn))(
        jax.random.PRNGKey(1), state
    )
    assert seen == [(16,)]
    # the buffer holds the 4 candidates with the highest p(1-p)+0.001p among the 32 scored
    keys = jax.random.split(jax.random.split(jax.random.PRNGKey(1), 3)[0], 2)
    cands = np.concatenate(
        [
            np.asarray(jax.vmap(sample_level)(jax.random.split(jax.random.split(k)[0], 16)).x)
            for k in keys
        ]
    )
    p = np.abs(cands) / 0.5
    want = np.sort(cands[np.argsort(-(p * (1 - p) + 0.001 * p))[:4]])
    np.testing.assert_allclose(np.sort(np.asarray(state.levels.x)), want, rtol=1e-6)
    assert float(m["sfl/buffer_learnability"]) > float(np.mean(p * (1 - p)))
    # half the envs play buffer levels, half fresh ones
    x = np.asarray(levels.x)
    assert np.isin(x[4:], np.asarray(state.levels.x)).all()
    assert not np.isin(x[:4], np.asarray(state.levels.x)).any()
    # no refresh on update 1 (update_every = 2): the buffer is unchanged
    _, _, state2, _ = cur.next_levels(jax.random.PRNGKey(5), state, jnp.int32(1), score_fn)
    np.testing.assert_array_equal(np.asarray(state2.levels.x), np.asarray(state.levels.x))


def _plr(kind="plr", **kw):
    cfg = CurriculumConfig(kind=kind, plr=PLRConfig(buffer_size=3, min_fill=1.0, **kw))
    mutate = (lambda key, lv: lv.replace(x=lv.x + 0.1)) if kind == "accel" else None
    return make_curriculum(cfg, sample_level, num_envs=2, mutate_fn=mutate)


def test_plr_replay_weights():
    cur = _plr(staleness_coef=0.3, temperature=1.0)
    st = cur.init(jax.random.PRNGKey(0)).replace(
        scores=jnp.asarray([3.0, 1.0, 2.0]),
        filled=jnp.asarray([True, True, True]),
        timestamps=jnp.asarray([0, 2, 4]),
        episode_count=jnp.asarray(6),
    )
    h = np.array([1.0, 1 / 3, 1 / 2])
    stale = np.array([6.0, 4.0, 2.0])
    want = 0.7 * h / h.sum() + 0.3 * stale / stale.sum()
    np.testing.assert_allclose(np.asarray(cur.replay_weights(st)), want, rtol=1e-6)
    # unfilled slots get no weight
    st = st.replace(filled=jnp.asarray([True, False, True]))
    w = np.asarray(cur.replay_weights(st))
    assert w[1] == 0.0 and abs(w.sum() - 1.0) < 1e-6


def _stats(values, rewards):
    t = len(values)
    z = jnp.zeros((t, 2))
    return RolloutStats(
        rewards=jnp.asarray(rewards, jnp.float32),
        dones=jnp.zeros((t, 2), bool).at[-1].set(True),
        solved=jnp.zeros((t, 2), bool),
        values=jnp.asarray(values, jnp.float32),
        advantages=z,
    )


def test_plr_insert_and_replay_update():
    cur = _plr()
    st = cur.init(jax.random.PRNGKey(0))
    lv = jax.vmap(sample_level)(jax.random.split(jax.random.PRNGKey(1), 2))
    stats = _stats(values=[[0.0, 0.0], [0.0, 0.0]], rewards=[[0.0, 0.0], [2.0, 1.0]])
    aux = {"branch": jnp.int32(0), "idx": jnp.zeros(2, jnp.int32)}
    st, train, m = cur.observe(jax.random.PRNGKey(2), st, aux, lv, stats)
    assert not bool(train)  # no gradient on fresh levels (robust PLR)
    np.testing.assert_array_equal(np.asarray(st.filled), [True, True, False])
    np.testing.assert_allclose(np.asarray(st.scores)[:2], [2.0, 1.0])  # MaxMC = R_max - mean V
    # full buffer: a better level replaces the worst, a worse one is dropped
    lv2 = jax.vmap(sample_level)(jax.random.split(jax.random.PRNGKey(3), 2))
    stats2 = _stats(values=[[0.0, 0.0], [0.0, 0.0]], rewards=[[0.0, 0.0], [5.0, 0.5]])
    st = st.replace(filled=jnp.asarray([True, True, True]), scores=jnp.asarray([2.0, 1.0, 0.7]))
    st, _, _ = cur.observe(jax.random.PRNGKey(4), st, aux, lv2, stats2)
    np.testing.assert_allclose(np.asarray(st.scores), [2.0, 1.0, 5.0])
    assert float(st.levels.x[2]) == float(lv2.x[0])
    # a replay update rewrites the scores of the replayed slots and trains
    aux = {"branch": jnp.int32(REPLAY), "idx": jnp.asarray([0, 2])}
    stats3 = _stats(values=[[1.0, 1.0], [1.0, 1.0]], rewards=[[0.0, 0.0], [1.0, 1.0]])
    st, train, _ = cur.observe(jax.random.PRNGKey(5), st, aux, lv2, stats3)
    assert bool(train)
    # R_max is the max of the stored (2, 5) and new (1) returns, minus mean V = 1
    np.testing.assert_allclose(np.asarray(st.scores), [1.0, 1.0, 4.0])
    assert int(st.last_branch) == REPLAY


def test_accel_mutates_after_replay():
    cur = _plr(kind="accel", num_edits=3)
    st = cur.init(jax.random.PRNGKey(0))
    parents = jax.vmap(sample_level)(jax.random.split(jax.random.PRNGKey(1), 2))
    st = st.replace(last_branch=jnp.int32(REPLAY), last_replay=parents)
    levels, aux, st, m = cur.next_levels(jax.random.PRNGKey(2), st, jnp.int32(3), None)
    assert int(aux["branch"]) == 2 and float(m["plr/mutate"]) == 1.0
    np.testing.assert_allclose(np.asarray(levels.x), np.asarray(parents.x) + 0.3, rtol=1e-5)


def test_accel_needs_mutator():
    with pytest.raises(ValueError, match="mutate_fn"):
        make_curriculum(CurriculumConfig(kind="accel"), sample_level, 2)


@pytest.mark.parametrize("kind", ["sfl", "plr"])
def test_curriculum_inside_ppo(kind):
    cfg = PPOConfig(num_envs=8, num_steps=20, update_epochs=1, num_minibatches=2)
    optim = dataclasses.replace(OPTIM, lr=1e-3)
    cur_cfg = CurriculumConfig(
        kind=kind,
        sfl=SFLConfig(update_every=2, batch_size=8, num_batches=1, rollout_steps=20, buffer_size=4),
        plr=PLRConfig(buffer_size=16, min_fill=0.5, replay_prob=0.5),
    )
    net = ActorCritic(
        NetworkConfig(kind="mlp", width=8, actor_depth=1, critic_depth=1),
        head_for_space(ENV.action_space()),
    )
    cur = make_curriculum(cur_cfg, sample_level, cfg.num_envs)
    ppo = PPO(cfg, ENV, ENV.default_params, net, optim=optim, num_updates=6, curriculum=cur)
    state, m = jax.jit(functools.partial(ppo_mod.train, ppo))(jax.random.PRNGKey(0))
    assert np.all(np.isfinite(np.asarray(m["loss"])))
    assert isinstance(state.levels, PointMassState) and state.levels.x.shape == (8,)
    if kind == "sfl":
        # the last update trained on buffer_ratio * num_envs = 4 levels drawn from the buffer it
        # kept (refreshed at update 4, update_every=2) and 4 fresh ones (sampled x is continuous,
        # so a fresh level equals no buffer level)
        buf = np.asarray(state.curriculum.levels.x)
        x = np.asarray(state.levels.x)
        assert np.isin(x[4:], buf).all() and not np.isin(x[:4], buf).any()
        # the stored scores are the learnability p(1-p) + 0.001 p of the stored success rates
        succ = np.asarray(state.curriculum.success)
        np.testing.assert_allclose(
            np.asarray(state.curriculum.scores), succ * (1 - succ) + 0.001 * succ, rtol=1e-5
        )
    else:
        assert int(np.sum(np.asarray(state.curriculum.filled))) >= 8
        # replays happen once half the buffer is filled, and only replays train
        rep = np.asarray(m["plr/replay"])
        assert rep.sum() >= 1
        assert np.all((np.asarray(m["grad_norm"]) > 0) == (rep > 0))
