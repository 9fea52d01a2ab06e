"""Tests for the injected-LM contract (jaxlab.decoding.interface) and the tabulated models."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.decoding import interface, tabulated


def key(seed):
    return jax.random.key(seed, impl="rbg")


def test_from_logits_fn_chunks_match_full_forward_and_roll_back():
    vocab = 3
    table = tabulated.random_table(key(0), (vocab, vocab, vocab))
    lm = tabulated.trigram_lm(vocab)
    seq = jnp.asarray([[0, 2, 1, 1, 0, 2], [1, 1, 2, 0, 0, 1]])
    full = np.asarray(table[jnp.concatenate([seq[:, :1], seq[:, :-1]], 1), seq])
    state = lm.init_state(table, 2, 8)
    logits, state = lm.apply(table, state, seq[:, :3], jnp.zeros(2, jnp.int32))
    np.testing.assert_allclose(np.asarray(logits), full[:, :3], rtol=1e-6)
    # Write garbage at positions 3..4, then roll back and feed the true tokens from position 3.
    _, state = lm.apply(table, state, jnp.asarray([[2, 2], [0, 2]]), jnp.asarray([3, 3]))
    logits, state = lm.apply(table, state, seq[:, 3:], jnp.asarray([3, 3]))
    np.testing.assert_allclose(np.asarray(logits), full[:, 3:], rtol=1e-6)
    # Ragged starts: row 0 re-feeds position 1, row 1 position 4.
    logits, _ = lm.apply(table, state, jnp.asarray([[2, 1], [0, 2]]), jnp.asarray([1, 4]))
    np.testing.assert_allclose(np.asarray(logits[0]), full[0, 1:3], rtol=1e-6)
    want_row1 = np.asarray(table[jnp.asarray([0, 0]), jnp.asarray([0, 2])])
    np.testing.assert_allclose(np.asarray(logits[1]), want_row1, rtol=1e-6)


def test_with_eos_last_renumbers_tokens_and_logits():
    vocab, eos = 4, 1
    table = jnp.arange(16, dtype=jnp.float32).reshape(4, 4)
    base = tabulated.bigram_lm(vocab)
    moved = interface.with_eos_last(base, eos)
    perm = [0, 2, 3, 1]
    tokens = jnp.asarray([[0, 1, 2, 3]])
    logits, _ = moved.apply(table, moved.init_state(table, 1, 4), tokens, jnp.zeros(1, jnp.int32))
    want = np.asarray(table)[np.asarray(perm)[np.asarray(tokens[0])]][:, perm]
    np.testing.assert_array_equal(np.asarray(logits[0]), want)
    with pytest.raises(ValueError, match="eos_id"):
        interface.with_eos_last(base, 4)


def test_causal_lm_validation():
    with pytest.raises(ValueError, match="vocab_size"):
        interface.CausalLM(apply=lambda *a: a, init_state=lambda *a: a, vocab_size=0)
    with pytest.raises(ValueError, match="apply"):
        interface.CausalLM(apply=None, init_state=lambda *a: a, vocab_size=3)


def test_tables_are_normalised_and_mixing_interpolates():
    a = tabulated.random_table(key(1), (5, 6), scale=2.0)
    b = tabulated.random_table(key(2), (5, 6))
    np.testing.assert_allclose(np.exp(np.asarray(a)).sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(
        np.asarray(tabulated.mix_tables(a, b, 0.0)), np.asarray(a), atol=1e-5
    )
    mixed = np.exp(np.asarray(tabulated.mix_tables(a, b, 0.25)))
    want = 0.75 * np.exp(np.asarray(a)) + 0.25 * np.exp(np.asarray(b))
    np.testing.assert_allclose(mixed, want, rtol=1e-5)
