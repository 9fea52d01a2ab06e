"""D-TSN vs behaviour cloning vs a fixed (breadth-first) search, from the same demonstrations.

For each method, ``--seeds`` runs (one ``vmap`` over seeds: ``training.make_train``) train on
``--demos`` oracle demonstrations for ``--steps`` Adam steps, then play greedy episodes on
held-out layouts (maze: ``--eval`` unseen procedurally generated mazes, equal for all methods and
seeds) or held-out instances (Game of 24: a fixed 20 % of the 1362 solvable instances). One JSON
line per (method, seed) and one summary line per method: success rate mean and standard error
over seeds, path-length ratio to the BFS optimum on solved episodes, parameter count.

Usage: ``python -m experiments.dtsn_vs_bc.dtsn_vs_bc --env maze --methods dtsn,bc,fixed --seeds 3
--demos 500 --steps 2000 --k 10``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import jax
import numpy as np

from jaxlab.rl.search import models, training


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", default="maze", choices=["maze", "game24"])
    ap.add_argument("--methods", default="dtsn,bc,fixed")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--demos", type=int, default=500)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--size", type=int, default=8)
    ap.add_argument("--eval", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--model", default="vector", choices=["vector", "spatial"])
    ap.add_argument("--channels", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--latent-weight", type=float, default=0.01)
    ap.add_argument("--reward-weight", type=float, default=0.1)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--gamma", type=float, default=0.9)
    ap.add_argument("--eval-size", type=int, default=0, help="held-out maze size (0: --size)")
    ap.add_argument("--eval-k", type=int, default=0, help="K at evaluation (0: --k)")
    args = ap.parse_args()
    for method in args.methods.split(","):
        cfg = training.LearnerConfig(
            env=args.env,
            method=method,
            height=args.size,
            width=args.size,
            num_demos=args.demos,
            num_expansions=args.k,
            batch_size=args.batch,
            eval_episodes=args.eval,
            demo_length=3 * args.size,
            maze_model=args.model,
            channels=args.channels,
            hidden=args.hidden,
            latent_weight=args.latent_weight,
            reward_weight=args.reward_weight,
            temperature=args.temperature,
            gamma=args.gamma,
        )
        t0 = time.perf_counter()
        optim = dataclasses.replace(training.OPTIM, lr=args.lr)
        train = jax.jit(jax.vmap(training.make_train(cfg, args.steps, optim=optim)))
        state, metrics = train(jax.random.split(jax.random.key(0), args.seeds))
        jax.block_until_ready(state)
        train_s = time.perf_counter() - t0
        ecfg = dataclasses.replace(
            cfg,
            num_expansions=args.eval_k or args.k,
            height=args.eval_size or args.size,
            width=args.eval_size or args.size,
            eval_max_steps=6 * (args.eval_size or args.size),
        )
        ev = jax.jit(jax.vmap(lambda p, c=ecfg: training.evaluate(jax.random.key(1234), p, c)))
        res = jax.device_get(ev(state.params))
        n_params = models.param_count(jax.tree.map(lambda x: x[0], state.params))
        succ = np.asarray(res["success_rate"])
        for s in range(args.seeds):
            print(
                json.dumps(
                    {
                        "what": "heldout",
                        "env": args.env,
                        "method": method,
                        "seed": s,
                        "demos": args.demos,
                        "steps": args.steps,
                        "K": args.k,
                        "size": args.size,
                        "success_rate": float(succ[s]),
                        "path_length_ratio": float(res["path_length_ratio"][s]),
                        "final_train_accuracy": float(
                            np.asarray(metrics["accuracy"])[s, -50:].mean()
                        ),
                    }
                ),
                flush=True,
            )
        print(
            json.dumps(
                {
                    "what": "summary",
                    "env": args.env,
                    "method": method,
                    "seeds": args.seeds,
                    "demos": args.demos,
                    "steps": args.steps,
                    "K": args.k,
                    "size": args.size,
                    "params": n_params,
                    "success_mean": float(succ.mean()),
                    "success_se": float(succ.std(ddof=1) / np.sqrt(len(succ)))
                    if len(succ) > 1
                    else 0.0,
                    "path_length_ratio_mean": float(np.asarray(res["path_length_ratio"]).mean()),
                    "wall_s": round(train_s, 1),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
