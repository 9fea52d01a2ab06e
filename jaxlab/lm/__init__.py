"""jaxlab.lm: decoder-only language models, byte tokenizer and the byte-level data pipeline."""

from jaxlab.lm.data import (
    ByteLMDataConfig,
    document_split,
    load_corpus,
    pack_windows,
    split_windows,
    token_streams,
    train_dataset,
    train_iterator,
    unigram_entropy,
    validation_dataset,
    validation_iterator,
)
from jaxlab.lm.model import (
    Decoder,
    DecoderCache,
    DecoderConfig,
    LayerFFN,
    dense_ffn,
    init_cache,
    next_token_loss,
)
from jaxlab.lm.tokenizer import BOS_ID, EOS_ID, PAD_ID, VOCAB_SIZE, ByteTokenizer

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "VOCAB_SIZE",
    "ByteLMDataConfig",
    "ByteTokenizer",
    "Decoder",
    "DecoderCache",
    "DecoderConfig",
    "LayerFFN",
    "dense_ffn",
    "document_split",
    "init_cache",
    "load_corpus",
    "next_token_loss",
    "pack_windows",
    "split_windows",
    "token_streams",
    "train_dataset",
    "train_iterator",
    "unigram_entropy",
    "validation_dataset",
    "validation_iterator",
]
