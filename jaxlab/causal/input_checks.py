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
"""

from __future__ import annotations

import numpy as np

from jaxlab.causal.ci_tests import DISCRETE_TESTS, KernelCI

DISCRETE_LEVELS = 10
NEAR_CONSTANT = 1e-6


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
    """All the checks of the module docstring (constant columns before their kind)."""
    check_rows(names, datasets, contexts, test)
    check_columns(names, datasets, contexts)
    check_kind(names, datasets, test, indicators)
