"""PPO: GAE against a NumPy loop, the clipped loss's gradients, learning on the point mass (and
not learning with the advantage sign flipped), and vmap-over-seeds equal to separate runs."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.envs.base import Environment
from jaxlab.envs.point_mass import PointMass
from jaxlab.envs.spaces import Box, Discrete
from jaxlab.rl import ppo as ppo_mod
from jaxlab.rl.action_heads import head_for_space
from jaxlab.rl.networks import ActorCritic, NetworkConfig
from jaxlab.rl.ppo import PPO, PPOConfig, compute_gae, ppo_loss
from jaxlab.rl.ppo import run as ppo_run

ENV = PointMass()
PARAMS = ENV.default_params
CFG = PPOConfig(
    num_envs=32,
    num_steps=20,
    update_epochs=4,
    num_minibatches=4,
    gamma=0.99,
    gae_lambda=0.95,
    ent_coef=0.0,
)
OPTIM = dataclasses.replace(ppo_mod.OPTIM, lr=3e-3)
NET = ActorCritic(
    NetworkConfig(kind="mlp", width=32, actor_depth=2, critic_depth=2),
    head_for_space(ENV.action_space(PARAMS)),
)
UPDATES = 30


def gae_numpy(r, v, d, last, gamma, lam):
    T = r.shape[0]
    adv = np.zeros_like(r)
    gae = np.zeros_like(last)
    for t in reversed(range(T)):
        nv = last if t == T - 1 else v[t + 1]
        live = 1.0 - d[t]
        delta = r[t] + gamma * nv * live - v[t]
        gae = delta + gamma * lam * live * gae
        adv[t] = gae
    return adv, adv + v


def test_gae_matches_numpy_loop():
    rng = np.random.default_rng(0)
    r, v = rng.normal(size=(2, 7, 3)).astype(np.float32)
    d = rng.random((7, 3)) < 0.3
    last = rng.normal(size=3).astype(np.float32)
    adv, ret = jax.jit(compute_gae, static_argnums=(4, 5))(r, v, d, last, 0.9, 0.8)
    want_adv, want_ret = gae_numpy(r, v, d.astype(np.float32), last, 0.9, 0.8)
    np.testing.assert_allclose(np.asarray(adv), want_adv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(ret), want_ret, rtol=1e-5, atol=1e-6)


def test_clipped_surrogate_gradient():
    """Ratio above 1 + eps with A > 0 (or below 1 - eps with A < 0): zero policy gradient;
    inside the clip range the gradient wrt log pi is -A / B."""
    import distrax

    cfg = PPOConfig(
        num_envs=1,
        num_steps=4,
        num_minibatches=1,
        normalize_advantages=False,
        ent_coef=0.0,
        vf_coef=0.0,
    )
    old = jnp.log(jnp.asarray([0.5, 0.5, 0.5, 0.5]))
    adv = jnp.asarray([1.0, 1.0, -1.0, -1.0])
    batch = {
        "action": jnp.zeros(4, jnp.int32),
        "log_prob": old,
        "advantage": adv,
        "target": jnp.zeros(4),
        "value": jnp.zeros(4),
    }

    def loss(logp0):
        logits = jnp.stack([logp0, jnp.log1p(-jnp.exp(logp0))], axis=-1)
        return ppo_loss(distrax.Categorical(logits=logits), jnp.zeros(4), batch, cfg)[0]

    new = jnp.log(jnp.asarray([0.7, 0.55, 0.3, 0.45]))  # ratios 1.4, 1.1, 0.6, 0.9
    g = np.asarray(jax.grad(loss)(new))
    assert g[0] == 0.0 and g[2] == 0.0
    assert g[1] < 0 and g[3] > 0  # raise pi for A > 0, lower it for A < 0


def test_config_validation():
    with pytest.raises(ConfigError, match="num_minibatches"):
        PPOConfig(num_envs=3, num_steps=5, num_minibatches=4)
    with pytest.raises(ConfigError, match="gamma"):
        PPOConfig(gamma=1.5)


def _train(seed=0):
    ppo = PPO(CFG, ENV, PARAMS, NET, optim=OPTIM, num_updates=UPDATES)
    return jax.jit(functools.partial(ppo_mod.train, ppo))(jax.random.PRNGKey(seed))


@pytest.fixture(scope="module")
def trained():
    return _train()


def test_learns_point_mass(trained):
    """Random play survives with |x| < 0.1 in ~3% of episodes; after 30 updates (19k steps) the
    last 5 updates must solve >= 80% and the return must rise well above its starting value."""
    _, m = trained
    solve, ret = np.asarray(m["solve_rate"]), np.asarray(m["episode_return"])
    assert solve[:2].mean() < 0.2, solve
    assert solve[-5:].mean() >= 0.8, solve
    assert ret[-5:].mean() > ret[:2].mean() + 1.0, ret
    assert np.all(np.isfinite(np.asarray(m["loss"])))


def test_flipped_advantage_does_not_learn(monkeypatch):
    """The same run with the advantage sign flipped must fail the learning criterion."""
    orig = ppo_mod.compute_gae

    def flipped(*args, **kw):
        adv, ret = orig(*args, **kw)
        return -adv, ret

    monkeypatch.setattr(ppo_run, "compute_gae", flipped)
    _, m = _train()
    assert np.asarray(m["solve_rate"])[-5:].mean() < 0.5


def test_vmap_over_seeds_equals_separate_runs(trained):
    """Seed 0 of a vmapped run follows the separate run (RL amplifies float round-off, so the
    first 8 updates are compared tightly), seed 1 differs, and both seeds learn."""
    ppo = PPO(CFG, ENV, PARAMS, NET, optim=OPTIM, num_updates=UPDATES)
    keys = jnp.stack([jax.random.PRNGKey(0), jax.random.PRNGKey(1)])
    _, metrics = jax.jit(jax.vmap(functools.partial(ppo_mod.train, ppo)))(keys)
    _, m0 = trained
    ret = np.asarray(metrics["episode_return"])
    np.testing.assert_allclose(ret[0, :8], np.asarray(m0["episode_return"])[:8], rtol=1e-5)
    assert not np.allclose(ret[0, :8], ret[1, :8])
    # both seeds learn (random play solves ~3%; seed 1 reaches ~0.78 where seed 0 reaches 0.8+)
    assert np.asarray(metrics["solve_rate"])[:, -5:].mean(axis=1).min() >= 0.6


class Bandit(Environment):
    """One-step continuous bandit: observe a target ``c`` in [-0.8, 0.8] (scaled by 10), act
    ``a`` in [-1, 1], reward ``-(a - c)^2``. Tests the Gaussian head and obs normalisation."""

    @property
    def default_params(self):
        return ()

    def get_obs(self, state, params=None):
        return jnp.stack([state * 10.0, jnp.float32(3.0)])

    def reset_env(self, key, params):
        c = jax.random.uniform(key, (), minval=-0.8, maxval=0.8)
        return self.get_obs(c), c

    def step_env(self, key, state, action, params):
        reward = -jnp.square(jnp.clip(action[0], -1, 1) - state)
        t = jnp.asarray(True)
        return self.get_obs(state), state, reward, t, ~t, {"solved": reward > -0.01}

    def action_space(self, params=None):
        return Box(-1.0, 1.0, (1,))

    def observation_space(self, params=None):
        return Box(-10.0, 10.0, (2,))


def test_continuous_head_with_obs_normalisation_learns():
    env = Bandit()
    cfg = PPOConfig(
        num_envs=64,
        num_steps=4,
        update_epochs=4,
        num_minibatches=4,
        ent_coef=0.0,
        normalize_obs=True,
        gamma=0.0,
    )
    net = ActorCritic(
        NetworkConfig(kind="mlp", width=32, actor_depth=1, critic_depth=1),
        head_for_space(env.action_space()),
    )
    ppo = PPO(cfg, env, (), net, optim=OPTIM, num_updates=40)
    state, m = jax.jit(functools.partial(ppo_mod.train, ppo))(jax.random.PRNGKey(0))
    r = np.asarray(m["episode_return"])
    assert r[-5:].mean() > 0.5 * r[:2].mean()  # squared error at least halved
    # running statistics: the target feature has mean ~0 and std ~10 * 0.8 / sqrt(3)
    mean, var = np.asarray(state.obs_stats.mean), np.asarray(state.obs_stats.var)
    assert abs(mean[0]) < 0.5 and abs(np.sqrt(var[0]) - 8 / np.sqrt(3)) < 0.5
    assert abs(mean[1] - 3.0) < 1e-3 and var[1] < 1e-3


def test_running_stats_match_numpy():
    from jaxlab.rl import normalization as norm

    rng = np.random.default_rng(0)
    a, b = rng.normal(2.0, 3.0, size=(2, 50, 4, 3)).astype(np.float32)
    obs = {"f": a[0, 0], "mask": np.ones(4, bool)}
    stats = norm.init_stats(obs)
    assert stats.mean["mask"] is None
    for batch in (a, b):
        stats = norm.update_stats(stats, {"f": batch, "mask": np.ones((50, 4), bool)})
    pooled = np.concatenate([a, b]).reshape(-1, 3)
    np.testing.assert_allclose(np.asarray(stats.mean["f"]), pooled.mean(0), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(np.asarray(stats.var["f"]), pooled.var(0), rtol=1e-3)
    out = norm.normalise(stats, {"f": a, "mask": np.ones((50, 4), bool)})
    assert out["mask"].dtype == bool
    assert abs(float(np.asarray(out["f"]).mean())) < 0.1


def test_gradient_chunks_give_the_minibatch_gradient():
    """One update with each minibatch's gradient accumulated over 4 chunks equals the one-pass
    update: same parameters, losses and gradient norms up to round-off (a chunk that normalised
    its own advantages or a sum instead of a mean would move them by percents)."""

    def one_update(chunks):
        cfg = dataclasses.replace(CFG, grad_chunks=chunks)
        ppo = PPO(cfg, ENV, PARAMS, NET, optim=OPTIM, num_updates=UPDATES)
        state = ppo_mod.init(ppo, jax.random.PRNGKey(3))
        return jax.jit(functools.partial(ppo_mod.update, ppo))(state)

    (s1, m1), (s4, m4) = one_update(1), one_update(4)
    for a, b in zip(jax.tree.leaves(s1.params), jax.tree.leaves(s4.params), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
    for k in ("loss", "grad_norm", "approx_kl", "entropy"):
        np.testing.assert_allclose(float(m1[k]), float(m4[k]), rtol=1e-4, atol=1e-7)
    with pytest.raises(ConfigError, match="grad_chunks"):
        PPOConfig(num_envs=32, num_steps=20, num_minibatches=4, grad_chunks=3)


def test_traced_hyperparameters_are_read_in_the_compiled_update():
    """The learning rate, clip range and loss coefficients live in ``state.hparams`` (valued from
    the configs) and are read inside the compiled update: one compiled update with ``optim.lr =
    0`` leaves the parameters unchanged, with the config's rate it moves them, a traced
    ``ppo.vf_coef`` changes the loss, and a vmap over two learning rates equals the two updates."""
    ppo = PPO(CFG, ENV, PARAMS, NET, optim=OPTIM, num_updates=1)
    state = jax.jit(functools.partial(ppo_mod.init, ppo))(jax.random.PRNGKey(0))
    assert set(state.hparams) == set(ppo_mod.TRACED)
    np.testing.assert_allclose(float(state.hparams["optim.lr"]), OPTIM.lr, rtol=1e-7)
    traces = []

    def update(s):
        traces.append(1)
        return ppo_mod.update(ppo, s)

    step = jax.jit(update)
    key = lambda k: "optim.lr" if k == "lr" else f"ppo.{k}"
    with_hp = lambda **kw: state.replace(
        hparams={**state.hparams, **{key(k): jnp.float32(v) for k, v in kw.items()}}
    )
    frozen, _ = step(with_hp(lr=0.0))
    moved, m = step(state)
    _, m_vf = step(with_hp(vf_coef=0.0))
    assert len(traces) == 1  # one program for every value
    leaves = lambda s: [np.asarray(x) for x in jax.tree.leaves(s.params)]
    for a, b in zip(leaves(frozen), leaves(state), strict=True):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(leaves(moved), leaves(state), strict=True))
    assert float(m_vf["loss"]) != float(m["loss"])
    pair = jax.tree.map(lambda a, b: jnp.stack([a, b]), with_hp(lr=0.0), state)
    both, _ = jax.jit(jax.vmap(functools.partial(ppo_mod.update, ppo)))(pair)
    for a, b in zip(
        leaves(moved), [np.asarray(x)[1] for x in jax.tree.leaves(both.params)], strict=True
    ):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    for a, b in zip(
        leaves(state), [np.asarray(x)[0] for x in jax.tree.leaves(both.params)], strict=True
    ):
        np.testing.assert_array_equal(b, a)


def test_value_loss_clipping():
    """clip_value (on by default): L_V = 0.5 mean max((V - G)^2, (V_old + clip(V - V_old, ±eps)
    - G)^2); a value that jumped past the clip range keeps the clipped (larger) error, so its
    gradient is zero; without clipping it is the plain squared error."""
    import distrax

    batch = {
        "action": jnp.zeros(3, jnp.int32),
        "log_prob": jnp.log(jnp.full(3, 0.5)),
        "advantage": jnp.zeros(3),
        "target": jnp.asarray([1.0, 1.0, 0.0]),
        "value": jnp.asarray([0.0, 0.0, 0.0]),  # old values
    }
    pi = distrax.Categorical(logits=jnp.zeros((3, 2)))
    value = jnp.asarray([0.1, 0.9, -0.5])  # inside the range; past it towards G; past it away
    base = dict(
        num_envs=1,
        num_steps=3,
        num_minibatches=1,
        normalize_advantages=False,
        ent_coef=0.0,
        clip_eps=0.2,
    )
    for clip in (True, False):
        cfg = PPOConfig(**base, clip_value=clip)

        def v_loss(v, cfg=cfg):
            return ppo_loss(pi, v, batch, cfg)[1]["value_loss"]

        unclipped = (value - batch["target"]) ** 2
        clipped = (jnp.clip(value, -0.2, 0.2) - batch["target"]) ** 2
        want = 0.5 * jnp.mean(jnp.maximum(unclipped, clipped) if clip else unclipped)
        assert float(v_loss(value)) == pytest.approx(float(want), rel=1e-6)
        g = np.asarray(jax.grad(v_loss)(value))
        if clip:
            # 0.9 moved past +0.2 towards G = 1: the clipped error (0.64) is the larger, no gradient
            assert g[1] == 0.0 and g[0] != 0.0 and g[2] != 0.0
        else:
            np.testing.assert_allclose(g, (value - batch["target"]) / 3, rtol=1e-6)


def test_linear_schedule_anneals_to_zero_per_optimiser_step():
    """optim.schedule=linear: the Adam step of a constant gradient is -lr (1 - t / (updates x
    epochs x minibatches)) at every optimiser step t; with the constant schedule, -lr throughout."""
    cfg = PPOConfig(num_envs=4, num_steps=4, update_epochs=2, num_minibatches=2)
    total = 5 * 2 * 2
    assert ppo_mod.optimizer_steps(cfg, 5) == total
    p = {"w": jnp.zeros(1)}
    for anneal in (True, False):
        optim = dataclasses.replace(
            ppo_mod.OPTIM, lr=1e-2, clip_norm=1e6, schedule="linear" if anneal else "constant"
        )
        opt = ppo_mod.make_optimizer(cfg, optim, 5)
        state = opt.init(p)
        for t in (0, 1, 5, 10, 19):
            while True:
                upd, state = opt.update({"w": jnp.ones(1)}, state, p)
                done = int(state[1][0].count) - 1  # the step just taken
                if done >= t:
                    break
            want = -1e-2 * (1 - t / total) if anneal else -1e-2
            assert float(upd["w"][0]) == pytest.approx(want, rel=1e-4, abs=1e-9), (anneal, t)


class Timer(Environment):
    """Episodes of exactly 3 steps with reward 1; each episode draws (at reset) whether it ends
    by a time limit (truncated, ``kind = 1``) or in a terminal state (terminated, ``kind = 0``).
    Observation ``[t, kind]``, so the final observation of every episode is ``[3, kind]``."""

    @property
    def default_params(self):
        return ()

    def get_obs(self, state, params=None):
        t, kind = state
        return jnp.stack([t.astype(jnp.float32), kind.astype(jnp.float32)])

    def reset_env(self, key, params):
        state = (jnp.int32(0), jax.random.bernoulli(key).astype(jnp.int32))
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        t, kind = state
        new = (t + 1, kind)
        end = new[0] >= 3
        term, trunc = end & (kind == 0), end & (kind == 1)
        return self.get_obs(new), new, jnp.float32(1.0), term, trunc, {"solved": term}

    def action_space(self, params=None):
        return Discrete(2)

    def observation_space(self, params=None):
        return Box(0.0, 3.0, (2,))


def test_bootstrap_truncation_adds_the_final_value_only_to_truncated_steps():
    """bootstrap_truncation: a truncated step's reward becomes ``r + gamma V(s_final)``; a
    terminated step keeps ``r`` (no bootstrap from a terminal state); without the option both are
    treated as episode ends with plain ``r``."""
    env = Timer()
    net = ActorCritic(
        NetworkConfig(kind="mlp", width=8, actor_depth=1, critic_depth=1),
        head_for_space(env.action_space()),
    )
    trajs = {}
    for boot in (False, True):
        cfg = PPOConfig(num_envs=8, num_steps=9, num_minibatches=1, bootstrap_truncation=boot)
        ppo = PPO(cfg, env, (), net, num_updates=1)
        s = ppo_mod.init(ppo, jax.random.PRNGKey(0))
        roll = jax.jit(functools.partial(ppo_mod.rollout, ppo), static_argnums=6)
        trajs[boot] = roll(jax.random.PRNGKey(1), s.params, s.obs_stats, s.env_state, s.obs, (), 9)
    plain, boot = trajs[False][2], trajs[True][2]
    np.testing.assert_array_equal(np.asarray(plain.obs), np.asarray(boot.obs))  # same episodes
    np.testing.assert_array_equal(np.asarray(plain.reward), 1.0)
    obs = np.asarray(boot.obs)  # [T, B, 2]: (t, kind) before each step
    ends = obs[..., 0] == 2
    truncated = ends & (obs[..., 1] == 1)
    assert truncated.any() and (ends & ~truncated).any()  # both kinds of episode end occur
    np.testing.assert_array_equal(np.asarray(boot.done), ends)
    _, v_final = ppo_mod.policy(ppo, s.params, s.obs_stats, jnp.asarray([[3.0, 1.0]]))
    want = 1.0 + cfg.gamma * float(v_final[0]) * truncated
    np.testing.assert_allclose(np.asarray(boot.reward), want, rtol=1e-6)
    assert abs(float(v_final[0])) > 1e-3  # the bootstrap term is visible
