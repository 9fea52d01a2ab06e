"""Heterogeneous data sources for DEPT: synthetic "languages" over one latent grammar, and a
trained BPE vocabulary (``tokenizers`` package) per source and over all sources.

Every language renders the *same* latent process through its own alphabet, so a shared
transformer body can learn the structure while the embeddings must stay language-specific:

* latent grammar: ``n_words`` words, each a fixed string of 2-5 latent symbols over an alphabet of
  ``n_symbols``; sentences are walks of a sparse first-order Markov chain over words (each word
  has ``branching`` successors with Dirichlet(1) probabilities), ended by a full stop;
* language ``k`` maps latent symbol ``j`` to ``alphabet_k[perm_k[j]]`` where ``alphabet_k`` is a
  disjoint block of Unicode letters (``disjoint=True``) or the Latin letters permuted by
  ``perm_k`` (``disjoint=False``). Word boundaries are spaces in every language.

Everything is deterministic in ``seed``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from jaxlab.core.config import ConfigError

#: first code point of each language's letter block (disjoint alphabets): Latin, Greek,
#: Cyrillic, Armenian, Hebrew, Georgian, ... (each block has >= 26 letters)
_BLOCKS: tuple[int, ...] = (0x61, 0x3B1, 0x430, 0x561, 0x5D0, 0x10D0, 0x1401, 0x3041)


@dataclasses.dataclass(frozen=True)
class GrammarConfig:
    """The shared latent grammar (see the module docstring)."""

    n_words: int = 48
    n_symbols: int = 14
    branching: int = 4
    sentence_len: tuple[int, int] = (4, 10)
    seed: int = 0

    def __post_init__(self):
        if self.n_words < 1:
            raise ConfigError("grammar.n_words", self.n_words, "an integer >= 1")
        if not 2 <= self.n_symbols <= 22:
            raise ConfigError("grammar.n_symbols", self.n_symbols, "in [2, 22]")
        if not 1 <= self.branching <= self.n_words:
            raise ConfigError("grammar.branching", self.branching, "in [1, n_words]")


@dataclasses.dataclass(frozen=True)
class Grammar:
    words: tuple[tuple[int, ...], ...]  # latent symbol strings
    transition: np.ndarray  # [n_words, n_words] row-stochastic, sparse
    start: np.ndarray  # [n_words]


def make_grammar(cfg: GrammarConfig) -> Grammar:
    """The latent words and Markov chain of ``cfg`` (deterministic in ``cfg.seed``)."""
    rng = np.random.default_rng(cfg.seed)
    words: set[tuple[int, ...]] = set()
    while len(words) < cfg.n_words:
        n = int(rng.integers(2, 6))
        words.add(tuple(int(s) for s in rng.integers(0, cfg.n_symbols, n)))
    ordered = tuple(sorted(words))
    trans = np.zeros((cfg.n_words, cfg.n_words))
    for i in range(cfg.n_words):
        succ = rng.choice(cfg.n_words, cfg.branching, replace=False)
        trans[i, succ] = rng.dirichlet(np.ones(cfg.branching))
    start = rng.dirichlet(np.ones(cfg.n_words))
    return Grammar(ordered, trans, start)


def alphabet(language: int, n_symbols: int, disjoint: bool = True, seed: int = 0) -> list[str]:
    """Letters of ``language``: latent symbol ``j`` is written ``alphabet(...)[j]``."""
    rng = np.random.default_rng((seed, 7919, language))
    if disjoint:
        if language >= len(_BLOCKS):
            raise ConfigError("language", language, f"< {len(_BLOCKS)} disjoint alphabets")
        letters = [chr(_BLOCKS[language] + i) for i in range(n_symbols)]
    else:
        letters = [chr(0x61 + i) for i in range(n_symbols)]
    return [letters[i] for i in rng.permutation(n_symbols)]


def render(
    grammar: Grammar,
    cfg: GrammarConfig,
    language: int,
    n_chars: int,
    *,
    disjoint: bool = True,
    sample_seed: int = 0,
) -> str:
    """About ``n_chars`` characters of ``language``: sentences of the shared Markov chain, each
    word spelled in the language's alphabet, words separated by spaces, sentences by ``". "``."""
    if n_chars <= 0:
        raise ConfigError("n_chars", n_chars, "a positive integer")
    letters = alphabet(language, cfg.n_symbols, disjoint, cfg.seed)
    spelled = ["".join(letters[s] for s in w) for w in grammar.words]
    rng = np.random.default_rng((cfg.seed, sample_seed, language))
    out: list[str] = []
    size = 0
    lo, hi = cfg.sentence_len
    while size < n_chars:
        length = int(rng.integers(lo, hi + 1))
        w = int(rng.choice(len(spelled), p=grammar.start))
        sentence = [spelled[w]]
        for _ in range(length - 1):
            w = int(rng.choice(len(spelled), p=grammar.transition[w]))
            sentence.append(spelled[w])
        text = " ".join(sentence) + ". "
        out.append(text)
        size += len(text)
    return "".join(out)


def train_bpe(corpora: list[str], vocab_size: int, field: str = "vocab_size") -> Tokenizer:
    """A BPE tokenizer (``tokenizers``) trained on ``corpora`` with at most ``vocab_size`` ids.

    Pre-tokenisation is ``Metaspace`` (a space becomes ``▁`` attached to the next word), so the
    alphabet is the corpora's characters plus ``▁``. Raises a ConfigError naming ``field`` when
    a corpus is empty or ``vocab_size`` is smaller than that alphabet."""
    for i, text in enumerate(corpora):
        if not text:
            raise ConfigError(f"corpora[{i}]", text, "a non-empty corpus")
    chars = set("".join(corpora).replace(" ", "")) | {"\u2581"}
    if vocab_size < len(chars):
        raise ConfigError(field, vocab_size, f"at least the tokenizer's alphabet of {len(chars)}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=sorted(chars), show_progress=False
    )
    tok.train_from_iterator(corpora, trainer=trainer)
    return tok


def encode(tok: Tokenizer, text: str) -> np.ndarray:
    """``text`` as an int32 id stream (encoded in sentence-sized pieces, then concatenated; a
    pretrained tokenizer's post-processor specials are not added to the pieces)."""
    pieces = [p + "." for p in text.split(".") if p.strip()]
    ids = [np.asarray(e.ids, np.int32) for e in tok.encode_batch(pieces, add_special_tokens=False)]
    return np.concatenate(ids) if ids else np.zeros((0,), np.int32)


def corpus_domains(n_sources: int) -> list[str]:
    """The shipped corpus (stdlib docstrings, ``jaxlab.lm.data.load_corpus``) split by domain:
    one source per standard-library module (its documents concatenated), the ``n_sources``
    largest modules, largest first. Modules differ in topic and vocabulary (``typing`` vs
    ``http.client`` vs ``statistics``), the natural-text counterpart of the synthetic languages."""
    from jaxlab.lm.data import load_corpus

    by_module: dict[str, list[str]] = {}
    for doc in load_corpus():
        name = doc.split("\n", 1)[0]
        module = name.split(".", 1)[0]
        by_module.setdefault(module, []).append(doc)
    texts = sorted(("\n".join(docs) for docs in by_module.values()), key=len, reverse=True)
    if not 1 <= n_sources <= len(texts):
        raise ConfigError("n_sources", n_sources, f"in [1, {len(texts)}] corpus modules")
    return texts[:n_sources]
