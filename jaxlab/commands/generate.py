"""Text generation from a trained decoder run or a Hugging Face model directory: the KV-cached
model as a ``decoding.CausalLM``, and the ``jaxlab generate RECIPE --run-dir DIR --prompt TEXT``
and ``jaxlab generate --hf-dir DIR --prompt TEXT`` commands (the directory's own tokenizer).

A command, not a recipe: it joins two families (``lm`` models and ``decoding`` algorithms).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.commands import decode_methods
from jaxlab.core import json_files
from jaxlab.decoding.generate import generate
from jaxlab.decoding.interface import CausalLM
from jaxlab.decoding.sampling import SamplingParams
from jaxlab.lm.model import Decoder, DecoderConfig, init_cache
from jaxlab.lm.tokenizer import ByteTokenizer


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
    tokenizer=None,
) -> list[str]:
    """Samples a continuation of each prompt, stopping at EOS.

    ``tokenizer``: any object with the byte tokenizer's interface (``encode``, ``decode``,
    ``bos_id``, ``eos_id``, ``pad_id``), e.g. :class:`jaxlab.lm.hub.HFTokenizer`; default the byte
    tokenizer. BOS is prepended when the tokenizer has one."""
    tok = ByteTokenizer() if tokenizer is None else tokenizer
    ids = [tok.encode(p, add_bos=tok.bos_id >= 0, add_eos=False) for p in prompts]
    width = max(len(i) for i in ids)
    max_len = width + max_new_tokens
    if max_len + 1 > model.cfg.max_len:
        raise ValueError(
            f"prompt ({width} tokens) + max_new_tokens ({max_new_tokens}) + 1 exceeds the model's "
            f"max_len={model.cfg.max_len}"
        )
    prompt = np.full((len(ids), width), tok.pad_id, np.int32)
    for r, row in enumerate(ids):
        prompt[r, : len(row)] = row
    lengths = np.array([len(i) for i in ids], np.int32)
    lm = decoder_lm(model)
    stop = jnp.array([tok.eos_id if tok.eos_id >= 0 else -1])
    run = jax.jit(
        lambda k, p, pr, ln: generate(
            k,
            lm,
            p,
            pr,
            ln,
            max_len=max_len,
            sampling_params=sampling_params,
            stop_tokens=stop,
            pad_id=tok.pad_id,
        )
    )
    out = run(key, params, jnp.asarray(prompt), jnp.asarray(lengths))
    texts = []
    for r in range(len(ids)):
        # rows with shorter prompts run on to the batch's max_len: keep max_new_tokens each
        end = min(int(out.lengths[r]), int(lengths[r]) + max_new_tokens)
        row = np.asarray(out.tokens[r, lengths[r] : end])
        texts.append(tok.decode(row, stop_at_eos=True))
    return texts


def build_parser() -> argparse.ArgumentParser:
    """The ``jaxlab generate`` parser."""
    ap = argparse.ArgumentParser(
        prog="jaxlab generate",
        description="Sample text from a trained decoder run or a Hugging Face model directory.",
    )
    ap.add_argument("recipe", nargs="?", help="the run's recipe (not with --hf-dir)")
    ap.add_argument("--run-dir", default=None, help="a trained run of RECIPE")
    ap.add_argument(
        "--hf-dir", default=None, help="a Hugging Face model directory (config.json, safetensors)"
    )
    ap.add_argument("--draft-hf-dir", default=None, help="drafter model directory (--hf-dir)")
    ap.add_argument("--prompt", action="append", required=True, help="repeat for a batch")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--method", choices=decode_methods.METHODS, default="sample")
    ap.add_argument("--draft-run-dir", default=None, help="drafter run (speculative, cascade)")
    ap.add_argument("--gamma", type=int, default=4, help="draft tokens per verification")
    ap.add_argument(
        "--rule", choices=sorted(decode_methods.RULES), default="chow", help="cascade deferral rule"
    )
    ap.add_argument("--alpha", type=float, default=0.1, help="the deferral rule's parameter")
    ap.add_argument("--regex", default=None, help="smc: the continuation must match PATTERN")
    ap.add_argument("--grammar", default=None, help="smc: a JSON grammar file (start, rules)")
    ap.add_argument("--particles", type=int, default=16, help="smc particles")
    ap.add_argument("--max-stack", type=int, default=16, help="smc grammar stack bound")
    return ap


def check_args(args: argparse.Namespace) -> None:
    """The sampling and method flags, checked before any model is read or compiled.

    Raises:
      UserError: naming the flag and its value (temperature >= 0, 0 < top-p <= 1, top-k >= 0,
        max-new-tokens, gamma, particles and max-stack >= 1, a finite alpha).
    """
    import math

    from jaxlab.core.errors import UserError

    checks = [
        ("--temperature", args.temperature, math.isfinite(args.temperature) and args.temperature >= 0,
         "a finite value >= 0 (0 is greedy)"),
        ("--top-p", args.top_p, 0 < args.top_p <= 1, "a value in (0, 1] (1 keeps every token)"),
        ("--top-k", args.top_k, args.top_k >= 0, "an integer >= 0 (0 keeps every token)"),
        ("--max-new-tokens", args.max_new_tokens, args.max_new_tokens >= 1, "an integer >= 1"),
        ("--gamma", args.gamma, args.gamma >= 1, "an integer >= 1 (draft tokens per check)"),
        ("--alpha", args.alpha, math.isfinite(args.alpha), "a finite value"),
        ("--particles", args.particles, args.particles >= 1, "an integer >= 1"),
        ("--max-stack", args.max_stack, args.max_stack >= 1, "an integer >= 1"),
    ]  # fmt: skip
    for flag, value, ok, expected in checks:
        if not ok:
            raise UserError(f"{flag} {value}: expected {expected}", "jaxlab generate --help")


def main(argv: Sequence[str]) -> int:
    """``jaxlab generate RECIPE --run-dir DIR --prompt TEXT [--max-new-tokens N] ...``."""
    from jaxlab.core import recipe as recipe_lib
    from jaxlab.core.errors import UserError
    from jaxlab.core.run import open_run, read_run

    args = build_parser().parse_args(list(argv))
    check_args(args)
    if (args.run_dir is None) == (args.hf_dir is None):
        raise UserError(
            "give exactly one model: RECIPE --run-dir DIR, or --hf-dir DIR",
            "jaxlab generate lm-tiny --run-dir runs/x --prompt TEXT",
        )
    if args.hf_dir is not None:
        return _from_hf_dir(args)
    if args.recipe is None:
        raise UserError("--run-dir needs the run's RECIPE", "jaxlab generate lm-tiny --run-dir DIR")
    r = recipe_lib.get(args.recipe)
    run_dir = Path(args.run_dir)
    if not (run_dir / "config.yaml").exists():
        raise UserError(
            f"no run in {run_dir} (missing config.yaml)",
            f"train first: jaxlab train {r.name} --run-dir {run_dir}",
        )
    if not isinstance(getattr(r.config_cls(), "model", None), DecoderConfig):
        raise UserError(f"recipe {r.name} is not a decoder language model")
    _, cfg = read_run(run_dir, r)  # the prompt is checked before any state is restored
    tok = ByteTokenizer()
    width = max(len(tok.encode(p, add_bos=True, add_eos=False)) for p in args.prompt)
    room = cfg.model.max_len - 1 - width  # tokens left after the prompt (and one spare slot)
    if room < 1:
        raise UserError(
            f"--prompt is {width} tokens long (with BOS); the model's context is "
            f"model.max_len={cfg.model.max_len}, so at most {cfg.model.max_len - 2} prompt tokens "
            "leave room for one new token",
            f"shorten the prompt to at most {cfg.model.max_len - 3} bytes",
        )
    run = open_run(run_dir, recipe=r)
    state = run.state
    model = Decoder(cfg.model)
    sp = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    key = jax.random.PRNGKey(args.seed)
    if args.method != "sample":
        return _other_method(args, r, model, state.params, cfg, sp, key)
    max_new = min(args.max_new_tokens, room)
    texts = generate_text(
        jax.random.PRNGKey(args.seed),
        model,
        state.params,
        args.prompt,
        max_new_tokens=max_new,
        sampling_params=sp,
    )
    for p, t in zip(args.prompt, texts, strict=True):
        sys.stdout.write(f"{p}{t}\n")
    return 0


def _load_hf(directory: str):
    """``(model, params, tokenizer)`` of a Hugging Face directory, errors as :class:`UserError`."""
    from jaxlab.core.errors import UserError
    from jaxlab.lm.hub import HubError, load_hf, load_tokenizer

    try:
        loaded = load_hf(directory)
        tok = load_tokenizer(directory, model_vocab_size=loaded.cfg.vocab_size)
    except HubError as e:
        raise UserError(
            str(e), "a model directory holds config.json, model.safetensors and tokenizer.json"
        ) from None
    return Decoder(loaded.cfg), loaded.params, tok


def _from_hf_dir(args) -> int:
    """``jaxlab generate --hf-dir DIR --prompt TEXT [--method speculative|cascade]``."""

    from jaxlab.core.errors import UserError

    model, params, tok = _load_hf(args.hf_dir)
    width = max(len(tok.encode(p, add_bos=tok.bos_id >= 0)) for p in args.prompt)
    room = model.cfg.max_len - 1 - width
    if room < 1:
        raise UserError(
            f"--prompt is {width} tokens long; the model's context is "
            f"max_position_embeddings={model.cfg.max_len}"
        )
    sp = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    key = jax.random.PRNGKey(args.seed)
    if args.method == "sample":
        texts = generate_text(
            key,
            model,
            params,
            args.prompt,
            max_new_tokens=min(args.max_new_tokens, room),
            sampling_params=sp,
            tokenizer=tok,
        )
        for p, t in zip(args.prompt, texts, strict=True):
            sys.stdout.write(f"{p}{t}\n")
        return 0
    if args.method == "smc":
        return _smc(args, key, model, params, max_tokens=min(args.max_new_tokens, room), tok=tok)
    if not args.draft_hf_dir:
        raise UserError(f"--method {args.method} needs --draft-hf-dir (the drafter's directory)")
    draft_model, draft_params, _ = _load_hf(args.draft_hf_dir)
    if draft_model.cfg.vocab_size != model.cfg.vocab_size:
        raise UserError(
            f"--draft-hf-dir {args.draft_hf_dir}: vocabulary {draft_model.cfg.vocab_size} "
            f"differs from --hf-dir's {model.cfg.vocab_size}"
        )
    room = min(model.cfg.max_len, draft_model.cfg.max_len) - width - args.gamma - 2
    return _speculative(args, key, model, params, draft_model, draft_params, room, sp, tok)


def _other_method(args, recipe, model, params, cfg, sp, key) -> int:
    """``--method speculative|cascade|smc`` (:mod:`jaxlab.commands.decode_methods`)."""
    from jaxlab.core.errors import UserError
    from jaxlab.core.run import open_run

    longest = max(len(p) for p in args.prompt) + 1
    if args.method == "smc":
        max_tokens = min(args.max_new_tokens, cfg.model.max_len - longest - 2)
        return _smc(args, key, model, params, max_tokens=max_tokens)
    if not args.draft_run_dir:
        raise UserError(f"--method {args.method} needs --draft-run-dir (the drafter's run)")
    draft_run = open_run(args.draft_run_dir)
    draft_model = Decoder(draft_run.cfg.model)
    if draft_model.cfg.vocab_size != model.cfg.vocab_size:
        raise UserError(
            f"--draft-run-dir {args.draft_run_dir}: vocabulary {draft_model.cfg.vocab_size} "
            f"differs from the run's {model.cfg.vocab_size}"
        )
    room = min(cfg.model.max_len, draft_model.cfg.max_len) - longest - args.gamma - 2
    draft_params = draft_run.state.params
    return _speculative(args, key, model, params, draft_model, draft_params, room, sp)


def _smc(args, key, model, params, *, max_tokens: int, tok=None) -> int:
    """``--method smc``: the constrained completions of the one prompt with their posterior
    mass, then the statistics as one JSON line (``tok``: the directory's tokenizer, default the
    byte tokenizer)."""
    from jaxlab.core.errors import UserError

    if len(args.prompt) != 1:
        raise UserError("--method smc takes one --prompt")
    grammar = decode_methods.load_grammar(args.grammar) if args.grammar else None
    posterior, stats = decode_methods.constrained_smc(
        key,
        decoder_lm(model),
        params,
        args.prompt[0],
        regex=args.regex,
        grammar=grammar,
        max_stack=args.max_stack,
        particles=args.particles,
        max_tokens=max(1, max_tokens),
        tokenizer=tok,
    )
    for text, w in posterior:
        sys.stdout.write(f"{w:.3f}\t{args.prompt[0]}{text}\n")
    print(_stats_line("smc", stats))
    return 0


def _stats_line(method: str, stats: dict) -> str:
    """The method's statistics as one valid JSON line: a non-finite one (e.g. the log marginal
    likelihood when no particle meets the constraint) is ``null``, with the reason beside it."""
    row = json_files.null_if_non_finite(
        {"method": method, **stats}, "non-finite (JSON has no NaN or infinity)"
    )
    return json_files.dumps(row, where=f"the {method} statistics")


def _speculative(args, key, model, params, draft_model, draft_params, room, sp, tok=None) -> int:
    """``--method speculative|cascade`` with a target and a drafter: prints each prompt's text,
    then the method's statistics as one JSON line."""
    texts, stats = decode_methods.speculative(
        key,
        decoder_lm(model),
        params,
        decoder_lm(draft_model),
        draft_params,
        args.prompt,
        max_new_tokens=max(1, min(args.max_new_tokens, room)),
        sampling_params=sp,
        gamma=args.gamma,
        rule="speed" if args.method == "speculative" else args.rule,
        alpha=args.alpha,
        tokenizer=tok,
    )
    for p, t in zip(args.prompt, texts, strict=True):
        sys.stdout.write(f"{p}{t}\n")
    print(_stats_line(args.method, stats))
    return 0
