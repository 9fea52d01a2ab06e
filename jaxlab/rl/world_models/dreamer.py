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

The agent is composed here from its modules: ``agent`` (configs, train state, the static
:class:`Agent`), ``world_model`` (step 1), ``actor_critic`` (steps 2-4), ``affordance_learning``
(LS-Imagine's affordance learners and the buffer item), ``iteration`` (init, collect, update,
one iteration) and ``evaluate``; their public names are re-exported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax

from jaxlab import envs
from jaxlab.rl.off_policy import OffPolicyConfig
from jaxlab.rl.replay import make_sequence_replay
from jaxlab.rl.world_models import ls_imagine
from jaxlab.rl.world_models.actor_critic import make_actor_critic_fns
from jaxlab.rl.world_models.affordance_learning import make_affordance_fns
from jaxlab.rl.world_models.agent import (
    LS_TRACED,
    TRACED,
    Agent,
    DreamerConfig,
    DreamerOptim,
    DreamerState,
    hparams,
    make_agent,
    preprocess,
    replay_config,
)
from jaxlab.rl.world_models.evaluate import make_evaluate
from jaxlab.rl.world_models.iteration import (
    make_collect,
    make_init,
    make_iteration,
    make_update,
)
from jaxlab.rl.world_models.rssm import Actor, NetConfig, WorldModel
from jaxlab.rl.world_models.world_model import make_open_loop, make_world_model_fns

__all__ = [
    "LS_TRACED",
    "TRACED",
    "Agent",
    "DreamerConfig",
    "DreamerOptim",
    "DreamerParts",
    "DreamerState",
    "hparams",
    "make_actor_critic_fns",
    "make_affordance_fns",
    "make_agent",
    "make_collect",
    "make_evaluate",
    "make_init",
    "make_iteration",
    "make_open_loop",
    "make_parts",
    "make_train",
    "make_update",
    "make_world_model_fns",
    "preprocess",
    "replay_config",
]


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
    _, item_of, aff_update = make_affordance_fns(a)
    observe, wm_loss = make_world_model_fns(a)
    imagine, ac_update = make_actor_critic_fns(a)
    init = make_init(a, env, env_params, replay, item_of)
    collect = make_collect(a, env, env_params, replay, item_of)
    update = make_update(a, replay, wm_loss, ac_update, aff_update, spread)
    iteration = make_iteration(a, replay, collect, update)
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
