"""Type-I error and power of the CI tests at alpha = 0.05 over seeded cases, one JSON line per
(test, family): the rejection rate, its binomial 99% interval under the null, and the rate on
the linear and nonlinear halves. The shipped RCIT settings (bandwidths from 500 rows) at the
sizes the suite cannot afford, exact KCI on 500 cases, and the random-feature test as it was
before float64 (``--old-rcit``: a 1e-3 ridge on unstandardised features, 50 conditioning
features).

``python -m experiments.ci_calibration.ci_calibration [--cases 500] [--old-rcit]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy import stats

from benchmarks.harness import emit
from jaxlab.causal.kernel_ci import kci_pvalue, rcit_pvalue

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "causal"))
import test_ci_calibration as cases  # noqa: E402  (the suite's case generators)

ALPHA = 0.05


def report(test: str, n: int, p_null: np.ndarray, p_alt: np.ndarray, **kw) -> None:
    lo, hi = stats.binom.interval(0.99, p_null.size, ALPHA)
    h = p_null.size // 2
    emit(
        what="ci_calibration",
        test=test,
        n=n,
        cases=p_null.size,
        type1=float((p_null <= ALPHA).mean()),
        interval99=[lo / p_null.size, hi / p_null.size],
        type1_linear=float((p_null[:h] <= ALPHA).mean()),
        type1_nonlinear=float((p_null[h:] <= ALPHA).mean()),
        power=float((p_alt <= ALPHA).mean()),
        power_linear=float((p_alt[:h] <= ALPHA).mean()),
        power_nonlinear=float((p_alt[h:] <= ALPHA).mean()),
        **kw,
    )


def old_rcit(data: np.ndarray) -> np.ndarray:
    """The random-feature test as shipped before (float32, ridge 1e-3, 50 features)."""
    import jax
    import jax.numpy as jnp

    from experiments.ci_calibration.old_rcit import median_distances, rcit_pvalues

    z = (data - data.mean(1, keepdims=True)) / data.std(1, keepdims=True)
    bw = np.stack([median_distances(v) for v in z])
    q = jnp.zeros(1, jnp.int32)

    def one(d, b):
        cond, mask = jnp.full((1, 1), 2), jnp.ones((1, 1), bool)
        return rcit_pvalues(jax.random.PRNGKey(0), d, b, q, q + 1, cond, mask)[0]

    f = jax.jit(jax.vmap(one))
    return np.asarray(f(jnp.asarray(z, jnp.float32), jnp.asarray(bw, jnp.float32)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=500)
    ap.add_argument("--old-rcit", action="store_true")
    a = ap.parse_args()
    k = a.cases
    for n in (200, 600):
        null = cases.continuous_cases(10 + n, k, n, dependent=False)
        alt = cases.continuous_cases(20 + n, k, n, dependent=True)
        both = cases.kernel_batch(rcit_pvalue, np.concatenate([null, alt]), seed=n)
        report("rcit", n, both[:k], both[k:], rows=500)
        if a.old_rcit:
            report("rcit_before_float64", n, old_rcit(null), old_rcit(alt))
        report("fisherz", n, cases.fisher_z_batch(null), cases.fisher_z_batch(alt))
    for n in (100, 200):
        null = cases.continuous_cases(30 + n, k, n, dependent=False)
        alt = cases.continuous_cases(40 + n, k, n, dependent=True)
        both = cases.kernel_batch(lambda _, *v: kci_pvalue(*v), np.concatenate([null, alt]), 0)
        report("kci", n, both[:k], both[k:])
    for n in (100, 300):
        null = cases.discrete_cases(50 + n, k, n, dependent=False)
        alt = cases.discrete_cases(60 + n, k, n, dependent=True)
        for g in (False, True):
            pn, pa = cases.discrete_batch(null, g), cases.discrete_batch(alt, g)
            report("gsq" if g else "chisq", n, pn, pa)


if __name__ == "__main__":
    main()
