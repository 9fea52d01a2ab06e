"""Proximal Policy Optimisation (Schulman et al. 2017) as pure functions over a state, in the
purejaxrl shape.

* :mod:`~jaxlab.rl.ppo.config`: ``PPOConfig``, the traced hyper-parameters (``optim.lr``,
  ``ppo.clip_eps``, ``ppo.ent_coef``, ``ppo.vf_coef``: a sweep vmaps over them in one program)
  and the optimiser over a run;
* :mod:`~jaxlab.rl.ppo.spec`: ``PPO`` (the static half of a run: config, env, network,
  curriculum, mesh axis) and ``PPOState`` (the checkpointable pytree it carries);
* :mod:`~jaxlab.rl.ppo.rollouts`: policy rollouts in all envs; :mod:`~jaxlab.rl.ppo.gae`: GAE;
  :mod:`~jaxlab.rl.ppo.loss`: the clipped surrogate (PPO eq. 7), value and entropy loss;
  :mod:`~jaxlab.rl.ppo.epochs`: the epochs of minibatch steps on one rollout;
* :mod:`~jaxlab.rl.ppo.run`: ``init(agent, key)``, ``update(agent, state)`` (the shared
  loop's ``train_step``), ``train(agent, key, n)`` and ``make_train(cfg, env, ...)(key)``.

Shard invariance (``shard_invariant``): an update on ``D`` data shards (inside ``shard_map``
over the ``data`` axis, ``PPO.axis_name="data"``) is the computation of one device up to the
order of float sums (:mod:`~jaxlab.rl.ppo.rollouts`, :mod:`~jaxlab.rl.ppo.epochs`). This holds
for curricula without per-device state (``uniform``); an SFL buffer split over devices draws its
own levels on each device.
"""

from jaxlab.rl.ppo.config import (
    OPTIM,
    TRACED,
    PPOConfig,
    hparams_from,
    make_optimizer,
    optimizer_steps,
)
from jaxlab.rl.ppo.epochs import learn
from jaxlab.rl.ppo.gae import Transition, compute_gae
from jaxlab.rl.ppo.loss import ppo_loss
from jaxlab.rl.ppo.rollouts import rollout, success_rates
from jaxlab.rl.ppo.run import init, make_train, train, update
from jaxlab.rl.ppo.spec import PPO, PPOState, policy

__all__ = [
    "OPTIM",
    "PPO",
    "TRACED",
    "PPOConfig",
    "PPOState",
    "Transition",
    "compute_gae",
    "hparams_from",
    "init",
    "learn",
    "make_optimizer",
    "make_train",
    "optimizer_steps",
    "policy",
    "ppo_loss",
    "rollout",
    "success_rates",
    "train",
    "update",
]
