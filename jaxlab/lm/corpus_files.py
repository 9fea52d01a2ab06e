"""The user's text corpus: documents read from plain text, JSON lines, Parquet or ArrayRecord
files, tokenized once into the token file that ``data.source`` reads (``jaxlab data prepare``).

Formats (chosen by the file's suffix, or named):

* ``txt``: UTF-8 text, one document per non-empty line (as ``datasets``' text loader).
* ``jsonl``: one JSON object per non-blank line, its string field ``text_key`` the document.
* ``parquet``: the string column ``text_key`` (needs ``pyarrow``, which jaxlab does not install).
* ``arrayrecord``: each record one UTF-8 document (``array_record``, installed with grain).

A bad line or record is named by its file and line (record) number. Each document is encoded
as ``[BOS] + ids + [EOS]`` (the specials the tokenizer has) and the documents are concatenated
in file order, as the shipped corpus is packed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from jaxtyping import Int

from jaxlab.lm.token_files import (
    RECORD_SUFFIXES,
    TOKEN_SUFFIXES,
    partial_path,
    write_token_records,
)

FORMATS = ("txt", "jsonl", "parquet", "arrayrecord")
"""Input formats of :func:`read_documents`."""

_SUFFIXES = {
    ".txt": "txt",
    ".text": "txt",
    ".jsonl": "jsonl",
    ".parquet": "parquet",
    ".arrayrecord": "arrayrecord",
    ".array_record": "arrayrecord",
}


def format_of(path: str | Path, fmt: str | None = None) -> str:
    """The format of ``path``: ``fmt`` when given, else from its suffix.

    Raises:
        ValueError: naming the file, for an unknown format or suffix.
    """
    if fmt is not None:
        if fmt not in FORMATS:
            raise ValueError(f"--format {fmt!r}: expected one of {FORMATS}")
        return fmt
    suffix = Path(path).suffix.lower()
    if suffix not in _SUFFIXES:
        raise ValueError(
            f"{path}: unknown corpus suffix {suffix!r} (expected one of "
            f"{sorted(_SUFFIXES)}, or name the format with --format)"
        )
    return _SUFFIXES[suffix]


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a UTF-8 file, a bad byte named by its line."""
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                yield number, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:{number}: not UTF-8 text ({e.reason})") from None


def _txt(path: Path, text_key: str) -> Iterator[str]:
    del text_key
    for _, line in _lines(path):
        if line.strip():
            yield line


def _jsonl(path: Path, text_key: str) -> Iterator[str]:
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{number}: not a JSON object ({e.msg})") from None
        if not isinstance(record, dict) or text_key not in record:
            raise ValueError(f"{path}:{number}: no field {text_key!r} (--text-key)")
        if not isinstance(record[text_key], str):
            kind = type(record[text_key]).__name__
            raise ValueError(f"{path}:{number}: field {text_key!r} is a {kind}, expected a string")
        yield record[text_key]


def _parquet(path: Path, text_key: str) -> Iterator[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(
            f"{path}: reading Parquet needs the pyarrow package, which is not installed "
            "(pip install pyarrow)"
        ) from None
    try:
        file = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises its own ArrowInvalid for a damaged file
        raise ValueError(f"{path}: not a readable Parquet file ({e})") from None
    if text_key not in file.schema_arrow.names:
        raise ValueError(
            f"{path}: no column {text_key!r} (--text-key; columns: {file.schema_arrow.names})"
        )
    row = 0
    for batch in file.iter_batches(columns=[text_key]):
        for value in batch.column(0).to_pylist():
            if not isinstance(value, str):
                kind = type(value).__name__
                raise ValueError(
                    f"{path}: row {row} of {text_key!r} is a {kind}, expected a string"
                )
            row += 1
            yield value


_NPY = b"\x93NUMPY"  # the magic of a token record (jaxlab.lm.token_files)


def _arrayrecord(path: Path, text_key: str) -> Iterator[str]:
    del text_key
    from array_record.python.array_record_module import ArrayRecordReader

    try:
        reader = ArrayRecordReader(str(path))
    except Exception as e:  # the C++ reader raises a bare RuntimeError/ValueError
        raise ValueError(f"{path}: not a readable ArrayRecord file ({e})") from None
    try:
        for start in range(0, reader.num_records(), 1024):
            stop = min(start + 1024, reader.num_records())
            for number, raw in enumerate(reader.read(range(start, stop)), start=start):
                try:
                    yield raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    hint = " (a token file: give it to data.source)" if raw[:6] == _NPY else ""
                    raise ValueError(
                        f"{path}: record {number} is not UTF-8 ({e.reason}){hint}"
                    ) from None
    finally:
        reader.close()


_READERS: dict[str, Callable[[Path, str], Iterator[str]]] = {
    "txt": _txt,
    "jsonl": _jsonl,
    "parquet": _parquet,
    "arrayrecord": _arrayrecord,
}


def read_documents(
    path: str | Path, *, fmt: str | None = None, text_key: str = "text"
) -> Iterator[str]:
    """The documents of a corpus file, in file order (see the module docstring).

    Args:
        path: the file.
        fmt: one of :data:`FORMATS` (default: from the suffix).
        text_key: the JSON field or Parquet column holding the text.

    Raises:
        ValueError: naming the file (and line, record or row) that cannot be read.
    """
    path = Path(path)
    kind = format_of(path, fmt)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    return _READERS[kind](path, text_key)


def tokenize_documents(
    documents: Iterator[str], tokenizer: Any, *, progress: Callable[[int], Any] | None = None
) -> Int[np.ndarray, " n"]:
    """``[BOS] + encode(doc) + [EOS]`` of every document, concatenated (int64).

    Args:
        documents: the texts.
        tokenizer: a :class:`jaxlab.lm.tokenizer.ByteTokenizer` or
            :class:`jaxlab.lm.hub.HFTokenizer` (a special it lacks, id ``-1``, is left out).
        progress: called with each document's byte count (a progress bar's ``update``).

    Raises:
        ValueError: if there is no document.
    """
    bos, eos = tokenizer.bos_id >= 0, tokenizer.eos_id >= 0
    parts = []
    for text in documents:
        parts.append(tokenizer.encode(text, add_bos=bos, add_eos=eos).astype(np.int64))
        if progress is not None:
            progress(len(text.encode("utf-8")))
    if not parts:
        raise ValueError("the corpus holds no document")
    return np.concatenate(parts)


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest of ``uint16`` / ``uint32`` holding ids below ``vocab_size``."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def write_tokens(ids: Int[np.ndarray, " n"], out: str | Path, *, vocab_size: int) -> Path:
    """Writes ``ids`` as ``out`` (``.npy``, raw ``.bin``, or an ArrayRecord token file,
    :func:`jaxlab.lm.token_files.write_token_records`) of :func:`token_dtype`, through a temporary
    file renamed into place, so a failed write leaves no partial file.

    Raises:
        ValueError: for another suffix, or an id outside ``[0, vocab_size)``.
    """
    out = Path(out)
    if out.suffix not in TOKEN_SUFFIXES:
        raise ValueError(f"{out}: expected a token file {TOKEN_SUFFIXES}")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(f"token id {int(ids.max())} outside the vocabulary [0, {vocab_size})")
    if out.suffix in RECORD_SUFFIXES:
        return write_token_records(ids, out, dtype=token_dtype(vocab_size))
    data = ids.astype(token_dtype(vocab_size))
    tmp = partial_path(out)
    try:
        with tmp.open("wb") as f:
            if out.suffix == ".npy":
                np.save(f, data, allow_pickle=False)
            else:
                data.tofile(f)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return out
