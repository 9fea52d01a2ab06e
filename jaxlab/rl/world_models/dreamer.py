"""A DreamerV3-style agent (Hafner et al. 2023) on a pixel env, optionally with LS-Imagine.

One ``iteration`` (a pure function of the ``DreamerState``, so a whole run is one ``lax.scan``)
steps ``num_envs`` envs once, writes one item per env to the on-device sequence buffer
(``rl.replay.make_sequence_replay``) and, after ``learning_starts`` iterations, takes
``updates_per_iteration`` gradient steps, each:

1. **World model** on ``[batch_size, sequence_length]`` replayed sequences (``rssm``): posterior
   rollout with resets at episode starts, loss (eq. 5)
   ``L = L_pred + 0.5 max(1, KL[sg(q) || p]) + 0.1 max(1, KL[q || sg(p)])`` with
   ``L_pred`` = summed pixel MSE of the decoder + two-hot reward CE + continue BCE
   (free bits 1 nat, KL summed over the latent groups).
2. **Imagination** of ``horizon`` steps from every posterior state with the actor.
3. **Critic**: two-hot CE towards the lambda returns (``returns.lambda_return``), plus the same
   CE towards the slow critic's prediction; the slow critic is an EMA (rate ``slow_rate``).
4. **Actor** (REINFORCE, discrete actions): ``-sg((R - V)/max(1, S)) log π(a|s) - η H[π]`` with
   ``S`` the EMA (decay ``retnorm_decay``) of the 95th minus 5th percentile of the returns.
   Steps are weighted by the imagined cumulative continue probability.

Items are ``(obs, prev_action, reward, cont, is_first)``: the observation, the action and reward
that led to it, ``1 - terminated`` and the episode-start flag. A finished episode's last
observation is stored, and the next iteration of that env stores its first observation (the env
does not step on that iteration), so every step of every episode is in the buffer.

LS-Imagine (``make_parts(..., ls=LSConfig())``, ``ls_imagine``/``affordance``): each stored item also carries the
affordance statistics of its observation (intrinsic score, the zoom of its best box and that
view's score, the jump flag, the relevance label); the world model additionally learns the
jumpy transition and the jump/Δ/Ĝ/intrinsic heads, the relevance model and the affordance
predictor; imagination jumps when the behaviour decides to and uses the mixed return.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import distrax
import jax
import jax.numpy as jnp
import optax
from flax import struct
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab import envs
from jaxlab.core import optim as optim_lib
from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig
from jaxlab.envs.open_world import OBS_SIZES, zoom
from jaxlab.envs.spaces import Box, Discrete
from jaxlab.rl.off_policy import OffPolicyConfig
from jaxlab.rl.replay import SequenceReplayConfig, make_sequence_replay
from jaxlab.rl.world_models import affordance, ls_imagine, twohot
from jaxlab.rl.world_models.returns import mixed_lambda_return
from jaxlab.rl.world_models.rssm import Actor, Critic, Latent, NetConfig, WorldModel, zeros_latent


@dataclasses.dataclass(frozen=True)
class DreamerOptim:
    """Dreamer's optimisers, one per role (Adam; DreamerV3's rates and clipping norms).

    Attributes:
        model: the world model's (3e-4, gradient norm clipped at 1000).
        actor, critic: the imagination actor-critic's (1e-4 each, clipped at 100).
        affordance: LS-Imagine's relevance model and affordance predictor (1e-3, no clipping;
            unused by plain Dreamer).
    """

    model: OptimConfig = OptimConfig(name="adam", lr=3e-4, clip_norm=1000.0)
    actor: OptimConfig = OptimConfig(name="adam", lr=1e-4, clip_norm=100.0)
    critic: OptimConfig = OptimConfig(name="adam", lr=1e-4, clip_norm=100.0)
    affordance: OptimConfig = OptimConfig(name="adam", lr=1e-3)


@dataclasses.dataclass(frozen=True)
class DreamerConfig:
    """Dreamer's own hyper-parameters; the env, replay and update schedule are a
    ``jaxlab.rl.off_policy.OffPolicyConfig``, the optimisers a :class:`DreamerOptim` and
    LS-Imagine's settings an ``ls_imagine.LSConfig``.

    Attributes:
        sequence_length: length of the replayed sequences (>= 1, <= the per-env capacity).
        deter, groups, classes, hidden, embed, depth, num_bins: network sizes (``rssm``).
        horizon, gamma, lam: imagination length, discount and lambda (in [0, 1]).
        entropy: the actor's entropy weight (>= 0); traced.
        free_bits: KL free nats (>= 0).
        dyn_scale, rep_scale: KL balancing weights (>= 0); traced.
        slow_rate: slow-critic EMA rate, in (0, 1].
        retnorm_decay: return-scale EMA decay, in [0, 1).
    """

    sequence_length: int = 16
    deter: int = 64
    groups: int = 8
    classes: int = 8
    hidden: int = 64
    embed: int = 64
    depth: int = 8
    num_bins: int = 255
    horizon: int = 15
    gamma: float = 0.997
    lam: float = 0.95
    entropy: float = 3e-4
    free_bits: float = 1.0
    dyn_scale: float = 0.5
    rep_scale: float = 0.1
    slow_rate: float = 0.02
    retnorm_decay: float = 0.99

    def __post_init__(self):
        for name in ("sequence_length", "deter", "groups", "classes", "hidden", "embed"):
            _check_int(name, getattr(self, name))
        _check_int("depth", self.depth)
        _check_int("horizon", self.horizon)
        if self.num_bins < 3:
            raise ConfigError("num_bins", self.num_bins, "an int >= 3")
        for name in ("gamma", "lam"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(name, getattr(self, name), "a float in [0, 1]")
        for name in ("entropy", "free_bits", "dyn_scale", "rep_scale"):
            if not getattr(self, name) >= 0.0:
                raise ConfigError(name, getattr(self, name), "a float >= 0")
        if not 0.0 < self.slow_rate <= 1.0:
            raise ConfigError("slow_rate", self.slow_rate, "a float in (0, 1]")
        if not 0.0 <= self.retnorm_decay < 1.0:
            raise ConfigError("retnorm_decay", self.retnorm_decay, "a float in [0, 1)")


def _check_int(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(name, v, "an int >= 1")


#: the traced hyper-parameters of a Dreamer run, as the recipes' dotted keys (the optimisers at
#: ``optim``, :class:`DreamerConfig` at ``dreamer``); LS-Imagine adds ``optim.affordance.lr``
TRACED: tuple[str, ...] = (
    "optim.model.lr",
    "optim.actor.lr",
    "optim.critic.lr",
    "dreamer.entropy",
    "dreamer.dyn_scale",
    "dreamer.rep_scale",
)
LS_TRACED: tuple[str, ...] = (*TRACED, "optim.affordance.lr")
_ROLES = ("model", "actor", "critic", "affordance")


def hparams(cfg: DreamerConfig, optim: DreamerOptim, ls: bool) -> dict[str, Array]:
    """The values of :data:`TRACED` (:data:`LS_TRACED` with ``ls``) for ``state.hparams``
    (float32 scalars)."""
    out = {f"optim.{r}.lr": jnp.float32(getattr(optim, r).lr) for r in _ROLES}
    for name in ("entropy", "dyn_scale", "rep_scale"):
        out[f"dreamer.{name}"] = jnp.float32(getattr(cfg, name))
    return {k: out[k] for k in (LS_TRACED if ls else TRACED)}


def replay_config(cfg: DreamerConfig, off: OffPolicyConfig) -> SequenceReplayConfig:
    """The sequence buffer: ``off.buffer_size // off.num_envs`` items per env."""
    capacity = off.buffer_size // off.num_envs
    return SequenceReplayConfig(off.num_envs, capacity, off.batch_size, cfg.sequence_length)


@struct.dataclass
class DreamerState:
    """The whole train state: networks, optimizer states, return scale, buffer, envs, key."""

    wm: Any
    actor: Any
    critic: Any
    slow_critic: Any
    wm_opt: Any
    actor_opt: Any
    critic_opt: Any
    retnorm: Float[Array, "*s 2"]
    buffer: Any
    env_state: Any
    obs: Any
    need_first: Any
    action: Any
    latent: Latent
    episode_return: Any
    last_return: Any
    successes: Any
    episodes: Any
    key: PRNGKeyArray
    iteration: Any
    hparams: dict  # the traced learning rates, entropy weight and KL scales
    aff: Any = None  # LS-Imagine: relevance/predictor params, optimizer states, statistics


@dataclasses.dataclass(frozen=True)
class DreamerParts:
    """``init(key)``, ``iteration(state) -> (state, metrics)``, one ``update(state, key)``,
    ``wm_loss`` and ``imagine`` (for tests and benchmarks), the env and the networks."""

    init: Callable
    iteration: Callable
    update: Callable
    collect: Callable
    wm_loss: Callable
    imagine: Callable
    open_loop: Callable
    env: Any
    env_params: Any
    net: NetConfig
    world_model: WorldModel
    actor: Actor
    replay: Any
    cfg: DreamerConfig
    off_policy: OffPolicyConfig


def preprocess(obs) -> Float[Array, "*b s s 3"]:
    """uint8 pixels -> float in ``[-0.5, 0.5]``."""
    return obs.astype(jnp.float32) / 255.0 - 0.5


def _kl(lhs_logits, rhs_logits):
    return distrax.Categorical(logits=lhs_logits).kl_divergence(
        distrax.Categorical(logits=rhs_logits)
    )


def _bce(logit, target):
    return optax.sigmoid_binary_cross_entropy(logit, target)


@dataclasses.dataclass(frozen=True)
class Agent:
    """The static pieces of one Dreamer (or LS-Imagine) agent that its functions share.

    Attributes:
        cfg, off, optim, ls: the configs (``ls`` None for plain Dreamer).
        net, wm, actor, critic: the networks (``rssm``).
        n_act, size: the env's number of actions and observation side.
        total_updates: the horizon of decaying learning-rate schedules.
    """

    cfg: DreamerConfig
    off: OffPolicyConfig
    optim: DreamerOptim
    ls: ls_imagine.LSConfig | None
    net: NetConfig
    wm: WorldModel
    actor: Actor
    critic: Critic
    n_act: int
    size: int
    total_updates: int

    def tx(self, role: str, hp: Mapping[str, Any]) -> optax.GradientTransformation:
        """The optimiser of ``role`` at the traced rate in ``hp`` (a state's ``hparams``)."""
        cfg = getattr(self.optim, role)
        return optim_lib.from_hparams(cfg, self.total_updates, hp, f"optim.{role}")

    def action_vec(self, a, jump=None):
        """One-hot actions ``[..., n_act]``; with LS-Imagine a last jump bit (``jump``)."""
        v = jax.nn.one_hot(a, self.n_act)
        if self.ls is not None:
            j = jnp.zeros(a.shape, jnp.float32) if jump is None else jump.astype(jnp.float32)
            v = jnp.concatenate([v * (1 - j)[..., None], j[..., None]], -1)
        return v


def make_agent(
    cfg: DreamerConfig,
    off: OffPolicyConfig,
    optim: DreamerOptim,
    ls: ls_imagine.LSConfig | None,
    env: Any,
    env_params: Any,
    iterations: int,
) -> Agent:
    """The :class:`Agent` for ``env``: refuses envs without discrete actions and square
    ``[S, S, 3]`` pixel observations, and LS-Imagine boxes larger than the view."""
    space = env.action_space(env_params)
    obs_space = env.observation_space(env_params)
    if not isinstance(space, Discrete):
        raise ConfigError("env", off.env, "an env with a Discrete action space")
    if not isinstance(obs_space, Box) or len(obs_space.shape) != 3 or obs_space.shape[-1] != 3:
        raise ConfigError("env", off.env, "an env with [S, S, 3] pixel observations")
    size = int(obs_space.shape[0])
    if size not in OBS_SIZES or obs_space.shape[1] != size:
        raise ConfigError("obs_size", obs_space.shape[:2], f"a square side in {OBS_SIZES}")
    if ls is not None and ls.box > size:
        raise ConfigError("ls.box", ls.box, f"a box side <= the observation side {size}")
    n_act = space.n
    net = NetConfig(
        obs_size=size,
        action_dim=n_act + (1 if ls is not None else 0),
        deter=cfg.deter,
        groups=cfg.groups,
        classes=cfg.classes,
        hidden=cfg.hidden,
        embed=cfg.embed,
        depth=cfg.depth,
        num_bins=cfg.num_bins,
        aux_heads=ls is not None,
    )
    total_updates = max(1, iterations - off.learning_starts) * off.updates_per_iteration
    actor, critic = Actor(cfg.hidden, n_act), Critic(cfg.hidden, cfg.num_bins)
    return Agent(
        cfg, off, optim, ls, net, WorldModel(net), actor, critic, n_act, size, total_updates
    )


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
            return _bce(relevance.apply(p, img), labels).mean()

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


def make_world_model_fns(a: Agent):
    """The world model's ``(observe(wm_p, key, embed, actions, is_first) -> (priors,
    posteriors), wm_loss(wm_p, batch, key, scales) -> (loss, (metrics, posterior)))`` (module
    docstring, step 1)."""
    cfg, ls, net, wm, action_vec = a.cfg, a.ls, a.net, a.wm, a.action_vec

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

    def kl_terms(post_logits, prior_logits):
        dyn = _kl(jax.lax.stop_gradient(post_logits), prior_logits).sum(-1)
        rep = _kl(post_logits, jax.lax.stop_gradient(prior_logits)).sum(-1)
        return (
            jnp.maximum(dyn, cfg.free_bits),
            jnp.maximum(rep, cfg.free_bits),
            dyn,
            rep,
        )

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
        dyn, rep, dyn_raw, rep_raw = kl_terms(post.logits, prior.logits)
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
            k1, k2 = jax.random.split(k_jump)
            jprior = wm.apply(wm_p, k1, post, jvec, method=WorldModel.img_step)
            jpost = wm.apply(wm_p, k2, jprior, zembed, method=WorldModel.obs_step)
            jfeat = jpost.feat()
            jrecon = wm.apply(wm_p, jfeat, method=WorldModel.decode)
            jheads = wm.apply(wm_p, jfeat, method=WorldModel.heads)
            d_logits, g_logits = wm.apply(wm_p, feat, jfeat, method=WorldModel.jump_heads)
            jdyn, jrep, _, _ = kl_terms(jpost.logits, jprior.logits)
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
            metrics.update(
                jump_loss=jump_loss.mean(),
                intrinsic_loss=intr_loss.mean(),
                jump_transition_loss=jump_total,
                jump_rate=batch["jump"].astype(jnp.float32).mean(),
                jump_valid=w.mean(),
            )
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


def make_actor_critic_fns(a: Agent):
    """Imagination and the actor-critic step: ``(imagine(wm_p, actor_p, start, key),
    ac_update(state, posterior, key) -> (state, metrics))`` (module docstring, steps 2-4)."""
    cfg, ls, wm, actor, critic, action_vec, tx = (
        a.cfg,
        a.ls,
        a.wm,
        a.actor,
        a.critic,
        a.action_vec,
        a.tx,
    )

    def imagine(wm_p, actor_p, start: Latent, key):
        """``horizon`` imagined steps from ``start`` [N]: features [H+1, N, F], actions [H, N],
        jump flags [H, N] (all False without LS), Δ and Ĝ [H, N]."""

        def step(latent, k):
            k_a, k_s, k_g, k_j = jax.random.split(k, 4)
            feat = latent.feat()
            a = jax.random.categorical(k_a, actor.apply(actor_p, feat), -1)
            if ls is not None:
                h = wm.apply(wm_p, feat, method=WorldModel.heads)
                gate = jax.random.uniform(k_g, a.shape)
                jump = ls_imagine.imagined_jump(
                    h["jump"], jax.nn.sigmoid(h["cont"]), gate, ls.jump_prob
                )
            else:
                jump = jnp.zeros(a.shape, bool)
            nxt = wm.apply(wm_p, k_s, latent, action_vec(a, jump), method=WorldModel.img_step)
            if ls is not None:
                d_logits, g_logits = wm.apply(wm_p, feat, nxt.feat(), method=WorldModel.jump_heads)
                delta = jnp.where(jump, jnp.maximum(twohot.mean(d_logits), 1.0), 1.0)
                acc = jnp.where(jump, twohot.mean(g_logits), 0.0)
            else:
                delta, acc = jnp.ones(a.shape), jnp.zeros(a.shape)
            return nxt, (feat, a, jump, delta, acc)

        last, (feats, acts, jumps, delta, acc) = jax.lax.scan(
            step, start, jax.random.split(key, cfg.horizon)
        )
        feats = jnp.concatenate([feats, last.feat()[None]], 0)
        return feats, acts, jumps, delta, acc

    def ac_update(state: DreamerState, post: Latent, key):
        start = jax.tree.map(lambda x: jax.lax.stop_gradient(x.reshape((-1,) + x.shape[2:])), post)
        feats, acts, jumps, delta, acc = imagine(state.wm, state.actor, start, key)
        feats = jax.lax.stop_gradient(feats)
        heads = wm.apply(state.wm, feats[1:], method=WorldModel.heads)
        reward = twohot.mean(heads["reward"])
        if ls is not None:
            reward = reward + twohot.mean(heads["intrinsic"])  # the paid reward, scales in it
        cont = jax.nn.sigmoid(heads["cont"])
        value = twohot.mean(critic.apply(state.critic, feats))
        ret = mixed_lambda_return(reward, cont, value[1:], delta, acc, cfg.gamma, cfg.lam)
        ret = jax.lax.stop_gradient(ret)
        weight = jax.lax.stop_gradient(
            jnp.cumprod(jnp.concatenate([jnp.ones_like(cont[:1]), cont[:-1]], 0), 0)
        )
        lo, hi = jnp.percentile(ret, 5.0), jnp.percentile(ret, 95.0)
        d = cfg.retnorm_decay
        retnorm = d * state.retnorm + (1 - d) * jnp.stack([lo, hi])
        scale = jnp.maximum(1.0, retnorm[1] - retnorm[0])
        adv = jax.lax.stop_gradient((ret - value[:-1]) / scale)
        policy_w = weight * (1.0 - jumps.astype(jnp.float32))  # jumps are not the actor's

        def actor_loss(p):
            logits = actor.apply(p, feats[:-1])
            dist = distrax.Categorical(logits=logits)
            logp = dist.log_prob(acts)
            ent = dist.entropy()
            eta = state.hparams["dreamer.entropy"]
            return -jnp.mean(policy_w * (logp * adv + eta * ent)), ent.mean()

        slow_target = twohot.mean(critic.apply(state.slow_critic, feats[:-1]))

        def critic_loss(p):
            logits = critic.apply(p, feats[:-1])
            ce = twohot.loss(logits, ret) + twohot.loss(logits, slow_target)
            return jnp.mean(weight * ce)

        (a_loss, ent), a_grad = jax.value_and_grad(actor_loss, has_aux=True)(state.actor)
        a_upd, actor_opt = tx("actor", state.hparams).update(a_grad, state.actor_opt, state.actor)
        c_loss, c_grad = jax.value_and_grad(critic_loss)(state.critic)
        c_tx = tx("critic", state.hparams)
        c_upd, critic_opt = c_tx.update(c_grad, state.critic_opt, state.critic)
        critic_p = optax.apply_updates(state.critic, c_upd)
        slow = optax.incremental_update(critic_p, state.slow_critic, cfg.slow_rate)
        state = state.replace(
            actor=optax.apply_updates(state.actor, a_upd),
            actor_opt=actor_opt,
            critic=critic_p,
            critic_opt=critic_opt,
            slow_critic=slow,
            retnorm=retnorm,
        )
        metrics = {
            "actor_loss": a_loss,
            "critic_loss": c_loss,
            "entropy": ent,
            "imag_return": ret.mean(),
            "imag_reward": reward.mean(),
            "return_scale": scale,
            "imag_jump_rate": jumps.astype(jnp.float32).mean(),
        }
        return state, metrics

    return imagine, ac_update


def make_init(a: Agent, env: Any, env_params: Any, replay: Any, item_of: Callable):
    """``init(key) -> DreamerState``: networks, optimiser states, an empty buffer, reset envs."""
    cfg, ls, net, wm, actor, critic = a.cfg, a.ls, a.net, a.wm, a.actor, a.critic
    size, n, optim = a.size, a.off.num_envs, a.optim
    relevance, predictor = affordance.Relevance(), affordance.AffordancePredictor()
    init_tx = {r: optim_lib.make(getattr(optim, r), 1) for r in _ROLES}  # the states' structure

    def init(key: PRNGKeyArray) -> DreamerState:
        k_wm, k_a, k_c, k_env, k_aff, k_run = jax.random.split(key, 6)
        dummy_img = jnp.zeros((1, size, size, 3))
        wm_p = wm.init(k_wm, k_wm, dummy_img, jnp.zeros((1, net.action_dim)))
        feat0 = jnp.zeros((1, net.feat))
        actor_p, critic_p = actor.init(k_a, feat0), critic.init(k_c, feat0)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(k_env, n), env_params
        )
        aff = None
        if ls is not None:
            k1, k2 = jax.random.split(k_aff)
            rel_p, pred_p = relevance.init(k1, dummy_img), predictor.init(k2, dummy_img)
            aff = {
                "relevance": rel_p,
                "predictor": pred_p,
                "relevance_opt": init_tx["affordance"].init(rel_p),
                "predictor_opt": init_tx["affordance"].init(pred_p),
                "stat_mean": jnp.float32(0.0),
                "score_mean": jnp.float32(0.0),
                "score_sq": jnp.float32(0.0),
                # the episode's best concentration / relevance scores so far, per env
                "best_score": jnp.zeros((n,), jnp.float32),
                "best_relevance": jnp.zeros((n,), jnp.float32),
            }
        example, _ = item_of(
            obs[:1],
            jnp.zeros((1,), jnp.int32),
            jnp.zeros((1,)),
            jnp.ones((1,)),
            jnp.ones((1,), bool),
            aff,
            jnp.zeros((1,)),
            (jnp.zeros((1,)), jnp.zeros((1,))),
        )
        example = jax.tree.map(lambda x: jnp.zeros_like(x[0]), example)
        return DreamerState(
            wm=wm_p,
            actor=actor_p,
            critic=critic_p,
            slow_critic=critic_p,
            wm_opt=init_tx["model"].init(wm_p),
            actor_opt=init_tx["actor"].init(actor_p),
            critic_opt=init_tx["critic"].init(critic_p),
            retnorm=jnp.zeros((2,), jnp.float32),
            buffer=replay.init(example),
            env_state=env_state,
            obs=obs,
            need_first=jnp.ones((n,), bool),
            action=jnp.zeros((n,), jnp.int32),
            latent=zeros_latent(net, (n,)),
            episode_return=jnp.zeros((n,)),
            last_return=jnp.zeros((n,)),
            successes=jnp.float32(0),
            episodes=jnp.float32(0),
            key=k_run,
            iteration=jnp.int32(0),
            hparams=hparams(cfg, optim, ls is not None),
            aff=aff,
        )

    return init


def make_collect(a: Agent, env: Any, env_params: Any, replay: Any, item_of: Callable):
    """``collect(state) -> (state, metrics)``: one env step per env (or the first observation
    of a new episode), one buffer item each, and the acting latent observed."""
    ls, wm, actor, action_vec = a.ls, a.wm, a.actor, a.action_vec
    n, off = a.off.num_envs, a.off

    def collect(state: DreamerState) -> tuple[DreamerState, dict]:
        """One env step per env (or the first observation of a new episode), one item each."""
        key, k_step, k_lat, k_act = jax.random.split(state.key, 4)
        obs2, env2, r, term, trunc, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k_step, n), state.env_state, state.action, env_params
        )
        first = state.need_first
        keep = lambda new, old: jax.tree.map(
            lambda a, b: jnp.where(first.reshape((n,) + (1,) * (a.ndim - 1)), b, a), new, old
        )
        item_obs = jnp.where(first[:, None, None, None], state.obs, info["final_observation"])
        rel = best = None
        if ls is not None:
            rel_first = jax.vmap(_relevance_of_state)(state.env_state)
            rel = jnp.where(first, rel_first, info["relevance"])
            best = (state.aff["best_score"], state.aff["best_relevance"])
        item, best = item_of(
            item_obs,
            jnp.where(first, 0, state.action),
            jnp.where(first, 0.0, r),
            jnp.where(first, 1.0, 1.0 - term.astype(jnp.float32)),
            first,
            state.aff,
            rel,
            best,
        )
        done = ~first & (term | trunc)
        env_state = keep(env2, state.env_state)
        obs = jnp.where(first[:, None, None, None], state.obs, obs2)
        # the agent's latent for acting: reset at a first item, then observe it
        k1, k2 = jax.random.split(k_lat)
        reset = (1.0 - first.astype(jnp.float32))[:, None]
        prev = jax.tree.map(
            lambda x: x * reset.reshape(reset.shape + (1,) * (x.ndim - 2)), state.latent
        )
        embed = wm.apply(state.wm, preprocess(item_obs), method=WorldModel.encode)
        prior = wm.apply(
            state.wm, k1, prev, action_vec(item["prev_action"]) * reset, method=WorldModel.img_step
        )
        latent = wm.apply(state.wm, k2, prior, embed, method=WorldModel.obs_step)
        logits = actor.apply(state.actor, latent.feat())
        warm = state.iteration < off.learning_starts
        logits = jnp.where(warm, jnp.zeros_like(logits), logits)
        action = jax.random.categorical(k_act, logits, -1).astype(jnp.int32)
        buffer = replay.add(state.buffer, jax.tree.map(lambda x: x[:, None], item))
        ep_ret = state.episode_return + jnp.where(first, 0.0, r)
        aff = state.aff
        if ls is not None:
            dcy = ls.stats_decay
            aff = {
                **aff,
                "stat_mean": dcy * aff["stat_mean"] + (1 - dcy) * item["zoom_stat"].mean(),
                "score_mean": dcy * aff["score_mean"] + (1 - dcy) * item["intrinsic"].mean(),
                "score_sq": dcy * aff["score_sq"] + (1 - dcy) * (item["intrinsic"] ** 2).mean(),
                "best_score": best[0],
                "best_relevance": best[1],
            }
        success = done & (r > 0)
        state = state.replace(
            buffer=buffer,
            env_state=env_state,
            obs=obs,
            need_first=done,
            action=action,
            latent=latent,
            episode_return=jnp.where(done, 0.0, ep_ret),
            last_return=jnp.where(done, ep_ret, state.last_return),
            successes=state.successes + success.sum(),
            episodes=state.episodes + done.sum(),
            key=key,
            iteration=state.iteration + 1,
            aff=aff,
        )
        metrics = {"episode_return": state.last_return.mean(), "env_steps": (~first).sum()}
        if ls is not None:
            metrics["jump_flag_rate"] = item["jump"].astype(jnp.float32).mean()
            metrics["intrinsic"] = item["intrinsic"].mean()
            metrics["intrinsic_reward"] = item["intrinsic_reward"].mean()
        return state, metrics

    return collect


def make_parts(
    cfg: DreamerConfig,
    off_policy: OffPolicyConfig,
    optim: DreamerOptim,
    *,
    ls: ls_imagine.LSConfig | None = None,
    env_options: Mapping[str, Any] | None = None,
    iterations: int = 1,
    spread: Callable[[Any], Any] | None = None,
) -> DreamerParts:
    """Build the agent's pure functions (module docstring) on ``off_policy.env`` made with
    ``env_options``; LS-Imagine when ``ls`` is given. ``iterations`` (the run's length) is the
    horizon of decaying learning-rate schedules; ``spread`` (data parallel) constrains every
    sampled batch's leading axis to the mesh's data axes."""
    off = off_policy
    replay = make_sequence_replay(replay_config(cfg, off))
    env, env_params = envs.make(off.env, **dict(env_options or {}))
    a = make_agent(cfg, off, optim, ls, env, env_params, iterations)
    tx = a.tx
    _, item_of, aff_update = make_affordance_fns(a)
    observe, wm_loss = make_world_model_fns(a)
    imagine, ac_update = make_actor_critic_fns(a)
    init = make_init(a, env, env_params, replay, item_of)
    collect = make_collect(a, env, env_params, replay, item_of)

    def update(state: DreamerState, key: PRNGKeyArray):
        """One gradient step of the world model, then critic and actor in imagination."""
        k_s, k_wm, k_ac, k_aff = jax.random.split(key, 4)
        batch = replay.sample(state.buffer, k_s).experience
        if spread is not None:
            batch = spread(batch)
        scales = (state.hparams["dreamer.dyn_scale"], state.hparams["dreamer.rep_scale"])
        (_, (metrics, post)), grad = jax.value_and_grad(wm_loss, has_aux=True)(
            state.wm, batch, k_wm, scales
        )
        upd, wm_opt = tx("model", state.hparams).update(grad, state.wm_opt, state.wm)
        state = state.replace(wm=optax.apply_updates(state.wm, upd), wm_opt=wm_opt)
        state, ac_metrics = ac_update(state, post, k_ac)
        metrics = {**metrics, **ac_metrics}
        if ls is not None:
            aff, aff_metrics = aff_update(state.aff, batch, k_aff, state.hparams)
            state = state.replace(aff=aff)
            metrics.update(aff_metrics)
        return state, metrics

    zero_names = ["image_loss", "reward_loss", "cont_loss", "kl", "rep_kl", "actor_loss"]
    zero_names += ["critic_loss", "entropy", "imag_return", "imag_reward", "return_scale"]
    zero_names += ["imag_jump_rate"]
    if ls is not None:
        zero_names += ["jump_loss", "intrinsic_loss", "jump_transition_loss", "jump_rate"]
        zero_names += ["jump_valid", "relevance_loss", "affordance_loss"]

    def iteration(state: DreamerState) -> tuple[DreamerState, dict]:
        k_learn = jax.random.fold_in(state.key, 1)
        state, metrics = collect(state)

        def learn(s):
            keys = jax.random.split(k_learn, off.updates_per_iteration)
            s, m = jax.lax.scan(update, s, keys)
            return s, jax.tree.map(lambda x: x[-1], m)

        zeros = {k: jnp.float32(0) for k in zero_names}
        can = (state.iteration > off.learning_starts) & replay.can_sample(state.buffer)
        state, learn_metrics = jax.lax.cond(can, learn, lambda s: (s, zeros), state)
        return state, {**metrics, **learn_metrics, "learning": can}

    return DreamerParts(
        init=init,
        iteration=iteration,
        update=update,
        collect=collect,
        wm_loss=wm_loss,
        imagine=imagine,
        open_loop=make_open_loop(a, observe),
        env=env,
        env_params=env_params,
        net=a.net,
        world_model=a.wm,
        actor=a.actor,
        replay=replay,
        cfg=cfg,
        off_policy=off,
    )


def _relevance_of_state(env_state) -> Float[Array, ""]:
    from jaxlab.envs.open_world import relevance

    return relevance(env_state)


def make_evaluate(parts: DreamerParts, episodes: int, steps: int):
    """``evaluate(state, key) -> {"return", "success"}``: ``episodes`` episodes of at most
    ``steps`` env steps with the actor sampling from the posterior latent. Envs whose ``info``
    has ``target_distance`` (the open world) also give ``min_distance``, the episodes' mean
    closest approach to the target (progress short of success)."""
    env, env_params, wm, actor = parts.env, parts.env_params, parts.world_model, parts.actor
    n_act = env.action_space(env_params).n
    has_jump = parts.net.action_dim > n_act
    _, s0 = jax.eval_shape(env.reset, jax.random.key(0), env_params)
    info0 = jax.eval_shape(env.step, jax.random.key(0), s0, jnp.int32(0), env_params)[5]
    has_distance = "target_distance" in info0

    def one(key, state: DreamerState):
        k_reset, k_steps = jax.random.split(key)
        obs, s = env.reset(k_reset, env_params)
        latent = zeros_latent(parts.net, ())

        def body(carry, k):
            obs, s, latent, a_prev, first, done, ret, succ, near = carry
            k1, k2, k3, k4 = jax.random.split(k, 4)
            av = jax.nn.one_hot(a_prev, n_act) * (1.0 - first)
            if has_jump:
                av = jnp.concatenate([av, jnp.zeros((1,))], -1)
            prior = wm.apply(state.wm, k1, latent, av, method=WorldModel.img_step)
            embed = wm.apply(state.wm, preprocess(obs), method=WorldModel.encode)
            latent = wm.apply(state.wm, k2, prior, embed, method=WorldModel.obs_step)
            a = jax.random.categorical(k3, actor.apply(state.actor, latent.feat()), -1)
            obs2, s2, r, te, tr, info = env.step(k4, s, a, env_params)
            live = 1.0 - done
            succ = succ | ((done == 0.0) & info.get("success", te))
            if has_distance:
                near = jnp.where(done == 0.0, jnp.minimum(near, info["target_distance"]), near)
            ret = ret + live * r
            done = jnp.maximum(done, (te | tr).astype(jnp.float32))
            return (obs2, s2, latent, a, jnp.float32(0), done, ret, succ, near), None

        init = (obs, s, latent, jnp.int32(0), jnp.float32(1), jnp.float32(0), 0.0, False, jnp.inf)
        (_, _, _, _, _, _, ret, succ, near), _ = jax.lax.scan(
            body, init, jax.random.split(k_steps, steps)
        )
        return ret, succ, near

    def evaluate(state: DreamerState, key: PRNGKeyArray) -> dict[str, Array]:
        keys = jax.random.split(key, episodes)
        ret, succ, near = jax.vmap(one, in_axes=(0, None))(keys, state)
        out = {"return": ret.mean(), "success": succ.astype(jnp.float32).mean()}
        if has_distance:
            out["min_distance"] = near.mean()
        return out

    return evaluate


def make_train(
    cfg: DreamerConfig,
    off_policy: OffPolicyConfig,
    optim: DreamerOptim,
    iterations: int,
    **kwargs: Any,
):
    """``train(key) -> (state, metrics [iterations])``: a whole run as one scan (vmappable);
    ``kwargs`` as :func:`make_parts`'s (``ls``, ``env_options``)."""
    parts = make_parts(cfg, off_policy, optim, iterations=iterations, **kwargs)

    def train(key):
        return jax.lax.scan(lambda s, _: parts.iteration(s), parts.init(key), None, iterations)

    return train
