"""benchmarks/report.py: the generated tables hold the lines' values (parsed back from the
Markdown), each table names its commands, machines and dates, and bad results files are errors
naming the file and line that leave the output folder untouched."""

import json
import math
import shutil
import subprocess

import pytest

from benchmarks import report

MACHINE = {"host": "h1", "cpus": 4, "python": "3.11.7", "jax": "0.10.2", "backend": "cpu"}
NEW = [
    {"what": "step", "size": {"scenes": 1, "width": 64}, "compile_s": 2.75851, "rate": 933.464,
     "unit": "plans/s", "ok": True, "device": "cpu:cpu", "date": "2026-12-07T10:11:12Z",
     "command": "python -m benchmarks.bench_a --n 1", "machine": MACHINE},
    {"what": "step", "size": {"scenes": 256, "width": 64}, "compile_s": 2.4228, "rate": 1296512.7,
     "unit": "plans/s", "peak_bytes": 3277192, "device": "cpu:cpu", "date": "2026-12-07T10:11:40Z",
     "command": "python -m benchmarks.bench_a --n 1", "machine": MACHINE},
    {"what": "ratio", "size": {"scenes": 256, "width": 64}, "ratio": float("nan"),
     "per_seed": [0.281, 0.96875, 6.3e-05], "device": "cpu:cpu", "date": "2026-12-07T10:12:00Z",
     "command": "python -m benchmarks.bench_a --n 1", "machine": MACHINE},
]  # fmt: skip
OLD = [{"what": "learn", "method": "metra", "seeds": 2, "coverage": [168.0, 126.0], "load": 3.9}]
OLD_COMMAND = "python -m benchmarks.bench_b --mode learn"


def write_results(folder, files: dict[str, list]) -> None:
    for name, rows in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
        (folder / name).write_text("".join(line + "\n" for line in lines))


@pytest.fixture
def results(tmp_path):
    folder = tmp_path / "results"
    write_results(folder, {"area_a.jsonl": NEW, "sub/area_b.jsonl": OLD})
    (folder / "sources.json").write_text(json.dumps({"sub/area_b.jsonl": OLD_COMMAND}))
    return folder


def parse_page(text: str) -> dict[str, dict]:
    """``what`` -> ``{"about": {command, machine, date}, "columns": [...], "rows": [[cells]]}``."""
    tables, what = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            what = line[3:]
            tables[what] = {"about": {}, "columns": None, "rows": []}
        elif what and line.startswith("- "):
            key, _, value = line[2:].partition(": ")
            tables[what]["about"][key] = value
        elif what and line.startswith("|") and not line.startswith("| ---"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if tables[what]["columns"] is None:
                tables[what]["columns"] = cells
            else:
                tables[what]["rows"].append(cells)
    return tables


def cell_holds(cell: str, value) -> bool:
    """Whether a table cell shows ``value`` (floats to 4 significant digits, NaN as ``nan``)."""
    if isinstance(value, bool):
        return cell == str(value).lower()
    if isinstance(value, int):
        return int(cell) == value
    if isinstance(value, float):
        return (
            cell == "nan" if math.isnan(value) else math.isclose(float(cell), value, rel_tol=5e-4)
        )
    if isinstance(value, list):
        items = cell.removeprefix("[").removesuffix("]").split(", ")
        return len(items) == len(value) and all(map(cell_holds, items, value))
    return cell == str(value)


def check_tables(page: str, rows: list[dict]) -> dict[str, dict]:
    tables = parse_page(page)
    assert list(tables) == list(dict.fromkeys(r["what"] for r in rows))
    for what, tab in tables.items():
        group = [report.flatten(r) for r in rows if r["what"] == what]
        keys = {k for r in group for k in r if k.split(".")[0] not in report.BOOKKEEPING}
        assert set(tab["columns"]) == keys and len(tab["rows"]) == len(group)
        for cells, row in zip(tab["rows"], group, strict=True):
            for col, cell in zip(tab["columns"], cells, strict=True):
                assert cell_holds(cell, row[col]) if col in row else cell == "", (what, col, cell)
    return tables


def test_pages_hold_the_lines_values_and_their_provenance(results, tmp_path):
    out = tmp_path / "docs" / "results"
    written = report.build(results, out)
    assert sorted(p.relative_to(out).as_posix() for p in written) == [
        "area_a.md", "index.md", "sub/area_b.md"]  # fmt: skip

    tables = check_tables((out / "area_a.md").read_text(), NEW)
    assert tables["step"]["columns"][:2] == ["size.scenes", "size.width"]
    assert "nan" in tables["ratio"]["rows"][0]
    about = tables["step"]["about"]
    assert about["command"] == "`python -m benchmarks.bench_a --n 1`"
    assert about["machine"] == "host h1, 4 cpus, device cpu:cpu, jax 0.10.2"
    assert about["date"] == "2026-12-07T10:11:12Z; 2026-12-07T10:11:40Z"

    old = check_tables((out / "sub" / "area_b.md").read_text(), OLD)["learn"]["about"]
    assert old == {"command": f"`{OLD_COMMAND}`", "machine": "not recorded",
                   "date": "not recorded"}  # fmt: skip

    index = (out / "index.md").read_text()
    assert "[area_a](area_a.md): 3 lines: step, ratio" in index
    assert "[sub/area_b](sub/area_b.md): 1 line: learn" in index
    assert [p.name for p in out.parent.iterdir()] == ["results"]  # no temporary folder left


def test_an_old_line_takes_its_date_from_the_last_commit(results):
    if shutil.which("git") is None:
        pytest.skip("no git")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(results)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "r"], check=True)
    day = subprocess.run([*git, "log", "-1", "--format=%cs"], capture_output=True, text=True)
    pages = report.render(results)
    about = parse_page(pages["sub/area_b.md"])["learn"]["about"]
    assert about["date"] == f"committed on {day.stdout.strip()}"
    assert parse_page(pages["area_a.md"])["step"]["about"]["date"].startswith("2026-12-07T10")


@pytest.mark.parametrize(
    "files, where",
    [
        ({"area_a.jsonl": [NEW[0], NEW[1], '{"what": "step", "rate": 1'], "sub/area_b.jsonl": OLD},
         "area_a.jsonl: line 3"),
        ({"area_a.jsonl": NEW[:2], "sub/area_b.jsonl": []}, "area_b.jsonl: line 1"),
        ({"area_a.jsonl": [NEW[0], "[1, 2]"], "sub/area_b.jsonl": OLD}, "area_a.jsonl: line 2"),
    ],
    ids=["malformed_line", "empty_file", "not_an_object"],
)  # fmt: skip
def test_a_bad_results_file_names_file_and_line_and_writes_nothing(
    results, tmp_path, capsys, files, where
):
    out = tmp_path / "out"
    report.build(results, out)
    before = {p: p.read_text() for p in out.rglob("*") if p.is_file()}
    for name in files:
        (results / name).unlink()
    write_results(results, files)
    with pytest.raises(ValueError, match=where):
        report.build(results, out)
    assert report.main(["--results", str(results), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and where in err
    assert {p: p.read_text() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "results"]


def test_cells_have_four_significant_digits_and_mixed_machines_their_line_counts():
    assert [report.fmt(v) for v in (2.75851, 1296512.7, 124710.9, 0.00031, 6.3e-05, 3277192)] == [
        "2.759", "1.297e+06", "124700", "0.00031", "6.3e-05", "3277192"]  # fmt: skip
    assert [report.fmt(v) for v in (float("nan"), float("inf"), None, False, "a|b")] == [
        "nan", "inf", "null", "false", "a\\|b"]  # fmt: skip
    assert report.counted(["m1", "m2", "m1"]) == "m1 (2 lines); m2 (1 line)"
    assert report.counted(["m1", "m1"]) == "m1"


def test_the_committed_pages_match_the_results_they_come_from():
    """docs/results/ is regenerated whenever benchmarks/results/ changes (``python -m
    benchmarks.report``); dates of old lines come from git, so a shallow clone is skipped."""
    shallow = subprocess.run(["git", "-C", str(report.ROOT), "rev-parse", "--is-shallow-repository"],
                             capture_output=True, text=True)  # fmt: skip
    if shallow.returncode != 0 or shallow.stdout.strip() != "false":
        pytest.skip("needs a full git checkout")
    pages = report.render(report.ROOT / "benchmarks" / "results")
    docs = report.ROOT / "docs" / "results"
    committed = {p.relative_to(docs).as_posix(): p.read_text() for p in docs.rglob("*.md")}
    assert committed == pages, "docs/results is stale: run `python -m benchmarks.report`"
