"""D-TSN vs behaviour cloning vs a fixed (breadth-first) search, from the same demonstrations.

For each method, ``--seeds`` runs (one ``vmap`` over seeds: ``training.make_train``) train on
``--demos`` oracle demonstrations for ``--steps`` Adam steps, then play greedy episodes on
held-out layouts (maze: ``--eval`` unseen procedurally generated mazes, equal for all methods and
seeds) or held-out instances (Game of 24: a fixed 20 % of the 1362 solvable instances). One JSON
line per (method, seed) and one summary line per method: success rate mean and standard error
over seeds, path-length ratio to the BFS optimum on solved episodes, parameter count.

Usage: ``python benchmarks/dtsn_vs_bc.py --env maze --methods dtsn,bc,fixed --seeds 3
--demos 500 --steps 2000 --k 10``.
"""

from __future__ import annotations

import argparse
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
            learning_rate=args.lr,
            demo_length=3 * args.size,
        )
        t0 = time.perf_counter()
        train = jax.jit(jax.vmap(training.make_train(cfg, args.steps)))
        state, metrics = train(jax.random.split(jax.random.key(0), args.seeds))
        jax.block_until_ready(state)
        train_s = time.perf_counter() - t0
        ev = jax.jit(jax.vmap(lambda p, cfg=cfg: training.evaluate(jax.random.key(1234), p, cfg)))
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
