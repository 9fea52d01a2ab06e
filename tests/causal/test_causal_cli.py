"""``jaxlab causal discover``: a run on the selection example, and bad input -> a clear error
naming the column or option, exit status 2, nothing written."""

import numpy as np
import pytest

from jaxlab.cli import main as jaxlab_main


def _write(path, header, rows):
    path.write_text(",".join(header) + "\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n")


@pytest.fixture
def selection_csv(tmp_path):
    """Example 2 of the original: 0 and 1 independent, selected on 0 + 1 > 0, one dataset
    intervening on each."""
    rng = np.random.default_rng(0)
    n = 4000
    x0, x1 = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    keep = x0 + x1 > 0
    x0, x1 = x0[keep], x1[keep]
    m = x0.size
    rows = np.vstack(
        [
            np.column_stack([x0, x1, np.zeros(m)]),
            np.column_stack([x0 + rng.uniform(0.5, 1, m), x1, np.ones(m)]),
            np.column_stack([x0, x1 + rng.uniform(0.5, 1, m), 2 * np.ones(m)]),
        ]
    )
    p = tmp_path / "sel.csv"
    _write(p, ["gene_a", "gene_b", "ctx"], rows.round(6).tolist())
    return p


def test_discover_prints_selection_edge_and_writes_png(selection_csv, capsys):
    out = selection_csv.with_name("g.png")
    rc = jaxlab_main(
        ["causal", "discover", str(selection_csv), "--context-column", "ctx", "--out", str(out)]
    )
    text = capsys.readouterr().out
    assert rc == 0
    assert "gene_a --- gene_b" in text and "selection: gene_a and gene_b" in text
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "case, expected",
    [
        ("non_numeric", "column 'b', row 3: non-numeric value 'x'"),
        ("missing", "column 'a', row 2: missing value"),
        ("one_context", "context column 'k' has a single value"),
        ("constant", "column 'c' is constant"),
        ("alpha", "--alpha 1.5: expected a value in (0, 1)"),
        ("too_many", "exceed --max-vars=2"),
        ("few_rows", "the CI tests need at least"),
        ("no_context", "--context-column 'k' is not a column"),
    ],
)
def test_bad_input_names_the_field_and_writes_nothing(tmp_path, capsys, case, expected):
    rng = np.random.default_rng(1)
    rows = np.column_stack([rng.normal(size=(40, 3)), np.repeat([0, 1], 20)]).round(4).tolist()
    header = ["a", "b", "c", "k"]
    args = ["--context-column", "k"]
    if case == "non_numeric":
        rows[1][1] = "x"
    elif case == "missing":
        rows[0][0] = ""
    elif case == "one_context":
        for r in rows:
            r[3] = 0
    elif case == "constant":
        for r in rows:
            r[2] = 1.0
    elif case == "alpha":
        args += ["--alpha", "1.5"]
    elif case == "too_many":
        args += ["--max-vars", "2"]
    elif case == "few_rows":
        rows = rows[:6] + rows[-3:]
    elif case == "no_context":
        header = ["a", "b", "c", "kk"]
    p = tmp_path / "bad.csv"
    _write(p, header, rows)
    out = tmp_path / "g.png"
    rc = jaxlab_main(["causal", "discover", str(p), *args, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert expected in err and err.startswith("error:")
    assert not out.exists()
