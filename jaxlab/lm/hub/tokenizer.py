"""A model directory's own ``tokenizer.json`` behind :class:`jaxlab.lm.tokenizer.ByteTokenizer`'s
interface (``vocab_size``, ``bos_id``, ``eos_id``, ``pad_id``, ``encode``, ``decode``), through the
``tokenizers`` library."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from jaxtyping import ArrayLike, Int
from tokenizers import Tokenizer

from jaxlab.lm.hub.config import HubError


@dataclasses.dataclass(frozen=True, eq=False)
class HFTokenizer:
    """A ``tokenizers.Tokenizer`` with the byte tokenizer's methods.

    ``encode`` adds BOS/EOS only when asked (the file's own post-processor is not applied), so a
    caller controls the specials exactly as with the byte tokenizer.

    Attributes:
        tokenizer: the ``tokenizers`` object.
        vocab_size: number of ids: the model's (often padded) vocabulary when given, else the
            file's with added tokens.
        bos_id: beginning-of-sequence id (``-1`` when the model has none).
        eos_id: end-of-sequence id (``-1`` when none).
        pad_id: padding id (the EOS id when the model has none, as Llama does).
    """

    tokenizer: Tokenizer
    vocab_size: int
    bos_id: int
    eos_id: int
    pad_id: int

    def encode(
        self, text: str, *, add_bos: bool = False, add_eos: bool = False
    ) -> Int[np.ndarray, " n"]:
        """Encodes ``text``.

        Args:
            text: the string.
            add_bos: prepend ``bos_id``.
            add_eos: append ``eos_id``.

        Returns:
            int32 ids.

        Raises:
            ValueError: if ``text`` is not a str, or a special is asked for that the model lacks.
        """
        if not isinstance(text, str):
            raise ValueError(f"text={type(text).__name__}: expected a str")
        for flag, name, value in (("add_bos", "bos", self.bos_id), ("add_eos", "eos", self.eos_id)):
            if (add_bos if flag == "add_bos" else add_eos) and value < 0:
                raise ValueError(f"{flag}=True: the tokenizer has no {name} token")
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        ids = ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])
        return np.asarray(ids, np.int32)

    def decode(
        self, ids: Int[ArrayLike, " n"] | Sequence[int], *, stop_at_eos: bool = False
    ) -> str:
        """Decodes ids to text, dropping special tokens.

        Args:
            ids: 1-D ids in ``[0, vocab_size)``.
            stop_at_eos: ignore everything from the first ``eos_id`` on.

        Returns:
            The decoded string.

        Raises:
            ValueError: if ``ids`` is not 1-D or holds an id outside ``[0, vocab_size)``.
        """
        arr = np.asarray(ids)
        if arr.ndim != 1:
            raise ValueError(f"ids.shape={arr.shape}: expected a 1-D sequence")
        if arr.size and (arr.min() < 0 or arr.max() >= self.vocab_size):
            raise ValueError(
                f"ids range=[{arr.min()}, {arr.max()}]: expected ids in [0, {self.vocab_size})"
            )
        if stop_at_eos and self.eos_id >= 0:
            eos = np.flatnonzero(arr == self.eos_id)
            if eos.size:
                arr = arr[: eos[0]]
        known = arr[arr < self.tokenizer.get_vocab_size(with_added_tokens=True)]  # padded rows
        return self.tokenizer.decode(known.tolist(), skip_special_tokens=True)


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet inverted: the printable character standing for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars = {b: chr(b) for b in printable}
    shifted = (b for b in range(256) if b not in chars)
    chars.update({b: chr(256 + n) for n, b in enumerate(shifted)})
    return {c: b for b, c in chars.items()}


def _uses_byte_level(config: dict) -> bool:
    decoder = config.get("decoder") or {}
    parts = decoder.get("decoders", []) if decoder.get("type") == "Sequence" else [decoder]
    return any(isinstance(d, dict) and d.get("type") == "ByteLevel" for d in parts)


def token_bytes(tok: HFTokenizer) -> tuple[bytes | None, ...]:
    """The bytes each id stands for (``None`` for special tokens and ids past the file's
    vocabulary), so byte-level potentials can read tokens: a byte-level BPE token's string is
    mapped back through GPT-2's byte alphabet (``Ġ`` is a space); a non-special added token is
    its UTF-8 text.

    Args:
        tok: the tokenizer.

    Returns:
        ``tok.vocab_size`` entries.

    Raises:
        HubError: if the tokenizer is not byte-level (its decoder is named), as a SentencePiece
            vocabulary's pieces do not map to bytes one to one.
    """
    config = json.loads(tok.tokenizer.to_str())
    if not _uses_byte_level(config):
        kind = (config.get("decoder") or {}).get("type")
        raise HubError(
            f"tokenizer.json: decoder {kind!r}, expected a byte-level BPE ('ByteLevel') whose "
            "tokens map to bytes"
        )
    alphabet = _byte_level_alphabet()
    table: list[bytes | None] = [None] * tok.vocab_size
    for text, i in tok.tokenizer.get_vocab(with_added_tokens=False).items():
        if i < tok.vocab_size and all(c in alphabet for c in text):
            table[i] = bytes(alphabet[c] for c in text)
    for i, added in tok.tokenizer.get_added_tokens_decoder().items():
        if i < tok.vocab_size:
            table[i] = None if added.special else added.content.encode("utf-8")
    return tuple(table)


def _special_id(tok: Tokenizer, config: dict, name: str, candidates: Sequence[str]) -> int:
    value = config.get(f"{name}_token_id")
    if isinstance(value, list):
        value = value[0] if value else None
    if isinstance(value, int):
        return value
    for token in candidates:
        found = tok.token_to_id(token)
        if found is not None:
            return found
    return -1


def load_tokenizer(directory: str | Path, *, model_vocab_size: int | None = None) -> HFTokenizer:
    """Loads ``DIR/tokenizer.json``, with the special ids of ``DIR/config.json`` when present.

    Args:
        directory: the model directory (or the ``tokenizer.json`` file itself).
        model_vocab_size: the model's vocabulary; a tokenizer producing larger ids is refused.

    Returns:
        The :class:`HFTokenizer`.

    Raises:
        HubError: naming the file, if it is missing or unreadable, or its vocabulary exceeds the
            model's.
    """
    path = Path(directory)
    file = path if path.is_file() else path / "tokenizer.json"
    if not file.exists():
        raise HubError(f"{file}: missing (expected the model's tokenizer.json)")
    try:
        tok = Tokenizer.from_file(str(file))
    except Exception as e:  # tokenizers raises a bare Exception on a malformed file
        raise HubError(f"{file}: not a readable tokenizer.json ({e})") from None
    config_file = file.parent / "config.json"
    config = json.loads(config_file.read_text()) if config_file.exists() else {}
    vocab = tok.get_vocab_size(with_added_tokens=True)
    if model_vocab_size is not None and vocab > model_vocab_size:
        raise HubError(
            f"{file}: vocabulary of {vocab} ids exceeds the model's vocab_size={model_vocab_size}"
        )
    bos = _special_id(tok, config, "bos", ("<s>", "<|begin_of_text|>", "<|endoftext|>"))
    eos = _special_id(tok, config, "eos", ("</s>", "<|end_of_text|>", "<|endoftext|>"))
    pad = _special_id(tok, config, "pad", ("<pad>",))
    size = vocab if model_vocab_size is None else model_vocab_size
    return HFTokenizer(tok, size, bos, eos, pad if pad >= 0 else eos)
