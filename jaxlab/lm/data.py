"""Byte-level language-modelling data: corpus -> tokens -> split -> packed windows -> grain batches.

Pipeline (all deterministic given the seeds):

1. Documents (default: the shipped stdlib-docstring corpus, :func:`load_corpus`) are encoded
   as ``[BOS] + utf8 bytes + [EOS]`` with :class:`jaxlab.lm.tokenizer.ByteTokenizer`.
2. Train/validation split, either by **document** (a seeded random subset of documents is held
   out) or by **region** (the tokens of all documents concatenated; the last ``val_fraction`` of
   the stream is held out). Within a split, the documents' tokens are concatenated in corpus
   order into one stream.
3. Each stream is cut into non-overlapping windows of ``seq_len + 1`` tokens (the remainder of
   the stream is dropped), so every sequence is full: no padding, documents packed back to back.
   A window ``w`` gives inputs ``w[:-1]`` and targets ``w[1:]``.
4. Training: grain ``MapDataset.source(windows)`` -> host shard -> ``shuffle(seed)`` ->
   ``repeat`` (reshuffled every epoch) -> ``batch`` -> ``to_iter_dataset()``. The returned
   ``grain.DatasetIterator`` supports ``get_state()/set_state()`` for checkpointing.
   Validation: the same without shuffling and repetition (one deterministic pass).

Batches are ``{"tokens": int32 [batch, seq_len + 1]}`` numpy arrays.

With ``ByteLMDataConfig.source`` set to a pre-tokenized file (``data.source=PATH.npy``,
``.bin`` or ``.array_record``), steps 1-3 are replaced by windows of that file with a region split
(:mod:`jaxlab.lm.token_files`); step 4 is the same. With ``data.tokenizer`` also set, the source
is a text corpus (``.txt``, ``.jsonl``, ``.parquet``, ``.arrayrecord``), tokenized once into a
cached token file that is then read the same way (:mod:`jaxlab.lm.text_source`).
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import importlib.resources
from collections.abc import Sequence
from typing import Literal

import grain
import numpy as np
from jaxtyping import Int

from jaxlab.lm import corpus_files
from jaxlab.lm.token_files import BIN_DTYPES, TOKEN_SUFFIXES, TokenWindows, split_token_windows
from jaxlab.lm.tokenizer import ByteTokenizer

Windows = Int[np.ndarray, "_ window"] | TokenWindows
"""Packed windows: an in-memory ``[num, seq_len + 1]`` array or a token file's windows."""

CORPUS_PACKAGE = "jaxlab.lm.corpus"
CORPUS_FILE = "stdlib_docstrings.txt.gz"
DOCUMENT_SEPARATOR = "\n\x1e\n"
"""Separator between documents in the corpus file (see ``corpus/make_corpus.py``)."""


@functools.cache
def load_corpus() -> tuple[str, ...]:
    """Loads the shipped corpus (stdlib docstrings; see ``jaxlab/lm/corpus/README.md``).

    Returns:
        The documents, in corpus order (1963 strings, about 541 KB of UTF-8).
    """
    resource = importlib.resources.files(CORPUS_PACKAGE).joinpath(CORPUS_FILE)
    text = gzip.decompress(resource.read_bytes()).decode("utf-8")
    return tuple(text.split(DOCUMENT_SEPARATOR))


@dataclasses.dataclass(frozen=True)
class ByteLMDataConfig:
    """Configuration of the byte-level LM data pipeline.

    Attributes:
        seq_len: model input length; windows hold ``seq_len + 1`` tokens.
        batch_size: global batch size (split evenly over ``shard_count`` hosts).
        val_fraction: fraction of documents (``split="document"``) or of tokens
            (``split="region"``) held out for validation, in ``(0, 1)``.
        split: "document" or "region".
        split_seed: seed of the document split (unused for "region").
        seed: seed of the training shuffle.
        source: a pre-tokenized ``.npy`` / ``.bin`` / ``.array_record`` file of token ids to
            train on instead of the shipped corpus (``None``); with ``tokenizer``, a text corpus.
            Split by region, its last ``val_fraction`` validates.
        source_dtype: element type of a ``.bin`` source (``uint16``, ``uint32`` or ``int32``).
        tokenizer: ``None`` (``source`` holds token ids), or ``"byte"`` or a model directory:
            ``source`` is then a text corpus tokenized with it once into a cached token file.
        source_format: the text corpus' format (``txt``, ``jsonl``, ``parquet``,
            ``arrayrecord``; default from the suffix); only with ``tokenizer``.
        text_key: the JSON field / Parquet column of a text corpus' documents.
        cache_dir: where a text corpus' token file is kept (``""``: ``~/.cache/jaxlab/tokens``).
    """

    seq_len: int = 128
    batch_size: int = 16
    val_fraction: float = 0.05
    split: Literal["document", "region"] = "document"
    split_seed: int = 0
    seed: int = 0
    source: str | None = None
    source_dtype: Literal["uint16", "uint32", "int32"] = "uint16"
    tokenizer: str | None = None
    source_format: str | None = None
    text_key: str = "text"
    cache_dir: str = ""

    def __post_init__(self) -> None:
        for name in ("seq_len", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"ByteLMDataConfig.{name}={value!r}: expected a positive int")
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(
                f"ByteLMDataConfig.val_fraction={self.val_fraction!r}: expected a float in (0, 1)"
            )
        if self.split not in ("document", "region"):
            raise ValueError(
                f"ByteLMDataConfig.split={self.split!r}: expected 'document' or 'region'"
            )
        if self.source_dtype not in BIN_DTYPES:
            raise ValueError(
                f"ByteLMDataConfig.source_dtype={self.source_dtype!r}: expected one of {BIN_DTYPES}"
            )
        self._check_source()
        for name in ("split_seed", "seed"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value < 2**32:
                raise ValueError(
                    f"ByteLMDataConfig.{name}={value!r}: expected an int in [0, 2**32)"
                )

    def _check_source(self) -> None:
        """``source`` is a token file, or a text corpus of a known format with ``tokenizer``."""
        if self.tokenizer is None:
            if self.source_format is not None:
                raise ValueError(
                    f"ByteLMDataConfig.source_format={self.source_format!r}: names a text "
                    "corpus' format, expected data.tokenizer=byte|DIR with it"
                )
            if self.source is not None and not str(self.source).endswith(TOKEN_SUFFIXES):
                raise ValueError(
                    f"ByteLMDataConfig.source={self.source!r}: expected a token file "
                    f"{TOKEN_SUFFIXES}, or a text corpus with data.tokenizer=byte|DIR"
                )
            return
        if self.source is None:
            raise ValueError(
                f"ByteLMDataConfig.tokenizer={self.tokenizer!r}: tokenizes data.source, which "
                "is not set (the shipped corpus is byte-tokenized already)"
            )
        try:
            corpus_files.format_of(self.source, self.source_format)
        except ValueError as e:
            key = "source" if self.source_format is None else "source_format"
            raise ValueError(f"ByteLMDataConfig.{key}={getattr(self, key)!r}: {e}") from None


def document_split(
    num_documents: int, *, val_fraction: float, seed: int
) -> tuple[Int[np.ndarray, " n_train"], Int[np.ndarray, " n_val"]]:
    """Splits document indices into train and validation sets.

    ``n_val = max(1, round(val_fraction · n))`` documents, drawn by a seeded permutation, are held
    out; both index arrays are returned sorted (corpus order).

    Args:
        num_documents: number of documents ``n`` (at least 2).
        val_fraction: held-out fraction in ``(0, 1)``.
        seed: permutation seed.

    Returns:
        ``(train_indices, val_indices)``, disjoint, covering ``0 … n-1``.

    Raises:
        ValueError: if fewer than 2 documents are given.
    """
    if num_documents < 2:
        raise ValueError(f"num_documents={num_documents}: expected at least 2 to split")
    n_val = min(num_documents - 1, max(1, round(val_fraction * num_documents)))
    order = np.random.default_rng(seed).permutation(num_documents)
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def token_streams(
    documents: Sequence[str],
    *,
    split: Literal["document", "region"],
    val_fraction: float,
    split_seed: int = 0,
) -> tuple[Int[np.ndarray, " n_train"], Int[np.ndarray, " n_val"]]:
    """Tokenises documents as ``[BOS] bytes [EOS]`` and returns the train and validation streams.

    Args:
        documents: the corpus.
        split: "document" (held-out documents, see :func:`document_split`) or "region" (the
            concatenated stream is cut at ``floor((1 - val_fraction) · length)``).
        val_fraction: held-out fraction in ``(0, 1)``.
        split_seed: seed of the document split.

    Returns:
        ``(train_stream, val_stream)`` int32 token arrays.

    Raises:
        ValueError: on an unknown ``split``.
    """
    tokenizer = ByteTokenizer()
    encoded = [tokenizer.encode(doc, add_bos=True, add_eos=True) for doc in documents]
    if split == "document":
        train_idx, val_idx = document_split(
            len(encoded), val_fraction=val_fraction, seed=split_seed
        )
        return (
            np.concatenate([encoded[i] for i in train_idx]),
            np.concatenate([encoded[i] for i in val_idx]),
        )
    if split == "region":
        stream = np.concatenate(encoded)
        cut = int(np.floor((1.0 - val_fraction) * stream.size))
        return stream[:cut], stream[cut:]
    raise ValueError(f"split={split!r}: expected 'document' or 'region'")


def pack_windows(stream: Int[np.ndarray, " n"], window: int) -> Int[np.ndarray, "num window"]:
    """Cuts a token stream into ``floor(n / window)`` consecutive non-overlapping windows.

    Args:
        stream: 1-D tokens.
        window: window length (``seq_len + 1``).

    Returns:
        ``[num_windows, window]`` int32 array (a copy); row ``i`` is
        ``stream[i·window : (i+1)·window]``.
    """
    num = stream.size // window
    return np.ascontiguousarray(stream[: num * window].reshape(num, window), dtype=np.int32)


def _synchronous() -> grain.ReadOptions:
    # Windows are in-memory slices: no worker threads (no background threads on shared CPUs).
    return grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


def _as_batch(window: np.ndarray) -> dict[str, np.ndarray]:
    return {"tokens": window}


def _shard_batch_size(batch_size: int, shard_index: int, shard_count: int) -> int:
    if shard_count <= 0 or not 0 <= shard_index < shard_count:
        raise ValueError(
            f"shard_index={shard_index}, shard_count={shard_count}: expected "
            "0 <= shard_index < shard_count"
        )
    if batch_size % shard_count:
        raise ValueError(
            f"batch_size={batch_size}: expected a multiple of shard_count={shard_count}"
        )
    return batch_size // shard_count


def train_dataset(
    windows: Windows,
    *,
    batch_size: int,
    seed: int,
    num_epochs: int | None = None,
    shard_index: int = 0,
    shard_count: int = 1,
) -> grain.IterDataset:
    """Shuffled, repeated, batched training dataset over packed windows.

    ``MapDataset.source(windows)[shard_index::shard_count].shuffle(seed).repeat(num_epochs)
    .map(to dict).batch(batch_size // shard_count, drop_remainder=True).to_iter_dataset()``.
    Each epoch uses a different permutation (grain reseeds ``shuffle`` per epoch).

    Args:
        windows: ``[num, seq_len + 1]`` packed windows.
        batch_size: global batch size.
        seed: shuffle seed.
        num_epochs: number of passes (``None``: forever).
        shard_index: this host's shard (``jax.process_index()``).
        shard_count: number of hosts (``jax.process_count()``).

    Returns:
        A grain ``IterDataset`` of ``{"tokens": [batch_size // shard_count, seq_len + 1]}``.

    Raises:
        ValueError: if a shard holds fewer windows than one batch, or on bad sharding.
    """
    per_host = _shard_batch_size(batch_size, shard_index, shard_count)
    ds = grain.MapDataset.source(windows)[shard_index::shard_count]
    if len(ds) < per_host:
        raise ValueError(
            f"batch_size={batch_size}: the training shard holds only {len(ds)} windows, "
            f"expected at least {per_host} (use a smaller batch or seq_len)"
        )
    ds = ds.shuffle(seed=seed).repeat(num_epochs).map(_as_batch)
    return ds.batch(per_host, drop_remainder=True).to_iter_dataset(_synchronous())


def validation_dataset(
    windows: Windows,
    *,
    batch_size: int,
    shard_index: int = 0,
    shard_count: int = 1,
) -> grain.IterDataset:
    """One deterministic, unshuffled pass over the validation windows (last partial batch dropped).

    Args:
        windows: ``[num, seq_len + 1]`` packed windows.
        batch_size: global batch size.
        shard_index: this host's shard.
        shard_count: number of hosts.

    Returns:
        A grain ``IterDataset`` of ``{"tokens": [batch_size // shard_count, seq_len + 1]}``.

    Raises:
        ValueError: if a shard holds fewer windows than one batch, or on bad sharding.
    """
    per_host = _shard_batch_size(batch_size, shard_index, shard_count)
    ds = grain.MapDataset.source(windows)[shard_index::shard_count]
    if len(ds) < per_host:
        raise ValueError(
            f"batch_size={batch_size}: the validation shard holds only {len(ds)} windows, "
            f"expected at least {per_host} (use a smaller batch or seq_len, or more val data)"
        )
    return ds.map(_as_batch).batch(per_host, drop_remainder=True).to_iter_dataset(_synchronous())


def split_windows(
    cfg: ByteLMDataConfig,
    documents: Sequence[str] | None = None,
    *,
    vocab_size: int | None = None,
) -> tuple[Windows, Windows]:
    """Train and validation windows ``[num, cfg.seq_len + 1]`` of a corpus.

    Args:
        cfg: the data configuration.
        documents: the corpus (default :func:`load_corpus`; ignored when ``cfg.source`` is set).
        vocab_size: the model's vocabulary: a ``cfg.source`` file's ids must lie below it (one
            pass over the file), so a file tokenized for a larger vocabulary is refused by name
            instead of training to a non-finite loss.

    Returns:
        ``(train_windows, val_windows)``: arrays, or :class:`TokenWindows` of ``cfg.source``.
    """
    if cfg.source is not None:
        path = cfg.source
        if cfg.tokenizer is not None:
            from jaxlab.lm.text_source import cached_token_file

            path = cached_token_file(
                cfg.source,
                tokenizer=cfg.tokenizer,
                fmt=cfg.source_format,
                text_key=cfg.text_key,
                cache_dir=cfg.cache_dir,
            )
        return split_token_windows(
            path,
            seq_len=cfg.seq_len,
            val_fraction=cfg.val_fraction,
            dtype=cfg.source_dtype,
            vocab_size=vocab_size,
        )
    docs = load_corpus() if documents is None else documents
    train, val = token_streams(
        docs, split=cfg.split, val_fraction=cfg.val_fraction, split_seed=cfg.split_seed
    )
    return pack_windows(train, cfg.seq_len + 1), pack_windows(val, cfg.seq_len + 1)


def train_iterator(
    cfg: ByteLMDataConfig,
    documents: Sequence[str] | None = None,
    *,
    num_epochs: int | None = None,
    shard_index: int = 0,
    shard_count: int = 1,
    vocab_size: int | None = None,
) -> grain.DatasetIterator:
    """Checkpointable iterator of shuffled training batches.

    Args:
        cfg: the data configuration.
        documents: the corpus (default :func:`load_corpus`).
        num_epochs: passes over the data (``None``: forever).
        shard_index: this host's shard.
        shard_count: number of hosts.
        vocab_size: the model's vocabulary, checked against a token file (:func:`split_windows`).

    Returns:
        A grain ``DatasetIterator`` yielding ``{"tokens": int32 [B, seq_len + 1]}``; save and
        restore its position with ``get_state()`` / ``set_state(state)``.
    """
    train, _ = split_windows(cfg, documents, vocab_size=vocab_size)
    ds = train_dataset(
        train,
        batch_size=cfg.batch_size,
        seed=cfg.seed,
        num_epochs=num_epochs,
        shard_index=shard_index,
        shard_count=shard_count,
    )
    return iter(ds)


def validation_iterator(
    cfg: ByteLMDataConfig,
    documents: Sequence[str] | None = None,
    *,
    shard_index: int = 0,
    shard_count: int = 1,
) -> grain.DatasetIterator:
    """Deterministic iterator over the validation batches (a fresh pass on every call).

    Args:
        cfg: the data configuration.
        documents: the corpus (default :func:`load_corpus`).
        shard_index: this host's shard.
        shard_count: number of hosts.

    Returns:
        A grain ``DatasetIterator`` yielding ``{"tokens": int32 [B, seq_len + 1]}``.
    """
    _, val = split_windows(cfg, documents)
    ds = validation_dataset(
        val, batch_size=cfg.batch_size, shard_index=shard_index, shard_count=shard_count
    )
    return iter(ds)


def unigram_entropy(corpus: str | bytes | Sequence[str]) -> float:
    """Entropy of the corpus' byte distribution, ``H = -Σ_b p_b ln p_b`` in nats per byte.

    ``p_b`` is the relative frequency of byte value ``b`` in the UTF-8 encoding (documents are
    concatenated; separators and special tokens are not counted). A byte-level LM that beats this
    has learned more than unigram statistics.

    Args:
        corpus: text, raw bytes, or a sequence of documents.

    Returns:
        The entropy in nats/byte.

    Raises:
        ValueError: if the corpus is empty or of an unsupported type.
    """
    if isinstance(corpus, bytes):
        data = corpus
    elif isinstance(corpus, str):
        data = corpus.encode("utf-8")
    elif isinstance(corpus, Sequence) and all(isinstance(d, str) for d in corpus):
        data = "".join(corpus).encode("utf-8")
    else:
        raise ValueError(
            f"corpus={type(corpus).__name__}: expected str, bytes or a sequence of str"
        )
    if not data:
        raise ValueError("corpus is empty: expected at least one byte")
    counts = np.bincount(np.frombuffer(data, dtype=np.uint8), minlength=256).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-np.sum(p * np.log(p)))
