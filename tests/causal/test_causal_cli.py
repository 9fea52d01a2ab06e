"""``jaxlab causal discover``: a run on the selection example, bad input -> a clear error naming
the column, context or option, exit status 2, nothing written; the output directory's lock and
the finished-result guard."""

import json

import numpy as np
import pytest

from jaxlab.causal.input_checks import CausalInputError, check_kind
from jaxlab.cli import main as jaxlab_main
from jaxlab.core.run_lock import RunLock


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
    out = selection_csv.with_name("run")
    args = ["causal", "discover", str(selection_csv), "--context-column", "ctx", "--out", str(out)]
    rc = jaxlab_main(args)
    text = capsys.readouterr().out
    assert rc == 0
    assert "gene_a --- gene_b" in text and "selection: gene_a and gene_b" in text
    assert (out / "pag.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = json.loads((out / "result.json").read_text())
    assert result["variables"] == ["gene_a", "gene_b"] and result["marks"] == [[0, 1], [1, 0]]
    assert not (out / ".lock").exists()
    # a finished result is kept unless --overwrite
    assert jaxlab_main(args) == 2
    assert "holds a finished result" in capsys.readouterr().err
    assert jaxlab_main([*args, "--overwrite", "--sepset-rule", "majority"]) == 0
    assert "ambiguous triples (neither colliders nor non-colliders): 0" in capsys.readouterr().out
    result = json.loads((out / "result.json").read_text())
    assert result["sepset_rule"] == "majority" and result["ambiguous_triples"] == []


def test_a_locked_output_directory_is_refused(selection_csv, capsys):
    out = selection_csv.with_name("run")
    with RunLock(out):  # another run holds it
        rc = jaxlab_main(
            ["causal", "discover", str(selection_csv), "--context-column", "ctx", "--out", str(out)]
        )
    assert rc == 2
    err = capsys.readouterr().err
    assert "is in use by another run" in err and "pass --out NEW_DIR" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "case, expected",
    [
        ("non_numeric", "column 'b', row 3: non-numeric value 'x'"),
        ("missing", "column 'a', row 2: missing value"),
        ("one_context", "context column 'k' has a single value"),
        ("constant", "column 'c' is constant"),
        ("alpha", "--alpha 1.5: expected a value in (0, 1)"),
        ("too_many", "exceed --max-vars=2"),
        ("few_rows", "context k=0 has 6 rows: the CI tests need at least"),
        ("no_context", "--context-column 'k' is not a column"),
        ("constant_in_context", "column 'c' is constant (1) in context k=0"),
        ("near_constant_in_context", "column 'a' is near-constant in context k=1"),
        ("discrete_for_fisherz", "column 'b' is discrete (3 distinct integer values)"),
        ("continuous_for_chisq", "column 'a' is not discrete"),
        ("indicator_not_binary", "--indicator-columns: column 'b' holds [0.0, 1.0, 2.0]"),
        ("indicator_unknown", "--indicator-columns: 'k' is not a variable column"),
        ("unknown_test", "--test 'kcl': expected one of fisherz, rcit, kci, chisq, gsq"),
        ("overflow", "column 'b' holds 1e+200 in context k=1: its squares summed over the 20"),
        ("collinear", "columns 'a', 'c' are exactly linearly dependent in context k=0"),
        ("collinear_3", "columns 'a', 'b', 'c' are exactly linearly dependent in context k=0"),
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
    elif case == "constant_in_context":
        for r in rows[:20]:
            r[2] = 1.0
    elif case == "near_constant_in_context":
        for i, r in enumerate(rows[20:]):
            r[0] = 5.0 + 1e-9 * i
    elif case == "discrete_for_fisherz":
        for i, r in enumerate(rows):
            r[1] = i % 3
    elif case == "continuous_for_chisq":
        args += ["--test", "chisq"]
    elif case == "indicator_not_binary":
        for i, r in enumerate(rows):
            r[1] = i % 3
        args += ["--indicator-columns", "b"]
    elif case == "indicator_unknown":
        args += ["--indicator-columns", "k"]
    elif case == "unknown_test":
        args += ["--test", "kcl"]
    elif case == "overflow":
        rows[25][1] = 1e200
    elif case == "collinear":
        for r in rows:
            r[2] = 2 * r[0]
    elif case == "collinear_3":
        for r in rows:
            r[2] = r[0] - 3 * r[1]
    p = tmp_path / "bad.csv"
    _write(p, header, rows)
    out = tmp_path / "run"
    rc = jaxlab_main(["causal", "discover", str(p), *args, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert expected in err and err.startswith("error:")
    assert not out.exists()


@pytest.mark.parametrize(
    "content, expected",
    [
        (
            b"a" * 200_000 + b",b,k\n1,2,0\n",
            "not a readable CSV file (field larger than field limit",
        ),
        (b"\x00\xff\xfe binary", "not UTF-8 text (invalid start byte at byte 1)"),
    ],
    ids=["huge-header", "binary"],
)
def test_an_unreadable_csv_is_named(tmp_path, capsys, content, expected):
    p = tmp_path / "bad.csv"
    p.write_bytes(content)
    assert jaxlab_main(["causal", "discover", str(p), "--context-column", "k"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {p}: {expected}") and "Traceback" not in err
    assert sorted(q.name for q in tmp_path.iterdir()) == ["bad.csv"]


def test_constant_column_in_one_context_writes_nothing(tmp_path, capsys):
    """60 rows of 3 normal columns, the third 1 throughout context 0."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(60, 3))
    ctx = np.repeat([0, 1], 30)
    x[ctx == 0, 2] = 1.0
    p = tmp_path / "c.csv"
    _write(p, ["a", "b", "c", "ctx"], np.column_stack([x, ctx]).tolist())
    rc = jaxlab_main(["causal", "discover", str(p), "--context-column", "ctx"])
    assert rc == 2
    assert "column 'c' is constant (1) in context ctx=0" in capsys.readouterr().err
    assert sorted(q.name for q in tmp_path.iterdir()) == ["c.csv"]


def test_non_finite_statistic_is_an_error_not_a_dependence(tmp_path, capsys, monkeypatch):
    """A test returning NaN (here forced) stops the run naming the variables and the dataset."""
    from jaxlab.causal.ci_tests import FisherZ

    monkeypatch.setattr(FisherZ, "_batch", lambda self, x, *a: np.full(x.shape, np.nan))
    rows = np.column_stack([np.random.default_rng(3).normal(size=(80, 3)), np.repeat([0, 1], 40)])
    p = tmp_path / "s.csv"
    _write(p, ["a", "b", "c", "k"], rows.tolist())
    rc = jaxlab_main(["causal", "discover", str(p), "--context-column", "k"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "the fisherz test of 'a' and 'b' in k=0 gave a non-finite p-value" in err
    assert sorted(q.name for q in tmp_path.iterdir()) == ["s.csv"]


def test_indicator_columns_pass_a_continuous_test_and_other_discrete_columns_do_not():
    """A 0/1 treatment column named in ``--indicator-columns`` passes Fisher-z's kind check; a
    3-level column beside it is still refused by name."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(40, 3))
    x[:, 1] = np.arange(40) % 2  # a 0/1 treatment indicator
    names = ["a", "treated", "c"]
    with pytest.raises(CausalInputError, match="column 'treated' is discrete"):
        check_kind(names, [x[:20], x[20:]], "fisherz")
    check_kind(names, [x[:20], x[20:]], "fisherz", indicators=("treated",))
    x[:, 2] = np.arange(40) % 3
    with pytest.raises(CausalInputError, match="column 'c' is discrete"):
        check_kind(names, [x[:20], x[20:]], "fisherz", indicators=("treated",))
