"""kinetix-ppo throughput, where the time goes, the cpu-single learning curve, and the original.

Every measurement prints one JSON line. Modes (combine freely):

* ``--train`` (default): end-to-end PPO training env-steps/s for sizes S/M/L, MLP + flat vs
  transformer + entity observations, at N = 256 and 2048 envs. One update is compiled
  (``compile_s``, trace + XLA, measured separately), then ``--updates`` updates are timed.
  N = 256 uses 64 steps per rollout (the original's CPU setting); N = 2048 uses 8 steps per
  rollout so one update stays affordable on 2 cores; both use minibatches of 512 transitions
  and 8 epochs (the paper's 32 minibatches x 8 epochs at N = 256).
* ``--profile``: the split of one update between the env (rollout with random actions), the
  policy's forward pass in the rollout, and the PPO update (epochs of minibatch gradients).
* ``--curve``: the ``cpu-single`` preset on ``s/h2_one_wheel_car``; the evaluation solve rate
  (20 attempts) after every update, as in the issue's "steps to a 0.9 solve rate".
* ``--peer``: the original Kinetix (``benchmarks/peers/.venv-kinetix``, set up by
  ``benchmarks/peers/setup_kinetix_peer.sh``) measured the same way in the same run: its
  transformer's forward/gradient on a 512-sample minibatch (the part that dominates its PPO), and
  ours for the ratio: one pass over 512, and ``grad_4x128`` accumulated over 4 chunks of 128
  (``ppo.grad_chunks=4``; ``--train`` runs the recipe's default, one chunk).
* ``--peer-train``: each ``--train`` cell for jaxlab, then the same cell for the original's own
  PPO training (``benchmarks/peers/bench_ppo_peer.py``: experiments/ppo.py's update built from
  the ``kinetix-env`` wheel, run in the peer venv in a fresh process: same size, level, envs,
  steps per rollout, 8 epochs, minibatches of 512, MLP on flat / transformer on entity
  observations; at XLA's default flags whatever ``XLA_FLAGS`` ours runs under, both echoed),
  then one ``ppo_train_vs_peer`` line per cell with both rates, ``speedup``
  (ours / peer, wall clock), ``speedup_cpu`` and the peer's resolved config. Run it on an idle
  machine; the peer venv is found at ``--peer-python``.

* ``--floor``: the matmul floor of one update (``ppo_update_matmul_floor``): the update's
  ``dot_general`` FLOPs, counted on its jaxpr (``harness.dot_flops``), over this machine's float32
  GEMM rate (``harness.gemm_peak``, 2048x2048). With ``--peer-train`` in the same run it adds the
  peer's seconds per update and ``max_speedup``: the largest ratio any exact implementation of
  the same update could reach on this CPU even if the env and everything but the matmuls were
  free.

Rates: ``rate`` is wall-clock env-steps/s; ``rate_cpu`` is env-steps per CPU-second of this
process (``time.process_time``), which stays meaningful on a loaded shared machine (``load``
is the 1-minute load average at the end of the measurement). Levels: S is the shipped
``s/h2_one_wheel_car``; M is ``m/h5_angry_birds`` of
the original Kinetix levels (kinetix-env's ``kinetix/levels``, read from ``SHARED``); L pads that M
level into L capacities (costs depend on the capacities, not on the level's contents).

Usage: ``python -m benchmarks.bench_ppo [--train] [--profile] [--curve] [--peer] [--peer-train] [--floor]
[--sizes s,m,l] [--nets mlp,transformer] [--envs 256,2048] [--updates N] [--steps T]``
(``--steps`` overrides the steps per rollout, for smoke runs only).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import harness
from benchmarks.harness import dot_flops, gemm_peak, peer_env
from jaxlab.core import config as C
from jaxlab.core import recipe as recipe_lib
from jaxlab.core.compile import compiler_options, jit
from jaxlab.envs.kinetix.actions import random_action
from jaxlab.recipes import kinetix_ppo as kp
from jaxlab.rl import kinetix_eval as ke
from jaxlab.rl import ppo as ppo_lib
from jaxlab.rl.ppo.rollouts import step_envs

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "kinetix-levels"
LEVELS = {
    "s": "s/h2_one_wheel_car",
    "m": str(SHARED / "m" / "h5_angry_birds.json"),
    "l": str(SHARED / "m" / "h5_angry_birds.json"),
}


def emit(**row) -> dict:
    row.setdefault("load", round(os.getloadavg()[0], 1))
    return harness.emit(row)


class Clock:
    """Wall and CPU seconds of a block."""

    def __enter__(self):
        self.t, self.c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t
        self.cpu = time.process_time() - self.c


def config(
    size: str,
    net: str,
    envs: int,
    grad_chunks: int = 0,
    steps: int = 0,
    train_levels: str = "bench",
) -> kp.KinetixPPOConfig:
    """``grad_chunks`` 0: the recipe's default, 1 (whole-minibatch gradients; 1, 2 and 4 chunks
    of the transformer's gradient run within 3 % of each other, see ``PPOConfig.grad_chunks``).
    ``steps`` 0: 64 steps per rollout at N <= 256, else 8 (``--steps`` overrides, for smoke
    runs); minibatches of 512 transitions (at least one minibatch). ``train_levels``: ``bench``
    (the size's bench level) or ``random`` (the procedural generator at that size, as the
    general agent trains)."""
    steps = steps or (64 if envs <= 256 else 8)
    chunks = grad_chunks or 1
    over = {
        "env.size": size,
        "env.train_levels": "random" if train_levels == "random" else LEVELS[size],
        "ppo.num_envs": envs,
        "ppo.num_steps": steps,
        "ppo.update_epochs": 8,
        "ppo.num_minibatches": max(1, envs * steps // 512),
        "ppo.grad_chunks": chunks,
        "loop.total_steps": 1000,
    }
    if net == "mlp":
        over.update({"network.kind": "mlp", "env.observation_type": "symbolic_flat"})
    else:
        over.update({"network.kind": "transformer", "env.observation_type": "symbolic_entity"})
    return C.replace(kp.KinetixPPOConfig(), **over)


def bench_train(
    size: str,
    net: str,
    envs: int,
    updates: int,
    grad_chunks: int = 0,
    steps: int = 0,
    train_levels: str = "bench",
) -> dict:
    cfg = config(size, net, envs, grad_chunks, steps, train_levels)
    with Clock() as build:
        agent = kp.agent(cfg)
        state = jit(functools.partial(ppo_lib.init, agent.ppo))(jax.random.PRNGKey(0))
        jax.block_until_ready(state)
    step = jit(functools.partial(ppo_lib.update, agent.ppo), donate_argnums=0)
    with Clock() as comp:
        compiled = step.lower(state).compile()
    state, m = compiled(state)  # warm-up
    jax.block_until_ready(m)
    with Clock() as run:
        for _ in range(updates):
            state, m = compiled(state)
        jax.block_until_ready(m)
    n = updates * cfg.ppo.num_envs * cfg.ppo.num_steps
    return emit(
        what="ppo_train",
        size=size,
        net=net,
        envs=envs,
        steps_per_rollout=cfg.ppo.num_steps,
        epochs=cfg.ppo.update_epochs,
        minibatch=cfg.ppo.minibatch_size,
        grad_chunks=cfg.ppo.grad_chunks,
        updates=updates,
        train_levels=train_levels,
        compile_s=round(comp.wall, 2),
        compile_cpu_s=round(comp.cpu, 2),
        init_s=round(build.wall, 2),
        time_s=round(run.wall, 2),
        rate=round(n / run.wall, 1),
        rate_cpu=round(n / run.cpu, 1),
        unit="env-steps/s",
        compiler_options=compiler_options(),
    )


def bench_profile(
    size: str, net: str, envs: int, reps: int = 2, steps: int = 0, train_levels: str = "bench"
) -> None:
    """Env-only rollout, rollout with the policy, and the update on a fixed rollout."""
    cfg = config(size, net, envs, steps=steps, train_levels=train_levels)
    agent = kp.agent(cfg)
    ppo = agent.ppo
    state = jit(functools.partial(ppo_lib.init, ppo))(jax.random.PRNGKey(0))
    T, at, sp = cfg.ppo.num_steps, cfg.env.action_type, agent.static

    @jit
    def env_only(state):
        def body(carry, k):
            es = carry
            a = jax.vmap(lambda kk: random_action(kk, at, sp))(jax.random.split(k, envs))
            _, es, *_ = step_envs(ppo, k, es, a, state.levels)
            return es, None

        es, _ = jax.lax.scan(body, state.env_state, jax.random.split(state.key, T))
        return es

    @jit
    def rollout(state):
        return ppo_lib.rollout(
            ppo,
            state.key,
            state.params,
            state.obs_stats,
            state.env_state,
            state.obs,
            state.levels,
            T,
        )

    _, _, traj = rollout(state)
    _, last_v = ppo_lib.policy(ppo, state.params, state.obs_stats, state.obs)
    from jaxlab.rl.ppo import compute_gae

    adv, tgt = compute_gae(traj.reward, traj.value, traj.done, last_v, 0.99, 0.95)

    @jit
    def update_only(state, traj, adv, tgt):
        return ppo_lib.learn(
            ppo, state.key, state.params, state.opt_state, state.obs_stats, traj, adv, tgt
        )

    @jit
    def forward_only(state, traj):
        flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), traj.obs)
        return ppo_lib.policy(ppo, state.params, state.obs_stats, flat)[1]

    rows = {}
    for name, fn, args in (
        ("env_rollout", env_only, (state,)),
        ("policy_rollout", rollout, (state,)),
        ("policy_forward", forward_only, (state, traj)),
        ("update", update_only, (state, traj, adv, tgt)),
    ):
        jax.block_until_ready(fn(*args))
        with Clock() as c:
            for _ in range(reps):
                out = fn(*args)
            jax.block_until_ready(out)
        rows[name] = c.cpu / reps
    total = rows["policy_rollout"] + rows["update"]
    emit(
        what="ppo_profile",
        size=size,
        net=net,
        envs=envs,
        steps_per_rollout=T,
        cpu_s_per_update={k: round(v, 3) for k, v in rows.items()},
        frac_env=round(rows["env_rollout"] / total, 3),
        frac_rollout_network=round(max(rows["policy_rollout"] - rows["env_rollout"], 0) / total, 3),
        frac_update=round(rows["update"] / total, 3),
        unit="cpu-seconds",
    )


def bench_curve(max_updates: int, attempts: int, level: str = "s/h2_one_wheel_car") -> None:
    recipe = recipe_lib.get("kinetix-ppo")
    cfg = recipe.config("cpu-single", [f"env.train_levels={level}"])
    agent = kp.agent(cfg)
    state = jit(functools.partial(ppo_lib.init, agent.ppo))(jax.random.PRNGKey(cfg.seed))
    step = jit(functools.partial(ppo_lib.update, agent.ppo), donate_argnums=0)
    evaluator = ke.Evaluator(agent, level, num_attempts=attempts, max_steps=cfg.env.max_timesteps)
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    per = cfg.ppo.num_envs * cfg.ppo.num_steps
    for u in range(1, max_updates + 1):
        state, m = step(state)
        _, res, _ = evaluator(state, jax.random.PRNGKey(100 + u))
        sr = float(np.mean(res.solve_rate))
        emit(
            what="ppo_curve",
            preset="cpu-single",
            level=level,
            compiler_options=compiler_options(),
            update=u,
            env_steps=u * per,
            eval_solve_rate=round(sr, 3),
            train_solve_rate=round(float(m["solve_rate"]), 3),
            train_return=round(float(m["episode_return"]), 3),
            wall_s=round(time.perf_counter() - start_wall, 1),
            cpu_s=round(time.process_time() - start_cpu, 1),
        )


PEER_SCRIPT = r"""
import json, time, jax, jax.numpy as jnp, numpy as np
from kinetix.models.transformer_model import ActorCriticTransformer
from kinetix.models.actor_critic import ScannedRNN
from kinetix.render.renderer_symbolic_entity import EntityObservation
from kinetix.environment.spaces import ActionType
B = 512; P, C, J, T = 5, 2, 1, 1; N = P + C
rng = np.random.default_rng(0)
f = lambda *s: jnp.asarray(rng.normal(size=(1, B) + s), jnp.float32)
ones = lambda *s: jnp.ones((1, B) + s, bool)
obs = EntityObservation(circles=f(C, 19), polygons=f(P, 27), joints=f(2 * J, 22),
    thrusters=f(T, 8), circle_mask=ones(C), polygon_mask=ones(P), joint_mask=ones(2 * J),
    thruster_mask=ones(T), attention_mask=ones(4, N, N),
    joint_indexes=jnp.zeros((1, B, 2 * J, 2), jnp.int32),
    thruster_indexes=jnp.zeros((1, B, T), jnp.int32))
net = ActorCriticTransformer(action_dim=16, actor_width=128, critic_width=128,
    action_mode=ActionType.MULTI_DISCRETE, hybrid_action_continuous_dim=16,
    multi_discrete_number_of_dims_per_distribution=[3, 3, 3, 3, 2, 2], transformer_size=16,
    transformer_encoder_size=128, transformer_depth=2, actor_depth=5, critic_depth=5,
    num_heads=8, activation="tanh", aggregate_mode="dummy_and_mean", full_attention_mask=False,
    transformer_ffn=False, multilayer_joint_thruster_mixing=False,
    joint_thruster_block_num_layers=2, joint_thruster_block_hidden_dim_multiplication=4,
    recurrent=False)
h = ScannedRNN.initialize_carry(B); x = (obs, jnp.zeros((1, B), bool))
params = net.init(jax.random.PRNGKey(0), h, x)
a = jnp.zeros((1, B, 6), jnp.int32)
def loss(p):
    _, pi, v = net.apply(p, h, x)
    return jnp.mean(pi.log_prob(a)) + jnp.mean(v)
out = {}
for name, fn in (("forward", jax.jit(lambda p: net.apply(p, h, x)[2])), ("grad", jax.jit(jax.grad(loss)))):
    jax.block_until_ready(fn(params)); jax.block_until_ready(fn(params))
    c = time.process_time()
    for _ in range(10): r = fn(params)
    jax.block_until_ready(r)
    out[name] = (time.process_time() - c) / 10
out["params"] = int(sum(l.size for l in jax.tree.leaves(params)))
out["jax"] = jax.__version__
print("PEER", json.dumps(out))
"""


def ours_network_ms() -> dict:
    from jaxlab.envs.kinetix.observations import random_entity_observation
    from jaxlab.envs.spaces import MultiDiscrete
    from jaxlab.rl.action_heads import head_for_space
    from jaxlab.rl.networks import ActorCritic, NetworkConfig

    # the S action space (4 motors, 2 thrusters) and the network tests' entity counts
    head = head_for_space(MultiDiscrete([3, 3, 3, 3, 2, 2]))
    net = ActorCritic(NetworkConfig(), head)
    obs = jax.tree.map(jnp.asarray, random_entity_observation(0, 512))
    params = net.init(jax.random.PRNGKey(0), obs)
    a = jnp.zeros((512, 6), jnp.int32)

    def loss(p):
        pi, v = net.apply(p, obs)
        return jnp.mean(pi.log_prob(a)) + jnp.mean(v)

    def chunked_grad(p):  # PPOConfig.grad_chunks = 4: the same gradient over 4 x 128 samples
        def chunk_loss(p, c):
            pi, v = net.apply(p, c[0])
            return jnp.mean(pi.log_prob(c[1])) + jnp.mean(v)

        chunks = jax.tree.map(lambda x: x.reshape((4, 128) + x.shape[1:]), (obs, a))
        zero = jax.tree.map(jnp.zeros_like, p)
        acc = lambda g, c: (jax.tree.map(jnp.add, g, jax.grad(chunk_loss)(p, c)), None)
        return jax.tree.map(lambda g: g / 4, jax.lax.scan(acc, zero, chunks)[0])

    out = {}
    for name, fn in (
        ("forward", jit(lambda p: net.apply(p, obs)[1])),
        ("grad", jit(jax.grad(loss))),
        ("grad_4x128", jit(chunked_grad)),
    ):
        jax.block_until_ready(fn(params))
        jax.block_until_ready(fn(params))
        with Clock() as c:
            for _ in range(10):
                r = fn(params)
            jax.block_until_ready(r)
        out[name] = c.cpu / 10
    out["params"] = int(sum(x.size for x in jax.tree.leaves(params)))
    return out


def bench_peer() -> None:
    py = ROOT / "benchmarks" / "peers" / ".venv-kinetix" / "bin" / "python"
    if not py.exists():
        emit(
            what="peer_network",
            error="peer venv missing; run benchmarks/peers/setup_kinetix_peer.sh",
        )
        return
    ours = ours_network_ms()
    proc = subprocess.run([str(py), "-c", PEER_SCRIPT], capture_output=True, text=True, timeout=900)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("PEER ")]
    if not line:
        emit(what="peer_network", error=proc.stderr[-500:])
        return
    peer = json.loads(line[0][5:])
    for part, peer_part in (("forward", "forward"), ("grad", "grad"), ("grad_4x128", "grad")):
        emit(
            what=f"transformer_{part}_512",
            size="s",
            cpu_ms=round(ours[part] * 1e3, 1),
            peer_cpu_ms=round(peer[peer_part] * 1e3, 1),
            speedup=round(peer[peer_part] / ours[part], 2),
            params=ours["params"],
            peer_params=peer["params"],
            peer_jax=peer["jax"],
            unit="cpu-ms per minibatch of 512",
        )


PEER_PYTHON = ROOT / "benchmarks" / "peers" / ".venv-kinetix" / "bin" / "python"
PEER_TRAIN = ROOT / "benchmarks" / "peers" / "bench_ppo_peer.py"


def bench_floor(
    size: str, net: str, envs: int, grad_chunks: int = 0, steps: int = 0, peer: dict | None = None
) -> None:
    """The matmul floor of one PPO update: the ``dot_general`` FLOPs of the update's jaxpr
    (``update_dot_gflop``: 8 epochs of minibatch gradients and Adam steps on one rollout, the
    rollout's policy passes counted separately in ``rollout_dot_gflop``) over this machine's
    2048x2048 float32 matmul rate (``gemm_gflops``): ``floor_s`` is the time no implementation
    of the same update can beat on this CPU without faster matmuls. With ``peer`` (its
    ``peer_train`` line, same run) ``peer_s_per_update`` and ``max_speedup`` = the peer's
    seconds per update over ``floor_s``: the most any exact reimplementation could gain here,
    even if everything but the update's matmuls cost nothing."""
    cfg = config(size, net, envs, grad_chunks, steps)
    agent = kp.agent(cfg)
    ppo = agent.ppo
    state = jax.eval_shape(functools.partial(ppo_lib.init, ppo), jax.random.PRNGKey(0))
    full = dot_flops(jax.make_jaxpr(functools.partial(ppo_lib.update, ppo))(state))
    T = cfg.ppo.num_steps
    rollout = dot_flops(
        jax.make_jaxpr(
            lambda s: ppo_lib.rollout(
                ppo, s.key, s.params, s.obs_stats, s.env_state, s.obs, s.levels, T
            )
        )(state)
    )
    peak = gemm_peak()
    update = full - rollout
    floor = update / peak
    row = dict(
        what="ppo_update_matmul_floor",
        size=size,
        net=net,
        envs=envs,
        steps_per_rollout=T,
        epochs=cfg.ppo.update_epochs,
        minibatch=cfg.ppo.minibatch_size,
        update_dot_gflop=round(update / 1e9, 1),
        rollout_dot_gflop=round(rollout / 1e9, 2),
        gemm_gflops=round(peak / 1e9, 1),
        floor_s=round(floor, 3),
    )
    if peer is not None:
        peer_s = cfg.ppo.num_envs * cfg.ppo.num_steps / peer["rate"]
        row.update(peer_s_per_update=round(peer_s, 3), max_speedup=round(peer_s / floor, 2))
    emit(**row)


def bench_peer_train(
    size: str,
    net: str,
    envs: int,
    updates: int,
    grad_chunks: int = 0,
    steps: int = 0,
    peer_python: Path = PEER_PYTHON,
    train_levels: str = "bench",
) -> dict | None:
    """One ``--train`` cell for jaxlab, then the same cell for the original's PPO
    (``benchmarks/peers/bench_ppo_peer.py`` in the peer venv, a fresh process), and one line
    with both rates and ``speedup`` = ours / peer (wall clock; ``speedup_cpu`` per CPU-second).
    The peer's resolved config is echoed (``peer_resolved``) next to ours so the match is
    visible in the line itself. Returns the peer's line (``None`` when it could not run)."""
    if not Path(peer_python).exists():
        emit(
            what="ppo_train_vs_peer",
            size=size,
            net=net,
            envs=envs,
            error=f"peer venv missing ({peer_python}); run benchmarks/peers/setup_kinetix_peer.sh",
        )
        return None
    ours = bench_train(size, net, envs, updates, grad_chunks, steps, train_levels)
    cmd = [str(peer_python), str(PEER_TRAIN), "--sizes", size, "--nets", net]
    cmd += ["--envs", str(envs), "--updates", str(updates), "--steps", str(steps)]
    cmd += ["--train-levels", train_levels]
    # The original runs in harness.peer_env (XLA's defaults unless JAXLAB_PEER_XLA_FLAGS), whatever
    # XLA_FLAGS ours runs under; both are echoed in the line, with jaxlab's compile options.
    env = peer_env()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=ROOT, env=env)
    rows = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    peer = next((r for r in rows if r.get("what") == "peer_train"), None)
    if peer is None:
        emit(what="ppo_train_vs_peer", size=size, net=net, envs=envs, error=proc.stderr[-800:])
        return None
    harness.emit(peer)
    emit(
        what="ppo_train_vs_peer",
        size=size,
        net=net,
        envs=envs,
        steps_per_rollout=ours["steps_per_rollout"],
        epochs=ours["epochs"],
        minibatch=ours["minibatch"],
        updates=updates,
        rate=ours["rate"],
        peer_rate=peer["rate"],
        speedup=round(ours["rate"] / peer["rate"], 2),
        rate_cpu=ours["rate_cpu"],
        peer_rate_cpu=peer["rate_cpu"],
        speedup_cpu=round(ours["rate_cpu"] / peer["rate_cpu"], 2),
        compile_s=ours["compile_s"],
        peer_compile_s=peer["compile_s"],
        peer_resolved=peer["resolved"],
        peer_loop=peer["loop"],
        peer_jax=peer["jax"],
        peer_load=peer["load"],
        xla_flags=os.environ.get("XLA_FLAGS", ""),
        compiler_options=compiler_options(),
        peer_xla_flags=env.get("XLA_FLAGS", ""),
        unit="env-steps/s",
    )
    return peer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--curve", action="store_true")
    ap.add_argument("--peer", action="store_true")
    ap.add_argument("--peer-train", action="store_true")
    ap.add_argument(
        "--floor",
        action="store_true",
        help="the update's matmul floor on this CPU (with --peer-train: the largest speedup "
        "over the peer that any exact implementation could reach)",
    )
    ap.add_argument(
        "--peer-python",
        default=str(PEER_PYTHON),
        help="the peer venv's python (default: benchmarks/peers/.venv-kinetix/bin/python)",
    )
    ap.add_argument(
        "--steps", type=int, default=0, help="steps per rollout (0: 64 at N<=256, else 8)"
    )
    ap.add_argument("--sizes", default="s,m,l")
    ap.add_argument("--nets", default="mlp,transformer")
    ap.add_argument("--envs", default="256,2048")
    ap.add_argument("--updates", type=int, default=1)
    ap.add_argument(
        "--train-levels",
        default="bench",
        choices=("bench", "random"),
        help="--train/--peer-train levels: the size's bench level, or the generator's (both sides)",
    )
    ap.add_argument("--curve-updates", type=int, default=15)
    ap.add_argument(
        "--curve-level", default="s/h2_one_wheel_car", help="the --curve level (train and eval)"
    )
    ap.add_argument("--attempts", type=int, default=20)
    ap.add_argument(
        "--grad-chunks",
        type=int,
        default=0,
        help="ppo.grad_chunks (0: the recipe's default, 1)",
    )
    args = ap.parse_args()
    if not (args.train or args.profile or args.curve or args.peer or args.peer_train or args.floor):
        args.train = True
    sizes, nets = args.sizes.split(","), args.nets.split(",")
    envs = [int(e) for e in args.envs.split(",")]
    if args.peer:
        bench_peer()
    for size in sizes:
        for net in nets:
            for n in envs:
                if args.train:
                    bench_train(
                        size, net, n, args.updates, args.grad_chunks, args.steps, args.train_levels
                    )
                peer = None
                if args.peer_train:
                    peer = bench_peer_train(
                        size,
                        net,
                        n,
                        args.updates,
                        args.grad_chunks,
                        args.steps,
                        Path(args.peer_python),
                        args.train_levels,
                    )
                if args.floor:
                    bench_floor(size, net, n, args.grad_chunks, args.steps, peer)
                if args.profile:
                    bench_profile(size, net, n, steps=args.steps, train_levels=args.train_levels)
    if args.curve:
        bench_curve(args.curve_updates, args.attempts, args.curve_level)


if __name__ == "__main__":
    main()
