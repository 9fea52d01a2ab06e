"""World-model maths without training: lambda returns (Dreamer's and LS-Imagine's mixed one)
against NumPy references, two-hot heads, the intrinsic reward's shape, jump labels, affordance
labels, and bad input naming the field."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.rl.world_models import affordance, ls_imagine, twohot
from jaxlab.rl.world_models.returns import lambda_return, mixed_lambda_return

GAMMA, LAM = 0.9, 0.8


def _np_mixed(reward, cont, value_next, delta, acc, gamma, lam):
    h = len(reward)
    out = np.zeros(h)
    nxt = value_next[-1]
    for t in reversed(range(h)):
        disc = gamma ** delta[t] * cont[t]
        out[t] = (
            gamma ** (delta[t] - 1) * reward[t]
            + acc[t]
            + disc * ((1 - lam) * value_next[t] + lam * nxt)
        )
        nxt = out[t]
    return out


def _np_dreamer(reward, cont, value_next, gamma, lam):
    h = len(reward)
    out = np.zeros(h)
    nxt = value_next[-1]
    for t in reversed(range(h)):
        out[t] = reward[t] + gamma * cont[t] * ((1 - lam) * value_next[t] + lam * nxt)
        nxt = out[t]
    return out


def test_mixed_return_without_jumps_is_dreamers():
    rng = np.random.default_rng(0)
    r, v = rng.normal(size=(7, 3)), rng.normal(size=(7, 3))
    c = (rng.random((7, 3)) > 0.2).astype(np.float32)
    mixed = mixed_lambda_return(
        jnp.asarray(r),
        jnp.asarray(c),
        jnp.asarray(v),
        jnp.ones((7, 3)),
        jnp.zeros((7, 3)),
        GAMMA,
        LAM,
    )
    plain = lambda_return(jnp.asarray(r), jnp.asarray(c), jnp.asarray(v), GAMMA, LAM)
    np.testing.assert_allclose(np.asarray(mixed), np.asarray(plain), rtol=1e-6)
    for b in range(3):
        ref = _np_dreamer(r[:, b], c[:, b], v[:, b], GAMMA, LAM)
        np.testing.assert_allclose(np.asarray(plain[:, b]), ref, rtol=1e-5, atol=1e-6)


def test_mixed_return_hand_case_delta5_g03():
    # one jump of Δ = 5 steps collecting Ĝ = 0.3 at t = 1 of a 4-step trajectory
    r = np.array([0.0, 0.5, 0.0, 1.0])
    c = np.ones(4)
    v = np.array([0.2, 0.4, 0.6, 0.8])
    delta = np.array([1.0, 5.0, 1.0, 1.0])
    acc = np.array([0.0, 0.3, 0.0, 0.0])
    got = np.asarray(
        mixed_lambda_return(
            *(jnp.asarray(x, jnp.float32) for x in (r, c, v, delta, acc)), GAMMA, LAM
        )
    )
    np.testing.assert_allclose(got, _np_mixed(r, c, v, delta, acc, GAMMA, LAM), rtol=1e-5)
    # by hand: R_3 = 1 + .9 (.2 .8 + .8 .8) = 1.72; R_2 = .9 (.2 .6 + .8 R_3) = 1.3464;
    # R_1 = .9^4 .5 + .3 + .9^5 (.2 .4 + .8 R_2) = .32805 + .3 + .59049 (1.15712)
    r3 = 1 + 0.9 * (0.2 * 0.8 + 0.8 * 0.8)
    r2 = 0.9 * (0.2 * 0.6 + 0.8 * r3)
    r1 = 0.9**4 * 0.5 + 0.3 + 0.9**5 * (0.2 * 0.4 + 0.8 * r2)
    np.testing.assert_allclose(got[1:], [r1, r2, r3], rtol=1e-5)


def test_twohot_encodes_and_decodes():
    y = jnp.array([-30.0, -1.5, 0.0, 0.3, 7.0, 1000.0])
    enc = twohot.twohot(y, 255)
    np.testing.assert_allclose(np.asarray(enc.sum(-1)), 1.0, rtol=1e-6)
    assert int((np.asarray(enc) > 0).sum(-1).max()) <= 2
    back = twohot.symexp(enc @ twohot.bins(255))
    np.testing.assert_allclose(np.asarray(back), np.asarray(y), rtol=1e-4, atol=1e-4)
    # the CE of the exact logits is minimal there
    logits = jnp.log(enc + 1e-9)
    assert float(twohot.loss(logits, y).mean()) < float(twohot.loss(logits[::-1], y).mean())


def test_intrinsic_reward_peaks_centred_and_falls_off_centre():
    size = 32
    ii, jj = np.meshgrid(np.arange(size) + 0.5, np.arange(size) + 0.5, indexing="ij")

    def blob(ci, cj):
        return np.exp(-((ii - ci) ** 2 + (jj - cj) ** 2) / (2 * 3.0**2)).astype(np.float32)

    offsets = [0, 3, 6, 9, 12]
    maps = jnp.asarray(np.stack([blob(16 + o, 16 + o) for o in offsets]))
    r = np.asarray(ls_imagine.intrinsic_reward(maps, 0.5))
    assert np.all(np.diff(r) < 0), r
    # a uniform map scores its value; the Gaussian weights integrate to mean(G)
    np.testing.assert_allclose(
        np.asarray(ls_imagine.intrinsic_reward(jnp.full((size, size), 0.7))), 0.7, rtol=1e-5
    )
    # the zoom statistic is larger for a peaked map than a flat one
    s = ls_imagine.zoom_statistic(jnp.stack([maps[0], jnp.full((size, size), 0.5)]))
    assert float(s[0]) > float(s[1])


def test_jump_labels_from_a_hand_sequence():
    score = jnp.array([[0.1, 0.2, 0.3, 0.6, 0.7, 0.1]])
    zoomed = jnp.array([[0.55, 0.9, 0.0, 0.0, 0.0, 0.0]])
    reward = jnp.array([[0.0, 0.5, 0.25, 1.0, 0.0, 0.0]])
    jump = jnp.array([[True, True, False, False, False, False]])
    first = jnp.zeros((1, 6), bool)
    delta, acc, arrival, valid = ls_imagine.jump_labels(jump, score, zoomed, reward, first, 0.5)
    # t=0 reaches 0.55 at t=3: Δ=3, Ĝ = r1 + .5 r2 = .625, arrival r3 = 1; t=1 never reaches .9
    assert float(delta[0, 0]) == 3.0 and bool(valid[0, 0]) and not bool(valid[0, 1])
    np.testing.assert_allclose(float(acc[0, 0]), 0.5 + 0.5 * 0.25)
    assert float(arrival[0, 0]) == 1.0
    # an episode start in between cuts the path
    cut = first.at[0, 2].set(True)
    _, _, _, valid = ls_imagine.jump_labels(jump, score, zoomed, reward, cut, 0.5)
    assert not bool(valid[0, 0])


def test_offline_affordance_labels_peak_on_the_relevant_region():
    img = np.zeros((32, 32, 3), np.float32)
    img[20:24, 4:8, 0] = 1.0  # a red patch low-left

    def score(frames):  # an oracle scorer: the fraction of red pixels in a frame
        return jnp.mean(frames[..., 0], (-2, -1))

    m = np.asarray(affordance.offline_labels(score, jnp.asarray(img), 16, 8, 4))
    assert m.shape == (32, 32)
    quads = [m[16:, :16].mean(), m[:16, :16].mean(), m[:16, 16:].mean(), m[16:, 16:].mean()]
    assert quads[0] > max(quads[1:]), quads
    i, j = np.unravel_index(np.argmax(m), m.shape)
    assert i >= 16 and j < 16
    c = np.asarray(affordance.best_box(jnp.asarray(m), 16, 8))
    assert c[0] >= 16 and c[1] <= 16


def test_episode_best_reward_pays_only_a_new_best_of_the_episode():
    """The original's wrappers pay a score only when it beats the episode's best so far (the
    best restarting at an episode's first observation): checked step by step, as the env scan
    calls it, against a Python loop over two envs with episode boundaries."""
    score = np.array(
        [[0.2, 0.1, 0.3, 0.3, 0.05, 0.4, 0.1, 0.2], [0.0, 0.5, 0.4, 0.6, 0.6, 0.7, 0.1, 0.9]],
        np.float32,
    )
    first = np.zeros_like(score, bool)
    first[0, [0, 4]] = True  # env 0: a new episode at step 4 (a lower score is paid there)
    first[1, [0, 6]] = True

    def scan_body(best, xs):
        s, f = xs
        paid, best = ls_imagine.episode_best_reward(s, best, f)
        return best, paid

    _, paid = jax.lax.scan(
        scan_body, jnp.full((2,), 0.9), (jnp.asarray(score.T), jnp.asarray(first.T))
    )
    want = np.zeros_like(score)
    for b in range(2):
        best = 0.9
        for t in range(score.shape[1]):
            best = 0.0 if first[b, t] else best
            if score[b, t] > best:
                want[b, t], best = score[b, t], score[b, t]
    np.testing.assert_array_equal(np.asarray(paid).T, want)
    # staring at the target pays once, approaching it pays every step
    np.testing.assert_array_equal(want[0], np.float32([0.2, 0.0, 0.3, 0.0, 0.05, 0.4, 0.0, 0.0]))
    assert np.count_nonzero(want[1]) == 5


def test_bad_input_names_the_field():
    from jaxlab.rl.off_policy import OffPolicyConfig
    from jaxlab.rl.world_models.dreamer import DreamerConfig, DreamerOptim, make_parts

    with pytest.raises(ConfigError, match="jump_prob"):
        ls_imagine.LSConfig(jump_prob=1.5)
    with pytest.raises(ConfigError, match="jump_prob"):
        ls_imagine.LSConfig(jump_prob=-0.1)
    with pytest.raises(ConfigError, match="relevance_scale"):
        ls_imagine.LSConfig(relevance_scale=-0.01)
    with pytest.raises(ConfigError, match="jump_loss_scale"):
        ls_imagine.LSConfig(jump_loss_scale=-1.0)
    with pytest.raises(ConfigError, match="jump_loss_scale.*jump_prob=0.7"):
        ls_imagine.LSConfig(jump_loss_scale=0.0)
    assert ls_imagine.LSConfig(jump_loss_scale=0.0, jump_prob=0.0).jump_loss_scale == 0.0
    one_env = OffPolicyConfig(env="open-world", num_envs=1, buffer_size=32, batch_size=16)
    with pytest.raises(ConfigError, match="sequence_length"):
        make_parts(DreamerConfig(sequence_length=64), one_env, DreamerOptim())
    with pytest.raises(ConfigError, match="obs_size"):
        make_parts(
            DreamerConfig(),
            OffPolicyConfig(env="grid-maze", buffer_size=4096, batch_size=16),
            DreamerOptim(),
            env_options={"observation_type": "pixels", "height": 6, "width": 6},
        )
    with pytest.raises(ConfigError, match="dyn_scale"):
        DreamerConfig(dyn_scale=-1.0)


def test_intrinsic_reward_is_jittable_and_vmappable():
    m = jax.random.uniform(jax.random.key(0), (4, 16, 16))
    a = jax.jit(jax.vmap(ls_imagine.intrinsic_reward))(m)
    b = jnp.stack([ls_imagine.intrinsic_reward(x) for x in m])
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
