"""``jaxlab export-hf RUN_DIR OUT``: a trained decoder LM run as a Hugging Face Llama (dense) or
OLMoE (QK-norm, MoE in every layer) directory (``jaxlab.lm.hub.save_hf``) that ``transformers``
loads."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jaxlab.core.errors import UserError

_DIR_HINT = "a model directory holds config.json, model.safetensors and tokenizer.json"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jaxlab export-hf",
        description="Write the newest checkpoint of a decoder LM run (lm-tiny, olmoe, ...) as a "
        "Hugging Face Llama or OLMoE directory (config.json, model.safetensors, tokenizer.json) "
        "that transformers' LlamaForCausalLM or OlmoeForCausalLM loads.",
    )
    p.add_argument("run_dir", help="the run directory")
    p.add_argument("out", help="the output directory (new or empty)")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: newest)")
    p.add_argument(
        "--tokenizer",
        default=None,
        help="a model directory or tokenizer.json to copy (default: that of the run's "
        "init_from=hf:DIR; a byte-level run has none)",
    )
    p.add_argument(
        "--max-shard-bytes", type=int, default=None, help="split the weights into shards"
    )
    return p


def _tokenizer_for(cfg, given: str | None):
    """``(tokenizer.json path or None, token ids)`` of the export."""
    from jaxlab.lm.hub import HubError, load_tokenizer
    from jaxlab.lm.hub.init_from import hf_directory
    from jaxlab.lm.tokenizer import ByteTokenizer

    source = Path(given) if given else hf_directory(getattr(cfg, "init_from", "") or "")
    if source is None:
        t = ByteTokenizer()
        return None, {"bos_token_id": t.bos_id, "eos_token_id": t.eos_id, "pad_token_id": t.pad_id}
    try:
        tok = load_tokenizer(source, model_vocab_size=cfg.model.vocab_size)
    except HubError as e:
        raise UserError(f"--tokenizer: {e}", _DIR_HINT) from None
    ids = {"bos_token_id": tok.bos_id, "eos_token_id": tok.eos_id, "pad_token_id": tok.pad_id}
    file = source if source.is_file() else source / "tokenizer.json"
    return file, {k: v for k, v in ids.items() if v >= 0}


def main(argv: list[str]) -> int:
    """``jaxlab export-hf RUN_DIR OUT [--step N] [--tokenizer DIR] [--max-shard-bytes N]``."""
    from jaxlab.core.run import open_run, read_run
    from jaxlab.lm.hub import HubError, hf_config_from_decoder, save_hf
    from jaxlab.lm.model import DecoderConfig

    args = build_parser().parse_args(argv)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out}: exists and is not an empty directory", "name a new directory")
    if args.max_shard_bytes is not None and args.max_shard_bytes < 1:
        raise UserError(f"--max-shard-bytes {args.max_shard_bytes}: expected a positive integer")
    recipe, cfg = read_run(args.run_dir)
    model = getattr(cfg, "model", None)
    if not isinstance(model, DecoderConfig):
        raise UserError(f"{args.run_dir}: a {recipe.name} run has no decoder LM (model) to export")
    try:
        hf_config_from_decoder(model)  # refuses what the Llama format cannot hold, before reading
    except HubError as e:
        raise UserError(
            f"{args.run_dir}: {e}", "export-hf writes Llama and OLMoE layouts"
        ) from None
    tokenizer_file, token_ids = _tokenizer_for(cfg, args.tokenizer)
    run = open_run(args.run_dir, recipe=recipe, step=args.step)
    save_hf(
        out,
        model,
        run.state.params,
        max_shard_bytes=args.max_shard_bytes,
        tokenizer_file=tokenizer_file,
        **token_ids,
    )
    note = "" if tokenizer_file else " (byte-level run: no tokenizer.json)"
    print(f"jaxlab: step {run.step} of {args.run_dir} written to {out}{note}", file=sys.stderr)
    return 0
