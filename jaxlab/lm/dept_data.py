"""DEPT's data: the heterogeneous sources (synthetic languages or the shipped corpus split by
domain), tokenized per variant, and the per-round batches of every source's windows."""

from __future__ import annotations

import dataclasses
from typing import Any

import grain
import numpy as np

from jaxlab.core.config import ConfigError
from jaxlab.lm import dept as dept_lib
from jaxlab.lm import sources as sources_lib


@dataclasses.dataclass(frozen=True)
class DeptDataConfig:
    """The sources: ``kind="synthetic"``: ``n_sources`` languages of ``chars_per_source``
    characters over one latent grammar; ``kind="corpus"``: the shipped corpus split by domain
    (the ``n_sources`` largest stdlib modules). BPE vocabularies of ``vocab_size``;
    ``batch_size`` windows of ``seq_len`` tokens per source per local step; ``eval_windows``
    held-out windows per source."""

    kind: str = "synthetic"
    n_sources: int = 3
    chars_per_source: int = 40_000
    vocab_size: int = 96
    disjoint: bool = True
    grammar: sources_lib.GrammarConfig = sources_lib.GrammarConfig()
    batch_size: int = 8
    seq_len: int = 32
    eval_windows: int = 16

    def __post_init__(self):
        if self.kind not in ("synthetic", "corpus"):
            raise ConfigError("kind", self.kind, "'synthetic' or 'corpus'")
        names = ("n_sources", "chars_per_source", "vocab_size", "batch_size", "seq_len")
        for name in (*names, "eval_windows"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an integer >= 1")


def make_sources(data: DeptDataConfig, variant: str, tokenizer: Any = None) -> dept_lib.Sources:
    """The tokenized sources of ``data`` for ``variant`` (deterministic in the grammar seed);
    with ``tokenizer`` (a pretrained model's, ``data.vocab_size`` its model's vocabulary) every
    source is encoded with it instead of BPE vocabularies trained here."""
    if data.kind == "corpus":
        texts = sources_lib.corpus_domains(data.n_sources)
    else:
        grammar = sources_lib.make_grammar(data.grammar)
        texts = [
            sources_lib.render(
                grammar, data.grammar, k, data.chars_per_source, disjoint=data.disjoint
            )
            for k in range(data.n_sources)
        ]
    return dept_lib.tokenize_sources(texts, variant, data.vocab_size, tokenizer=tokenizer)


def round_iterator(
    src: dept_lib.Sources, data: DeptDataConfig, seed: int, local_steps: int, local: list[int]
):
    """A grain iterator of round batches ``{"tokens": [len(local), N, B, T+1]}`` (the windows of
    this host's sources ``local``; round ``i`` deterministic in ``(seed, i)``)."""
    n, b, t = local_steps, data.batch_size, data.seq_len

    def round_batch(i: int) -> dict[str, np.ndarray]:
        return {"tokens": dept_lib.round_windows(src.train, seed, int(i), n, b, t)[local]}

    ds = grain.MapDataset.range(2**31 - 1).map(round_batch)
    return iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)))
