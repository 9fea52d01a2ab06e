"""End-to-end PPO training throughput of the original Kinetix (the peer side of
``benchmarks/bench_ppo.py --peer-train``).

Runs inside the peer venv only (``benchmarks/peers/.venv-kinetix``, made by
``setup_kinetix_peer.sh``). It builds the training of the original's ``experiments/ppo.py``
(github.com/FLAIROx/Kinetix; that script is not in the ``kinetix-env`` wheel) from the wheel's
own pieces, for the same cells as jaxlab's ``bench_ppo.py --train``, compiles one update
(``compile_s``), then times ``--updates`` updates and prints one JSON line per cell::

    {"what": "peer_train", "size": "s", "net": "mlp", "envs": 256, "steps_per_rollout": 64,
     "compile_s": ..., "time_s": ..., "rate": ..., "rate_cpu": ..., "load": ...,
     "resolved": {"num_train_envs": 256, "num_steps": 64, "update_epochs": 8,
                  "num_minibatches": 32, "network": "ActorCriticSymbolicRNN", ...}}

What one update is (``--loop ppo``, the default; experiments/ppo.py's ``_update_step``):

* env: ``LogWrapper(make_kinetix_env(multi_discrete, obs_type, reset_fn, env_params,
  static_env_params))`` with ``reset_fn = make_reset_fn_from_config`` (``train_level_mode:
  list`` of the bench's level, or ``random``), ``env_params = EnvParams(dense_reward_scale=0.2)``
  (``generate_params_from_config``), static sizes ``static_env_params_from_size(size)``
  (frame_skip 2); auto-reset through ``reset_fn`` as in ppo.py (``env.step`` without an
  override state).
* network: ``make_network_from_config`` with the paper's model config (``model-base`` +
  ``model-transformer``: tanh, 5 x 128 actor and critic layers, not recurrent; transformer depth
  2, 8 heads, qkv 16, encoder 128, ``dummy_and_mean``): ``ActorCriticSymbolicRNN`` on
  ``symbolic_flat``, ``ActorCriticTransformer`` on ``symbolic_entity``.
* optimiser: flax ``TrainState`` with ``clip_by_global_norm(1.0)`` + ``adam(5e-5, eps=1e-5)``
  (``ppo-base``: no annealing, no warm-up).
* rollout: ``lax.scan`` over ``num_steps`` of policy forward, ``pi.sample``, ``log_prob`` and
  ``jax.vmap(env.step)`` over ``num_train_envs`` (ppo.py's ``_env_step``; written here because
  ppo.py inlines it), the bootstrap value, then the wheel's ``kinetix.util.learning.compute_gae``
  and ``update_actor_critic_rnn`` (``update_epochs`` x ``num_minibatches`` Adam steps on the PPO
  clip + clipped value + entropy loss; the same loss ppo.py inlines; the wheel's function also
  computes each minibatch gradient's global norm, which ppo.py does not: a few hundred
  thousand flops per minibatch against the gradient's hundreds of millions).

``--loop library`` instead calls the wheel's ``sample_trajectories_and_learn`` (one
``outer_rollout_steps``) under one ``jax.jit``; it differs from ppo.py in one way: its rollout
auto-resets each env to the state it had at the start of the rollout (an override reset
state), not through ``reset_fn``; with a single fixed level the per-step cost is the same.

Cells (as ``bench_ppo.config``): ``num_steps`` 64 at N <= 256 and 8 above (``--steps``
overrides), ``update_epochs`` 8, minibatches of 512 transitions (``num_minibatches =
N * steps // 512``, at least 1). Levels (as ``bench_ppo.LEVELS``): S ``s/h2_one_wheel_car``,
M ``m/h5_angry_birds`` of ``SHARED_LEVELS``, L the same level padded to L capacities.
``rate`` is wall-clock env-steps/s, ``rate_cpu`` env-steps per CPU-second of this process.

Usage (repository root)::

    benchmarks/peers/.venv-kinetix/bin/python benchmarks/peers/bench_ppo_peer.py \
        --sizes s --nets mlp,transformer --envs 256,2048 --updates 3
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import time

import jax
import jax.numpy as jnp
import optax
from flax.serialization import to_state_dict
from flax.training.train_state import TrainState
from kinetix.environment import (
    ActionType,
    LogWrapper,
    ObservationType,
    make_kinetix_env,
    make_reset_fn_from_config,
    static_env_params_from_size,
)
from kinetix.environment.env_state import EnvParams
from kinetix.models import ScannedRNN, make_network_from_config
from kinetix.util.learning import (
    compute_gae,
    sample_trajectories_and_learn,
    update_actor_critic_rnn,
)

# kinetix-env 3.0.2's update_actor_critic_rnn and sample_trajectories_and_learn call
# ``jax.tree.tree_map``, which the jax it pins (0.9.0) no longer has; the alias restores the
# name (same function, no change to what is computed) so the wheel's own code runs unedited.
if not hasattr(jax.tree, "tree_map"):
    jax.tree.tree_map = jax.tree.map

REPO = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SHARED_LEVELS = os.path.realpath(os.path.join(REPO, "..", "shared", "kinetix-levels"))
# bench_ppo.LEVELS: S is the wheel's copy of s/h2_one_wheel_car (byte-identical to shared/'s),
# M and L the shared M level (L: padded to L capacities by load_evaluation_levels).
LEVELS = {
    "s": "s/h2_one_wheel_car",
    "m": os.path.join(SHARED_LEVELS, "m", "h5_angry_birds.json"),
    "l": os.path.join(SHARED_LEVELS, "m", "h5_angry_birds.json"),
}


def ppo_config(size: str, net: str, envs: int, steps: int, train_levels: str) -> dict:
    """The flat config dict experiments/ppo.py gets from ``normalise_config`` (configs/ppo.yaml
    with ``env=symbolic`` for the MLP, ``env=entity`` for the transformer), for this cell."""
    steps = steps or (64 if envs <= 256 else 8)
    obs_type = ObservationType.SYMBOLIC_FLAT if net == "mlp" else ObservationType.SYMBOLIC_ENTITY
    _, sizes = static_env_params_from_size(size, return_dict=True)
    cfg = {
        # env/{symbolic,entity}.yaml
        "action_type": ActionType.MULTI_DISCRETE,
        "observation_type": obs_type,
        "dense_reward_scale": 0.2,
        "frame_skip": 2,
        # env_size/<size>.yaml
        **sizes,
        "env_size_name": size,
        # learning/ppo-base.yaml + ppo-rnn.yaml, with this cell's envs / steps / minibatches
        "lr": 5e-5,
        "max_grad_norm": 1.0,
        "num_train_envs": envs,
        "num_steps": steps,
        "num_minibatches": max(1, envs * steps // 512),
        "update_epochs": 8,
        "gamma": 0.995,
        "gae_lambda": 0.9,
        "clip_eps": 0.2,
        "ent_coef": 0.01,
        "vf_coef": 0.5,
        "anneal_lr": False,
        "warmup_lr": False,
        "outer_rollout_steps": 1,
        # model/model-base.yaml + model-transformer.yaml (the wheel's key names: one fc width
        # and depth became actor_/critic_ ones; the newer switches at their off values)
        "actor_width": 128,
        "critic_width": 128,
        "actor_depth": 5,
        "critic_depth": 5,
        "activation": "tanh",
        "recurrent_model": False,
        "transformer_depth": 2,
        "transformer_size": 16,
        "transformer_encoder_size": 128,
        "num_heads": 8,
        "full_attention_mask": False,
        "aggregate_mode": "dummy_and_mean",
        "transformer_ffn": False,
        "multilayer_joint_thruster_mixing": False,
        "joint_thruster_block_num_layers": 2,
        "joint_thruster_block_hidden_dim_multiplication": 4,
        "dropout_prob": 0.0,
        "permutation_invariant_mlp": False,
    }
    if train_levels == "random":
        cfg["train_level_mode"] = "random"
    else:
        cfg["train_level_mode"] = "list"
        cfg["train_levels_list"] = [LEVELS[size] if train_levels == "bench" else train_levels]
    cfg["minibatch_size"] = envs * steps // cfg["num_minibatches"]
    return cfg


def build(cfg: dict, size: str):
    """Env, network, initial runner state, and one update ``runner -> (runner, loss)``."""
    env_params = EnvParams().replace(dense_reward_scale=cfg["dense_reward_scale"])
    static = static_env_params_from_size(size)
    cfg["static_env_params"] = to_state_dict(static)
    reset_fn = make_reset_fn_from_config(cfg, env_params, static)
    env = LogWrapper(
        make_kinetix_env(cfg["action_type"], cfg["observation_type"], reset_fn, env_params, static)
    )
    # network_kws passed explicitly: the function fills (mutates) its default dict
    network = make_network_from_config(env, env_params, cfg, network_kws={})
    n, t = cfg["num_train_envs"], cfg["num_steps"]

    key = jax.random.PRNGKey(0)
    key, k_reset, k_init = jax.random.split(key, 3)
    obs, env_state = jax.vmap(env.reset, (0, None))(jax.random.split(k_reset, n), env_params)
    done = jnp.zeros((n,), bool)
    hstate = ScannedRNN.initialize_carry(n)
    params = network.init(k_init, hstate, jax.tree.map(lambda x: x[None], (obs, done)))
    tx = optax.chain(
        optax.clip_by_global_norm(cfg["max_grad_norm"]), optax.adam(cfg["lr"], eps=1e-5)
    )
    train_state = TrainState.create(apply_fn=network.apply, params=params, tx=tx)
    runner = (train_state, env_state, obs, done, hstate, key)

    def update_ppo(runner):
        train_state, env_state, obs, done, hstate, key = runner
        init_hstate = hstate

        def env_step(carry, _):
            train_state, env_state, obs, done, hstate, key = carry
            key, k_act, k_step = jax.random.split(key, 3)
            x = jax.tree.map(lambda v: v[None], (obs, done))
            hstate, pi, value = network.apply(train_state.params, hstate, x)
            action = pi.sample(seed=k_act)
            log_prob = pi.log_prob(action)
            value, action, log_prob = (v.squeeze(0) for v in (value, action, log_prob))
            obs2, env_state, reward, done2, info = jax.vmap(env.step, (0, 0, 0, None))(
                jax.random.split(k_step, n), env_state, action, env_params
            )
            ret = info["returned_episode_returns"] * info["returned_episode"]
            carry = (train_state, env_state, obs2, done2, hstate, key)
            return carry, (obs, action, reward, done2, log_prob, value, ret)

        carry, traj = jax.lax.scan(env_step, runner, None, t)
        train_state, env_state, obs, done, hstate, key = carry
        t_obs, actions, rewards, dones, log_probs, values, rets = traj
        x = jax.tree.map(lambda v: v[None], (obs, done))
        _, _, last_value = network.apply(train_state.params, hstate, x)
        adv, targets = compute_gae(
            cfg["gamma"], cfg["gae_lambda"], last_value.squeeze(0), values, rewards, dones
        )
        (key, train_state), (losses, _) = update_actor_critic_rnn(
            key,
            train_state,
            init_hstate,
            (t_obs, actions, dones, log_probs, values, targets, adv),
            n,
            t,
            cfg["num_minibatches"],
            cfg["update_epochs"],
            cfg["clip_eps"],
            cfg["ent_coef"],
            cfg["vf_coef"],
        )
        episode_return = rets.sum() / jnp.maximum(1, dones.sum())
        return (train_state, env_state, obs, done, hstate, key), (losses[0].mean(), episode_return)

    def update_library(runner):
        train_state, env_state, obs, done, hstate, key = runner
        (key, train_state, hstate, obs, env_state), roll = sample_trajectories_and_learn(
            env, env_params, cfg, key, train_state, hstate, obs, env_state
        )
        losses = roll[9][0]
        return (train_state, env_state, obs, done, hstate, key), (losses.mean(), losses.mean())

    return network, runner, {"ppo": update_ppo, "library": update_library}


class Clock:
    def __enter__(self):
        self.t, self.c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t
        self.cpu = time.process_time() - self.c


def bench(size, net, envs, steps, updates, loop, train_levels) -> dict:
    cfg = ppo_config(size, net, envs, steps, train_levels)
    with Clock() as init:
        network, runner, updates_by_loop = build(cfg, size)
        jax.block_until_ready(runner)
    step = jax.jit(updates_by_loop[loop], donate_argnums=0)
    with Clock() as comp:
        compiled = step.lower(runner).compile()
    runner, out = compiled(runner)  # warm-up (first execution)
    jax.block_until_ready(out)
    with Clock() as run:
        for _ in range(updates):
            runner, out = compiled(runner)
        jax.block_until_ready(out)
    n = updates * cfg["num_train_envs"] * cfg["num_steps"]
    params = runner[0].params
    return {
        "what": "peer_train",
        "size": size,
        "net": net,
        "envs": envs,
        "steps_per_rollout": cfg["num_steps"],
        "epochs": cfg["update_epochs"],
        "minibatch": cfg["minibatch_size"],
        "updates": updates,
        "loop": loop,
        "compile_s": round(comp.wall, 2),
        "compile_cpu_s": round(comp.cpu, 2),
        "init_s": round(init.wall, 2),
        "time_s": round(run.wall, 2),
        "rate": round(n / run.wall, 1),
        "rate_cpu": round(n / run.cpu, 1),
        "unit": "env-steps/s",
        "loss": round(float(out[0]), 4),
        "resolved": {
            "num_train_envs": cfg["num_train_envs"],
            "num_steps": cfg["num_steps"],
            "update_epochs": cfg["update_epochs"],
            "num_minibatches": cfg["num_minibatches"],
            "minibatch_size": cfg["minibatch_size"],
            "network": type(network).__name__,
            "observation_type": cfg["observation_type"].name.lower(),
            "action_type": cfg["action_type"].name.lower(),
            "train_level_mode": cfg["train_level_mode"],
            "train_levels": cfg.get("train_levels_list", "random"),
            "static_sizes": [
                cfg[k] for k in ("num_polygons", "num_circles", "num_joints", "num_thrusters")
            ],
            "params": int(sum(x.size for x in jax.tree.leaves(params))),
        },
        "device": jax.devices()[0].platform,
        "jax": jax.__version__,
        "kinetix_env": importlib.metadata.version("kinetix-env"),
        "load": round(os.getloadavg()[0], 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="s")
    ap.add_argument("--nets", default="mlp,transformer")
    ap.add_argument("--envs", default="256,2048")
    ap.add_argument("--updates", type=int, default=1)
    ap.add_argument(
        "--steps", type=int, default=0, help="steps per rollout (0: 64 at N<=256, else 8)"
    )
    ap.add_argument("--loop", choices=("ppo", "library"), default="ppo")
    ap.add_argument(
        "--train-levels",
        default="bench",
        help="'bench' (bench_ppo's level of the size), 'random', or one level name/path",
    )
    args = ap.parse_args()
    for size in args.sizes.split(","):
        for net in args.nets.split(","):
            for n in (int(e) for e in args.envs.split(",")):
                row = bench(size, net, n, args.steps, args.updates, args.loop, args.train_levels)
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
