"""``jaxlab workflows ...``: the AFlow search command with a trained decoder run injected as the
language-model executor's model, and a jaxlab run or a Hugging Face directory as the optimizer's
model (:func:`model_generator`).

A command, not part of the family: it joins ``lm`` (the decoder and its run) with ``workflows``
(whose modules only see a ``decoding.CausalLM``). The search itself is
:func:`jaxlab.workflows.cli.main`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.commands.generate import decoder_lm
from jaxlab.decoding.arithmetic import byte_token_strings
from jaxlab.decoding.generate import generate
from jaxlab.decoding.sampling import SamplingParams
from jaxlab.lm.model import Decoder, DecoderConfig
from jaxlab.lm.tokenizer import BOS_ID, EOS_ID, ByteTokenizer
from jaxlab.workflows import cli as workflows_cli
from jaxlab.workflows.lm_executor import TextLM, decode_batch
from jaxlab.workflows.program_grammar import reply_potential


def byte_text_lm(model: Decoder, params) -> TextLM:
    """A byte-level decoder as the executor's text model: token strings are the bytes (specials
    outside the text alphabet), BOS before each prompt, end-of-document padding on the left."""
    return TextLM(
        decoder_lm(model),
        params,
        byte_token_strings(model.cfg.vocab_size),
        bos_id=BOS_ID,
        pad_id=EOS_ID,
    )


def load_text_lm(recipe_name: str, run_dir: str | Path) -> TextLM:
    """Opens a trained decoder run (e.g. ``lm-tiny``) on one device as a :class:`TextLM`."""
    return byte_text_lm(*open_decoder_run(recipe_name, run_dir))


def open_decoder_run(recipe_name: str, run_dir: str | Path) -> tuple[Decoder, object]:
    """``(model, params)`` of a trained decoder run, errors as ``UserError``."""
    from jaxlab.core import recipe as recipe_lib
    from jaxlab.core.errors import UserError
    from jaxlab.core.run import open_run

    r = recipe_lib.get(recipe_name)
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").exists():
        raise UserError(
            f"--lm-run-dir {run_dir}: no run there (missing config.yaml)",
            f"train first, e.g. python -m benchmarks.bench_workflows --parts lm --train-lm {run_dir}",
        )
    if not isinstance(getattr(r.config_cls(), "model", None), DecoderConfig):
        raise UserError(f"--lm-recipe {r.name}: not a decoder language model")
    run = open_run(run_dir, recipe=r)
    return Decoder(run.cfg.model), run.state.params


def batch_generator(
    model: Decoder,
    params,
    tokenizer=None,
    *,
    max_new_tokens: int = 256,
    temperature: float = 1.0,
    batch_bucket: int = 8,
):
    """``(prompts, seed) -> (texts, usage)`` on a decoder: one batched sampling call.

    Prompts are cut to a fixed width (``max_len - max_new_tokens - 1`` tokens; a longer prompt
    keeps its end, where the templates put the output instructions) and the batch is padded to
    a multiple of ``batch_bucket``, so a search compiles a handful of programs. ``usage``
    counts the prompt tokens read and the tokens generated.
    """
    tok = ByteTokenizer() if tokenizer is None else tokenizer
    max_new = min(max_new_tokens, model.cfg.max_len // 2)
    width = model.cfg.max_len - max_new - 1
    lm = decoder_lm(model)
    stop = jnp.array([tok.eos_id if tok.eos_id >= 0 else -1])
    run = jax.jit(
        lambda k, p, pr, ln: generate(
            k,
            lm,
            p,
            pr,
            ln,
            max_len=width + max_new,
            sampling_params=SamplingParams(temperature=temperature),
            stop_tokens=stop,
            pad_id=tok.pad_id,
        )
    )

    def generate_batch(prompts: list[str], seed: int) -> tuple[list[str], dict]:
        ids = [tok.encode(p, add_bos=tok.bos_id >= 0, add_eos=False)[-width:] for p in prompts]
        rows = -(-len(ids) // batch_bucket) * batch_bucket
        batch = np.full((rows, width), tok.pad_id, np.int32)
        lengths = np.ones(rows, np.int32)
        for r, row in enumerate(ids):
            batch[r, : len(row)] = row
            lengths[r] = len(row)
        out = run(jax.random.key(seed), params, jnp.asarray(batch), jnp.asarray(lengths))
        texts, generated = [], 0
        for r, row in enumerate(ids):
            end = min(int(out.lengths[r]), len(row) + max_new)
            new = np.asarray(out.tokens[r, len(row) : end])
            generated += int(new.size)
            texts.append(tok.decode(new, stop_at_eos=True))
        prompt_tokens = sum(len(r) for r in ids)
        return texts, {"prompt_tokens": prompt_tokens, "generated_tokens": generated}

    return generate_batch


def model_generator(model: Decoder, params, tokenizer=None, *, max_new_tokens: int = 256):
    """The optimizer's generator ``(prompt, seed) -> (text, usage)``: :func:`batch_generator`
    on one prompt."""
    batch = batch_generator(model, params, tokenizer, max_new_tokens=max_new_tokens, batch_bucket=1)

    def generate_reply(prompt: str, seed: int) -> tuple[str, dict]:
        texts, usage = batch([prompt], seed)
        return texts[0], usage

    return generate_reply


def token_strings(tok, vocab_size: int) -> tuple[str, ...]:
    """The text of each id of ``tok`` (byte or Hugging Face tokenizer); specials, ids that
    decode to nothing and ids past the tokenizer get a private-use character, outside every
    grammar's alphabet."""
    if isinstance(tok, ByteTokenizer):
        return byte_token_strings(vocab_size)
    specials = {tok.bos_id, tok.eos_id, tok.pad_id}
    size = tok.tokenizer.get_vocab_size(with_added_tokens=True)
    out = []
    for i in range(vocab_size):
        text = tok.decode([i]) if i < size and i not in specials else ""
        out.append(text or chr(0xE000 + i))
    return tuple(out)


def constrained_generator(
    model: Decoder,
    params,
    tokenizer=None,
    *,
    max_new_tokens: int = 320,
    num_particles: int = 4,
    max_text: int = 40,
):
    """The optimizer's generator ``(prompt, seed) -> (reply, usage)`` whose every reply parses:
    SMC (:func:`jaxlab.workflows.lm_executor.decode_batch`, the locally constrained proposal
    with its weights) under the reply grammar of :mod:`jaxlab.workflows.program_grammar`,
    bounded to ``max_new_tokens`` tokens, the model's end-of-sequence token ending the reply.
    The highest-weight particle is the reply. Prompts are left-padded to one width (one
    compiled program).

    Raises:
        ValueError: when the model has no end-of-sequence token, or no reply fits in
            ``max_new_tokens`` tokens.
    """
    tok = ByteTokenizer() if tokenizer is None else tokenizer
    if tok.eos_id < 0:
        raise ValueError("constrained optimizer decoding needs a model with an end token")
    max_new = min(max_new_tokens, model.cfg.max_len // 2)
    width = model.cfg.max_len - max_new - 1
    strings = token_strings(tok, model.cfg.vocab_size)
    condition = reply_potential(
        tuple(t for i, t in enumerate(strings) if i != tok.eos_id),
        max_tokens=max_new,
        max_text=max_text,
    )
    lm = decoder_lm(model)
    pad = tok.pad_id if tok.pad_id >= 0 else tok.eos_id

    def generate_reply(prompt: str, seed: int) -> tuple[str, dict]:
        ids = tok.encode(prompt, add_bos=tok.bos_id >= 0, add_eos=False)[-width:]
        row = np.full((1, width), pad, np.int32)
        row[0, width - len(ids) :] = ids
        tokens, lengths, _ = decode_batch(
            jax.random.key(seed),
            lm,
            params,
            jnp.asarray(row),
            condition,
            num_particles=num_particles,
            max_tokens=max_new,
            proposal="constrained",
            terminator_id=tok.eos_id,
        )
        n = int(lengths[0])
        text = tok.decode(np.asarray(tokens[0, :n]))
        return text, {"prompt_tokens": len(ids), "generated_tokens": n}

    return generate_reply


def load_generator(
    *,
    hf_dir=None,
    run_dir=None,
    recipe="lm-tiny",
    max_new_tokens=256,
    batch=False,
    constrained=False,
):
    """A generator on a Hugging Face directory (its own tokenizer) or a trained decoder run
    (byte tokenizer): the optimizer's ``(prompt, seed)`` (with ``constrained``, replies that
    parse by construction: :func:`constrained_generator`), or with ``batch`` the text
    executor's ``(prompts, seed)``."""
    if hf_dir is not None:
        from jaxlab.commands.generate import _load_hf

        model, params, tok = _load_hf(hf_dir)
    else:
        (model, params), tok = open_decoder_run(recipe, run_dir), None
    if constrained:
        return constrained_generator(model, params, tok, max_new_tokens=max_new_tokens)
    make = batch_generator if batch else model_generator
    return make(model, params, tok, max_new_tokens=max_new_tokens)


def build_parser() -> argparse.ArgumentParser:
    """The ``jaxlab workflows`` parser (:func:`jaxlab.workflows.cli.build_parser`)."""
    return workflows_cli.build_parser()


def main(argv: Sequence[str]) -> int:
    """``jaxlab workflows search ...`` (see :mod:`jaxlab.workflows.cli`)."""
    return workflows_cli.main(argv, load_lm=load_text_lm, load_generator=load_generator)
