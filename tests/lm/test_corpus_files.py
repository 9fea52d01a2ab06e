"""The user's corpus files: every format gives the same token stream, bad lines are named by
number, and ``jaxlab data prepare`` writes a token file ``data.source`` reads (or nothing)."""

import importlib.util
import json

import numpy as np
import pytest

from jaxlab import cli
from jaxlab.lm import corpus_files
from jaxlab.lm.token_files import open_tokens
from jaxlab.lm.tokenizer import ByteTokenizer

DOCS = ["hello world", "zweite Zeile: grüße", "third {document}"]


def _write(path, fmt):
    if fmt == "txt":
        path.write_text("\n".join(DOCS[:2]) + "\n\n" + DOCS[2] + "\n")  # blank lines skipped
    elif fmt == "jsonl":
        path.write_text(
            "".join(json.dumps({"id": i, "body": d}) + "\n" for i, d in enumerate(DOCS))
        )
    else:
        from array_record.python.array_record_module import ArrayRecordWriter

        writer = ArrayRecordWriter(str(path), "group_size:1")
        for d in DOCS:
            writer.write(d.encode("utf-8"))
        writer.close()
    return path


@pytest.mark.parametrize("fmt", ["txt", "jsonl", "arrayrecord"])
def test_every_format_gives_the_same_token_stream(tmp_path, fmt):
    path = _write(tmp_path / f"c.{fmt}", fmt)
    docs = corpus_files.read_documents(path, text_key="body")
    ids = corpus_files.tokenize_documents(docs, ByteTokenizer())
    tok = ByteTokenizer()
    want = np.concatenate([tok.encode(d, add_bos=True, add_eos=True) for d in DOCS])
    np.testing.assert_array_equal(ids, want)


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("a.jsonl", '{"text": "ok"}\n\n{"text": 3}\n', r"a.jsonl:3: field 'text' is a int"),
        ("b.jsonl", '{"text": "ok"}\n{"txt": "x"}\n', r"b.jsonl:2: no field 'text'"),
        ("c.jsonl", '{"text": "ok"}\n{"text": \n', r"c.jsonl:2: not a JSON object"),
        ("d.txt", b"fine\nbad \xff byte\n", r"d.txt:2: not UTF-8"),
        ("e.csv", "x\n", r"unknown corpus suffix '.csv'"),
    ],
    ids=["not-a-string", "no-field", "bad-json", "bad-utf8", "unknown-suffix"],
)
def test_bad_lines_are_named_by_number(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ValueError, match=message):
        list(corpus_files.read_documents(path))


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is not None, reason="pyarrow installed")
def test_parquet_without_pyarrow_names_the_package(tmp_path):
    (tmp_path / "c.parquet").write_bytes(b"PAR1")
    with pytest.raises(ValueError, match="needs the pyarrow package"):
        list(corpus_files.read_documents(tmp_path / "c.parquet"))


@pytest.mark.parametrize("suffix", [".npy", ".bin", ".array_record"])
def test_prepare_writes_a_token_file_the_loader_reads(tmp_path, suffix):
    text, out = _write(tmp_path / "c.txt", "txt"), tmp_path / f"t{suffix}"
    argv = ["data", "prepare", str(text), str(out), "--tokenizer", "byte", "--no-progress"]
    if suffix == ".array_record":
        argv += ["--out-format", "array_record"]
    assert cli.main(argv) == 0
    tokens = open_tokens(out, dtype="uint16")
    tok = ByteTokenizer()
    want = np.concatenate([tok.encode(d, add_bos=True, add_eos=True) for d in DOCS])
    assert tokens.dtype == np.uint16 and tokens.size == want.size
    np.testing.assert_array_equal(tokens[0 : want.size], want)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt", out.name]


def test_prepare_refuses_an_out_format_its_suffix_contradicts(tmp_path, capsys):
    text, out = _write(tmp_path / "c.txt", "txt"), tmp_path / "t.npy"
    argv = ["data", "prepare", str(text), str(out), "--tokenizer", "byte"]
    assert cli.main([*argv, "--out-format", "array_record"]) == 2
    assert "--out-format array_record: OUT=" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt"]


def test_a_token_file_given_as_a_text_corpus_is_named(tmp_path):
    text, out = _write(tmp_path / "c.txt", "txt"), tmp_path / "t.array_record"
    argv = ["data", "prepare", str(text), str(out), "--tokenizer", "byte", "--no-progress"]
    assert cli.main(argv) == 0
    with pytest.raises(ValueError, match=r"record 0 is not UTF-8 .*a token file"):
        list(corpus_files.read_documents(out, fmt="arrayrecord"))


def test_prepare_writes_nothing_on_a_bad_line(tmp_path, capsys):
    bad, out = tmp_path / "c.jsonl", tmp_path / "t.npy"
    bad.write_text('{"text": "ok"}\n{"other": 1}\n')
    argv = ["data", "prepare", str(bad), str(out), "--tokenizer", "byte", "--no-progress"]
    assert cli.main(argv) == 2
    assert "c.jsonl:2" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl"]
