"""The decoding methods of ``jaxlab generate`` on the project's byte-level decoder LMs.

* ``sample``: KV-cached ancestral sampling (:func:`jaxlab.decoding.generate.generate`).
* ``speculative`` / ``cascade``: a drafter run (``--draft-run-dir``) proposes ``gamma`` tokens and
  the run's model verifies them (:func:`jaxlab.decoding.speculative.speculative_decode`); with
  ``cascade`` the deferral rule (``chow``, ``diff``, ``opt``, ``token-v1..3``) and its ``alpha``
  make it a speculative cascade, with ``speculative`` the rule is ``speed`` (exact: the output is
  distributed as the large model's).
* ``smc``: sequential Monte Carlo for ``g ∝ p_LM · 1[x matches the constraint]`` (a regex or a
  grammar file over the continuation's bytes), :func:`jaxlab.decoding.smc.smc` with the
  constrained proposal.

Each returns the texts and the method's statistics (acceptance rate, large-model calls per token,
effective sample size, log marginal likelihood).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.errors import UserError
from jaxlab.decoding import smc as smc_lib
from jaxlab.decoding.arithmetic import byte_token_strings
from jaxlab.decoding.grammar import Grammar
from jaxlab.decoding.interface import CausalLM, with_eos_last
from jaxlab.decoding.potentials import grammar_potential, regex_potential
from jaxlab.decoding.sampling import SamplingParams
from jaxlab.decoding.speculative import SpeculativeConfig, cascade_rule, speculative_decode
from jaxlab.lm.tokenizer import EOS_ID, ByteTokenizer

METHODS: tuple[str, ...] = ("sample", "speculative", "cascade", "smc")
#: command-line rule names -> jaxlab.decoding.speculative.RULE_NAMES
RULES: dict[str, str] = {
    "chow": "chow",
    "diff": "diff",
    "opt": "opt",
    "token-v1": "token_v1",
    "token-v2": "token_v2",
    "token-v3": "token_v3",
}


def encode_prompts(prompts: Sequence[str], tokenizer=None) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ``[B, P]`` prompt ids (BOS first when the tokenizer has one) and their lengths
    (``tokenizer``: the byte tokenizer's interface; default the byte tokenizer)."""
    tok = ByteTokenizer() if tokenizer is None else tokenizer
    ids = [tok.encode(p, add_bos=tok.bos_id >= 0, add_eos=False) for p in prompts]
    width = max(len(i) for i in ids)
    prompt = np.full((len(ids), width), tok.pad_id, np.int32)
    for r, row in enumerate(ids):
        prompt[r, : len(row)] = row
    return prompt, np.array([len(i) for i in ids], np.int32)


def speculative(
    key: jax.Array,
    target: CausalLM,
    target_params: Any,
    draft: CausalLM,
    draft_params: Any,
    prompts: Sequence[str],
    *,
    max_new_tokens: int,
    sampling_params: SamplingParams,
    gamma: int = 4,
    rule: str = "speed",
    alpha: float = 0.0,
    tokenizer=None,
) -> tuple[list[str], dict[str, float]]:
    """Speculative decoding (``rule="speed"``) or a speculative cascade with ``rule``
    (``tokenizer``: the byte tokenizer's interface; default the byte tokenizer)."""
    tok = ByteTokenizer() if tokenizer is None else tokenizer
    prompt, lengths = encode_prompts(prompts, tok)
    config = SpeculativeConfig(
        gamma=gamma, max_len=prompt.shape[1] + max_new_tokens, pad_id=tok.pad_id
    )
    stop = jnp.array([tok.eos_id if tok.eos_id >= 0 else -1])
    r = cascade_rule(RULES.get(rule, rule), alpha)
    out = jax.jit(
        lambda k, tp, dp, pr, ln, r: speculative_decode(
            k,
            draft,
            target,
            dp,
            tp,
            pr,
            ln,
            config=config,
            rule=r,
            sampling_params=sampling_params,
            stop_tokens=stop,
        )
    )(key, target_params, draft_params, jnp.asarray(prompt), jnp.asarray(lengths), r)
    texts = [
        tok.decode(np.asarray(out.tokens[b, lengths[b] : int(out.lengths[b])]), stop_at_eos=True)
        for b in range(len(prompts))
    ]
    s = jax.device_get(out.stats)
    generated = max(int(np.sum(s.generated)), 1)
    stats = {
        "acceptance_rate": float(np.sum(s.accepted) / max(int(np.sum(s.verified)), 1)),
        "large_model_calls_per_token": float(np.sum(s.target_calls) / generated),
        "draft_calls_per_token": float(np.sum(s.draft_calls) / generated),
        "generated_tokens": generated,
    }
    return texts, stats


def load_grammar(path: str | Path) -> Grammar:
    """A grammar file: JSON ``{"start": "S", "rules": {"S": [["a", "S"], []], ...}}``."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(
            f"--grammar {path}: not a readable JSON grammar ({e})",
            'expected {"start": "S", "rules": {"S": [["(", "S", ")"], []]}}',
        ) from None
    if not isinstance(raw, dict) or "start" not in raw or not isinstance(raw.get("rules"), dict):
        raise UserError(f"--grammar {path}: expected the keys 'start' and 'rules' (a mapping)")
    try:
        return Grammar.from_dict(raw["rules"], start=raw["start"])
    except (TypeError, ValueError) as e:
        raise UserError(f"--grammar {path}: {e}") from None


def potential_strings(tokenizer, vocab_size: int) -> tuple[list[str], list[int]]:
    """What the grammar and regex potentials read for each id, one character per byte (byte
    ``b`` is ``chr(b)``), and the ids they refuse. The byte tokenizer: its bytes (its specials a
    character outside every pattern's text); a Hugging Face tokenizer: each token's bytes
    (:func:`jaxlab.lm.hub.tokenizer.token_bytes`), its special tokens refused."""
    if tokenizer is None or isinstance(tokenizer, ByteTokenizer):
        return list(byte_token_strings(vocab_size)), []
    from jaxlab.lm.hub import HubError
    from jaxlab.lm.hub.tokenizer import token_bytes

    try:
        table = token_bytes(tokenizer)
    except HubError as e:
        raise UserError(f"--method smc: {e}") from None
    table = table + (None,) * (vocab_size - len(table))
    strings = ["" if b is None else b.decode("latin-1") for b in table]
    return strings, [i for i, b in enumerate(table) if b is None]


def constrained_smc(
    key: jax.Array,
    lm: CausalLM,
    params: Any,
    prompt: str,
    *,
    regex: str | None = None,
    grammar: Grammar | None = None,
    max_stack: int = 16,
    particles: int = 16,
    max_tokens: int = 32,
    ess_threshold: float = 0.5,
    tokenizer=None,
) -> tuple[list[tuple[str, float]], dict[str, float]]:
    """SMC for the LM conditioned on the continuation matching ``regex`` (or ``grammar``).

    The constraint reads the continuation's bytes (:func:`potential_strings`); ``tokenizer``:
    the byte tokenizer (default) or a byte-level :class:`jaxlab.lm.hub.HFTokenizer`.
    Returns the distinct completions with their posterior mass (highest first) and the
    statistics (final and minimum ESS, log marginal likelihood = log P(constraint) estimate)."""
    if (regex is None) == (grammar is None):
        raise UserError("smc needs exactly one constraint: --regex PATTERN or --grammar FILE")
    tok = ByteTokenizer() if tokenizer is None else tokenizer
    if tok.eos_id < 0:
        raise UserError("--method smc: the tokenizer has no EOS token to end a completion with")
    strings, refused = potential_strings(tokenizer, lm.vocab_size)
    eos = tok.eos_id if tokenizer is not None else EOS_ID
    renumbered = with_eos_last(lm, eos)
    perm = [i for i in range(lm.vocab_size) if i != eos]
    inverse = {i: j for j, i in enumerate([*perm, eos])}
    pot_strings = [strings[i] for i in perm]
    try:
        if regex is not None:
            condition = regex_potential(regex, pot_strings)
        else:
            condition = grammar_potential(grammar, pot_strings, max_stack=max_stack)
    except ValueError as e:
        what = f"--regex {regex!r}" if regex is not None else "--grammar"
        raise UserError(f"{what}: {e}") from None
    if refused:
        condition = condition.refusing([inverse[i] for i in refused if i != eos])
    ids = tok.encode(prompt, add_bos=tok.bos_id >= 0, add_eos=False)
    renumbered_prompt = jnp.asarray([inverse[int(t)] for t in ids], jnp.int32)
    config = smc_lib.SMCConfig(num_particles=particles, max_tokens=max_tokens, pad_id=0)
    result = jax.jit(
        lambda k, p, c: smc_lib.smc(
            k,
            renumbered,
            p,
            renumbered_prompt,
            config=config,
            condition=c,
            ess_threshold=ess_threshold,
        )
    )(key, params, condition)
    post = smc_lib.posterior_over_sequences(result)
    merged: dict[str, float] = {}
    for seq, w in sorted(post.items(), key=lambda sw: -sw[1]):
        text = tok.decode(np.asarray([perm[t] for t in seq], np.int32))
        merged[text] = merged.get(text, 0.0) + float(w)
    ess = np.asarray(result.ess)
    stats = {
        "log_marginal_likelihood": float(result.log_ml),
        "ess_final": float(ess[-1]),
        "ess_min": float(np.min(ess)),
        "resampling_steps": int(np.sum(np.asarray(result.resampled))),
        "particles": particles,
    }
    return sorted(merged.items(), key=lambda tw: -tw[1]), stats
