"""Per-level trajectory deviation of jaxlab.physics from the original Jax2D.

Replays every reference fixture (``tests/physics/fixtures``, 74 Kinetix levels recorded with
jax2d 1.0.1) with jaxlab's engine from the same initial state: 240 steps with zero actions and
120 steps with the reference's all-+1 engine actions. For each level it prints one JSON line
with the maximum deviation over active shapes (max of the position error's infinity norm in m
and the rotation error in rad), maximised over all steps up to 0.5 s, 1 s, 2 s and 4 s
(``null`` where the trajectory is shorter or the level has no actuators), then one summary line
per size and variant with the median and maximum over levels.

Usage (repository root, project venv)::

    python -m experiments.physics_fidelity.physics_fidelity_report [--sizes s,m,l]
        [--solver fast|reference] [--sensitivity]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time

import numpy as np

from benchmarks.harness import emit
from experiments.physics_fidelity.physics_fidelity import (
    HORIZONS_S,
    SizeBatch,
    deviations,
    max_up_to,
)


def _num(x: float) -> float | None:
    return None if math.isnan(x) else float(f"{x:.3g}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="s,m,l")
    parser.add_argument("--solver", default="fast", choices=("fast", "reference"))
    parser.add_argument(
        "--sensitivity",
        action="store_true",
        help="also the original's own one-extra-iteration sensitivity per level: the reference "
        "solver (Jax2D's layout) with num_solver_iterations + 1 against the same fixtures",
    )
    args = parser.parse_args(argv)
    summaries = []
    for size in args.sizes.lower().split(","):
        t0 = time.perf_counter()
        batch = SizeBatch(size)
        dev = deviations(batch, args.solver)
        wall = time.perf_counter() - t0
        sens = None
        if args.sensitivity:
            plus_one = SizeBatch(size)
            plus_one.static_params = dataclasses.replace(
                batch.static_params,
                num_solver_iterations=batch.static_params.num_solver_iterations + 1,
            )
            sens = deviations(plus_one, "reference")
        for variant, d in dev.items():
            table = {h: max_up_to(d, h) for h in HORIZONS_S}
            for i, name in enumerate(batch.names):
                if variant == "act" and not batch.has_act[i]:
                    continue
                rec = {"what": "fidelity", "level": name, "size": size.upper()}
                rec["variant"] = variant
                rec.update({f"max_dev_{h:g}s": _num(table[h][i]) for h in HORIZONS_S})
                rec["dev_step1"] = _num(d[i, 0])
                if sens is not None:
                    rec["sensitivity_1s"] = _num(max_up_to(sens[variant], 1.0)[i])
                    rec["within_sensitivity_1s"] = bool(
                        table[1.0][i] <= max(max_up_to(sens[variant], 1.0)[i], 1e-5)
                    )
                emit(rec)
            summary = {
                "what": "fidelity_summary",
                "size": size.upper(),
                "variant": variant,
                "solver": args.solver,
                "levels": int(np.sum(~np.isnan(d[:, 0]))),
                "max_dev_step1": _num(np.nanmax(d[:, 0])),
            }
            for h in HORIZONS_S:
                col = table[h]
                if np.all(np.isnan(col)):
                    continue
                summary[f"median_{h:g}s"] = _num(np.nanmedian(col))
                summary[f"max_{h:g}s"] = _num(np.nanmax(col))
                summary[f"worst_{h:g}s"] = batch.names[int(np.nanargmax(col))]
            if sens is not None:
                within = [
                    table[1.0][i] <= max(max_up_to(sens[variant], 1.0)[i], 1e-5)
                    for i in range(len(batch.names))
                    if not np.isnan(table[1.0][i])
                ]
                summary["levels_within_sensitivity_1s"] = f"{sum(within)}/{len(within)}"
            summary["wall_s"] = round(wall, 1)
            summaries.append(summary)
    for s in summaries:
        emit(s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
