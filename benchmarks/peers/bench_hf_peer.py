"""The ``transformers`` side of ``benchmarks/bench_hf.py``, run in the HF peer venv
(``setup_hf_peer.sh``): load time of a model directory and greedy ``generate`` tokens/s at the
given batch sizes on the same prompt, one JSON line each (with the batch-1 greedy tokens).

Usage: ``python bench_hf_peer.py DIR --prompt-ids 0,5,7 --new 40 --batches 1,16 --reps 3``.
"""

import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("directory")
    ap.add_argument("--prompt-ids", required=True)
    ap.add_argument("--new", type=int, default=40)
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(args.directory).float().eval()
    load_s = time.perf_counter() - start
    print(json.dumps({"what": "load", "seconds": load_s, "torch": torch.__version__}))
    ids = [int(i) for i in args.prompt_ids.split(",")]
    for batch in (int(b) for b in args.batches.split(",")):
        tokens = torch.tensor([ids] * batch)
        kw = dict(
            attention_mask=torch.ones_like(tokens), max_new_tokens=args.new, min_new_tokens=args.new,
            do_sample=False, eos_token_id=None, pad_token_id=0,
        )  # fmt: skip
        with torch.no_grad():
            out = model.generate(tokens, **kw)  # warm-up
            times = []
            for _ in range(args.reps):
                start = time.perf_counter()
                out = model.generate(tokens, **kw)
                times.append(time.perf_counter() - start)
        best = min(times)
        row = {"what": "generate", "batch": batch, "new": args.new, "seconds": best}
        row["tokens_per_s"] = batch * args.new / best
        if batch == 1:
            row["greedy"] = out[0, len(ids) :].tolist()
        print(json.dumps(row))


if __name__ == "__main__":
    main()
