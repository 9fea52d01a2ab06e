"""Does fine-tuning a loaded Hugging Face model on a user's text file lower its perplexity on
held-out lines of that file?

The model is the tiny Llama fixture (``tests/lm/fixtures/tiny_llama``, random weights made by
``transformers``) or the OLMo-2 one; the "user file" is the shipped corpus written one document
per line: the first ``--train-docs`` lines are prepared with the fixture's tokenizer
(``jaxlab.lm.corpus_files``, as ``jaxlab data prepare`` does) and trained on with ``lm-tiny
init_from=hf:DIR data.source=...`` for ``--steps`` steps; the last ``--heldout-docs`` lines are
scored before and after (``jaxlab.lm.perplexity``, windows of 31 tokens), each run with its
seed's data order. One JSON line per (fixture, lr, seed), then a markdown table in
``experiments/hf_finetune/README.md``'s format on stderr.

Usage: ``python -m experiments.hf_finetune.hf_finetune [--steps 40] [--seeds 2]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from jaxlab.core import loop
from jaxlab.core.recipe import get
from jaxlab.core.run import open_run
from jaxlab.lm import corpus_files, perplexity
from jaxlab.lm.data import load_corpus
from jaxlab.lm.hub import load_hf, load_tokenizer
from jaxlab.lm.model import Decoder

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "lm" / "fixtures"


def _tokens(directory: Path, docs: list[str]) -> np.ndarray:
    tok = load_tokenizer(directory)
    return corpus_files.tokenize_documents(iter(d.replace("\n", " ") for d in docs), tok)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default="tiny_llama,tiny_olmo2")
    ap.add_argument("--lrs", default="1e-3,3e-3")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--train-docs", type=int, default=1600)
    ap.add_argument("--heldout-docs", type=int, default=300)
    args = ap.parse_args()
    docs = list(load_corpus())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.fixtures.split(","):
            directory = FIXTURES / name
            train = corpus_files.write_tokens(
                _tokens(directory, docs[: args.train_docs]), Path(tmp) / f"{name}.npy",
                vocab_size=128,
            )  # fmt: skip
            held = perplexity.windows_of(_tokens(directory, docs[-args.heldout_docs :]), 31)
            base = load_hf(directory)
            before = perplexity.evaluate(Decoder(base.cfg), base.params, held)["bits_per_token"]
            for lr in (float(x) for x in args.lrs.split(",")):
                for seed in range(args.seeds):
                    cfg = get("lm-tiny").config("tiny", [
                        f"init_from=hf:{directory}", f"data.source={train}", f"seed={seed}",
                        f"data.seed={seed}", f"optim.lr={lr}", f"loop.total_steps={args.steps}",
                        f"loop.steps_per_call={args.steps // 4}", f"loop.eval_every={args.steps}",
                        f"loop.checkpoint_every={args.steps}", f"loop.log_every={args.steps}",
                    ])  # fmt: skip
                    run_dir = Path(tmp) / f"{name}-{lr}-{seed}"
                    loop.run(get("lm-tiny"), cfg, run_dir)
                    run = open_run(run_dir)
                    after = perplexity.evaluate(Decoder(run.cfg.model), run.state.params, held)
                    row = {"fixture": name, "lr": lr, "seed": seed, "steps": args.steps,
                           "heldout_tokens": int(held.size), "bits_before": before,
                           "bits_after": after["bits_per_token"]}  # fmt: skip
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    print("| fixture | lr | seeds lowered | bits/token before | after (mean over seeds) |",
          file=sys.stderr)  # fmt: skip
    print("| --- | --- | --- | --- | --- |", file=sys.stderr)
    for key in sorted({(r["fixture"], r["lr"]) for r in rows}):
        group = [r for r in rows if (r["fixture"], r["lr"]) == key]
        lowered = sum(r["bits_after"] < r["bits_before"] for r in group)
        mean = np.mean([r["bits_after"] for r in group])
        print(f"| {key[0]} | {key[1]:g} | {lowered}/{len(group)} | "
              f"{group[0]['bits_before']:.3f} | {mean:.3f} |", file=sys.stderr)  # fmt: skip


if __name__ == "__main__":
    main()
