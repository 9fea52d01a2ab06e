"""Byte-level tokenizer: the 256 byte values plus three special ids."""

import dataclasses
from collections.abc import Sequence

import numpy as np
from jaxtyping import ArrayLike, Int

BYTE_VOCAB = 256
"""Ids ``0 … 255`` are the UTF-8 byte values."""
BOS_ID = 256
"""Beginning-of-sequence (document start) id."""
EOS_ID = 257
"""End-of-sequence (document end) id."""
PAD_ID = 258
"""Padding id (never produced by the packed training pipeline)."""
VOCAB_SIZE = 259
"""Number of ids."""


@dataclasses.dataclass(frozen=True)
class ByteTokenizer:
    """Maps text to its UTF-8 bytes (ids 0-255) with optional BOS/EOS and back.

    ``decode(encode(s)) == s`` for every Python string ``s`` (specials are dropped on decode).
    """

    vocab_size: int = VOCAB_SIZE
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    pad_id: int = PAD_ID

    def encode(
        self, text: str, *, add_bos: bool = False, add_eos: bool = False
    ) -> Int[np.ndarray, " n"]:
        """Encodes ``text`` as UTF-8 byte ids.

        Args:
            text: the string.
            add_bos: prepend ``BOS_ID``.
            add_eos: append ``EOS_ID``.

        Returns:
            int32 ids of length ``len(text.encode("utf-8")) + add_bos + add_eos``.

        Raises:
            ValueError: if ``text`` is not a str.
        """
        if not isinstance(text, str):
            raise ValueError(f"text={type(text).__name__}: expected a str")
        body = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)
        parts = [np.array([BOS_ID], np.int32)] if add_bos else []
        parts.append(body)
        if add_eos:
            parts.append(np.array([EOS_ID], np.int32))
        return np.concatenate(parts)

    def decode(
        self, ids: Int[ArrayLike, " n"] | Sequence[int], *, stop_at_eos: bool = False
    ) -> str:
        """Decodes ids to text, dropping BOS/EOS/PAD.

        Byte sequences that are not valid UTF-8 (possible for sampled ids) decode with U+FFFD
        replacement characters.

        Args:
            ids: 1-D integer ids in ``[0, VOCAB_SIZE)`` (numpy, list or a JAX array).
            stop_at_eos: ignore everything from the first ``EOS_ID`` on.

        Returns:
            The decoded string.

        Raises:
            ValueError: if ``ids`` is not 1-D or holds an id outside ``[0, VOCAB_SIZE)``.
        """
        arr = np.asarray(ids)
        if arr.ndim != 1:
            raise ValueError(f"ids.shape={arr.shape}: expected a 1-D sequence")
        if arr.size and (arr.min() < 0 or arr.max() >= VOCAB_SIZE):
            raise ValueError(
                f"ids range=[{arr.min()}, {arr.max()}]: expected ids in [0, {VOCAB_SIZE})"
            )
        if stop_at_eos:
            eos = np.flatnonzero(arr == EOS_ID)
            if eos.size:
                arr = arr[: eos[0]]
        return arr[arr < BYTE_VOCAB].astype(np.uint8).tobytes().decode("utf-8", errors="replace")
