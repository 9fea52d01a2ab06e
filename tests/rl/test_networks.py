"""Networks and action heads: the entity transformer is permutation invariant and ignores inactive
entities; heads match NumPy references; MLP and CNN produce the right shapes."""

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.envs.kinetix.observations import (
    EntityObservation,
    PixelsObservation,
    random_entity_observation,
)
from jaxlab.envs.spaces import Box, Discrete, MultiDiscrete
from jaxlab.rl.action_heads import head_for_space, make_distribution
from jaxlab.rl.networks import ActorCritic, NetworkConfig

P, C, J, T = 5, 2, 1, 1
N = P + C
SMALL = NetworkConfig(
    kind="transformer",
    width=16,
    actor_depth=1,
    critic_depth=1,
    encoder_size=16,
    num_heads=4,
    qkv_features=8,
    depth=2,
)
HEAD = head_for_space(MultiDiscrete([3, 3, 3, 3, 2, 2]))


def random_obs(seed: int, batch: int = 3) -> EntityObservation:
    return random_entity_observation(seed, batch, polygons=P, circles=C, joints=J, thrusters=T)


def permute(obs: EntityObservation, seed: int) -> EntityObservation:
    """Reorders polygons, circles, joint rows and thrusters; remaps every index reference."""
    rng = np.random.default_rng(seed)
    pp, pc = rng.permutation(P), rng.permutation(C)
    pj, pt = rng.permutation(2 * J), rng.permutation(T)
    new_to_old = np.concatenate([pp, P + pc])
    old_to_new = np.argsort(new_to_old)
    return EntityObservation(
        circles=obs.circles[:, pc],
        polygons=obs.polygons[:, pp],
        joints=obs.joints[:, pj],
        thrusters=obs.thrusters[:, pt],
        circle_mask=obs.circle_mask[:, pc],
        polygon_mask=obs.polygon_mask[:, pp],
        joint_mask=obs.joint_mask[:, pj],
        thruster_mask=obs.thruster_mask[:, pt],
        attention_mask=obs.attention_mask[:, :, new_to_old][:, :, :, new_to_old],
        joint_indexes=old_to_new[obs.joint_indexes[:, pj]].astype(np.int32),
        thruster_indexes=old_to_new[obs.thruster_indexes[:, pt]].astype(np.int32),
    )


@pytest.fixture(scope="module")
def transformer():
    net = ActorCritic(SMALL, HEAD)
    obs = random_obs(0)
    params = net.init(jax.random.PRNGKey(0), obs)
    # Give the small-init (orthogonal 0.01) actor head O(1) logits so differences are measurable.
    head = params["params"]["actor_head"]["Dense_0"]
    head["kernel"] = head["kernel"] * 100.0
    apply = jax.jit(lambda p, o: (lambda pi, v: (pi.distribution.logits, v))(*net.apply(p, o)))
    return apply, params


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_transformer_is_permutation_invariant(transformer, seed):
    apply, params = transformer
    obs = random_obs(seed)
    logits, value = apply(params, obs)
    logits_p, value_p = apply(params, permute(obs, seed + 100))
    np.testing.assert_allclose(np.asarray(value_p), np.asarray(value), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(logits_p), np.asarray(logits), rtol=1e-4, atol=1e-4)
    # ...and it is not constant: changing an active entity's features changes the output.
    obs2 = obs.replace(polygons=jnp.asarray(obs.polygons).at[:, 0].add(1.0))
    assert not np.allclose(np.asarray(apply(params, obs2)[1]), np.asarray(value), atol=1e-4)


def test_inactive_entities_do_not_matter(transformer):
    apply, params = transformer
    obs = random_obs(7)
    noise = np.random.default_rng(0).normal(size=obs.circles.shape).astype(np.float32) * 5
    circles = np.where(obs.circle_mask[..., None], obs.circles, noise)
    _, v1 = apply(params, obs)
    _, v2 = apply(params, obs.replace(circles=circles))
    np.testing.assert_allclose(np.asarray(v2), np.asarray(v1), rtol=1e-5, atol=1e-6)


def test_small_head_attention_paths_agree(monkeypatch):
    """Head size 2 (the paper's) computes attention as broadcast products; the einsum path (taken
    for larger heads) gives the same values and gradients on the same parameters and mask."""
    from jaxlab.rl import networks

    b, n, heads = 3, 5, 4
    att = networks.MaskedSelfAttention(num_heads=heads, qkv_features=8, out_features=16)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(b * n, 16)), jnp.float32)
    mask = rng.random((b, heads, n, n)) < 0.5
    mask[:, :, np.arange(n), np.arange(n)] = True
    mask[0, :, 1] = False  # a query with every key masked attends uniformly on both paths
    mask = jnp.asarray(mask)
    params = att.init(jax.random.PRNGKey(0), x, mask)

    def value_and_grad():
        f = lambda p, x: jnp.sum(jnp.sin(att.apply(p, x, mask)))
        return jax.jit(jax.value_and_grad(f, argnums=(0, 1)))(params, x)

    fast = value_and_grad()
    monkeypatch.setattr(networks, "_BROADCAST_HEAD_SIZE", 0)
    reference = value_and_grad()
    for a, r in zip(jax.tree.leaves(fast), jax.tree.leaves(reference), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(r), rtol=1e-5, atol=1e-5)


def test_transformer_takes_any_entity_count():
    """The same parameters apply to larger observations (how an S agent is evaluated on M): one
    more polygon slot, masked out, gives the same policy and value as the unpadded observation
    (the slot is inserted after the polygons, so entity indexes of circles shift by one)."""
    net = ActorCritic(SMALL, HEAD)
    params = net.init(jax.random.PRNGKey(0), random_obs(0))
    obs = jax.tree.map(jnp.asarray, random_obs(1))
    p = obs.polygons.shape[1]
    shift = lambda ix: jnp.where(ix >= p, ix + 1, ix)  # noqa: E731
    att = jnp.insert(obs.attention_mask, p, False, axis=2)
    big = obs.replace(
        polygons=jnp.concatenate([obs.polygons, 7.0 + obs.polygons[:, :1]], axis=1),
        polygon_mask=jnp.concatenate([obs.polygon_mask, jnp.zeros((3, 1), bool)], axis=1),
        attention_mask=jnp.insert(att, p, False, axis=3),
        joint_indexes=shift(obs.joint_indexes),
        thruster_indexes=shift(obs.thruster_indexes),
    )
    pi, v = net.apply(params, obs)
    pi_big, v_big = net.apply(params, big)
    assert v_big.shape == (3,) and pi_big.batch_shape == (3,)
    np.testing.assert_allclose(np.asarray(v_big), np.asarray(v), rtol=1e-5, atol=1e-5)
    actions = jnp.asarray(np.random.default_rng(0).integers(0, 2, (3, 6)), jnp.int32)
    np.testing.assert_allclose(
        np.asarray(pi_big.log_prob(actions)),
        np.asarray(pi.log_prob(actions)),
        rtol=1e-5,
        atol=1e-5,
    )


def test_multi_discrete_head_matches_numpy():
    spec = head_for_space(MultiDiscrete([3, 2, 4]))
    rng = np.random.default_rng(0)
    flat = rng.normal(size=(5, 9)).astype(np.float32)
    dist = make_distribution(spec, jnp.asarray(flat))
    actions = np.stack([rng.integers(0, n, 5) for n in (3, 2, 4)], axis=1)
    parts = np.split(flat, [3, 5], axis=1)
    logsm = [p - np.log(np.exp(p).sum(1, keepdims=True)) for p in parts]
    want_lp = sum(ls[np.arange(5), actions[:, i]] for i, ls in enumerate(logsm))
    want_h = sum(-(np.exp(ls) * ls).sum(1) for ls in logsm)
    np.testing.assert_allclose(np.asarray(dist.log_prob(actions)), want_lp, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(dist.entropy()), want_h, rtol=1e-5)
    samples = np.asarray(dist.sample(seed=jax.random.PRNGKey(1), sample_shape=(200,)))
    assert samples.shape == (200, 5, 3)
    assert (samples < np.array([3, 2, 4])).all() and (samples >= 0).all()


def test_discrete_and_continuous_heads():
    d = make_distribution(head_for_space(Discrete(4)), jnp.zeros((2, 4)))
    assert isinstance(d, distrax.Categorical)
    np.testing.assert_allclose(np.asarray(d.entropy()), np.log(4), rtol=1e-6)
    spec = head_for_space(Box(-1.0, 1.0, (3,)))
    mu = jnp.asarray([[0.5, -0.2, 0.0]])
    c = make_distribution(spec, mu, jnp.log(jnp.asarray([1.0, 2.0, 0.5])))
    x = np.array([[0.0, 1.0, 0.3]], np.float32)
    sd = np.array([1.0, 2.0, 0.5])
    want = np.sum(-0.5 * ((x - np.asarray(mu)) / sd) ** 2 - np.log(sd) - 0.5 * np.log(2 * np.pi))
    np.testing.assert_allclose(float(c.log_prob(x)[0]), want, rtol=1e-5)
    with pytest.raises(ValueError, match="action space"):
        head_for_space(Box(0.0, 1.0, (2, 2)))


def test_mlp_and_cnn_shapes():
    mlp = ActorCritic(
        NetworkConfig(kind="mlp", width=8, actor_depth=2, critic_depth=1),
        head_for_space(Discrete(5)),
    )
    x = jnp.ones((4, 11))
    params = mlp.init(jax.random.PRNGKey(0), x)
    pi, v = jax.jit(mlp.apply)(params, x)
    assert pi.logits.shape == (4, 5) and v.shape == (4,)
    cnn = ActorCritic(
        NetworkConfig(kind="cnn", width=8, actor_depth=1, critic_depth=1),
        head_for_space(Box(-1.0, 1.0, (6,))),
    )
    obs = PixelsObservation(image=jnp.zeros((2, 40, 40, 3)), global_info=jnp.ones((2, 1)))
    params = cnn.init(jax.random.PRNGKey(0), obs)
    pi, v = cnn.apply(params, obs)
    assert pi.event_shape == (6,) and v.shape == (2,)


def test_network_config_errors():
    from jaxlab.core.config import ConfigError

    with pytest.raises(ConfigError, match="num_heads"):
        NetworkConfig(num_heads=6)
    with pytest.raises(ConfigError, match="qkv_features"):
        NetworkConfig(num_heads=8, qkv_features=12)
