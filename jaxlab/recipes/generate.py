"""Text generation from a trained decoder run: the KV-cached model as a ``decoding.CausalLM``,
and the ``jaxlab generate RECIPE --run-dir DIR --prompt TEXT`` command.

Lives with the recipes because it joins two families (``lm`` models and ``decoding`` algorithms).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.decoding.generate import generate
from jaxlab.decoding.interface import CausalLM
from jaxlab.decoding.sampling import SamplingParams
from jaxlab.lm.model import Decoder, init_cache
from jaxlab.lm.tokenizer import EOS_ID, PAD_ID, ByteTokenizer


def decoder_lm(model: Decoder) -> CausalLM:
    """``model`` with its per-layer KV cache as an injected :class:`CausalLM`.

    ``apply(params, cache, tokens[B, C], start[B])`` rewinds each row's cache to ``start`` (slots
    at or beyond the index are ignored by attention) and appends the chunk, so rolled-back
    speculative tokens cost nothing.
    """

    def init_state(params, batch_size: int, capacity: int):
        del params
        return init_cache(model.cfg, batch_size, capacity)

    def apply(params, cache, tokens, start):
        cache = tuple(c.replace(index=start.astype(jnp.int32)) for c in cache)
        return model.apply(params, tokens, cache, method=Decoder.decode)

    return CausalLM(apply=apply, init_state=init_state, vocab_size=model.cfg.vocab_size)


def generate_text(
    key: jax.Array,
    model: Decoder,
    params,
    prompts: Sequence[str],
    *,
    max_new_tokens: int,
    sampling_params: SamplingParams | None = None,
) -> list[str]:
    """Samples a continuation of each prompt (byte tokenizer, stops at EOS)."""
    tok = ByteTokenizer()
    ids = [tok.encode(p, add_bos=True, add_eos=False) for p in prompts]
    width = max(len(i) for i in ids)
    max_len = width + max_new_tokens
    if max_len + 1 > model.cfg.max_len:
        raise ValueError(
            f"prompt ({width} tokens) + max_new_tokens ({max_new_tokens}) + 1 exceeds the model's "
            f"max_len={model.cfg.max_len}"
        )
    prompt = np.full((len(ids), width), PAD_ID, np.int32)
    for r, row in enumerate(ids):
        prompt[r, : len(row)] = row
    lengths = np.array([len(i) for i in ids], np.int32)
    lm = decoder_lm(model)
    run = jax.jit(
        lambda k, p, pr, ln: generate(
            k,
            lm,
            p,
            pr,
            ln,
            max_len=max_len,
            sampling_params=sampling_params,
            stop_tokens=jnp.array([EOS_ID]),
            pad_id=PAD_ID,
        )
    )
    out = run(key, params, jnp.asarray(prompt), jnp.asarray(lengths))
    texts = []
    for r in range(len(ids)):
        row = np.asarray(out.tokens[r, lengths[r] : int(out.lengths[r])])
        texts.append(tok.decode(row, stop_at_eos=True))
    return texts


def main(argv: Sequence[str]) -> int:
    """``jaxlab generate RECIPE --run-dir DIR --prompt TEXT [--max-new-tokens N] ...``."""
    from jaxlab.cli import UserError
    from jaxlab.core import config as config_lib
    from jaxlab.core import loop
    from jaxlab.core import recipe as recipe_lib
    from jaxlab.core.checkpoint import Checkpointer

    ap = argparse.ArgumentParser(
        prog="jaxlab generate", description="Sample text from a trained decoder run."
    )
    ap.add_argument("recipe")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--prompt", action="append", required=True, help="repeat for a batch")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(list(argv))
    r = recipe_lib.get(args.recipe)
    run_dir = Path(args.run_dir)
    if not (run_dir / "config.yaml").exists():
        raise UserError(
            f"no run in {run_dir} (missing config.yaml)",
            f"train first: jaxlab train {r.name} --run-dir {run_dir}",
        )
    cfg = config_lib.from_dict(r.config_cls, config_lib.load_yaml(run_dir / "config.yaml"))
    if not hasattr(cfg, "model") or not hasattr(r.build(cfg), "init"):
        raise UserError(f"recipe {r.name} is not a decoder language model")
    task = r.build(cfg)
    ck = Checkpointer(run_dir / "checkpoints", cfg)
    try:
        state, step = ck.restore(loop.abstract_state(task, jax.random.PRNGKey(cfg.seed)))
    finally:
        ck.close()
    model = Decoder(cfg.model)
    sp = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    max_new = min(args.max_new_tokens, cfg.model.max_len - 2 - max(len(p) for p in args.prompt))
    texts = generate_text(
        jax.random.PRNGKey(args.seed),
        model,
        state.params,
        args.prompt,
        max_new_tokens=max(1, max_new),
        sampling_params=sp,
    )
    for p, t in zip(args.prompt, texts, strict=True):
        sys.stdout.write(f"{p}{t}\n")
    return 0


def load_decoder_run(recipe_name: str, run_dir: str | Path):
    """Restores a trained decoder run: ``(Decoder, params, cfg)`` (used by commands that inject
    the model into another family, e.g. ``jaxlab workflows search --executor lm``)."""
    from jaxlab.cli import UserError
    from jaxlab.core import config as config_lib
    from jaxlab.core import loop
    from jaxlab.core import recipe as recipe_lib
    from jaxlab.core.checkpoint import Checkpointer

    r = recipe_lib.get(recipe_name)
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").exists():
        raise UserError(
            f"no run in {run_dir} (missing config.yaml)",
            f"train first: jaxlab train {r.name} --run-dir {run_dir}",
        )
    cfg = config_lib.from_dict(r.config_cls, config_lib.load_yaml(run_dir / "config.yaml"))
    if not hasattr(cfg, "model"):
        raise UserError(f"recipe {r.name} is not a decoder language model")
    task = r.build(cfg)
    ck = Checkpointer(run_dir / "checkpoints", cfg)
    try:
        state, _ = ck.restore(loop.abstract_state(task, jax.random.PRNGKey(cfg.seed)))
    finally:
        ck.close()
    return Decoder(cfg.model), state.params, cfg


def byte_text_lm(model: Decoder, params):
    """A byte-level decoder as the ``workflows`` executor's text model (token strings: bytes,
    specials mapped outside the text alphabet)."""
    from jaxlab.decoding.arithmetic import byte_token_strings
    from jaxlab.lm.tokenizer import BOS_ID
    from jaxlab.workflows.lm_executor import TextLM

    return TextLM(
        decoder_lm(model),
        params,
        byte_token_strings(model.cfg.vocab_size),
        bos_id=BOS_ID,
        pad_id=EOS_ID,
    )
