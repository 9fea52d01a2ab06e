"""A text corpus as ``data.source`` (with ``data.tokenizer``): tokenized once, by the code of
``jaxlab data prepare`` (:mod:`jaxlab.lm.corpus_files`), into a ``.npy`` token file in a cache
directory, which the token-file pipeline (:mod:`jaxlab.lm.token_files`) then reads.

The cached file is named by a digest of everything its ids depend on: the corpus file's absolute
path, size and modification time, its format and text field, and the tokenizer (``byte``, or the
bytes of the directory's ``tokenizer.json`` and ``config.json``). Later runs, evaluations and
hosts reuse it; an edited corpus or another tokenizer gets a new file. The user's file is only
read. The cache directory is ``data.cache_dir``, by default ``$XDG_CACHE_HOME/jaxlab/tokens``
(``~/.cache/jaxlab/tokens``).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from jaxlab.lm import corpus_files


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/jaxlab/tokens``, or ``~/.cache/jaxlab/tokens``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "jaxlab" / "tokens"


def load_named_tokenizer(name: str, *, key: str = "data.tokenizer") -> Any:
    """The byte tokenizer (``"byte"``) or a model directory's ``tokenizer.json`` (its
    ``config.json``'s ``vocab_size`` bounds the ids).

    Raises:
        ValueError: naming ``key`` and ``name``, if the directory holds no readable tokenizer.
    """
    from jaxlab.lm.hub import HubError, load_tokenizer
    from jaxlab.lm.tokenizer import ByteTokenizer

    if name == "byte":
        return ByteTokenizer()
    path = Path(name)
    if not path.exists():
        raise ValueError(f"{key}={name!r}: expected 'byte' or a model directory (tokenizer.json)")
    config = (path if path.is_dir() else path.parent) / "config.json"
    vocab = json.loads(config.read_text()).get("vocab_size") if config.is_file() else None
    try:
        return load_tokenizer(path, model_vocab_size=vocab)
    except HubError as e:
        raise ValueError(f"{key}={name!r}: {e}") from None


def _tokenizer_digest(name: str) -> str:
    if name == "byte":
        return "byte"
    directory = Path(name) if Path(name).is_dir() else Path(name).parent
    h = hashlib.sha256()
    for file in ("tokenizer.json", "config.json"):
        path = directory / file
        h.update(path.read_bytes() if path.is_file() else b"")
    return h.hexdigest()


def cached_token_file(
    source: str | Path,
    *,
    tokenizer: str,
    fmt: str | None = None,
    text_key: str = "text",
    cache_dir: str | Path = "",
) -> Path:
    """The token file of the text corpus ``source``, tokenized now unless already cached.

    Args:
        source: the corpus file (:data:`jaxlab.lm.corpus_files.FORMATS`).
        tokenizer: ``"byte"`` or a model directory.
        fmt: the corpus format (default: from the suffix).
        text_key: the JSON field / Parquet column of the text.
        cache_dir: where token files are kept (``""``: :func:`default_cache_dir`).

    Returns:
        The ``.npy`` token file.

    Raises:
        ValueError: naming the key and value, or the file and line, of what cannot be read;
            nothing is written then.
    """
    source = Path(source)
    kind = corpus_files.format_of(source, fmt)
    if not source.is_file():
        raise ValueError(f"data.source={str(source)!r}: no such file")
    tok = load_named_tokenizer(tokenizer)
    stat = source.stat()
    key = json.dumps(
        [str(source.resolve()), stat.st_size, stat.st_mtime_ns, kind, text_key]
        + [_tokenizer_digest(tokenizer), tok.vocab_size]
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    directory = Path(cache_dir) if cache_dir else default_cache_dir()
    out = directory / f"{source.stem}-{digest}.npy"
    if out.is_file():
        return out
    from tqdm.auto import tqdm

    docs = corpus_files.read_documents(source, fmt=kind, text_key=text_key)
    with tqdm(
        total=stat.st_size, unit="B", unit_scale=True, desc="tokenizing", disable=None
    ) as bar:
        ids = corpus_files.tokenize_documents(docs, tok, progress=bar.update)
    directory.mkdir(parents=True, exist_ok=True)
    corpus_files.write_tokens(ids, out, vocab_size=tok.vocab_size)
    print(f"jaxlab: {source} tokenized into {out} ({ids.size} tokens)", file=sys.stderr)
    return out
