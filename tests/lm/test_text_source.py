"""A text corpus as ``data.source`` with ``data.tokenizer``: the batches of the token file
``jaxlab data prepare`` makes, tokenized once into the cache, the user's file only read, and bad
keys named."""

import json
from pathlib import Path

import numpy as np
import pytest

from jaxlab import cli
from jaxlab.core.config import ConfigError, resolve
from jaxlab.lm import corpus_files
from jaxlab.lm.data import ByteLMDataConfig, train_iterator, validation_iterator
from jaxlab.recipes.lm_tiny import LmTinyConfig

LLAMA = Path(__file__).parent / "fixtures" / "tiny_llama"
DOCS = [f"document {i}: " + "word " * (i % 5) for i in range(40)]


def _cfg(source, **kw):
    return ByteLMDataConfig(seq_len=7, batch_size=4, val_fraction=0.1, source=str(source), **kw)


def _batches(cfg):
    it = train_iterator(cfg)
    train = [next(it)["tokens"] for _ in range(6)]
    return np.stack(train), np.concatenate([b["tokens"] for b in validation_iterator(cfg)])


@pytest.mark.parametrize("tokenizer", ["byte", str(LLAMA)], ids=["byte", "hf"])
def test_text_source_reads_the_batches_of_the_prepared_file(tmp_path, tokenizer):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"body": d}) + "\n" for d in DOCS))
    before = corpus.read_bytes()
    prepared = tmp_path / "prepared.npy"
    argv = ["data", "prepare", str(corpus), str(prepared), "--tokenizer", tokenizer]
    assert cli.main([*argv, "--text-key", "body", "--no-progress"]) == 0
    cache = tmp_path / "cache"
    text_cfg = _cfg(corpus, tokenizer=tokenizer, text_key="body", cache_dir=str(cache))
    want, got = _batches(_cfg(prepared)), _batches(text_cfg)
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(g, w)
    assert corpus.read_bytes() == before and len(list(cache.iterdir())) == 1


def test_the_corpus_is_tokenized_once(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(DOCS) + "\n")
    cfg = _cfg(corpus, tokenizer="byte", cache_dir=str(tmp_path / "cache"))
    first = _batches(cfg)

    def refuse(*args, **kwargs):
        raise AssertionError("tokenized again")

    monkeypatch.setattr(corpus_files, "tokenize_documents", refuse)
    for a, b in zip(first, _batches(cfg), strict=True):
        np.testing.assert_array_equal(a, b)
    corpus.write_text("\n".join(DOCS[::-1] + ["more"]) + "\n")  # edited: tokenized anew
    with pytest.raises(AssertionError, match="tokenized again"):
        _batches(cfg)


def test_bad_text_sources_are_named_and_write_nothing(tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(ConfigError, match=r"'data.source'.*corpus.txt.*data.tokenizer=byte\|DIR"):
        resolve(LmTinyConfig, overrides=["data.source=corpus.txt"])
    with pytest.raises(ConfigError, match=r"'data.tokenizer'.*data.source, which is not set"):
        resolve(LmTinyConfig, overrides=["data.tokenizer=byte"])
    with pytest.raises(ConfigError, match=r"'data.source_format'.*data.tokenizer=byte\|DIR"):
        resolve(LmTinyConfig, overrides=["data.source=t.npy", "data.source_format=jsonl"])
    with pytest.raises(ConfigError, match=r"'data.source'.*unknown corpus suffix '.csv'"):
        resolve(LmTinyConfig, overrides=["data.source=c.csv", "data.tokenizer=byte"])
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "fine"}\n{"other": 1}\n')
    with pytest.raises(ValueError, match=r"c.jsonl:2: no field 'text'"):
        train_iterator(_cfg(corpus, tokenizer="byte", cache_dir=str(cache)))
    with pytest.raises(ValueError, match=r"data.tokenizer='.*nowhere': expected 'byte' or a model"):
        train_iterator(_cfg(corpus, tokenizer=str(tmp_path / "nowhere"), cache_dir=str(cache)))
    with pytest.raises(ValueError, match=r"data.source='.*missing.txt': no such file"):
        train_iterator(_cfg(tmp_path / "missing.txt", tokenizer="byte", cache_dir=str(cache)))
    assert not cache.exists()
