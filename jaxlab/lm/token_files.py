"""The user's pre-tokenized corpus as packed windows: a ``.npy`` (any integer dtype) or raw
``.bin`` (``uint16``/``uint32``/``int32``, e.g. nanoGPT's ``train.bin``) file of token ids.

The file is memory-mapped, never read whole: :class:`TokenWindows` is a grain random-access data
source whose item ``i`` is the ``i``-th non-overlapping window of ``seq_len + 1`` tokens (the
remainder is dropped), exactly as :func:`jaxlab.lm.data.pack_windows` cuts the shipped corpus.
The last ``val_fraction`` of the windows is the validation split (a region split), and the same
grain pipelines (:func:`jaxlab.lm.data.train_dataset`, :func:`jaxlab.lm.data.validation_dataset`)
shard, shuffle and batch them, so batches are ``{"tokens": int32 [B, seq_len + 1]}`` as for the
shipped corpus.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from jaxtyping import Int

BIN_DTYPES = ("uint16", "uint32", "int32")
"""Element types accepted for raw ``.bin`` token files."""


def open_tokens(path: str | Path, *, dtype: str = "uint16") -> np.ndarray:
    """Memory-maps a token file as a 1-D integer array.

    Args:
        path: a ``.npy`` file (1-D, integer dtype) or a raw ``.bin`` file of ``dtype`` ids.
        dtype: element type of a ``.bin`` file (one of :data:`BIN_DTYPES`; ignored for ``.npy``).

    Returns:
        The read-only memory-mapped ids.

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
    else:
        raise ValueError(f"{path}: expected a .npy or .bin token file, got {path.suffix!r}")
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

    def __init__(self, tokens: np.ndarray, window: int, start: int, stop: int):
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
