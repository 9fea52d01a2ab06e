"""``jaxlab causal discover data.csv --context-column k [--alpha 0.05] [--test T] [--out DIR]``.

The CSV has a header row; every column but the context column is a variable. Rows whose context
value is ``--observational`` (default: the smallest value) form the observational dataset, every
other value one interventional dataset (soft interventions, unknown targets). CDIS runs on them
with the CI test ``--test`` (``fisherz``; ``rcit``, random-feature kernel; ``kci``, exact kernel,
small n; ``chisq`` / ``gsq`` for discrete columns) and the separating-set rule
``--sepset-rule``; the PAG's edges are printed with their meaning, and the output directory
(``--out``, default ``<csv stem>_causal``) receives ``pag.png`` and, last, ``result.json`` (the
marks, the edges, the ambiguous triples of the majority rule and the options). The directory is locked for the run
(:mod:`jaxlab.core.run_lock`: a second run on it is refused), and a finished result is not
overwritten without ``--overwrite``.

The input is validated before anything runs or is written (:mod:`jaxlab.causal.input_checks`:
per context, constant columns, row counts, discrete vs continuous columns; 0/1 treatment columns
named in ``--indicator-columns`` are allowed with a continuous test), and a CI test that
returns a non-finite p-value stops the run; an error prints ``error: ...`` naming the column,
context or option, writes nothing, and exits with status 2.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from jaxlab import media
from jaxlab.causal.ci_tests import TESTS, NonFiniteTestError
from jaxlab.causal.fci import SEPSET_RULES
from jaxlab.causal.graphs import ARROW, CIRCLE, TAIL, edge_meaning, edge_string
from jaxlab.causal.input_checks import CausalInputError, check_datasets
from jaxlab.core import json_files
from jaxlab.core.errors import keeping
from jaxlab.core.resume import RunDirError, check_run_dir
from jaxlab.core.run_lock import RunLock

MAX_VARIABLES = 50
RESULT = "result.json"


def read_table(path: Path) -> tuple[list[str], np.ndarray]:
    """Header and (rows, columns) float array; non-numeric or missing cells are errors."""
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except UnicodeDecodeError as e:
        raise CausalInputError(
            f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); expected a CSV file"
        ) from None
    except csv.Error as e:  # e.g. a field past the csv module's size limit
        raise CausalInputError(f"{path}: not a readable CSV file ({e})") from None
    if not rows or not rows[0]:
        raise CausalInputError(f"{path}: empty file (expected a header row and data rows)")
    header = [h.strip() for h in rows[0]]
    if len(set(header)) != len(header):
        raise CausalInputError(f"{path}: duplicate column names in the header {header}")
    body = [r for r in rows[1:] if any(c.strip() for c in r)]
    if not body:
        raise CausalInputError(f"{path}: no data rows")
    out = np.empty((len(body), len(header)))
    for r, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise CausalInputError(f"{path}: row {r} has {len(row)} fields, expected {len(header)}")
        for c, cell in enumerate(row):
            cell = cell.strip()
            if cell == "" or cell.lower() in ("na", "nan", "null", "none"):
                raise CausalInputError(f"column '{header[c]}', row {r}: missing value")
            try:
                v = float(cell)
            except ValueError:
                raise CausalInputError(
                    f"column '{header[c]}', row {r}: non-numeric value {cell!r}"
                ) from None
            if not math.isfinite(v):
                raise CausalInputError(f"column '{header[c]}', row {r}: non-finite value {cell!r}")
            out[r - 2, c] = v
    return header, out


def split_by_context(
    header: list[str], table: np.ndarray, context: str, observational: float | None
) -> tuple[list[str], list[np.ndarray], list[float]]:
    """Variables, datasets (observational first) and their context values; validates."""
    if context not in header:
        raise CausalInputError(f"--context-column '{context}' is not a column (columns: {header})")
    k = header.index(context)
    names = [h for i, h in enumerate(header) if i != k]
    if not names:
        raise CausalInputError("no variable columns besides the context column")
    values = sorted(set(table[:, k].tolist()))
    if len(values) < 2:
        raise CausalInputError(
            f"context column '{context}' has a single value ({values[0]:g}); CDIS needs an "
            "observational and at least one interventional dataset"
        )
    obs = values[0] if observational is None else observational
    if obs not in values:
        raise CausalInputError(f"--observational {obs:g} is not a value of column '{context}'")
    order = [obs] + [v for v in values if v != obs]
    x = np.delete(table, k, axis=1)
    datasets = [x[table[:, k] == v] for v in order]
    return names, datasets, order


def check_capacity(names: list[str], max_vars: int) -> None:
    if len(names) > max_vars:
        raise CausalInputError(f"{len(names)} variables exceed --max-vars={max_vars}")


def describe(marks: np.ndarray, names: list[str]) -> list[str]:
    """One line per PAG edge: ``a --> b   cause: ...``."""
    lines = []
    d = marks.shape[0]
    for i in range(d):
        for j in range(i + 1, d):
            if marks[i, j] == 0:
                continue
            mi, mj = int(marks[j, i]), int(marks[i, j])
            if (mi, mj) == (ARROW, TAIL):  # print causes left to right
                i2, j2, mi, mj = j, i, mj, mi
            else:
                i2, j2 = i, j
            s = edge_string(marks, i2, j2).split(" ")[1]
            meaning = edge_meaning(mi, mj, names[i2], names[j2])
            lines.append(f"{names[i2]} {s} {names[j2]}\t{meaning}")
    return lines


def ambiguous_triples(res, names: list[str], context: str) -> list[list[str]]:
    """The majority rule's ambiguous triples of every adjacency search (observational and pooled),
    once each, as ``[a, b, c]`` column names (``a`` before ``c`` in the header); the pooled
    searches' context indicator is named by the context column."""
    full = [*names, context]
    triples = sorted(set().union(*res.ambiguous)) if res.ambiguous else []
    return [[full[v] for v in t] for t in triples]


def draw_pag(marks: np.ndarray, names: list[str], path: Path) -> None:
    """PNG of the PAG (through :func:`jaxlab.media.plot_graph`): nodes on a circle, arrowheads,
    circles and tails at the edge ends; directed edges blue, selection (tail-tail) edges red."""
    ends = {ARROW: "arrow", CIRCLE: "circle", TAIL: "none"}
    edges = []
    d = len(names)
    for i in range(d):
        for j in range(i + 1, d):
            if marks[i, j] == 0:
                continue
            mark_i, mark_j = int(marks[j, i]), int(marks[i, j])
            color = {(TAIL, ARROW): "C0", (ARROW, TAIL): "C0", (TAIL, TAIL): "C3"}.get(
                (mark_i, mark_j), "0.4"
            )
            edges.append((i, j, ends[mark_i], ends[mark_j], color))
    media.plot_graph(
        path, names, edges, title="CDIS PAG  (blue ->: cause, red --: selection, o: unknown)"
    )


def output_dir(args: argparse.Namespace, csv_path: Path) -> Path:
    """The output directory, checked writable and free of a finished result (or ``--overwrite``)."""
    out = Path(args.out) if args.out else csv_path.with_name(csv_path.stem + "_causal")
    check_run_dir(out)
    if (out / RESULT).exists() and not args.overwrite:
        raise CausalInputError(
            f"--out {out} holds a finished result ({out / RESULT}); pass --overwrite to replace "
            "it, or another --out"
        )
    return out


def write_result(
    out: Path, res, names: list[str], lines: list[str], ambiguous: list[list[str]], args, order
) -> None:
    """``pag.png``, then ``result.json`` (written to a temporary name and renamed: a reader sees
    a whole result or none)."""
    draw_pag(res.final, names, out / "pag.png")
    record = {
        "variables": names,
        "marks": res.final.tolist(),
        "edges": lines,
        "ambiguous_triples": ambiguous,
        "rounds": res.rounds,
        "contexts": {args.context_column: [float(v) for v in order]},
        "test": args.test,
        "alpha": args.alpha,
        "sepset_rule": args.sepset_rule,
        "indicator_columns": [c.strip() for c in args.indicator_columns.split(",") if c.strip()],
    }
    json_files.write(out / RESULT, record)


def discover(args: argparse.Namespace) -> int:
    from jaxlab.causal.cdis import cdis_from_data

    try:
        media.require_plotting()  # checked before anything runs: the PNG needs matplotlib
    except media.MissingExtraError as e:
        raise CausalInputError(f"writing the PNG: {e}") from None
    if not 0.0 < args.alpha < 1.0:
        raise CausalInputError(f"--alpha {args.alpha}: expected a value in (0, 1)")
    if args.test not in TESTS:
        raise CausalInputError(f"--test {args.test!r}: expected one of {', '.join(TESTS)}")
    path = Path(args.csv)
    header, table = read_table(path)
    names, datasets, order = split_by_context(
        header, table, args.context_column, args.observational
    )
    check_capacity(names, args.max_vars)
    contexts = [f"{args.context_column}={v:g}" for v in order]
    indicators = tuple(c.strip() for c in args.indicator_columns.split(",") if c.strip())
    check_datasets(names, datasets, contexts, args.test, indicators)
    out = output_dir(args, path)
    kept = f"{out} holds no {RESULT} from this run ({RESULT} is written last, whole)"
    with RunLock(out), keeping(kept):
        if (out / RESULT).exists() and not args.overwrite:  # finished while we waited to lock
            raise CausalInputError(f"--out {out} holds a finished result; pass --overwrite")
        res = cdis_from_data(
            datasets,
            test=args.test,
            alpha=args.alpha,
            sepset_rule=args.sepset_rule,
            names=names,
            labels=[contexts[0]] + [f"{contexts[0]} pooled with {c}" for c in contexts[1:]],
        )
        print(
            f"CDIS on {len(names)} variables; observational: {contexts[0]} "
            f"({datasets[0].shape[0]} rows); interventional: "
            + ", ".join(
                f"{c} ({x.shape[0]} rows)" for c, x in zip(contexts[1:], datasets[1:], strict=True)
            )
        )
        for k, ch in enumerate(res.changed, 1):
            print(f"  dataset {contexts[k]} changes: {[names[i] for i in sorted(ch)] or 'nothing'}")
        lines = describe(res.final, names)
        print(f"PAG ({len(lines)} edges, {res.rounds} rounds):")
        for line in lines:
            print("  " + line)
        ambiguous = ambiguous_triples(res, names, args.context_column)
        print(f"ambiguous triples (neither colliders nor non-colliders): {len(ambiguous)}")
        write_result(out, res, names, lines, ambiguous, args, order)
    print(f"wrote {out / 'pag.png'} and {out / RESULT}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jaxlab causal", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("discover", help="CDIS on a CSV with a context (dataset) column")
    s.add_argument("csv")
    s.add_argument("--context-column", required=True)
    s.add_argument("--alpha", type=float, default=0.05)
    s.add_argument("--test", default="fisherz", help=" | ".join(TESTS))
    s.add_argument(
        "--sepset-rule",
        default="union",
        choices=SEPSET_RULES,
        help="separating sets for collider decisions: first | union | majority",
    )
    s.add_argument("--observational", type=float, default=None, help="observational context value")
    s.add_argument(
        "--indicator-columns",
        default="",
        help="comma-separated 0/1 treatment columns (variables) allowed with a continuous test",
    )
    s.add_argument("--max-vars", type=int, default=MAX_VARIABLES)
    s.add_argument("--out", default=None, help="output directory (default <csv stem>_causal)")
    s.add_argument("--overwrite", action="store_true", help="replace a finished result in --out")
    s.set_defaults(fn=discover)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``jaxlab causal`` with ``argv`` (without the program name); returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as e:
        return int(e.code or 0)
    try:
        return args.fn(args)
    except (CausalInputError, FileNotFoundError, NonFiniteTestError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RunDirError as e:
        hint = e.hint.replace("--run-dir", "--out")  # the run directory is --out here
        print(f"error: {e}" + (f" ({hint})" if hint else ""), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
