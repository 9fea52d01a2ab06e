"""D-TSN vs behaviour cloning on held-out mazes at the training size and at a larger size.

Both methods train on ``--demos`` BFS demonstrations (each budget in the list) of
``--size x --size`` mazes embedded in a ``--map x --map`` static map (extra cells are walls), for
``--steps`` Adam steps, ``--seeds`` seeds in one ``vmap`` (``training.make_train``); BC has
D-TSN's parameter count. Each run is evaluated greedily on ``--eval`` unseen layouts at the
training size and at ``--large`` (1.5-2x), the same layouts for every method and seed. A setting
is (demonstration budget, evaluation size, seed); D-TSN wins it when its success rate is higher
than BC's on the same seed. Writes ``results.md`` (a table) and ``results.jsonl`` beside itself.

Usage: ``python -m experiments.dtsn_larger_mazes.dtsn_larger_mazes`` (defaults: 6x6 mazes in a
12x12 map, evaluation at 6x6 and 11x11, budgets 25/50/100, 5 seeds, 600 steps, K = 10).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import numpy as np

from jaxlab.rl.search import training

HERE = Path(__file__).parent


def run(method: str, demos: int, args) -> dict[str, np.ndarray]:
    """Success rates ``[seeds]`` at both sizes of one method and budget."""
    cfg = training.LearnerConfig(
        method=method,
        height=args.size,
        width=args.size,
        map_height=args.map,
        map_width=args.map,
        eval_height=args.large,
        eval_width=args.large,
        layout=args.layout,
        min_size=args.min_size,
        num_demos=demos,
        demo_length=3 * args.size,
        num_expansions=args.k,
        batch_size=args.batch,
        eval_episodes=args.eval,
        eval_max_steps=4 * args.large,
    )
    train = jax.jit(jax.vmap(training.make_train(cfg, args.steps)))
    state, _ = train(jax.random.split(jax.random.key(0), args.seeds))
    ev = jax.jit(jax.vmap(lambda p: training.evaluate(jax.random.key(1234), p, cfg)))
    res = jax.device_get(ev(state.params))
    return {
        "train_size": np.asarray(res["success_rate"]),
        "large": np.asarray(res["eval_size_success_rate"]),
    }


def table(rows: list[dict], args) -> str:
    lines = [
        "| demos | held-out size | D-TSN success | BC success | D-TSN wins (seeds) |",
        "| ---: | :---: | :---: | :---: | :---: |",
    ]
    wins = 0
    for r in rows:
        d, b = np.asarray(r["dtsn"]), np.asarray(r["bc"])
        won = int(np.sum(d > b))
        wins += won
        size = args.size if r["eval"] == "train_size" else args.large
        lines.append(
            f"| {r['demos']} | {size}x{size} | {d.mean():.3f} ± {d.std(ddof=1):.3f} | "
            f"{b.mean():.3f} ± {b.std(ddof=1):.3f} | {won}/{len(d)} |"
        )
    total = len(rows) * args.seeds
    lines.append("")
    lines.append(
        f"D-TSN wins {wins} of {total} settings (budget x size x seed): {wins / total:.2f}. "
        "Mean ± standard deviation over seeds."
    )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=6)
    ap.add_argument("--large", type=int, default=11)
    ap.add_argument("--map", type=int, default=12)
    ap.add_argument("--layout", default="random", choices=["random", "perfect"])
    ap.add_argument("--min-size", type=int, default=0)
    ap.add_argument("--demos", default="25,50,100")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--eval", type=int, default=100)
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = []
    out = Path(args.out)
    with open(out.with_suffix(".jsonl"), "w") as f:
        for demos in (int(x) for x in args.demos.split(",")):
            res = {m: run(m, demos, args) for m in ("dtsn", "bc")}
            for ev in ("train_size", "large"):
                row = {
                    "demos": demos,
                    "eval": ev,
                    "dtsn": res["dtsn"][ev].tolist(),
                    "bc": res["bc"][ev].tolist(),
                }
                rows.append(row)
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(json.dumps(row), flush=True)
    wall = time.perf_counter() - t0
    cmd = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "out")
    text = (
        f"# D-TSN vs BC on held-out mazes, training size {args.size}x{args.size} and "
        f"{args.large}x{args.large} ({args.layout} layouts, map {args.map}x{args.map})\n\n"
        f"`python -m experiments.dtsn_larger_mazes.dtsn_larger_mazes {cmd}` "
        f"({wall / 60:.1f} min wall on {jax.devices()[0].platform}).\n\n" + table(rows, args) + "\n"
    )
    out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
