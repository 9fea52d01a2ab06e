"""Hugging Face model directories: load time and greedy generation tokens/s of a loaded fixture in
jaxlab (KV-cached ``jaxlab.decoding.generate``) against ``transformers``' ``generate`` on the CPU,
same model, same prompt, side by side; and the token-file data pipeline's tokens/s against the
shipped corpus path. One JSON line each (``benchmarks.harness``).

The ``transformers`` side runs in the HF peer venv (``bash benchmarks/peers/setup_hf_peer.sh``,
or ``JAXLAB_HF_PEER_PYTHON=/path/to/python``); without it only jaxlab's lines are printed. The
batch-1 greedy tokens of both sides are compared (``greedy_equal``).

Usage: ``python -m benchmarks.bench_hf [--fixture tiny_llama] [--new 40] [--batches 1,16]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import harness
from jaxlab.commands.generate import decoder_lm
from jaxlab.decoding.generate import generate
from jaxlab.decoding.sampling import SamplingParams
from jaxlab.lm.hub import load_hf, load_tokenizer
from jaxlab.lm.model import Decoder

FIXTURES = harness.REPO / "tests" / "lm" / "fixtures"
HF_PEER = Path(
    os.environ.get("JAXLAB_HF_PEER_PYTHON", harness.PEERS / ".venv-hf" / "bin" / "python")
)


def _peer(directory: Path, ids: list[int], new: int, batches: str) -> list[dict]:
    if not HF_PEER.exists():
        print(f"# no HF peer at {HF_PEER}: bash benchmarks/peers/setup_hf_peer.sh", file=sys.stderr)
        return []
    cmd = [str(HF_PEER), str(harness.PEERS / "bench_hf_peer.py"), str(directory)]
    cmd += ["--prompt-ids", ",".join(map(str, ids)), "--new", str(new), "--batches", batches]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=harness.peer_env())
    if proc.returncode:
        print(f"# HF peer failed: {proc.stderr.strip()[-800:]}", file=sys.stderr)
        return []
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def _generation(directory: Path, ids: list[int], new: int, batch: int) -> dict:
    loaded = load_hf(directory)
    model = Decoder(loaded.cfg)
    prompt = jnp.asarray([ids] * batch, jnp.int32)
    lengths = jnp.full((batch,), len(ids), jnp.int32)
    greedy = SamplingParams(temperature=0.0)
    fn = jax.jit(
        lambda p, key: generate(
            key, decoder_lm(model), p, prompt, lengths, max_len=len(ids) + new,
            sampling_params=greedy,
        ).tokens
    )  # fmt: skip
    compile_s, best, out, _ = harness.timed(fn, loaded.params, jax.random.PRNGKey(0), repeats=3)
    return {"compile_s": compile_s, "seconds": best, "tokens": np.asarray(out)}


def _pipeline(tokens_file: Path | None, batches: int) -> tuple[float, int]:
    """Tokens/s of ``batches`` training batches of the grain pipeline (token file or corpus)."""
    from jaxlab.lm.data import ByteLMDataConfig, train_iterator

    source = None if tokens_file is None else str(tokens_file)
    cfg = ByteLMDataConfig(seq_len=128, batch_size=32, source=source)
    it = train_iterator(cfg, vocab_size=None)
    next(it)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    elapsed = time.perf_counter() - start
    return elapsed, batches * cfg.batch_size * (cfg.seq_len + 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixture", default="tiny_llama")
    ap.add_argument("--new", type=int, default=40)
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--pipeline-batches", type=int, default=200)
    args = ap.parse_args()
    directory = FIXTURES / args.fixture
    ids = np.load(directory / "reference.npz")["tokens"].tolist()
    start = time.perf_counter()
    load_hf(directory)
    harness.emit(what="hf_load", fixture=args.fixture, side="jaxlab",
                 seconds=time.perf_counter() - start)  # fmt: skip
    peer = {(r["what"], r.get("batch")): r for r in _peer(directory, ids, args.new, args.batches)}
    if ("load", None) in peer:
        harness.emit(what="hf_load", fixture=args.fixture, side="transformers",
                     seconds=peer[("load", None)]["seconds"])  # fmt: skip
    for batch in (int(b) for b in args.batches.split(",")):
        ours = _generation(directory, ids, args.new, batch)
        rate = batch * args.new / ours["seconds"]
        theirs = peer.get(("generate", batch), {})
        extra = {}
        if theirs:
            extra = {"peer_rate": theirs["tokens_per_s"], "ratio": rate / theirs["tokens_per_s"]}
            if "greedy" in theirs:
                generated = ours["tokens"][0, len(ids) : len(ids) + args.new].tolist()
                extra["greedy_equal"] = generated == theirs["greedy"]
        harness.emit_rate("hf_generate_greedy", {"fixture": args.fixture, "batch": batch,
                          "prompt": len(ids), "new": args.new}, ours["compile_s"],
                          ours["seconds"], rate, "tok/s", **extra)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        from jaxlab.lm import corpus_files
        from jaxlab.lm.data import load_corpus

        tok = load_tokenizer(directory)
        ids_all = corpus_files.tokenize_documents(iter(load_corpus()), tok)
        file = corpus_files.write_tokens(ids_all, Path(tmp) / "t.npy", vocab_size=tok.vocab_size)
        for name, source in (("token_file", file), ("shipped_corpus", None)):
            elapsed, count = _pipeline(source, args.pipeline_batches)
            harness.emit_rate("lm_pipeline", {"source": name, "batch": 32, "seq_len": 128}, 0.0,
                              elapsed, count / elapsed, "tok/s")  # fmt: skip


if __name__ == "__main__":
    main()
