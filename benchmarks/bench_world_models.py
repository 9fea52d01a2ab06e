"""World models (``jaxlab.rl.world_models``): throughput, and the learning comparison.

Throughput (default mode), one JSON line per measurement (``what, size, compile_s, time_s, rate,
unit``, peak temporary memory of the compiled program from XLA's memory analysis):

* ``env_step``: the ``open-world`` env alone (ray-cast rendering included), a ``lax.scan`` of
  ``--chunk`` steps at 1 and 256 parallel envs (``--envs``);
* ``wm_update``: one Dreamer gradient step (world model on ``batch x seq`` replayed sequences,
  imagination of ``horizon`` steps from every posterior state, critic and actor);
* ``wm_loss_grad``: the world-model loss and gradient alone and ``imagine``: the imagination
  rollout alone (``batch x seq`` starts x ``horizon`` steps): where an update's time goes;
* ``ls_update``: the same step with LS-Imagine (jump branch, affordance models).

Learning (``--learning``): Dreamer on the easy variant, and Dreamer vs LS-Imagine on the hard
variant, ``--seeds`` seeds vmapped in one compiled whole-run scan of ``--iterations`` iterations
(``num_envs`` env steps each: the env-step budget is ``iterations x num_envs``); success rate
over ``--eval-episodes`` episodes per seed. Same network sizes and budget for both methods.

Usage: ``python -m benchmarks.bench_world_models [--envs 1,256] [--chunk 32] [--seconds 3]``
or ``python -m benchmarks.bench_world_models --learning [--iterations 3000] [--seeds 3]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import jax
import numpy as np

from benchmarks.harness import emit as _emit
from benchmarks.harness import steady_rate
from jaxlab import envs
from jaxlab.rl.off_policy import OffPolicyConfig
from jaxlab.rl.world_models.dreamer import DreamerConfig, DreamerOptim, make_evaluate, make_parts
from jaxlab.rl.world_models.ls_imagine import LSConfig


def emit(**row) -> None:
    row["load"] = round(os.getloadavg()[0], 1)
    _emit(**row)


def _peak_bytes(compiled) -> int | None:
    try:
        m = compiled.memory_analysis()
        return int(m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes)
    except Exception:  # backends without memory analysis
        return None


def measure(what, fn, args, units: float, unit: str, seconds: float, size: dict):
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    step = lambda carry: compiled(carry, *args[1:])
    elapsed, calls, _ = steady_rate(lambda c: step(c)[0], args[0], (), seconds)
    emit(
        what=what,
        size=size,
        compile_s=round(compile_s, 2),
        time_s=round(elapsed / calls, 5),
        rate=round(units * calls / elapsed, 1),
        unit=unit,
        peak_bytes=_peak_bytes(compiled),
    )


BASE = DreamerConfig(sequence_length=16, horizon=15)
BASE_OFF = OffPolicyConfig(
    env="open-world", num_envs=8, buffer_size=8 * 512, batch_size=16, learning_starts=0
)


def throughput(args) -> None:
    for n in (int(v) for v in args.envs.split(",")):
        env, params = envs.make("open-world")

        def run(states, keys, env=env, params=params):
            def body(s, k):
                a = jax.random.randint(k, (states.t.shape[0],), 0, 5)
                o, s, *_ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                    jax.random.split(k, states.t.shape[0]), s, a, params
                )
                return s, o.mean()

            return jax.lax.scan(body, states, keys)

        _, st = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(jax.random.key(0), n), params
        )
        keys = jax.random.split(jax.random.key(1), args.chunk)
        measure("env_step", run, (st, keys), n * args.chunk, "env-step/s", args.seconds,
                {"num_envs": n, "chunk": args.chunk, "obs": 32})  # fmt: skip
    cfg = BASE
    for name, ls in (("wm_update", None), ("ls_update", LSConfig())):
        parts = make_parts(cfg, BASE_OFF, DreamerOptim(), ls=ls, env_options={"variant": "easy"})
        state = jax.jit(parts.init)(jax.random.key(0))
        fill = jax.jit(
            lambda s, parts=parts: jax.lax.scan(lambda c, _: parts.collect(c), s, None, 32)[0]
        )
        state = fill(state)
        size = {"batch": BASE_OFF.batch_size, "seq": cfg.sequence_length, "horizon": cfg.horizon,
                "deter": cfg.deter, "stoch": f"{cfg.groups}x{cfg.classes}"}  # fmt: skip
        updates = lambda s, ks, parts=parts: jax.lax.scan(parts.update, s, ks)
        keys = jax.random.split(jax.random.key(2), 4)
        measure(name, updates, (state, keys), 4, "update/s", args.seconds, size)
        if name != "wm_update":
            continue
        batch = parts.replay.sample(state.buffer, jax.random.key(3)).experience

        def wm_grad(wm_p, batch, k, parts=parts):
            g = jax.grad(lambda p: parts.wm_loss(p, batch, k)[0])(wm_p)
            return jax.tree.map(lambda a, b: a + 0 * b, wm_p, g), None

        measure("wm_loss_grad", wm_grad, (state.wm, batch, jax.random.key(4)), 1, "step/s",
                args.seconds, size)  # fmt: skip
        _, (_, post) = parts.wm_loss(state.wm, batch, jax.random.key(4))
        start = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), post)

        def imag(start, wm_p, actor_p, k, parts=parts):
            feats, *_ = parts.imagine(wm_p, actor_p, start, k)
            return start.replace(
                deter=start.deter + 0 * feats[-1, :, : start.deter.shape[-1]]
            ), None

        n_starts = BASE_OFF.batch_size * cfg.sequence_length
        measure("imagine", imag, (start, state.wm, state.actor, jax.random.key(5)),
                n_starts * cfg.horizon, "imagined-step/s", args.seconds, size)  # fmt: skip


def random_success(variant: str, episodes: int, max_steps: int, seed: int) -> tuple[float, float]:
    """Success rate and mean closest approach to the target of the uniform random policy (the
    floor of the comparison)."""
    env, params = envs.make("open-world", variant=variant, max_steps=max_steps)

    def one(key):
        _, s = env.reset(key, params)

        def body(c, k):
            s, succ, done, near = c
            _, s, _, te, tr, info = env.step(k, s, jax.random.randint(k, (), 0, 5), params)
            near = jax.numpy.where(done, near, jax.numpy.minimum(near, info["target_distance"]))
            return (s, succ | (~done & info["success"]), done | te | tr, near), None

        init = (s, False, False, jax.numpy.inf)
        (_, succ, _, near), _ = jax.lax.scan(body, init, jax.random.split(key, max_steps))
        return succ, near

    keys = jax.random.split(jax.random.key(seed), episodes)
    succ, near = jax.jit(jax.vmap(one))(keys)
    return float(succ.mean()), float(near.mean())


def learning(args) -> None:
    for variant in ("easy", "hard"):
        succ, near = random_success(variant, 1024, args.max_steps, args.seed)
        emit(what="learning", method="random", variant=variant, episodes=1024,
             success_mean=round(succ, 3), min_distance=round(near, 2))  # fmt: skip
    cfg = DreamerConfig(sequence_length=16, gamma=0.99)
    off = OffPolicyConfig(
        env="open-world",
        num_envs=args.num_envs,
        buffer_size=args.num_envs * max(64, args.iterations),
        batch_size=16,
        learning_starts=100,
    )
    ls_cfg = LSConfig(
        intrinsic_scale=args.intrinsic_scale, relevance_scale=args.relevance_scale,
        episode_best=not args.every_step, jump_prob=args.jump_prob,
        jump_loss_scale=args.jump_loss_scale)  # fmt: skip
    runs = [("dreamer", "easy", None), ("dreamer", "hard", None), ("ls-imagine", "hard", ls_cfg)]
    wanted = set(args.runs.split(","))
    for method, variant, ls in runs:
        if f"{method}-{variant}" not in wanted:
            continue
        opts = {"variant": variant, "max_steps": args.max_steps}
        parts = make_parts(cfg, off, DreamerOptim(), ls=ls, env_options=opts)
        evaluate = make_evaluate(parts, args.eval_episodes, args.max_steps)

        def one(key, parts=parts, evaluate=evaluate):
            state, m = jax.lax.scan(
                lambda s, _: parts.iteration(s), parts.init(key), None, args.iterations
            )
            ev = evaluate(state, jax.random.fold_in(key, 7))
            return ev, state.successes / jax.numpy.maximum(state.episodes, 1.0), m["image_loss"]

        t0 = time.perf_counter()
        keys = jax.random.split(jax.random.key(args.seed), args.seeds)
        ev, train_success, img = jax.device_get(jax.jit(jax.vmap(one))(keys))
        wall = time.perf_counter() - t0
        emit(
            what="learning",
            method=method,
            variant=variant,
            seeds=args.seeds,
            env_steps=args.iterations * off.num_envs,
            eval_episodes=args.eval_episodes,
            success=[round(float(x), 3) for x in ev["success"]],
            success_mean=round(float(np.mean(ev["success"])), 3),
            min_distance=[round(float(x), 2) for x in ev["min_distance"]],
            train_success=[round(float(x), 3) for x in train_success],
            image_loss_first_last=[
                round(float(img[:, off.learning_starts + 1].mean()), 2),
                round(float(img[:, -1].mean()), 2),
            ],  # fmt: skip
            wall_s=round(wall, 1),
            **({"ls": dataclasses.asdict(ls)} if ls is not None else {}),
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--envs", default="1,256")
    ap.add_argument("--chunk", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--learning", action="store_true")
    ap.add_argument("--runs", default="dreamer-easy,dreamer-hard,ls-imagine-hard")
    ap.add_argument("--iterations", type=int, default=3000)
    ap.add_argument("--num-envs", type=int, default=8)
    ap.add_argument("--max-steps", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-episodes", type=int, default=32)
    ap.add_argument("--intrinsic-scale", type=float, default=0.1)
    ap.add_argument("--relevance-scale", type=float, default=0.01)
    ap.add_argument("--jump-prob", type=float, default=0.7, help="0: no imagined jumps")
    ap.add_argument(
        "--jump-loss-scale", type=float, default=1.0, help="0: no jumpy-transition training"
    )
    ap.add_argument(
        "--every-step",
        action="store_true",
        help="LS-Imagine pays the intrinsic scores every step (not only a new best)",
    )
    args = ap.parse_args()
    if args.learning:
        learning(args)
    else:
        throughput(args)


if __name__ == "__main__":
    main()
