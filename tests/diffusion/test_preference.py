"""Diffusion-DPO, DSPO and SFT: identities of the losses and a 2-D preference fine-tuning run.

The fine-tuning model is the mixture oracle with trainable means and weights (its eps is exact, so
the run takes seconds); the reference is the 8-Gaussian ring, preferences come from Bradley-Terry
labels with the linear reward r(x) = a.x, and the analytic target is the tilted ring
p_ref(x) e^{r(x)} / Z (also a mixture).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.diffusion import preference as pref
from jaxlab.diffusion import schedules as sc
from jaxlab.diffusion.gmm import GaussianMixture, ring_mixture
from jaxlab.diffusion.losses import eps_loss
from jaxlab.diffusion.sliced_wasserstein import sliced_wasserstein

SCH = sc.VPLinear()
REF = ring_mixture(8, 1.0, 0.1)
A = jnp.array([2.0, 0.0])


def reward(x):
    return x @ A


def _eps_of(theta):
    g = GaussianMixture(means=theta["means"], stds=REF.stds, logits=theta["logits"])
    return lambda x, t: g.eps(x, SCH.alpha(t), SCH.sigma(t))


THETA0 = {"means": REF.means, "logits": REF.logits}
REF_EPS = _eps_of(THETA0)


def _linear_model(w):
    """A small trainable eps model: eps = x W1 + t w2 + b (enough for loss identities)."""
    return lambda x, t: x @ w["w1"] + t[:, None] * w["w2"][None] + w["b"][None]


W = {
    "w1": jnp.array([[0.9, 0.1], [-0.2, 1.1]]),
    "w2": jnp.array([0.3, -0.1]),
    "b": jnp.array([0.05, 0.0]),
}
W_REF = {"w1": jnp.eye(2), "w2": jnp.zeros(2), "b": jnp.zeros(2)}


def _pairs(n, key=0):
    k1, k2 = jax.random.split(jax.random.PRNGKey(key))
    return REF.sample(k1, n), REF.sample(k2, n)


def test_dspo_with_beta_zero_is_score_matching_on_winners():
    """Same key: DSPO(beta=0) loss and gradient == eps_loss on the winners == SFT."""
    xw, xl = _pairs(64)
    key = jax.random.PRNGKey(3)
    ref_model = _linear_model(W_REF)

    def dspo(w):
        return pref.preference_loss(
            key, _linear_model(w), ref_model, xw, xl, SCH, method="dspo", beta=0.0
        )[0]

    def sft(w):
        return pref.preference_loss(
            key, _linear_model(w), ref_model, xw, xl, SCH, method="sft", beta=1.0
        )[0]

    def dsm(w):
        return eps_loss(key, _linear_model(w), xw, SCH)

    values, grads = jax.jit(
        lambda w: ([f(w) for f in (dspo, sft, dsm)], [jax.grad(f)(w) for f in (dspo, sft, dsm)])
    )(W)
    for v, g in zip(values[1:], grads[1:], strict=True):
        np.testing.assert_allclose(values[0], v, rtol=1e-6)
        for k in W:
            np.testing.assert_allclose(grads[0][k], g[k], rtol=1e-5, atol=1e-7)


def test_margin_equals_diffusion_dpo_and_t_eps_are_shared():
    """z (NumPy, from the definition) == the margin inside Diffusion-DPO's loss; -log sigmoid(z)
    is its loss; winner and loser see the same t and eps."""
    xw, xl = _pairs(32, key=1)
    key = jax.random.PRNGKey(4)
    model, ref_model = _linear_model(W), _linear_model(W_REF)
    beta = 7.0
    eps_w, eps_l, ref_w, ref_l, noise, t = pref.pair_predictions(key, model, ref_model, xw, xl, SCH)
    # shared t and eps: reconstruct both noisy inputs from the same (t, noise)
    a, s = np.asarray(SCH.alpha(t))[:, None], np.asarray(SCH.sigma(t))[:, None]
    xw_t, xl_t = (
        a * np.asarray(xw) + s * np.asarray(noise),
        a * np.asarray(xl) + s * np.asarray(noise),
    )
    np.testing.assert_allclose(eps_w, np.asarray(model(jnp.asarray(xw_t), t)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(eps_l, np.asarray(model(jnp.asarray(xl_t), t)), rtol=1e-5, atol=1e-6)
    mse = lambda p: np.mean((np.asarray(p) - np.asarray(noise)) ** 2, axis=-1)  # noqa: E731
    z_np = -0.5 * beta * ((mse(eps_w) - mse(eps_l)) - (mse(ref_w) - mse(ref_l)))
    loss_dpo, z_dpo = pref.diffusion_dpo_loss(eps_w, eps_l, ref_w, ref_l, noise, beta=beta)
    _, z_dspo = pref.dspo_loss(eps_w, eps_l, ref_w, ref_l, noise, beta=beta)
    np.testing.assert_allclose(z_dpo, z_np, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(z_dspo, z_np, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(loss_dpo, np.mean(np.log1p(np.exp(-z_np))), rtol=1e-5)
    # the DSPO residual, written out
    w = 1.0 - 1.0 / (1.0 + np.exp(-z_np))
    resid = (np.asarray(eps_w) - np.asarray(noise)) - beta * w[:, None] * np.asarray(eps_w - ref_w)
    loss_dspo, _ = pref.dspo_loss(eps_w, eps_l, ref_w, ref_l, noise, beta=beta)
    np.testing.assert_allclose(loss_dspo, np.mean(resid**2), rtol=1e-5)
    # at the reference the margin is zero
    _, z0 = pref.diffusion_dpo_loss(ref_w, ref_l, ref_w, ref_l, noise, beta=beta)
    np.testing.assert_allclose(z0, 0.0)


def test_stop_grad_weight_and_sdxl_variant():
    xw, xl = _pairs(16, key=2)
    key = jax.random.PRNGKey(5)
    ref_model = _linear_model(W_REF)

    def loss(w, **kw):
        return pref.preference_loss(
            key, _linear_model(w), ref_model, xw, xl, SCH, method="dspo", beta=0.5, **kw
        )[0]

    (l1, l2), (g1, g2) = jax.jit(
        lambda w: (
            (loss(w), loss(w, stop_grad_weight=True)),
            (jax.grad(loss)(w), jax.grad(lambda v: loss(v, stop_grad_weight=True))(w)),
        )
    )(W)
    np.testing.assert_allclose(l1, l2)
    assert float(jnp.max(jnp.abs(g1["w1"] - g2["w1"]))) > 0
    # SDXL branch: at the reference eps_theta = eps_ref, d = 0 < 0.1 -> mean (1 - sigmoid(0))^2
    np.testing.assert_allclose(
        pref.preference_loss(
            key, ref_model, ref_model, xw, xl, SCH, method="dspo", beta=0.5, variant="sdxl"
        )[0],
        0.25,
        rtol=1e-6,
    )
    with pytest.raises(ValueError, match="method"):
        pref.preference_loss(key, ref_model, ref_model, xw, xl, SCH, method="kto", beta=1.0)


N_PAIRS = 2048
STEPS = 400


@pytest.fixture(scope="module")
def toy():
    k = jax.random.split(jax.random.PRNGKey(0), 6)
    xw, xl = pref.label_pairs(k[2], REF.sample(k[0], N_PAIRS), REF.sample(k[1], N_PAIRS), reward)
    hw, hl = pref.label_pairs(k[5], REF.sample(k[3], 512), REF.sample(k[4], 512), reward)
    target = REF.tilt(A, 1.0).sample(jax.random.PRNGKey(11), 4000)
    return xw, xl, hw, hl, target


def _finetune(toy, method, beta):
    xw, xl, hw, hl, target = toy
    opt = optax.adam(1e-2)

    def step(carry, k):
        th, os = carry
        kb, kl = jax.random.split(k)
        idx = jax.random.randint(kb, (256,), 0, N_PAIRS)
        g = jax.grad(
            lambda th: pref.preference_loss(
                kl, _eps_of(th), REF_EPS, xw[idx], xl[idx], SCH, method=method, beta=beta
            )[0]
        )(th)
        u, os = opt.update(g, os, th)
        return (optax.apply_updates(th, u), os), None

    @jax.jit
    def run(key):
        (th, _), _ = jax.lax.scan(step, (THETA0, opt.init(THETA0)), jax.random.split(key, STEPS))
        g = GaussianMixture(means=th["means"], stds=REF.stds, logits=th["logits"])
        xs = g.sample(jax.random.PRNGKey(12), 4000)
        acc = pref.implicit_accuracy(
            jax.random.PRNGKey(14), _eps_of(th), REF_EPS, hw, hl, SCH, num_draws=16
        )
        return jnp.mean(reward(xs)), sliced_wasserstein(jax.random.PRNGKey(13), xs, target), acc

    return [float(v) for v in run(jax.random.PRNGKey(1))]


@pytest.mark.parametrize("method,beta", [("dspo", 1.0), ("dpo", 10.0)])
def test_finetuning_moves_toward_the_tilted_target(toy, method, beta):
    """Mean reward rises, implicit accuracy > chance, SW to p_ref e^r falls below the reference's."""
    *_, target = toy
    xs = REF.sample(jax.random.PRNGKey(12), 4000)
    ref_reward = float(jnp.mean(reward(xs)))
    ref_sw = float(sliced_wasserstein(jax.random.PRNGKey(13), xs, target))
    r, sw, acc = _finetune(toy, method, beta)
    print(
        f"{method} beta={beta}: reward {ref_reward:.3f}->{r:.3f}, SW {ref_sw:.3f}->{sw:.3f}, acc {acc:.3f}"
    )
    assert r > ref_reward + 0.3
    assert sw < 0.8 * ref_sw
    assert acc > 0.6
