"""Calibration of the CI tests over seeded cases at alpha = 0.05: under the null the rejection
rate lies inside its binomial 99% interval, under alternatives the power is high. Every family
of cases is one jitted call (``vmap`` over datasets); the exact KCI uses fewer, smaller cases here
(``experiments/ci_calibration`` runs 500 of each at larger n)."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxlab.causal.ci_tests import fisher_z_pvalues
from jaxlab.causal.discrete_ci import discrete_pvalue
from jaxlab.causal.kernel_ci import kci_pvalue, rcit_pvalue

ALPHA = 0.05


def continuous_cases(seed: int, cases: int, n: int, dependent: bool) -> np.ndarray:
    """(cases, n, 3) datasets ``(x, y, z)``, half linear (unit noise), half nonlinear
    (``x = sin(1.5 z) + e``, ``y = z^2 + e``, noise sd 0.3: z explains most of x and y, so a
    test that regresses z out poorly rejects); ``x _||_ y | z`` unless ``dependent`` (then y also
    depends on x)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(cases, n))
    e1, e2 = rng.normal(size=(2, cases, n))
    h = cases // 2
    x = np.concatenate([0.8 * z[:h] + e1[:h], np.sin(1.5 * z[h:]) + 0.3 * e1[h:]])
    y = np.concatenate([0.8 * z[:h] + e2[:h], z[h:] ** 2 + 0.3 * e2[h:]])
    if dependent:
        y = y + np.concatenate([0.5 * x[:h], 0.5 * np.cos(2.0 * x[h:])])
    return np.stack([x, y, z], axis=-1)


def discrete_cases(seed: int, cases: int, n: int, dependent: bool) -> np.ndarray:
    """(cases, n, 3) integer datasets: z in 0..2, x and y noisy functions of z (x in 0..2,
    y in 0..1); if ``dependent`` y also copies x's parity with probability 0.3."""
    rng = np.random.default_rng(seed)
    z = rng.integers(0, 3, (cases, n))
    x = (z + (rng.random((cases, n)) < 0.4)) % 3
    y = (z + (rng.random((cases, n)) < 0.3)) % 2
    if dependent:
        y = np.where(rng.random((cases, n)) < 0.3, x % 2, y)
    return np.stack([x, y, z], axis=-1).astype(np.int32)


def interval(cases: int) -> tuple[float, float]:
    lo, hi = stats.binom.interval(0.99, cases, ALPHA)
    return lo / cases, hi / cases


def check(p_null: np.ndarray, p_alt: np.ndarray, min_power: float) -> None:
    lo, hi = interval(p_null.size)
    rate = float((p_null <= ALPHA).mean())
    power = float((p_alt <= ALPHA).mean())
    assert np.isfinite(p_null).all() and np.isfinite(p_alt).all()
    assert lo <= rate <= hi, f"type-I error {rate:.3f} outside the 99% interval [{lo}, {hi}]"
    assert power >= min_power, f"power {power:.3f} < {min_power}"


def fisher_z_batch(data: np.ndarray) -> np.ndarray:
    corr = np.stack([np.corrcoef(d.T) for d in data])
    q = jnp.zeros(1, jnp.int32)
    one = jax.vmap(
        lambda c: fisher_z_pvalues(
            c, float(data.shape[1]), q, q + 1, jnp.full((1, 1), 2), jnp.ones((1, 1), bool)
        )[0]
    )
    return np.asarray(one(jnp.asarray(corr, jnp.float32)))


def kernel_batch(fn, data: np.ndarray, seed: int) -> np.ndarray:
    """``fn(key, x, y, z, zmask)`` over every dataset in one jitted call (float64)."""
    with jax.enable_x64(True):
        d = jnp.asarray(data, jnp.float64)
        keys = jax.random.split(jax.random.PRNGKey(seed), data.shape[0])
        mask = jnp.ones(1, bool)
        run = jax.jit(jax.vmap(lambda k, v: fn(k, v[:, 0], v[:, 1], v[:, 2:3], mask)))
        return np.asarray(run(keys, d))


def discrete_batch(data: np.ndarray, g_squared: bool) -> np.ndarray:
    d = jnp.asarray(data)
    card = jnp.array([3], jnp.int32)
    mask = jnp.ones(1, bool)
    run = jax.jit(
        jax.vmap(
            lambda v: discrete_pvalue(
                v[:, 0], v[:, 1], v[:, 2:3], mask, card, kmax=3, g_squared=g_squared
            )
        )
    )
    return np.asarray(run(d))


def test_fisher_z_level_and_power_on_500_linear_cases():
    null = continuous_cases(0, 1000, 200, dependent=False)[:500]  # the linear half
    alt = continuous_cases(1, 1000, 200, dependent=True)[:500]
    check(fisher_z_batch(null), fisher_z_batch(alt), min_power=0.95)


def test_rcit_level_and_power_on_500_linear_and_nonlinear_cases():
    """Bandwidths from the first 100 rows (the default 500 costs a sort of 20k distances per
    variable and case)."""
    null = continuous_cases(2, 500, 200, dependent=False)
    alt = continuous_cases(3, 500, 200, dependent=True)
    both = kernel_batch(partial(rcit_pvalue, rows=100), np.concatenate([null, alt]), seed=0)
    check(both[:500], both[500:], min_power=0.9)


def test_exact_kci_level_and_power_on_small_cases():
    null = continuous_cases(4, 100, 150, dependent=False)
    alt = continuous_cases(5, 100, 150, dependent=True)
    both = kernel_batch(lambda k, *a: kci_pvalue(*a), np.concatenate([null, alt]), seed=0)
    check(both[:100], both[100:], min_power=0.9)


@pytest.mark.parametrize("g_squared", [False, True], ids=["chisq", "gsq"])
def test_discrete_level_and_power_on_500_cases(g_squared):
    null = discrete_cases(6, 500, 300, dependent=False)
    alt = discrete_cases(7, 500, 300, dependent=True)
    check(discrete_batch(null, g_squared), discrete_batch(alt, g_squared), min_power=0.9)
