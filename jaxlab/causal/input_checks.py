"""Checks of ``jaxlab causal discover``'s datasets against the chosen CI test, per context, before
anything runs: every refusal names the column and the context.

* a column constant or near-constant within a context (its standard deviation there below
  ``1e-6`` of its pooled one): its correlations, kernels or tables are degenerate there;
* a context with too few rows for the largest conditioning set (Fisher-z needs
  ``n - |S| - 3 >= 1``; the rule here, ``n >= d + 5`` for ``d`` variables, also covers the pooled
  datasets' extra indicator) or, for the exact KCI, too many (O(n^3) per test);
* a discrete column (integer values, at most ``DISCRETE_LEVELS`` of them) given to a continuous
  test (Fisher-z, RCIT, KCI), and a non-discrete column given to chi-square or G^2. A column
  named as an indicator (``--indicator-columns``: a 0/1 treatment or intervention indicator that
  is a variable of the graph, as the pooled datasets' context indicator is for CDIS) is allowed
  in a continuous test, and must hold only 0 and 1.
* a value so large that the column's squares, summed over the context's rows, overflow float32
  (the tests run in float32: their correlations and kernels would be inf or NaN);
* columns that are exactly linearly dependent within a context (a singular correlation matrix,
  e.g. one column twice another): a CI test conditioning on them is degenerate, and the graph
  would state a causal relation that is an identity of the data.
"""

from __future__ import annotations

import numpy as np

from jaxlab.causal.ci_tests import DISCRETE_TESTS, KernelCI

DISCRETE_LEVELS = 10
NEAR_CONSTANT = 1e-6
#: the largest float32
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: smallest singular value of a context's standardized columns, relative to the largest, below
#: which they are collinear (float64 rounding of an exact relation is ~1e-15)
COLLINEAR = 1e-9


class CausalInputError(ValueError):
    """Bad input to ``jaxlab causal``: the message names the column or option."""


def is_discrete(column: np.ndarray) -> bool:
    """Integer-valued with at most :data:`DISCRETE_LEVELS` distinct values."""
    return bool(np.all(column == np.round(column)) and np.unique(column).size <= DISCRETE_LEVELS)


def check_columns(names: list[str], datasets: list[np.ndarray], contexts: list[str]) -> None:
    """No column constant or near-constant within any context."""
    pooled_sd = np.concatenate(datasets).std(0)
    for data, ctx in zip(datasets, contexts, strict=True):
        sd = data.std(0)
        for j, name in enumerate(names):
            if np.ptp(data[:, j]) == 0:
                raise CausalInputError(
                    f"column '{name}' is constant ({data[0, j]:g}) in context {ctx}: its tests "
                    "there are undefined; drop the column or the context"
                )
            if sd[j] < NEAR_CONSTANT * pooled_sd[j]:
                raise CausalInputError(
                    f"column '{name}' is near-constant in context {ctx} (standard deviation "
                    f"{sd[j]:.3g} against {pooled_sd[j]:.3g} over all contexts)"
                )


def check_magnitude(names: list[str], datasets: list[np.ndarray], contexts: list[str]) -> None:
    """No value whose square, summed over its context's rows, overflows float32."""
    for data, ctx in zip(datasets, contexts, strict=True):
        limit = np.sqrt(FLOAT32_MAX / data.shape[0])
        big = np.abs(data).max(0)
        for j, name in enumerate(names):
            if big[j] > limit:
                raise CausalInputError(
                    f"column '{name}' holds {big[j]:.3g} in context {ctx}: its squares summed "
                    f"over the {data.shape[0]} rows overflow float32 (largest allowed magnitude "
                    f"{limit:.3g}); rescale the column"
                )


def check_collinear(names: list[str], datasets: list[np.ndarray], contexts: list[str]) -> None:
    """No set of columns exactly linearly dependent within a context: the standardized columns'
    smallest singular value is at least :data:`COLLINEAR` of the largest; else the columns with
    a weight in its singular vector (the dependent set) are named."""
    for data, ctx in zip(datasets, contexts, strict=True):
        z = (data - data.mean(0)) / data.std(0)
        _, sv, vt = np.linalg.svd(z, full_matrices=False)
        if sv[-1] <= COLLINEAR * sv[0]:  # check_rows: at least d + 5 rows, so d values
            null = vt[-1]
            cols = [n for n, c in zip(names, null, strict=True) if abs(c) > 1e-6 * abs(null).max()]
            raise CausalInputError(
                f"columns {', '.join(repr(c) for c in cols)} are exactly linearly dependent in "
                f"context {ctx} (one is a linear function of the others): a CI test on them is "
                "degenerate and the graph would report an identity of the data as a causal "
                "relation; drop one of them"
            )


def check_rows(names: list[str], datasets: list[np.ndarray], contexts: list[str], test: str):
    """Enough rows in every context for the largest conditioning set; not too many for KCI."""
    d = len(names)
    for data, ctx in zip(datasets, contexts, strict=True):
        n = data.shape[0]
        if n < d + 5:
            raise CausalInputError(
                f"context {ctx} has {n} rows: the CI tests need at least {d + 5} rows per "
                f"context for {d} variables (conditioning sets of up to {d - 1} variables on "
                "the pooled data)"
            )
    if test == "kci":
        n0 = datasets[0].shape[0]
        for data, ctx in zip(datasets[1:], contexts[1:], strict=True):
            if n0 + data.shape[0] > KernelCI.MAX_ROWS:
                raise CausalInputError(
                    f"context {ctx} pooled with {contexts[0]} has {n0 + data.shape[0]} rows: "
                    f"--test kci (exact, O(n^3) per test) takes at most {KernelCI.MAX_ROWS}; "
                    "use --test rcit"
                )


def check_kind(
    names: list[str], datasets: list[np.ndarray], test: str, indicators: tuple[str, ...] = ()
) -> None:
    """Discrete columns only for the discrete tests, and only discrete columns there; the
    ``indicators`` (0/1 columns) are allowed in every test."""
    table = np.concatenate(datasets)
    for name in indicators:
        if name not in names:
            raise CausalInputError(
                f"--indicator-columns: '{name}' is not a variable column (variables: {names})"
            )
        values = np.unique(table[:, names.index(name)])
        if not np.isin(values, (0.0, 1.0)).all():
            raise CausalInputError(
                f"--indicator-columns: column '{name}' holds {values[:5].tolist()}"
                f"{' ...' if values.size > 5 else ''}; an indicator holds only 0 and 1"
            )
    for j, name in enumerate(names):
        if name in indicators:
            continue
        discrete = is_discrete(table[:, j])
        levels = np.unique(table[:, j]).size
        if test in DISCRETE_TESTS and not discrete:
            raise CausalInputError(
                f"column '{name}' is not discrete ({levels} distinct values): --test {test} "
                f"needs integer columns with at most {DISCRETE_LEVELS} values; use --test "
                "fisherz, rcit or kci"
            )
        if test not in DISCRETE_TESTS and discrete:
            raise CausalInputError(
                f"column '{name}' is discrete ({levels} distinct integer values): --test {test} "
                "assumes continuous variables; use --test chisq or --test gsq, or name a 0/1 "
                "treatment column in --indicator-columns"
            )


def check_datasets(
    names: list[str],
    datasets: list[np.ndarray],
    contexts: list[str],
    test: str,
    indicators: tuple[str, ...] = (),
) -> None:
    """All the checks of the module docstring (magnitudes first: the others square the values;
    constant columns before collinear ones and before their kind)."""
    check_magnitude(names, datasets, contexts)
    check_rows(names, datasets, contexts, test)
    check_columns(names, datasets, contexts)
    check_collinear(names, datasets, contexts)
    check_kind(names, datasets, test, indicators)
