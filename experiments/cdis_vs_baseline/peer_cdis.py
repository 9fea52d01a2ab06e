"""The original CDIS code (github.com/MarkDana/CDIS, not part of jaxlab) on saved datasets.

Runs in its own process with the original checkout on ``sys.path`` (``--src``; it needs numpy,
networkx and causal-learn only) and imports nothing from jaxlab. For every ``*.npz`` in
``--data`` (arrays ``data0``, ``data1``, ... observational first) it calls
``cdis_from_data(data_list, test, alpha, max_cond_set_size)`` (``--test``: causal-learn's
``fisherz``, ``rcit``, ``kci`` or ``fastkci``; ``--rows N``: the first N rows of each dataset
only) and writes the final PAG's
edges as ``<name>.json`` (``{"->": [[i, j], ...], "<->": ..., ...}``, or ``{"error": ...}``
when the original raises).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--src", required=True, help="checkout of the original CDIS repository")
    p.add_argument("--data", required=True)
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--max-cond", type=int, default=3)
    p.add_argument("--test", default="fisherz", help="causal-learn CIT method")
    p.add_argument("--rows", type=int, default=0, help="first rows of each dataset (0: all)")
    a = p.parse_args()
    sys.path.insert(0, a.src)
    from main import cdis_from_data  # the original's entry point

    for f in sorted(Path(a.data).glob("*.npz")):
        z = np.load(f)
        data = [z[f"data{k}"][: a.rows or None] for k in range(len(z.files))]
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                res = cdis_from_data(
                    data, citest_method=a.test, citest_alpha=a.alpha, max_cond_set_size=a.max_cond
                )
        except Exception as e:  # the original failing on one dataset is a result, not a stop
            f.with_suffix(".json").write_text(json.dumps({"error": f"{type(e).__name__}: {e}"}))
            continue
        edges = {k: sorted([int(i), int(j)] for i, j in v) for k, v in res["final_PAG"].items()}
        f.with_suffix(".json").write_text(json.dumps(edges))


if __name__ == "__main__":
    main()
