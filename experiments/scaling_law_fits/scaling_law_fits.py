"""Does :func:`jaxlab.lm.scaling_laws.fit_law` recover random precision laws, including data with
3-bit weights, activations and KV cache, or say that it did not?

For each of ``--sets`` random constant sets (drawn as in ``tests/lm/test_scaling_laws.py``:
Table 2 scaled, offsets small enough that no 3-bit point diverges), the training loss on a grid of
3 sizes x 3 token counts x 13 precision settings (full precision, and one of w, a, kv at 3, 4, 6,
8 bits) is fitted from Table 2 with all ten training-loss constants free, with the default starts
and with the single start Table 2. Prints one JSON line per set and a summary.

    python -m experiments.scaling_law_fits.scaling_law_fits --sets 20
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np

from jaxlab.lm import scaling_laws as sl
from tests.lm.test_scaling_laws import LOSS_FREE, precision_grid, random_law


def fit(law: sl.PrecisionLaw, data: dict, starts) -> dict:
    y = np.asarray(sl.loss_model(law, data))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", sl.FitWarning)
        result = sl.fit_law(data, y, free=LOSS_FREE, init=sl.TABLE2, starts=starts)
    errors = {f: abs(getattr(result.law, f) / getattr(law, f) - 1) for f in LOSS_FREE}
    return {
        "r2": result.r2,
        "converged": result.converged,
        "warned": any(issubclass(w.category, sl.FitWarning) for w in caught),
        "max_rel_error": max(v for k, v in errors.items() if not k.startswith("n_")),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", type=int, default=20)
    args = ap.parse_args()
    data = precision_grid()
    rows = []
    for seed in range(args.sets):
        law = random_law(np.random.default_rng(seed))
        row = {
            "seed": seed,
            "default": fit(law, data, None),
            "table2_only": fit(law, data, [sl.TABLE2]),
        }
        rows.append(row)
        print(json.dumps(row))
    for name in ("default", "table2_only"):
        conv = [r[name]["converged"] for r in rows]
        silent = [not r[name]["converged"] and not r[name]["warned"] for r in rows]
        print(json.dumps({"starts": name, "recovered": int(sum(conv)), "of": len(rows),
                          "unreported_failures": int(sum(silent))}))  # fmt: skip


if __name__ == "__main__":
    main()
