"""``jaxlab data prepare IN OUT --tokenizer DIR [--out-format npy|bin|array_record]``: a text
corpus tokenized once into the token file (``.npy``, ``.bin`` or ArrayRecord) that ``data.source``
reads (:mod:`jaxlab.lm.corpus_files`, :mod:`jaxlab.lm.token_files`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jaxlab.core.errors import UserError

#: --out-format -> the suffixes OUT may have
OUT_FORMATS = {
    "npy": (".npy",),
    "bin": (".bin",),
    "array_record": (".array_record", ".arrayrecord"),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jaxlab data", description="Corpus files for the LM recipes.")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    s = sub.add_parser(
        "prepare",
        help="tokenize a corpus file into a token file for data.source",
        description="Tokenize IN (.txt: one document per line; .jsonl: a text field; .parquet: a "
        "text column, needs pyarrow; .arrayrecord: one UTF-8 document per record) with a model "
        "directory's tokenizer.json (or the byte tokenizer) into OUT (.npy, raw .bin, or "
        ".array_record: ArrayRecord records of ids).",
    )
    s.add_argument("input", help="the corpus file")
    s.add_argument("output", help="the token file to write (.npy, .bin or .array_record)")
    s.add_argument(
        "--out-format",
        choices=sorted(OUT_FORMATS),
        default=None,
        help="the token file's format (default: from OUT's suffix, which must match it)",
    )
    s.add_argument(
        "--tokenizer",
        required=True,
        help="a model directory (its tokenizer.json and config.json), or 'byte'",
    )
    s.add_argument("--format", default=None, help="txt, jsonl, parquet or arrayrecord")
    s.add_argument("--text-key", default="text", help="JSON field / Parquet column of the text")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _tokenizer(name: str):
    from jaxlab.lm.text_source import load_named_tokenizer

    try:
        return load_named_tokenizer(name, key="--tokenizer")
    except ValueError as e:
        raise UserError(str(e), "a model directory holding tokenizer.json, or 'byte'") from None


def prepare(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from jaxlab.lm import corpus_files

    out = Path(args.output)
    if args.out_format is not None and out.suffix not in OUT_FORMATS[args.out_format]:
        raise UserError(
            f"--out-format {args.out_format}: OUT={out} should end in "
            f"{' or '.join(OUT_FORMATS[args.out_format])} (data.source reads a file by its suffix)"
        )
    if not any(out.suffix in suffixes for suffixes in OUT_FORMATS.values()):
        raise UserError(f"{out}: expected a .npy, .bin or .array_record output file")
    if not out.parent.is_dir():
        raise UserError(f"{out.parent}: no such directory")
    tok = _tokenizer(args.tokenizer)
    source = Path(args.input)
    docs = corpus_files.read_documents(source, fmt=args.format, text_key=args.text_key)
    total = source.stat().st_size
    with tqdm(
        total=total, unit="B", unit_scale=True, disable=args.no_progress, desc="tokenizing"
    ) as bar:
        ids = corpus_files.tokenize_documents(docs, tok, progress=bar.update)
    corpus_files.write_tokens(ids, out, vocab_size=tok.vocab_size)
    dtype = corpus_files.token_dtype(tok.vocab_size)
    how = f"data.source={out}" + (f" data.source_dtype={dtype}" if out.suffix == ".bin" else "")
    print(
        f"jaxlab: {ids.size} tokens ({dtype}) written to {out}; train with {how}", file=sys.stderr
    )
    return 0


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    return prepare(args)
