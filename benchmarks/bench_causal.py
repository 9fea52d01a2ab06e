"""Causal-discovery benchmarks (``jaxlab.causal``), one JSON line per measurement.

* ``ci``: conditional-independence tests per second, batched in JAX (one jitted call for the
  whole batch) vs a Python loop over causal-learn's ``CIT`` on the same data and triples
  (Fisher-z; and the random-feature kernel test vs causal-learn's KCI on fewer triples).
* ``cdis``: end-to-end CDIS wall time vs the number of variables (10, 20, 50) and samples.
* ``fci``: our FCI vs causal-learn's FCI on seeded data, for each separating-set rule (all
  variables observed; 2 of 10 latent): how many PAGs and skeletons are equal.
* ``accuracy``: directed-edge precision, recall, F1 and SHD of CDIS and of the selection-ignoring
  interventional baseline against the true DAG, over seeds, n = 1000 and 10000 (ER DAGs, degree
  1.5, linear-Gaussian, 2 selection mechanisms on standardized parents, 2 datasets with one
  single-target soft intervention each), and in oracle mode (d-separation in the twin graphs).

Timings on a shared 2-core CPU are noisy. Usage:
``python -m benchmarks.bench_causal [--only ci|cdis|accuracy|fci] [--quick]``.
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from benchmarks.harness import emit
from benchmarks.harness import emit_rate as _emit
from jaxlab.causal.cdis import cdis_core, interventional_fci_baseline
from jaxlab.causal.ci_tests import FisherZ, OracleCI, RandomFeatureCI, make_test
from jaxlab.causal.graphs import ARROW, TAIL, random_dag_er, selection_graph, twin_graph
from jaxlab.causal.scm import (
    SoftIntervention,
    pool_with_indicator,
    random_scm,
    random_selection,
    sample_datasets,
    standardize_selection,
)


def _triples(rng, d, q, max_s):
    out = []
    for _ in range(q):
        perm = rng.permutation(d)
        out.append(
            (
                int(perm[0]),
                int(perm[1]),
                tuple(int(v) for v in perm[2 : 2 + rng.integers(0, max_s + 1)]),
            )
        )
    return out


def _causallearn():
    """The peer package, or a clear error naming the extra that brings it."""
    try:
        import causallearn  # noqa: F401  (PyPI: causal-learn)
    except ImportError as err:
        raise SystemExit(
            "bench_causal compares with causal-learn: pip install 'jaxlab[bench]'"
        ) from err


def bench_ci(quick: bool):
    _causallearn()
    from causallearn.utils.cit import CIT

    rng = np.random.default_rng(0)
    d, n = 20, 5000
    data = rng.normal(size=(n, d))
    for q in [256, 4096] if not quick else [256]:
        trip = _triples(rng, d, q, 4)
        xs, ys, ss = zip(*trip, strict=True)
        t = FisherZ(data)
        t0 = time.perf_counter()
        t.pvalues(xs, ys, ss)
        first = time.perf_counter() - t0
        best = np.inf
        for _ in range(3):
            t._cache.clear()
            t0 = time.perf_counter()
            t.pvalues(xs, ys, ss)
            best = min(best, time.perf_counter() - t0)
        cit = CIT(data, "fisherz")
        t0 = time.perf_counter()
        for a, b, s in trip:
            cit(a, b, list(s))
        peer = time.perf_counter() - t0
        _emit(
            "fisherz_tests",
            {"n": n, "d": d, "q": q, "max_cond": 4},
            first - best,
            best,
            q / best,
            "tests/s",
            peer_rate=round(q / peer, 2),
            speedup=round(peer / best, 2),
        )
    n, q = 500, 16
    data = rng.normal(size=(n, 6))
    trip = _triples(rng, 6, q, 2)
    xs, ys, ss = zip(*trip, strict=True)
    t = RandomFeatureCI(jax.random.PRNGKey(0), data)
    t0 = time.perf_counter()
    t.pvalues(xs, ys, ss)
    first = time.perf_counter() - t0
    t._cache.clear()
    t0 = time.perf_counter()
    t.pvalues(xs, ys, ss)
    best = time.perf_counter() - t0
    cit = CIT(data, "kci")
    k = 4 if quick else 8
    t0 = time.perf_counter()
    for a, b, s in trip[:k]:
        cit(a, b, list(s))
    peer = (time.perf_counter() - t0) / k
    _emit(
        "kernel_ci_tests",
        {"n": n, "d": 6, "q": q, "max_cond": 2},
        first - best,
        best,
        q / best,
        "tests/s",
        peer_rate=round(1 / peer, 2),
        speedup=round(peer * q / best, 2),
        note="ours: random-feature RCIT (gamma null); peer: causal-learn KCI (exact kernels)",
    )


def _problem(seed, d, n, num_sel=2, num_iv=2, degree=1.5, test="fisherz"):
    """Random ER DAG, SCM, selection and single-target soft interventions; the CI tests of CDIS
    (observational, then pooled per intervention) from data (``fisherz``/``rcit``) or from the
    graphs (``oracle``)."""
    key = jax.random.PRNGKey(seed)
    adj = np.asarray(random_dag_er(key, d, degree))
    scm = random_scm(jax.random.fold_in(key, 1), adj)
    sel = random_selection(jax.random.fold_in(key, 2), d, num_sel)
    sel = standardize_selection(jax.random.fold_in(key, 4), sel, scm)
    rng = np.random.default_rng(seed)
    targets = [int(v) for v in rng.choice(d, num_iv, replace=False)]
    if test == "oracle":
        tests = [OracleCI(selection_graph(adj, sel.parents))]
        tests += [OracleCI(twin_graph(adj, (t,), sel.parents)) for t in targets]
        return adj, tests
    data = sample_datasets(
        jax.random.fold_in(key, 3),
        scm,
        n,
        selection=sel,
        interventions=tuple(SoftIntervention((t,)) for t in targets),
    )
    pooled = [pool_with_indicator(data[0], x) for x in data[1:]]
    tests = [make_test(test, data[0])] + [make_test(test, x) for x in pooled]
    return adj, tests


def bench_cdis(quick: bool):
    for d in [10, 20] if quick else [10, 20, 50]:
        for n in [1000] if quick else [1000, 10000]:
            adj, tests = _problem(0, d, n)
            t0 = time.perf_counter()
            res = cdis_core(tests, alpha=0.05, max_cond=3)
            cold = time.perf_counter() - t0
            calls = sum(t.calls for t in tests)
            count = sum(t.tests for t in tests)
            for t in tests:  # same run again: compiled programs reused, CI tests recomputed
                t._cache.clear()
            t0 = time.perf_counter()
            res = cdis_core(tests, alpha=0.05, max_cond=3)
            el = time.perf_counter() - t0
            _emit(
                "cdis_end_to_end",
                {"d": d, "n": n, "datasets": len(tests)},
                max(cold - el, 0.0),
                el,
                count / el,
                "tests/s",
                cold_s=round(cold, 3),
                ci_tests=count,
                ci_batches=calls,
                rounds=res.rounds,
                note="time_s: warm run (compiled programs reused); cold_s: first run; max_cond=3",
            )


def _scores(marks, adj):
    d = adj.shape[0]
    out = (marks == ARROW) & (marks.T == TAIL)
    tp = int((out & adj).sum())
    fp = int(out.sum() - tp)
    fn = int(adj.sum() - tp)
    prec = tp / (tp + fp) if tp + fp else float("nan")  # no claims: undefined
    rec = tp / max(tp + fn, 1)
    f1 = 2 * prec * rec / (prec + rec) if tp else 0.0
    shd = 0
    for i in range(d):
        for j in range(i + 1, d):
            truth = 1 if adj[i, j] else (2 if adj[j, i] else 0)
            if marks[i, j] == 0:
                got = 0
            elif out[i, j]:
                got = 1
            elif out[j, i]:
                got = 2
            else:
                got = 3  # adjacent, not directed
            shd += truth != got
    return prec, rec, f1, shd


def bench_accuracy(quick: bool, tests_kind: tuple[str, ...], num_seeds: int):
    seeds = range(3 if quick else num_seeds)
    sizes = [1000] if quick else [1000, 3000, 10000]
    for kind, n in [(k, n) for k in tests_kind for n in sizes]:
        if kind == "oracle" and n != 1000:
            continue
        rows = {"cdis": [], "baseline": []}
        t0 = time.perf_counter()
        for seed in seeds:
            adj, tests = _problem(seed, 10, n, test=kind)
            a = 0.5 if kind == "oracle" else 0.05
            mc = None if kind == "oracle" else 3
            rows["cdis"].append(_scores(cdis_core(tests, alpha=a, max_cond=mc).final, adj))
            rows["baseline"].append(
                _scores(interventional_fci_baseline(tests, alpha=a, max_cond=mc), adj)
            )
        el = time.perf_counter() - t0
        for method, vals in rows.items():
            v = np.array(vals)
            emit(
                what="directed_edge_accuracy",
                method=method,
                test=kind,
                size={
                    "d": 10,
                    "n": n if kind != "oracle" else None,
                    "seeds": len(seeds),
                    "selection": 2,
                    "interventions": 2,
                },
                precision=round(float(np.nanmean(v[:, 0])), 3),
                seeds_with_directed_edges=int(np.isfinite(v[:, 0]).sum()),
                recall=round(float(v[:, 1].mean()), 3),
                f1=round(float(v[:, 2].mean()), 3),
                shd=round(float(v[:, 3].mean()), 2),
                precision_se=round(
                    float(np.nanstd(v[:, 0]) / np.sqrt(np.isfinite(v[:, 0]).sum())), 3
                ),
                time_s=round(el, 1),
            )


def bench_fci_parity(quick: bool):
    """FCI on seeded linear-Gaussian data vs causal-learn's FCI on the same data, for each
    separating-set rule, with every variable observed and with 2 of 10 latent."""
    import contextlib
    import io

    _causallearn()
    from causallearn.search.ConstraintBased.FCI import fci as cl_fci

    from jaxlab.causal.fci import SEPSET_RULES, fci
    from jaxlab.causal.scm import sample_dataset

    lut = {0: 0, -1: 1, 1: 2, 2: 3}
    for n in [2000] if quick else [2000, 10000]:
        for v, latents in ((8, 0), (10, 2)):
            seeds = range(5 if quick else 20)
            same_skel = dict.fromkeys(SEPSET_RULES, 0)
            same_pag = dict.fromkeys(SEPSET_RULES, 0)
            diff_marks = {r: [] for r in SEPSET_RULES}
            for seed in seeds:
                key = jax.random.PRNGKey(1000 + seed)
                adj = np.asarray(random_dag_er(key, v, 2.0))
                scm = random_scm(jax.random.fold_in(key, 1), adj)
                x = sample_dataset(jax.random.fold_in(key, 2), scm, n)[:, : v - latents]
                with contextlib.redirect_stdout(io.StringIO()):
                    g, _ = cl_fci(x, "fisherz", 0.05, show_progress=False)
                ref = np.vectorize(lut.get)(g.graph.T)
                for rule in SEPSET_RULES:
                    ours = fci(FisherZ(x), alpha=0.05, sepset_rule=rule).marks
                    same_skel[rule] += np.array_equal(ours != 0, ref != 0)
                    same_pag[rule] += np.array_equal(ours, ref)
                    diff_marks[rule].append(int((ours != ref).sum()))
            for rule in SEPSET_RULES:
                emit(
                    what="fci_vs_causallearn",
                    size={"d": v - latents, "latents": latents, "n": n, "seeds": len(seeds)},
                    sepset_rule=rule,
                    same_skeleton=same_skel[rule],
                    same_pag=same_pag[rule],
                    mean_differing_marks=round(float(np.mean(diff_marks[rule])), 2),
                )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--only", choices=["ci", "cdis", "accuracy", "fci"], default=None)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seeds", type=int, default=20, help="seeds for the accuracy comparison")
    p.add_argument(
        "--tests", default="oracle,fisherz", help="CI tests for accuracy: oracle,fisherz,rcit"
    )
    a = p.parse_args()
    if a.only in (None, "ci"):
        bench_ci(a.quick)
    if a.only in (None, "cdis"):
        bench_cdis(a.quick)
    if a.only in (None, "accuracy"):
        bench_accuracy(a.quick, tuple(a.tests.split(",")), a.seeds)
    if a.only in (None, "fci"):
        bench_fci_parity(a.quick)


if __name__ == "__main__":
    main()
