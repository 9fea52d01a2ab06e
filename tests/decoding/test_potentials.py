"""Contract tests for jaxlab.decoding.potentials (next-token consistency, autoregressive
factorisation, batch consistency), plus regex / grammar semantics, products and coercion."""

import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.decoding import grammar, potentials
from jaxlab.decoding.dfa import dfa_alphabet
from tests.decoding.decoding_toys import MAX_TOKENS, PATTERN, TOKENS, sequence_value, value_critic

V = len(TOKENS)
WIDTH = MAX_TOKENS + 1


def contexts():
    """All token sequences of length <= 3 and a fixed random sample of lengths 4 and 5."""
    seqs = [s for n in range(4) for s in itertools.product(range(V), repeat=n)]
    rng = np.random.default_rng(0)
    seqs += [tuple(rng.integers(0, V, size=n)) for n in (4, 5) for _ in range(60)]
    tokens = np.zeros((len(seqs), WIDTH), np.int32)
    for i, s in enumerate(seqs):
        tokens[i, : len(s)] = s
    return seqs, jnp.asarray(tokens), jnp.asarray([len(s) for s in seqs], jnp.int32)


SEQS, TOKENS_ARR, LENGTHS = contexts()


def arithmetic():
    g = grammar.arithmetic_grammar(1, digits="123", operators="+")
    return potentials.grammar_potential(g, TOKENS + ("(", ")"), max_stack=7)


ALPHABET = dfa_alphabet(TOKENS)
FACTORIES = {
    "regex": lambda: potentials.regex_potential(PATTERN, TOKENS),
    "regex-char-liveness": lambda: potentials.regex_potential(
        PATTERN, TOKENS, token_level_liveness=False
    ),
    "grammar": arithmetic,
    "sequence": value_critic,
    "product": lambda: potentials.regex_potential(PATTERN, TOKENS) * value_critic(),
    "coerced": lambda: potentials.coerce(
        potentials.char_regex_potential(PATTERN, ALPHABET), TOKENS, ALPHABET
    ),
}


@jax.jit
def contract_values(pot, tokens, length):
    """Everything the contract relates, for one padded context."""
    vocab = pot.vocab_size
    state = pot.final_state(tokens, length)
    logw = pot.logw_next(state)

    def extended_prefix(v):
        return pot.prefix(tokens.at[jnp.minimum(length, tokens.shape[0] - 1)].set(v), length + 1)

    ext = jax.vmap(extended_prefix)(jnp.arange(vocab))
    single = jax.vmap(lambda v: pot.token_logw(state, v))(jnp.arange(vocab + 1))

    def factor(carry, inputs):
        st, total = carry
        tok, pos = inputs
        valid = pos < length
        w = pot.logw_next(st)[tok]
        total = jnp.where(valid, total + w, total)
        st = jax.tree.map(lambda a, b: jnp.where(valid, a, b), pot.step(st, tok), st)
        return (st, total), None

    (_, path), _ = jax.lax.scan(
        factor, (pot.initial_state(), jnp.float32(0.0)), (tokens, jnp.arange(tokens.shape[0]))
    )
    return {
        "logw": logw,
        "prefix": pot.log_prefix(state),
        "complete": pot.log_complete(state),
        "seq_complete": pot.complete(tokens, length),
        "ext_prefix": ext,
        "single": single,
        "path": path + logw[vocab],
        "empty_prefix": pot.log_prefix(pot.initial_state()),
        "state": state,
    }


_batched = jax.jit(jax.vmap(contract_values, in_axes=(None, 0, 0)))
_single_logw = jax.jit(lambda pot, state: pot.logw_next(state))
_batched_logw = jax.jit(jax.vmap(lambda pot, state: pot.logw_next(state), in_axes=(None, 0)))


def batched_values(pot):
    return _batched(pot, TOKENS_ARR, LENGTHS)


def same(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    both_inf = np.isneginf(a) & np.isneginf(b)
    return np.all(both_inf | np.isclose(a, b, atol=1e-5))


@pytest.fixture(scope="module", params=list(FACTORIES))
def case(request):
    pot = FACTORIES[request.param]()
    return request.param, pot, batched_values(pot)


def test_logw_next_is_consistent_with_prefix_and_complete(case):
    name, pot, out = case
    vocab = pot.vocab_size
    prefix = np.asarray(out["prefix"])
    logw = np.asarray(out["logw"])
    finite = np.isfinite(prefix)
    assert finite.any() and (~finite).any(), name  # the contexts exercise both cases
    want_tokens = np.asarray(out["ext_prefix"])[finite] - prefix[finite, None]
    want_eos = np.asarray(out["complete"])[finite] - prefix[finite]
    assert same(logw[finite, :vocab], want_tokens), name
    assert same(logw[finite, vocab], want_eos), name
    assert np.all(np.isneginf(logw[~finite])), name  # prefix = -inf => every extension -inf
    assert np.all(np.isneginf(np.asarray(out["ext_prefix"])[~finite])), name
    assert same(out["single"], logw), name  # token_logw agrees with logw_next
    assert same(out["seq_complete"], out["complete"]), name


def test_autoregressive_factorisation(case):
    name, _, out = case
    empty = np.asarray(out["empty_prefix"])
    assert np.all(np.isfinite(empty)), name
    lhs = np.asarray(out["complete"]) - empty
    assert same(lhs, out["path"]), name


def test_batch_equals_single(case):
    name, pot, out = case
    batched = np.asarray(_batched_logw(pot, out["state"]))
    for i in range(0, len(SEQS), 23):
        state = jax.tree.map(lambda x, i=i: x[i], out["state"])
        assert same(batched[i], _single_logw(pot, state)), (name, i)
    assert same(batched, out["logw"]), name


def test_regex_potential_semantics():
    out = batched_values(potentials.regex_potential(PATTERN, TOKENS))
    complete = np.asarray(out["complete"])
    prefix = np.asarray(out["prefix"])
    for i, seq in enumerate(SEQS):
        string = "".join(TOKENS[t] for t in seq)
        assert (complete[i] == 0) == (re.fullmatch(PATTERN, string) is not None), string
        completable = any(
            re.fullmatch(PATTERN, string + "".join(TOKENS[t] for t in ext))
            for n in range(3)
            for ext in itertools.product(range(V), repeat=n)
        )
        assert (prefix[i] == 0) == completable, string


def test_sequence_potential_matches_host_evaluation():
    out = batched_values(value_critic())
    complete = np.asarray(out["complete"])
    for i, seq in enumerate(SEQS):
        string = "".join(TOKENS[t] for t in seq)
        if re.fullmatch(PATTERN, string):
            value = sequence_value(string)
            assert (complete[i] == 0) == (value <= 9 and value % 2 == 0), string


def test_coerced_character_potential_equals_lifted_dfa():
    lifted = batched_values(FACTORIES["regex-char-liveness"]())
    coerced = batched_values(FACTORIES["coerced"]())
    assert same(lifted["logw"], coerced["logw"])
    assert same(lifted["prefix"], coerced["prefix"])


def test_token_level_liveness_prunes_what_the_vocabulary_cannot_spell():
    tokens = ("ab", "cd")
    token_live = potentials.regex_potential("abc", tokens)
    char_live = potentials.regex_potential("abc", tokens, token_level_liveness=False)
    after_ab = token_live.step(token_live.initial_state(), jnp.int32(0))  # token 'ab'
    assert float(char_live.log_prefix(after_ab)) == 0.0  # "ab" extends to "abc" by characters
    assert float(token_live.log_prefix(after_ab)) == -np.inf  # but no token sequence does
    assert float(token_live.log_prefix(token_live.initial_state())) == -np.inf


def test_refused_tokens_are_never_allowed_and_liveness_follows():
    tokens = ("a", "b", "")  # id 2 spells nothing, as a special token would
    pot = potentials.regex_potential("a*b", tokens).refusing([2])
    start = pot.initial_state()
    assert np.asarray(pot.logw_next(start)).tolist() == [0.0, 0.0, -np.inf, -np.inf]
    assert float(pot.log_prefix(pot.step(start, jnp.int32(2)))) == -np.inf
    only_b = potentials.regex_potential("b", tokens).refusing([1])  # "b" can no longer be spelled
    assert float(only_b.log_prefix(only_b.initial_state())) == -np.inf


def test_product_adds_weights_and_checks_vocabularies():
    regex = potentials.regex_potential(PATTERN, TOKENS)
    critic = value_critic()
    prod = batched_values(regex * critic)
    a, b = batched_values(regex), batched_values(critic)
    assert same(prod["logw"], np.asarray(a["logw"]) + np.asarray(b["logw"]))
    other = potentials.regex_potential("a", ("a", "b"))
    with pytest.raises(ValueError, match="vocab_size"):
        _ = regex * other
    with pytest.raises(ValueError, match="alphabet"):
        potentials.coerce(potentials.char_regex_potential("a", "ab"), TOKENS, "abc")
