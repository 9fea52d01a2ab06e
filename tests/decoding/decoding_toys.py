"""Shared toy problems for the decoding tests: tabulated LMs, exact enumeration, chi-square."""

from __future__ import annotations

import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from jaxlab.decoding import potentials, tabulated

# SMC toy: 6 tokens + EOS (id 6), sums of positive numbers, at most 5 tokens.
TOKENS = ("1", "2", "3", "+", "12", "+1")
EOS = len(TOKENS)
PATTERN = r"[123]+(\+[123]+)*"
MAX_TOKENS = 5
VALUE_BOUND = 9


def chi_square_pvalue(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> float:
    """Pearson chi-square p-value of ``counts`` against ``probs`` (cells with small expected
    counts pooled into one, so the asymptotic distribution applies)."""
    counts = np.asarray(counts, np.float64).ravel()
    probs = np.asarray(probs, np.float64).ravel()
    probs = probs / probs.sum()
    total = counts.sum()
    expected = probs * total
    assert np.all(counts[expected == 0] == 0), "samples fell outside the target support"
    big = expected >= min_expected
    obs = np.concatenate([counts[big], [counts[~big].sum()]])
    exp = np.concatenate([expected[big], [expected[~big].sum()]])
    keep = exp > 0
    exp = exp[keep] * obs[keep].sum() / exp[keep].sum()
    return float(stats.chisquare(obs[keep], exp).pvalue)


def sequence_value(string: str) -> int:
    """Value of a ``+``-separated sum of positive numbers (host reference: Python ``eval``)."""
    return int(eval(string))  # noqa: S307 - strings are built from a fixed digit/plus alphabet


def _token_char_table() -> tuple[np.ndarray, np.ndarray]:
    width = max(len(t) for t in TOKENS)
    codes = np.full((len(TOKENS), width), -1, np.int32)  # digit value, -2 for '+', -1 pad
    for i, tok in enumerate(TOKENS):
        for j, c in enumerate(tok):
            codes[i, j] = -2 if c == "+" else int(c)
    return codes, np.asarray([len(t) for t in TOKENS], np.int32)


def _value_so_far(params, tokens, length):
    codes = params[0]
    chars = codes[tokens]  # [L, width]
    valid = (jnp.arange(tokens.shape[0]) < length)[:, None] & (chars != -1)

    def body(carry, code_ok):
        total, current = carry
        code, ok = code_ok
        is_plus = code == -2
        new_total = jnp.where(is_plus, total + current, total)
        new_current = jnp.where(is_plus, 0, current * 10 + jnp.maximum(code, 0))
        return (jnp.where(ok, new_total, total), jnp.where(ok, new_current, current)), None

    (total, current), _ = jax.lax.scan(
        body, (jnp.int32(0), jnp.int32(0)), (chars.reshape(-1), valid.reshape(-1))
    )
    return total + current


def _critic_prefix(params, tokens, length):
    _, bound, _ = params
    return jnp.where(_value_so_far(params, tokens, length) <= bound, 0.0, -jnp.inf)


def _critic_complete(params, tokens, length):
    _, bound, modulus = params
    value = _value_so_far(params, tokens, length)
    return jnp.where((value <= bound) & (value % modulus == 0), 0.0, -jnp.inf)


def value_critic(bound: int = VALUE_BOUND, modulus: int = 2) -> potentials.SequencePotential:
    """Semantic potential: the sum's value is a multiple of ``modulus`` and at most ``bound``.

    ``prefix`` is ``1[value so far <= bound]`` (values only grow, so it is a valid upper bound)
    and ``complete`` adds the divisibility check. ``bound`` and ``modulus`` are traced
    parameters (``value_critic(10**6, 1)`` is the constant-one potential) and the functions are
    module-level, so every instance shares the static fields and jitted callers hit their cache.
    """
    codes, _ = _token_char_table()
    return potentials.SequencePotential(
        params=(jnp.asarray(codes), jnp.int32(bound), jnp.int32(modulus)),
        prefix_fn=_critic_prefix,
        complete_fn=_critic_complete,
        max_len=MAX_TOKENS + 1,
        num_tokens=len(TOKENS),
    )


def toy_lm_table(seed: int = 0) -> jnp.ndarray:
    """Random bigram log-probabilities over ``TOKENS + EOS`` (EOS row = BOS context)."""
    return tabulated.random_table(jax.random.key(seed, impl="rbg"), (EOS + 1, EOS + 1), scale=1.5)


def all_sequences(max_tokens: int = MAX_TOKENS, vocab: int = EOS):
    """Every token tuple of length ``0 … max_tokens`` in index order (see :func:`sequence_index`)."""
    for length in range(max_tokens + 1):
        yield from itertools.product(range(vocab), repeat=length)


def sequence_index(tokens, lengths, vocab: int = EOS):
    """Index of a padded sequence in :func:`all_sequences` order (works on jnp/np arrays)."""
    xp = jnp if isinstance(tokens, jax.Array) else np
    width = tokens.shape[-1]
    offsets = xp.asarray([sum(vocab**k for k in range(n)) for n in range(width + 1)])
    pos = xp.arange(width)[None, :]
    lens = lengths.reshape(-1, 1)
    power = xp.where(pos < lens, vocab ** xp.maximum(lens - 1 - pos, 0), 0)
    return offsets[lengths] + xp.sum(tokens * power, axis=-1)


def exact_target(table, *, use_regex: bool = True, use_critic: bool = True):
    """Exact ``(g, Z, lcd)`` over :func:`all_sequences`.

    ``g ∝ p_LM(x EOS) Phi_eff(x) Phi_exp(x)``; ``lcd`` is the distribution of locally constrained
    decoding with the regex (token-level liveness) and the length limit, without weights,
    conditioned on survival (the length limit can leave a particle with no admissible token).
    """
    logp = np.asarray(table, np.float64)
    probs = np.exp(logp)
    probs = probs / probs.sum(axis=1, keepdims=True)
    regex = potentials.regex_potential(PATTERN, TOKENS)
    trans = np.asarray(regex.transitions)
    live = np.asarray(regex.live)
    accepting = np.asarray(regex.accepting)
    seqs = list(all_sequences())
    target = np.zeros(len(seqs))
    lcd = np.zeros(len(seqs))
    for i, seq in enumerate(seqs):
        string = "".join(TOKENS[t] for t in seq)
        prev, p_lm, q_lcd, state = EOS, 1.0, 1.0, 0
        for step, tok in enumerate(seq + (EOS,)):
            row = probs[prev]
            allowed = np.append(live[trans[state]], accepting[state]) & live[state]
            if step == MAX_TOKENS:
                allowed[:EOS] = False
            q_lcd *= row[tok] * allowed[tok] / max((row * allowed).sum(), 1e-300)
            p_lm *= row[tok]
            if tok != EOS:
                state = trans[state, tok]
            prev = tok
        matches = re.fullmatch(PATTERN, string) is not None
        ok = matches or not use_regex
        if use_critic:
            ok = ok and matches and sequence_value(string) <= VALUE_BOUND
            ok = ok and sequence_value(string) % 2 == 0
        target[i] = p_lm * ok
        lcd[i] = q_lcd
    z = target.sum()
    return target / z, z, lcd / lcd.sum()  # LCD conditioned on not hitting a dead end
