"""The user's pre-tokenized corpus as packed windows: a ``.npy`` (any integer dtype) or raw
``.bin`` (``uint16``/``uint32``/``int32``, e.g. nanoGPT's ``train.bin``) file of token ids, or an
ArrayRecord file of token records (``.array_record``, written by ``jaxlab data prepare``).

An ArrayRecord token file holds the id stream cut into records of ``tokens_per_record`` ids (the
last record may be shorter), each record a 1-D ``.npy``-serialised ``uint16``/``uint32`` array, so
the dtype travels with the data and window ``i`` is found without scanning: it is read through
grain's ``ArrayRecordDataSource`` (:class:`RecordTokens`), record by record.

The file is memory-mapped (or read record by record), never read whole: :class:`TokenWindows` is
a grain random-access data source whose item ``i`` is the ``i``-th non-overlapping window of ``seq_len + 1`` tokens (the
remainder is dropped), exactly as :func:`jaxlab.lm.data.pack_windows` cuts the shipped corpus.
The last ``val_fraction`` of the windows is the validation split (a region split), and the same
grain pipelines (:func:`jaxlab.lm.data.train_dataset`, :func:`jaxlab.lm.data.validation_dataset`)
shard, shuffle and batch them, so batches are ``{"tokens": int32 [B, seq_len + 1]}`` as for the
shipped corpus.
"""

from __future__ import annotations

import io
import os
import uuid
from pathlib import Path

import numpy as np
from jaxtyping import Int, Integer

BIN_DTYPES = ("uint16", "uint32", "int32")
"""Element types accepted for raw ``.bin`` token files."""

RECORD_SUFFIXES = (".array_record", ".arrayrecord")
"""Suffixes of ArrayRecord token files."""

TOKEN_SUFFIXES = (".npy", ".bin", *RECORD_SUFFIXES)
"""Suffixes ``data.source`` reads as token files."""

TOKENS_PER_RECORD = 1 << 14
"""Ids per ArrayRecord record written by :func:`write_token_records` (32 KiB of ``uint16``)."""


class RecordTokens:
    """An ArrayRecord token file read through grain, sliced like a 1-D array (``x[a:b]``).

    Attributes:
        path: the file.
        per_record: ids in every record but the last.
        size: ids in the file.
        dtype: their element type.
    """

    def __init__(self, path: str | Path):
        import grain

        self.path = Path(path)
        try:
            self.records = grain.sources.ArrayRecordDataSource([str(self.path)])
            count = len(self.records)
        except Exception as e:  # the C++ reader raises bare RuntimeError / ValueError
            raise ValueError(f"{self.path}: not a readable ArrayRecord file ({e})") from None
        if count == 0:
            raise ValueError(f"{self.path}: empty (expected token records)")
        self._cached: tuple[int, np.ndarray] | None = None
        first, last = self._record(0), self._record(count - 1)
        self.per_record, self.dtype = first.size, first.dtype
        self.size = (count - 1) * self.per_record + last.size
        if first.size == 0 or last.size > self.per_record:
            raise ValueError(
                f"{self.path}: records of {first.size} then {last.size} ids, expected equal "
                "records with a shorter or equal last one (as jaxlab data prepare writes)"
            )

    def _record(self, index: int) -> np.ndarray:
        if self._cached is not None and self._cached[0] == index:
            return self._cached[1]
        raw = self.records[index]
        try:
            ids = np.load(io.BytesIO(raw), allow_pickle=False)
        except (ValueError, OSError, EOFError):
            raise ValueError(
                f"{self.path}: record {index} is not a token record (expected a .npy-serialised "
                "id array, as jaxlab data prepare writes; a text ArrayRecord corpus is read with "
                "data.tokenizer)"
            ) from None
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(
                f"{self.path}: record {index} holds a {ids.dtype} array of shape {ids.shape}, "
                "expected 1-D integer token ids"
            )
        self._cached = (index, ids)
        return ids

    def __getitem__(self, window: slice) -> Integer[np.ndarray, " n"]:
        start, stop, step = window.indices(self.size)
        if step != 1:
            raise ValueError(f"{self.path}: step {step} slices are not supported")
        if stop <= start:
            return np.zeros(0, self.dtype)
        first, last = start // self.per_record, (stop - 1) // self.per_record
        parts = []
        for index in range(first, last + 1):
            ids = self._record(index)
            want = min(self.per_record, self.size - index * self.per_record)
            if ids.size != want:
                raise ValueError(
                    f"{self.path}: record {index} holds {ids.size} ids, expected {want}"
                )
            parts.append(ids)
        ids = np.concatenate(parts) if len(parts) > 1 else parts[0]
        offset = start - first * self.per_record
        return ids[offset : offset + stop - start]


def is_token_file(path: str | Path) -> bool:
    """Whether ``path`` holds token ids: a ``.npy`` / ``.bin`` file, or an ArrayRecord file whose
    first record is a token record (a text ArrayRecord corpus holds UTF-8 documents)."""
    path = Path(path)
    if path.suffix in (".npy", ".bin"):
        return True
    if path.suffix not in RECORD_SUFFIXES or not path.is_file():
        return False
    import grain

    try:
        records = grain.sources.ArrayRecordDataSource([str(path)])
        return len(records) > 0 and records[0][:6] == b"\x93NUMPY"
    except Exception:  # unreadable: left to the corpus reader, which names the file
        return False


def partial_path(out: Path) -> Path:
    """A fresh temporary name beside ``out`` (unique per writer, so hosts writing the same file
    never share one), renamed onto ``out`` once complete."""
    return out.with_name(f"{out.name}.{uuid.uuid4().hex}.partial")


def write_token_records(
    ids: Integer[np.ndarray, " n"],
    out: str | Path,
    *,
    dtype: str | np.dtype | type,
    tokens_per_record: int = TOKENS_PER_RECORD,
) -> Path:
    """Writes ``ids`` as an ArrayRecord token file (module docstring), through a temporary file
    renamed into place, so a failed write leaves no partial file.

    Args:
        ids: 1-D token ids.
        out: the file to write.
        dtype: element type of the records (``uint16`` or ``uint32``).
        tokens_per_record: ids per record (the last may hold fewer).

    Returns:
        ``out``.
    """
    from array_record.python.array_record_module import ArrayRecordWriter

    out = Path(out)
    tmp = partial_path(out)
    try:
        writer = ArrayRecordWriter(str(tmp), "group_size:1")  # group size 1: cheap random access
        for begin in range(0, ids.size, tokens_per_record):
            buffer = io.BytesIO()
            np.save(
                buffer, ids[begin : begin + tokens_per_record].astype(dtype), allow_pickle=False
            )
            writer.write(buffer.getvalue())
        writer.close()
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return out


def open_tokens(path: str | Path, *, dtype: str = "uint16") -> np.ndarray | RecordTokens:
    """Memory-maps a token file as a 1-D integer array (an ArrayRecord file: its records).

    Args:
        path: a ``.npy`` file (1-D, integer dtype), a raw ``.bin`` file of ``dtype`` ids, or an
            ArrayRecord token file (:data:`RECORD_SUFFIXES`).
        dtype: element type of a ``.bin`` file (one of :data:`BIN_DTYPES`; ignored otherwise).

    Returns:
        The read-only memory-mapped ids, or a :class:`RecordTokens` sliced the same way.

    Raises:
        ValueError: naming the file, if it is missing, of another kind, not 1-D integer, empty or
            of a size that is not a whole number of ``dtype`` elements.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"data.source={str(path)!r}: no such file")
    if path.suffix == ".npy":
        try:
            tokens = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as e:
            raise ValueError(f"{path}: not a readable .npy file ({e})") from None
        if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(
                f"{path}: holds a {tokens.dtype} array of shape {tokens.shape}, expected 1-D "
                "integer token ids"
            )
    elif path.suffix == ".bin":
        if dtype not in BIN_DTYPES:
            raise ValueError(f"data.source_dtype={dtype!r}: expected one of {BIN_DTYPES}")
        size = path.stat().st_size
        itemsize = np.dtype(dtype).itemsize
        if size % itemsize:
            raise ValueError(
                f"{path}: {size} bytes is not a whole number of {dtype} ids ({itemsize} bytes each)"
            )
        if size == 0:
            raise ValueError(f"{path}: empty (expected {dtype} token ids)")
        tokens = np.memmap(path, dtype=dtype, mode="r")
    elif path.suffix in RECORD_SUFFIXES:
        tokens = RecordTokens(path)
    else:
        raise ValueError(f"{path}: expected a token file {TOKEN_SUFFIXES}, got {path.suffix!r}")
    if tokens.size == 0:
        raise ValueError(f"{path}: empty (expected token ids)")
    return tokens


class TokenWindows:
    """Grain random-access source of windows ``tokens[(start + i)·w : (start + i + 1)·w]``.

    Attributes:
        tokens: the 1-D ids (memory-mapped).
        window: ``seq_len + 1``.
        start: first window of this split.
        stop: one past its last window.
    """

    def __init__(self, tokens: np.ndarray | RecordTokens, window: int, start: int, stop: int):
        self.tokens, self.window, self.start, self.stop = tokens, window, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, index: int) -> Int[np.ndarray, " window"]:
        if not 0 <= index < len(self):
            raise IndexError(f"window {index} out of range [0, {len(self)})")
        begin = (self.start + index) * self.window
        return np.asarray(self.tokens[begin : begin + self.window], dtype=np.int32)

    def __repr__(self) -> str:  # grain records the source in its state and error messages
        return f"TokenWindows(window={self.window}, windows=[{self.start}, {self.stop}))"


def split_token_windows(
    path: str | Path,
    *,
    seq_len: int,
    val_fraction: float,
    dtype: str = "uint16",
    vocab_size: int | None = None,
) -> tuple[TokenWindows, TokenWindows]:
    """Train and validation windows of a token file (region split: the last windows validate).

    Args:
        path: the token file (see :func:`open_tokens`).
        seq_len: model input length; windows hold ``seq_len + 1`` tokens.
        val_fraction: fraction of the windows held out, in ``(0, 1)`` (at least one window).
        dtype: element type of a ``.bin`` file.
        vocab_size: when given, every id must lie in ``[0, vocab_size)`` (one pass over the file).

    Returns:
        ``(train, validation)`` sources of int32 ``[seq_len + 1]`` windows.

    Raises:
        ValueError: naming the file, if it cannot be read, is too short for two windows, or holds
            an id outside the vocabulary.
    """
    tokens = open_tokens(path, dtype=dtype)
    window = seq_len + 1
    num = tokens.size // window
    if num < 2:
        raise ValueError(
            f"{path}: {tokens.size} tokens make {num} windows of seq_len + 1 = {window}, "
            "expected at least 2 (one to train on, one to validate)"
        )
    if vocab_size is not None:
        chunk = 1 << 24
        for begin in range(0, tokens.size, chunk):
            part = np.asarray(tokens[begin : begin + chunk])
            lo, hi = int(part.min()), int(part.max())
            if lo < 0 or hi >= vocab_size:
                raise ValueError(
                    f"{path}: holds id {hi if hi >= vocab_size else lo}, expected ids in "
                    f"[0, model.vocab_size={vocab_size})"
                )
    n_val = min(num - 1, max(1, round(num * val_fraction)))
    return TokenWindows(tokens, window, 0, num - n_val), TokenWindows(
        tokens, window, num - n_val, num
    )
