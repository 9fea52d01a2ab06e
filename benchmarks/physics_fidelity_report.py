"""Per-level trajectory deviation of jaxlab.physics from the original Jax2D.

Replays every reference fixture (``tests/physics/fixtures``, 74 Kinetix levels recorded with
jax2d 1.0.1) with jaxlab's engine from the same initial state: 240 steps with zero actions and
120 steps with the reference's all-+1 engine actions. For each level it prints one JSON line
with the maximum deviation over active shapes (max of the position error's infinity norm in m
and the rotation error in rad), maximised over all steps up to 0.5 s, 1 s, 2 s and 4 s
(``null`` where the trajectory is shorter or the level has no actuators), then one summary line
per size and variant with the median and maximum over levels.

Usage (repository root, project venv)::

    python benchmarks/physics_fidelity_report.py [--sizes s,m,l] [--solver fast|reference]
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np
from jaxlab.benchmarks.harness import emit
from jaxlab.benchmarks.physics_fidelity import HORIZONS_S, SizeBatch, deviations, max_up_to


def _num(x: float) -> float | None:
    return None if math.isnan(x) else float(f"{x:.3g}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="s,m,l")
    parser.add_argument("--solver", default="fast", choices=("fast", "reference"))
    args = parser.parse_args(argv)
    summaries = []
    for size in args.sizes.lower().split(","):
        t0 = time.perf_counter()
        batch = SizeBatch(size)
        dev = deviations(batch, args.solver)
        wall = time.perf_counter() - t0
        for variant, d in dev.items():
            table = {h: max_up_to(d, h) for h in HORIZONS_S}
            for i, name in enumerate(batch.names):
                if variant == "act" and not batch.has_act[i]:
                    continue
                rec = {"what": "fidelity", "level": name, "size": size.upper()}
                rec["variant"] = variant
                rec.update({f"max_dev_{h:g}s": _num(table[h][i]) for h in HORIZONS_S})
                rec["dev_step1"] = _num(d[i, 0])
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
            summary["wall_s"] = round(wall, 1)
            summaries.append(summary)
    for s in summaries:
        emit(s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
