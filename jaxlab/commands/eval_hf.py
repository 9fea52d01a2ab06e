"""``jaxlab eval --hf-dir DIR [--data FILE]``: perplexity and bits per token of a Hugging Face
model directory on a token file, a corpus file tokenized with its tokenizer, or the shipped
corpus (:mod:`jaxlab.lm.perplexity`)."""

from __future__ import annotations

import argparse
import json

from jaxlab.core.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jaxlab eval --hf-dir",
        description="Perplexity and bits per token of a Hugging Face model directory on a token "
        "file (.npy/.bin/.array_record of ids), a corpus file (.txt/.jsonl/.parquet/.arrayrecord, tokenized with the "
        "model's tokenizer) or, by default, the shipped corpus.",
    )
    p.add_argument("--hf-dir", required=True, help="the model directory")
    p.add_argument("--data", default=None, help="the file to score (default: shipped corpus)")
    p.add_argument("--format", default=None, help="corpus format (default: from the suffix)")
    p.add_argument("--text-key", default="text", help="JSON field / Parquet column of the text")
    p.add_argument("--source-dtype", default="uint16", help="element type of a .bin token file")
    p.add_argument(
        "--seq-len", type=int, default=None, help="window length (default: min(256, context - 1))"
    )
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-windows", type=int, default=None, help="score at most this many")
    return p


def _eval_tokens(args, tok, vocab_size: int):
    """``(token ids, UTF-8 bytes or None)`` of ``--data``."""
    import numpy as np

    from jaxlab.lm import corpus_files
    from jaxlab.lm.data import load_corpus
    from jaxlab.lm.token_files import is_token_file, open_tokens

    if args.data is not None and is_token_file(args.data):
        tokens = open_tokens(args.data, dtype=args.source_dtype)
        tokens = np.asarray(tokens[0 : tokens.size])
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= vocab_size:
            raise UserError(f"{args.data}: holds id {hi}, expected ids in [0, {vocab_size})")
        return np.asarray(tokens), None
    if args.data is None:
        docs = iter(load_corpus())
    else:
        docs = corpus_files.read_documents(args.data, fmt=args.format, text_key=args.text_key)
    size = [0]
    ids = corpus_files.tokenize_documents(
        docs, tok, progress=lambda n: size.__setitem__(0, size[0] + n)
    )
    return ids, size[0]


def main(argv: list[str]) -> int:
    """``jaxlab eval --hf-dir DIR [--data FILE] [--seq-len N] [--batch-size B]``: one JSON line."""
    from jaxlab.commands.generate import _load_hf
    from jaxlab.lm import perplexity

    args = build_parser().parse_args(argv)
    if args.batch_size < 1 or (args.max_windows is not None and args.max_windows < 1):
        raise UserError("--batch-size and --max-windows: expected integers >= 1")
    model, params, tok = _load_hf(args.hf_dir)
    seq_len = args.seq_len or min(256, model.cfg.max_len - 1)
    if not 1 <= seq_len <= model.cfg.max_len:
        raise UserError(
            f"--seq-len {seq_len}: expected in [1, max_position_embeddings={model.cfg.max_len}]"
        )
    tokens, num_bytes = _eval_tokens(args, tok, model.cfg.vocab_size)
    windows = perplexity.windows_of(tokens, seq_len)[: args.max_windows]
    if num_bytes is not None:  # the bytes of the scored part of the stream, pro rata
        num_bytes = round(num_bytes * windows.size / len(tokens))
    metrics = perplexity.evaluate(
        model, params, windows, batch_size=args.batch_size, num_bytes=num_bytes
    )
    data = args.data or "shipped corpus"
    print(json.dumps({"hf_dir": str(args.hf_dir), "data": data, "seq_len": seq_len, **metrics}))
    return 0
