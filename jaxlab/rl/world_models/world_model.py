"""Dreamer's world model step: the posterior rollout and the world-model loss (eq. 5), with
LS-Imagine's jumpy-transition terms, and the open-loop prediction of replayed sequences.

``L = L_pred + dyn_scale max(free_bits, KL[sg(q) || p]) + rep_scale max(free_bits, KL[q || sg(p)])``
with ``L_pred`` the summed pixel MSE of the decoder, the two-hot reward CE and the continue BCE
(KL summed over the latent groups); step 1 of ``jaxlab.rl.world_models.dreamer``.
"""

from __future__ import annotations

from collections.abc import Callable

import distrax
import jax
import jax.numpy as jnp
import optax

from jaxlab.rl.world_models import ls_imagine, twohot
from jaxlab.rl.world_models.agent import Agent, DreamerState, preprocess
from jaxlab.rl.world_models.rssm import WorldModel, zeros_latent


def _kl(lhs_logits, rhs_logits):
    """KL between categoricals given by their logits, per group."""
    return distrax.Categorical(logits=lhs_logits).kl_divergence(
        distrax.Categorical(logits=rhs_logits)
    )


def _bce(logit, target):
    """Binary cross-entropy of a logit against a target in [0, 1]."""
    return optax.sigmoid_binary_cross_entropy(logit, target)


def _make_observe(a: Agent):
    """``observe(wm_p, key, embed, actions, is_first) -> (priors, posteriors)``."""
    net, wm = a.net, a.wm

    def observe(wm_p, key, embed, actions, is_first):
        """Posterior rollout over time (axis 1 of ``[b, l, ...]`` inputs): priors, posteriors."""
        b = embed.shape[0]

        def step(prev, xs):
            k, e, a, first = xs
            keep = (1.0 - first.astype(jnp.float32))[:, None]
            prev = jax.tree.map(lambda x: x * keep.reshape(keep.shape + (1,) * (x.ndim - 2)), prev)
            k1, k2 = jax.random.split(k)
            prior = wm.apply(wm_p, k1, prev, a * keep, method=WorldModel.img_step)
            post = wm.apply(wm_p, k2, prior, e, method=WorldModel.obs_step)
            return post, (prior, post)

        keys = jax.random.split(key, embed.shape[1])
        xs = (keys, jnp.swapaxes(embed, 0, 1), jnp.swapaxes(actions, 0, 1), is_first.T)
        _, (prior, post) = jax.lax.scan(step, zeros_latent(net, (b,)), xs)
        swap = lambda t: jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), t)
        return swap(prior), swap(post)

    return observe


def _kl_terms(free_bits: float, post_logits, prior_logits):
    """The dynamics and representation KLs summed over the groups: free-bits clipped, raw."""
    dyn = _kl(jax.lax.stop_gradient(post_logits), prior_logits).sum(-1)
    rep = _kl(post_logits, jax.lax.stop_gradient(prior_logits)).sum(-1)
    return (
        jnp.maximum(dyn, free_bits),
        jnp.maximum(rep, free_bits),
        dyn,
        rep,
    )


def _add_ls_losses(a: Agent, wm_p, batch, post, feat, heads, key, scales, total):
    """``total`` plus LS-Imagine's jump/intrinsic head losses and the jumpy transition's loss
    (on the steps with a valid jump label), and their metrics."""
    cfg, ls, wm, action_vec = a.cfg, a.ls, a.wm, a.action_vec
    dyn_scale, rep_scale = scales
    jump_loss = _bce(heads["jump"], batch["jump"].astype(jnp.float32))
    intr_loss = twohot.loss(heads["intrinsic"], batch["intrinsic_reward"])
    delta, acc, arrival, valid = ls_imagine.jump_labels(
        batch["jump"],
        batch["intrinsic"],
        batch["zoomed_score"],
        batch["reward"],
        batch["is_first"],
        cfg.gamma,
    )
    # the jumpy transition: from the posterior at t, the jump action, to the posterior
    # of the zoomed view
    zimg = preprocess(batch["zoomed"])
    zembed = wm.apply(wm_p, zimg, method=WorldModel.encode)
    jvec = action_vec(jnp.zeros_like(batch["prev_action"]), jnp.ones(delta.shape, bool))
    k1, k2 = jax.random.split(key)
    jprior = wm.apply(wm_p, k1, post, jvec, method=WorldModel.img_step)
    jpost = wm.apply(wm_p, k2, jprior, zembed, method=WorldModel.obs_step)
    jfeat = jpost.feat()
    jrecon = wm.apply(wm_p, jfeat, method=WorldModel.decode)
    jheads = wm.apply(wm_p, jfeat, method=WorldModel.heads)
    d_logits, g_logits = wm.apply(wm_p, feat, jfeat, method=WorldModel.jump_heads)
    jdyn, jrep, _, _ = _kl_terms(cfg.free_bits, jpost.logits, jprior.logits)
    jl = (
        jnp.sum((jrecon - zimg) ** 2, (-3, -2, -1))
        + twohot.loss(jheads["reward"], arrival)
        + twohot.loss(d_logits, delta)
        + twohot.loss(g_logits, acc)
        + dyn_scale * jdyn
        + rep_scale * jrep
    )
    w = valid.astype(jnp.float32)
    jump_total = jnp.sum(jl * w) / jnp.maximum(w.sum(), 1.0)
    total = total + (jump_loss + intr_loss).mean() + ls.jump_loss_scale * jump_total
    metrics = dict(
        jump_loss=jump_loss.mean(),
        intrinsic_loss=intr_loss.mean(),
        jump_transition_loss=jump_total,
        jump_rate=batch["jump"].astype(jnp.float32).mean(),
        jump_valid=w.mean(),
    )
    return total, metrics


def make_world_model_fns(a: Agent):
    """The world model's ``(observe(wm_p, key, embed, actions, is_first) -> (priors,
    posteriors), wm_loss(wm_p, batch, key, scales) -> (loss, (metrics, posterior)))`` (module
    docstring, step 1)."""
    cfg, ls, wm, action_vec = a.cfg, a.ls, a.wm, a.action_vec
    observe = _make_observe(a)

    def wm_loss(wm_p, batch, key, scales=None):
        """World-model loss of a ``[b, l]`` batch: ``(loss, (metrics, posterior))``; ``scales``
        are the KL weights ``(dyn, rep)`` (default: the config's; the update passes the traced
        values)."""
        dyn_scale, rep_scale = (cfg.dyn_scale, cfg.rep_scale) if scales is None else scales
        k_obs, k_jump, k_jpost = jax.random.split(key, 3)
        img = preprocess(batch["obs"])
        embed = wm.apply(wm_p, img, method=WorldModel.encode)
        actions = action_vec(batch["prev_action"])
        prior, post = observe(wm_p, k_obs, embed, actions, batch["is_first"])
        feat = post.feat()
        recon = wm.apply(wm_p, feat, method=WorldModel.decode)
        heads = wm.apply(wm_p, feat, method=WorldModel.heads)
        image_loss = jnp.sum((recon - img) ** 2, (-3, -2, -1))
        reward_loss = twohot.loss(heads["reward"], batch["reward"])
        cont_loss = _bce(heads["cont"], batch["cont"])
        dyn, rep, dyn_raw, rep_raw = _kl_terms(cfg.free_bits, post.logits, prior.logits)
        loss = image_loss + reward_loss + cont_loss + dyn_scale * dyn + rep_scale * rep
        metrics = {
            "image_loss": image_loss.mean(),
            "reward_loss": reward_loss.mean(),
            "cont_loss": cont_loss.mean(),
            "kl": dyn_raw.mean(),
            "rep_kl": rep_raw.mean(),
        }
        total = loss.mean()
        if ls is not None:
            kl_scales = (dyn_scale, rep_scale)
            total, ls_metrics = _add_ls_losses(
                a, wm_p, batch, post, feat, heads, k_jump, kl_scales, total
            )
            metrics.update(ls_metrics)
        return total, (metrics, post)

    return observe, wm_loss


def make_open_loop(a: Agent, observe: Callable):
    """``open_loop(state, batch, context, key) -> frames``: the world model's open-loop
    prediction of replayed sequences (for the imagination GIF and its test)."""
    wm, action_vec = a.wm, a.action_vec

    def open_loop(state: DreamerState, batch, context: int, key):
        """Observe ``context`` real steps of each ``[b, l]`` sequence, then imagine the rest with
        the real actions: decoded frames ``[b, l, S, S, 3]`` in ``[-0.5, 0.5]`` (reconstructions
        for the context, open-loop predictions after it)."""
        k1, k2 = jax.random.split(key)
        img = preprocess(batch["obs"])
        embed = wm.apply(state.wm, img, method=WorldModel.encode)
        actions = action_vec(batch["prev_action"])
        _, post = observe(state.wm, k1, embed, actions, batch["is_first"])
        start = jax.tree.map(lambda x: x[:, context - 1], post)

        def step(latent, xs):
            k, a = xs
            nxt = state_img(state.wm, k, latent, a)
            return nxt, nxt.feat()

        rest = jnp.swapaxes(actions[:, context:], 0, 1)
        _, feats = jax.lax.scan(step, start, (jax.random.split(k2, rest.shape[0]), rest))
        feats = jnp.concatenate([post.feat()[:, :context], jnp.swapaxes(feats, 0, 1)], 1)
        return wm.apply(state.wm, feats, method=WorldModel.decode)

    def state_img(wm_p, k, latent, a):
        return wm.apply(wm_p, k, latent, a, method=WorldModel.img_step)

    return open_loop
