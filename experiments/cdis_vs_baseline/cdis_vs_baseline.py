"""CDIS vs the selection-ignoring interventional baseline in data mode, with the original CDIS
code on the same datasets.

Data (the generator of ``benchmarks/bench_causal.py --only accuracy``): ER DAGs on 10 variables,
expected degree 1.5, 2 selection mechanisms on standardized parents, 2 interventional datasets
with one single-target soft intervention each; ``n`` rows per dataset; linear-Gaussian with
Fisher-z, or (``--nonlinearity sin --test rcit``) nonlinear with the random-feature kernel test.
alpha = 0.05, conditioning sets up to 3, no Possible-D-Sep refinement (the original's default).
``cdis`` uses the default union separating-set rule, ``cdis_first`` the first set found (the
original keeps the first set of its order-dependent search). Scores against the true DAG:
directed-edge precision, recall, F1, SHD.

The original (github.com/MarkDana/CDIS) runs in a separate process through ``peer_cdis.py``
from a checkout given by ``--peer-src`` (the jaxlab checkout never holds its code), with the
interpreter ``--peer-python`` (a venv with causal-learn; ``setup_cdis_peer.sh`` makes one);
without ``--peer-src`` the peer column is left out.

``python -m experiments.cdis_vs_baseline.cdis_vs_baseline [--seeds 30] [--seeds-large 30]
[--sizes 1000,3000,10000] [--test fisherz|rcit] [--nonlinearity linear|sin] [--peer-src DIR
--peer-python PY [--peer-test T] [--peer-rows N] [--peer-only]] [--out MD]`` (JSON lines on
stdout, the table in ``--out``; ``--peer-only`` runs the original alone, its lines merged with
jaxlab's by ``--from-jsonl``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import jax
import numpy as np

from benchmarks.bench_causal import _scores
from jaxlab.causal.cdis import cdis_core, interventional_fci_baseline
from jaxlab.causal.ci_tests import make_test
from jaxlab.causal.graphs import ARROW, CIRCLE, TAIL, random_dag_er
from jaxlab.causal.scm import (
    SoftIntervention,
    pool_with_indicator,
    random_scm,
    random_selection,
    sample_datasets,
    standardize_selection,
)

D, ALPHA, MAX_COND = 10, 0.05, 3
METRICS = ("precision", "recall", "f1", "shd")


def problem(seed: int, n: int, nonlinearity: str = "linear"):
    """(true DAG, datasets: observational first), as ``bench_causal._problem`` draws them."""
    key = jax.random.PRNGKey(seed)
    adj = np.asarray(random_dag_er(key, D, 1.5))
    scm = random_scm(jax.random.fold_in(key, 1), adj, nonlinearity=nonlinearity)
    sel = random_selection(jax.random.fold_in(key, 2), D, 2)
    sel = standardize_selection(jax.random.fold_in(key, 4), sel, scm)
    rng = np.random.default_rng(seed)
    targets = [int(v) for v in rng.choice(D, 2, replace=False)]
    data = sample_datasets(
        jax.random.fold_in(key, 3),
        scm,
        n,
        selection=sel,
        interventions=tuple(SoftIntervention((t,)) for t in targets),
    )
    return adj, [np.asarray(x, np.float64) for x in data]


def marks_from_edges(edges: dict) -> np.ndarray:
    """The original's PAG dict (``'->'``: (i, j) pairs, ...) as jaxlab marks."""
    m = np.zeros((D, D), np.int8)
    for kind, pairs in edges.items():
        for i, j in pairs:
            if kind == "->":
                m[i, j], m[j, i] = ARROW, TAIL
            elif m[i, j] == 0:
                m[i, j] = m[j, i] = CIRCLE
    return m


def run(
    sizes_seeds,
    peer_src: str | None,
    test: str,
    nonlinearity: str,
    peer_python: str,
    peer_test: str | None = None,
    peer_rows: int = 0,
    peer_only: bool = False,
) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, seeds in sizes_seeds:
            for seed in range(seeds):
                adj, data = problem(seed, n, nonlinearity)
                if peer_only:
                    rows.append({"n": n, "seed": seed})
                    _save(Path(tmp), n, seed, adj, data)
                    continue
                key = jax.random.PRNGKey(10_000 + seed)
                tests = [make_test(test, data[0], key=key)] + [
                    make_test(test, pool_with_indicator(data[0], x), key=jax.random.fold_in(key, k))
                    for k, x in enumerate(data[1:], 1)
                ]
                cd = _scores(cdis_core(tests, alpha=ALPHA, max_cond=MAX_COND).final, adj)
                first = cdis_core(tests, alpha=ALPHA, max_cond=MAX_COND, sepset_rule="first")
                bl = _scores(
                    interventional_fci_baseline(tests, alpha=ALPHA, max_cond=MAX_COND), adj
                )
                row = {"n": n, "seed": seed, "cdis": cd, "cdis_first": _scores(first.final, adj)}
                row["baseline"] = bl
                rows.append(row)
                print(json.dumps(row), flush=True)  # jaxlab's side, as it goes
                _save(Path(tmp), n, seed, adj, data)
        if peer_src:
            subprocess.run(
                [
                    peer_python,
                    str(Path(__file__).parent / "peer_cdis.py"),
                    "--src",
                    peer_src,
                    "--data",
                    tmp,
                    "--alpha",
                    str(ALPHA),
                    "--test",
                    peer_test or test,
                    "--rows",
                    str(peer_rows),
                    "--max-cond",
                    str(MAX_COND),
                ],
                check=True,
            )
            for row in rows:
                stem = Path(tmp) / f"n{row['n']}_s{row['seed']:03d}"
                edges = json.loads(stem.with_suffix(".json").read_text())
                adj = np.load(f"{stem}.adj.npy")
                if "error" in edges:
                    row["original"] = (np.nan,) * 4
                    row["original_error"] = edges["error"]
                else:
                    row["original"] = _scores(marks_from_edges(edges), adj)
                keep = ("n", "seed", "original", "original_error")
                print(json.dumps({k: row[k] for k in keep if k in row}), flush=True)
    return rows


def _save(tmp: Path, n: int, seed: int, adj: np.ndarray, data: list[np.ndarray]) -> None:
    """A problem's datasets and true DAG, as ``peer_cdis.py`` reads them."""
    np.savez(tmp / f"n{n}_s{seed:03d}.npz", **{f"data{k}": x for k, x in enumerate(data)})
    np.save(tmp / f"n{n}_s{seed:03d}.adj.npy", adj)


def _cmp(a: float, b: float) -> int:
    if np.isnan(a) or np.isnan(b):
        return 2
    return int(np.sign(a - b))


def write_table(rows: list[dict], path: Path) -> None:
    # the original may have run on some seeds only (a costlier test): each method's rows
    methods = [
        m for m in ("cdis", "cdis_first", "original", "baseline") if any(m in r for r in rows)
    ]
    lines = [
        "| n | seeds | method | precision | recall | F1 | SHD |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    wins = [
        "| n | seeds | CDIS precision > / = / < baseline (both defined) | CDIS F1 > / = / < baseline "
        "| CDIS F1 > / = / < original |",
        "| --- | --- | --- | --- | --- |",
    ]
    for n in sorted({r["n"] for r in rows}):
        rs = [r for r in rows if r["n"] == n]
        for m in methods:
            if not any(m in r for r in rs):
                continue
            v = np.array([r[m] for r in rs if m in r], float)
            ran = int(np.isfinite(v[:, 3]).sum())  # the original may raise on a dataset
            lines.append(
                f"| {n} | {ran} | {m} | {np.nanmean(v[:, 0]):.3f} | {np.nanmean(v[:, 1]):.3f} "
                f"| {np.nanmean(v[:, 2]):.3f} | {np.nanmean(v[:, 3]):.2f} |"
            )
        cells = []
        for k, other in ((0, "baseline"), (2, "baseline"), (2, "original")):
            if not any(other in r and "cdis" in r for r in rs):
                cells.append("-")
                continue
            c = [_cmp(r["cdis"][k], r[other][k]) for r in rs if other in r and "cdis" in r]
            defined = sum(x != 2 for x in c)
            if not defined:
                cells.append("- (0)")
                continue
            cells.append(
                f"{c.count(1) / defined:.2f} / {c.count(0) / defined:.2f} / "
                f"{c.count(-1) / defined:.2f} ({defined})"
            )
        wins.append(f"| {n} | {len(rs)} | " + " | ".join(cells) + " |")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines + [""] + wins) + "\n")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=30, help="seeds at n = 1000 and 3000")
    p.add_argument("--seeds-large", type=int, default=10, help="seeds at n = 10000")
    p.add_argument("--peer-src", default=None, help="checkout of github.com/MarkDana/CDIS")
    p.add_argument(
        "--peer-python",
        default=sys.executable,
        help="the peer venv's python (numpy, networkx, causal-learn); default: this interpreter",
    )
    p.add_argument("--test", default="fisherz", choices=("fisherz", "rcit"))
    p.add_argument(
        "--peer-test",
        default=None,
        choices=("fisherz", "rcit", "kci", "fastkci"),
        help="causal-learn test the original runs with (default: --test)",
    )
    p.add_argument("--peer-rows", type=int, default=0, help="the original's rows per dataset")
    p.add_argument(
        "--peer-only", action="store_true", help="run only the original (merge with --from-jsonl)"
    )
    p.add_argument("--nonlinearity", default="linear", choices=("linear", "tanh", "sin"))
    p.add_argument("--sizes", default="1000,3000,10000")
    p.add_argument("--from-jsonl", default=None, help="only write the table of a run's output")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "cdis_vs_baseline.md"))
    a = p.parse_args()
    if a.from_jsonl:  # rows of one seed may come in two lines (jaxlab's, then the original's)
        merged = {}
        for line in Path(a.from_jsonl).read_text().splitlines():
            r = json.loads(line)
            merged.setdefault((r["n"], r["seed"]), {}).update(r)
        write_table(list(merged.values()), Path(a.out))
        return
    sizes = [int(v) for v in a.sizes.split(",")]
    plan = [(n, a.seeds_large if n >= 10000 else a.seeds) for n in sizes]
    rows = run(
        plan,
        a.peer_src,
        a.test,
        a.nonlinearity,
        a.peer_python,
        a.peer_test,
        a.peer_rows,
        a.peer_only,
    )
    if not a.peer_only:
        write_table(rows, Path(a.out))


if __name__ == "__main__":
    main()
