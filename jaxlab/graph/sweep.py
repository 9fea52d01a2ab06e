"""Accuracy vs phi on the cSBM for several rewirings: the paper's Figure-style table as text.

``main(argv)`` is the ``jaxlab sweep gnn`` command::

    jaxlab sweep gnn [--phis=-1,-0.5,0,0.5,1] [--methods=none,digl,jdr] [--preset=NAME|FILE]
                     [--json=FILE] [key=value ...]

Every cell is one :func:`~jaxlab.graph.experiment.run_experiment` (``num_seeds`` seeds in one
vmap) of the :class:`~jaxlab.graph.experiment.GnnConfig` resolved from the preset and the dotted
overrides, with ``graph.phi`` and ``rewire`` set by the sweep. Cells show the mean test accuracy at
the best validation epoch, +- its standard deviation over seeds. The same graph sample
(``graph.seed``) and the same splits/initialisations (``seed``) are used for every method.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from jaxlab.core import config as config_lib
from jaxlab.graph.experiment import GnnConfig, run_experiment

#: the paper's grid, phi = -1, -0.875, ..., 1
PAPER_PHIS: tuple[float, ...] = tuple(float(x) for x in np.round(np.linspace(-1, 1, 17), 3))
METHODS: tuple[str, ...] = ("none", "digl", "jdr")
PRESETS_DIR = Path(__file__).resolve().parent.parent / "recipes" / "presets" / "gnn"


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise config_lib.ConfigError("--phis", text, "comma-separated numbers") from None


def _preset(name: str | None) -> dict:
    if name is None:
        return {}
    path = Path(name)
    if not path.suffix:
        path = PRESETS_DIR / f"{name}.yaml"
    return config_lib.load_yaml(path)


def sweep(
    base: GnnConfig, phis: Sequence[float], methods: Sequence[str], *, log=sys.stderr
) -> list[dict]:
    """Runs every (phi, method) cell; returns one row per cell with per-seed accuracies."""
    rows = []
    for phi in phis:
        for method in methods:
            cfg = config_lib.replace(base, **{"graph.phi": float(phi), "rewire": method})
            t0 = time.perf_counter()
            seeds, _ = run_experiment(cfg)
            acc = np.asarray(seeds.test_acc_at_best, np.float64)
            row = {
                "phi": float(phi),
                "method": method,
                "mean": float(acc.mean()),
                "std": float(acc.std()),
                "test_acc_at_best": [float(a) for a in acc],
                "seconds": time.perf_counter() - t0,
            }
            rows.append(row)
            if log is not None:
                print(
                    f"phi={phi:+.3f} {method:5s} {row['mean']:.4f} +- {row['std']:.4f} "
                    f"({row['seconds']:.1f}s)",
                    file=log,
                    flush=True,
                )
    return rows


def format_table(rows: Sequence[dict], methods: Sequence[str]) -> str:
    """Text table: one line per phi, one ``mean +- std`` column (percent) per method."""
    phis = sorted({r["phi"] for r in rows})
    cell = {(r["phi"], r["method"]): r for r in rows}
    lines = ["phi     " + "".join(f"{m:>16s}" for m in methods)]
    for phi in phis:
        parts = []
        for m in methods:
            r = cell.get((phi, m))
            parts.append(f"{100 * r['mean']:9.1f} +- {100 * r['std']:3.1f}" if r else f"{'':>16s}")
        lines.append(f"{phi:+7.3f} " + "".join(f"{p:>16s}" for p in parts))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``jaxlab sweep gnn ...``: prints the accuracy-vs-phi table; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "gnn":
        argv = argv[1:]
    parser = argparse.ArgumentParser(
        prog="jaxlab sweep gnn",
        description="Test accuracy vs cSBM phi for each rewiring method (mean +- std over seeds).",
    )
    parser.add_argument("--phis", default=",".join(str(p) for p in PAPER_PHIS))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--preset", default=None, help="preset name of the gnn recipe, or a file")
    parser.add_argument("--json", default=None, help="also write the cells to this JSON file")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args, unknown = parser.parse_known_args(argv)
    stray = [u for u in unknown if u.startswith("-") or "=" not in u]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    methods = tuple(m for m in args.methods.split(",") if m)
    for m in methods:
        if m not in METHODS:
            raise config_lib.ConfigError("--methods", m, "one of " + ", ".join(METHODS))
    phis = _floats(args.phis)
    base = config_lib.resolve(
        GnnConfig, preset=_preset(args.preset), overrides=list(args.overrides) + unknown
    )
    if base.graph.name != "csbm":
        raise config_lib.ConfigError("graph.name", base.graph.name, "'csbm' for a phi sweep")
    for phi in phis:  # validate every cell before the first run
        config_lib.replace(base, **{"graph.phi": phi})
    rows = sweep(base, phis, methods)
    print(
        f"# cSBM n={base.graph.n} p={base.graph.p} d={base.graph.d} eps={base.graph.epsilon}, "
        f"{base.model}, {base.num_seeds} seeds, {base.graph.split} split; test accuracy (%) at "
        "best validation accuracy, mean +- std over seeds"
    )
    print(format_table(rows, methods))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
