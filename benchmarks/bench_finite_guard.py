"""Cost of the loop's non-finite guard (``jaxlab.core.finite``): lm-tiny training steps per second
with the per-step all-finite flag over the train state (what the loop runs) and without it,
measured interleaved (on, off, on, off, ...) so machine load affects both alike.

Prints one JSON line per measurement and a summary line with the median ratio.
Usage: ``python -m benchmarks.bench_finite_guard [--preset default] [--steps 40] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks import bench_core
from benchmarks.harness import emit
from jaxlab.core import config as C
from jaxlab.core import finite
from jaxlab.core import recipe as recipe_lib


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default=None)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cfg = recipe_lib.get("lm-tiny").config(args.preset)
    cfg = C.replace(cfg, **{"mesh.data": 1})
    real = finite.with_state_flag
    rates: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(args.repeats):
        for guard in ("on", "off"):
            finite.with_state_flag = real if guard == "on" else (lambda step: step)
            try:
                row = bench_core.measure(cfg, args.k, max(1, args.steps // args.k))
            finally:
                finite.with_state_flag = real
            row.update(
                what="lm_tiny_train_step_finite_guard", guard=guard, preset=args.preset or "default"
            )
            rates[guard].append(row["steps_per_s"])
            emit(row)
    on, off = statistics.median(rates["on"]), statistics.median(rates["off"])
    emit(
        what="finite_guard_summary",
        preset=args.preset or "default",
        steps_per_s_on=on,
        steps_per_s_off=off,
        ratio_on_over_off=round(on / off, 3),
    )


if __name__ == "__main__":
    main()
