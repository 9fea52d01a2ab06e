"""LS-Imagine's affordance learning inside the Dreamer agent, and the buffer item it extends.

:func:`make_affordance_fns` gives the affordance features of an observation (concentration
score, zoom statistic, zoomed view and its score, relevance score), the buffer item of one
observation per env (plain Dreamer's five fields; with LS-Imagine also the affordance
statistics and the paid intrinsic reward) and one update of the relevance model and the
affordance predictor.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from jaxlab.envs.open_world import zoom
from jaxlab.rl.world_models import affordance, ls_imagine
from jaxlab.rl.world_models.agent import Agent, preprocess


def make_affordance_fns(a: Agent):
    """LS-Imagine's affordance pieces and the buffer item: ``(aff_features(aff, obs),
    item_of(obs, prev_action, reward, cont, is_first, aff, relevance_label, best),
    aff_update(aff, batch, key, hparams))`` (``item_of`` alone serves plain Dreamer)."""
    ls, tx = a.ls, a.tx
    size = a.size
    relevance, predictor = affordance.Relevance(), affordance.AffordancePredictor()

    def aff_features(aff, obs):
        """Per observation: concentration score, zoom statistic, zoomed image, zoomed score and
        the MineCLIP stand-in's score of the frame."""
        img = preprocess(obs)
        m = predictor.apply(aff["predictor"], img)
        score = ls_imagine.intrinsic_reward(m, ls.sigma_frac)
        stat = ls_imagine.zoom_statistic(m)
        centre = jax.vmap(lambda mm: affordance.best_box(mm, ls.box, ls.stride))(m)
        zoomed = jax.vmap(lambda o, c: zoom(o, c, float(ls.box)))(obs, centre)
        zoomed = jnp.clip(jnp.round(zoomed), 0, 255).astype(jnp.uint8)
        zm = predictor.apply(aff["predictor"], preprocess(zoomed))
        zscore = ls_imagine.intrinsic_reward(zm, ls.sigma_frac)
        rel_score = jax.nn.sigmoid(relevance.apply(aff["relevance"], img))
        return score, stat, zoomed, zscore, rel_score

    def item_of(
        obs, prev_action, reward, cont, is_first, aff=None, relevance_label=None, best=None
    ):
        """The buffer item of one observation per env; with LS-Imagine also the episode's best
        concentration and relevance scores after it (``best`` before it)."""
        item = {
            "obs": obs,
            "prev_action": prev_action.astype(jnp.int32),
            "reward": reward.astype(jnp.float32),
            "cont": cont.astype(jnp.float32),
            "is_first": is_first,
        }
        if ls is not None:
            score, stat, zoomed, zscore, rel_score = aff_features(aff, obs)
            std = jnp.sqrt(jnp.maximum(aff["score_sq"] - aff["score_mean"] ** 2, 1e-8))
            jump = ls_imagine.jump_flag(stat, score, zscore, aff["stat_mean"], std, ls.zscore)
            # the paid intrinsic reward (ls_imagine docstring): the concentration score and the
            # MineCLIP stand-in's score of the frame, each paid when it beats the episode's best
            if ls.episode_best:
                pay_g, best_g = ls_imagine.episode_best_reward(score, best[0], is_first)
                pay_c, best_c = ls_imagine.episode_best_reward(rel_score, best[1], is_first)
                best = (best_g, best_c)
            else:
                pay_g, pay_c = score, rel_score
            item.update(
                intrinsic=score,
                intrinsic_reward=ls.intrinsic_scale * pay_g + ls.relevance_scale * pay_c,
                zoom_stat=stat,
                zoomed=zoomed,
                zoomed_score=zscore,
                jump=jump,
                relevance=relevance_label.astype(jnp.float32),
            )
        return item, best

    def aff_update(aff, batch, key, hp):
        """Relevance model (BCE on the relevance labels) and predictor (MSE on offline labels of
        ``label_images`` replayed observations)."""
        img = preprocess(batch["obs"]).reshape((-1, size, size, 3))
        labels = batch["relevance"].reshape(-1)

        def rel_loss(p):
            return optax.sigmoid_binary_cross_entropy(relevance.apply(p, img), labels).mean()

        r_loss, r_grad = jax.value_and_grad(rel_loss)(aff["relevance"])
        aff_tx = tx("affordance", hp)
        r_upd, r_opt = aff_tx.update(r_grad, aff["relevance_opt"], aff["relevance"])
        rel_p = optax.apply_updates(aff["relevance"], r_upd)
        idx = jax.random.choice(key, img.shape[0], (ls.label_images,), replace=False)
        chosen = img[idx]
        score_fn = lambda x: jax.nn.sigmoid(relevance.apply(rel_p, x))
        target = jax.vmap(
            lambda im: affordance.offline_labels(score_fn, im, ls.box, ls.stride, ls.frames)
        )(chosen)
        target = jax.lax.stop_gradient(target)

        def pred_loss(p):
            return jnp.mean((predictor.apply(p, chosen) - target) ** 2)

        p_loss, p_grad = jax.value_and_grad(pred_loss)(aff["predictor"])
        p_upd, p_opt = aff_tx.update(p_grad, aff["predictor_opt"], aff["predictor"])
        aff = {
            **aff,
            "relevance": rel_p,
            "relevance_opt": r_opt,
            "predictor": optax.apply_updates(aff["predictor"], p_upd),
            "predictor_opt": p_opt,
        }
        return aff, {"relevance_loss": r_loss, "affordance_loss": p_loss}

    return aff_features, item_of, aff_update
