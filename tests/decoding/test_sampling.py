"""Tests for jaxlab.decoding.sampling and jaxlab.decoding.generate."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.decoding import generate, sampling, tabulated
from tests.decoding.decoding_toys import chi_square_pvalue
from tests.typecheck import checks_off


def key(seed):
    return jax.random.key(seed, impl="rbg")


def reference_probs(logits, temperature, top_k, top_p):
    """Plain NumPy reference of the processed distribution for one row."""
    logits = np.asarray(logits, np.float64)
    vocab = logits.size
    if temperature == 0:
        out = np.zeros(vocab)
        out[np.argmax(logits)] = 1.0
        return out
    z = logits / temperature
    if 0 < top_k < vocab:
        kth = np.sort(z)[::-1][top_k - 1]
        z = np.where(z >= kth, z, -np.inf)
    probs = np.exp(z - z.max())
    probs /= probs.sum()
    if top_p < 1:
        order = np.sort(probs)[::-1]
        mass_before = np.cumsum(order) - order
        threshold = order[np.sum(mass_before < top_p) - 1]
        probs = np.where(probs >= threshold, probs, 0.0)
        probs /= probs.sum()
    return probs


@pytest.fixture(scope="module")
def processed_fn():
    return jax.jit(lambda logits, params: jnp.exp(sampling.processed_log_probs(logits, params)))


def test_processed_probs_match_numpy_per_row(processed_fn):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 10)).astype(np.float32) * 2
    temperature = np.asarray([1.0, 0.5, 2.0, 0.0, 0.8, 1.0], np.float32)
    top_k = np.asarray([0, 3, 10, 2, 5, 1], np.int32)
    top_p = np.asarray([1.0, 1.0, 0.6, 0.5, 0.9, 0.3], np.float32)
    params = sampling.SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    got = np.asarray(processed_fn(jnp.asarray(logits), params))
    for row in range(6):
        want = reference_probs(logits[row], temperature[row], top_k[row], top_p[row])
        np.testing.assert_allclose(got[row], want, atol=1e-5, err_msg=f"row {row}")
    assert (got[5] > 0).sum() == 1  # top_k = 1 keeps only the arg-max


def test_top_k_and_top_p_masks_keep_the_right_sets():
    logits = jnp.asarray([[3.0, 1.0, 2.0, 0.0, -1.0]])
    assert np.asarray(sampling.top_k_mask(logits, 2)).tolist() == [
        [True, False, True, False, False]
    ]
    assert np.asarray(sampling.top_k_mask(logits, 0)).all()
    log_probs = jnp.log(jnp.asarray([[0.5, 0.2, 0.25, 0.04, 0.01]]))
    # 0.5 alone < 0.7; 0.5 + 0.25 >= 0.7 -> keep {0, 2}
    assert np.asarray(sampling.top_p_mask(log_probs, 0.7)).tolist() == [
        [True, False, True, False, False]
    ]
    assert np.asarray(sampling.top_p_mask(log_probs, 1.0)).all()


def test_zero_temperature_is_greedy_with_first_index_ties():
    logits = jnp.asarray([[0.0, 2.0, 2.0, 1.0], [5.0, -1.0, 0.0, 5.0]])
    sample = jax.jit(sampling.sample)
    tokens = sample(key(0), logits, sampling.SamplingParams(temperature=0.0))
    assert np.asarray(tokens).tolist() == [1, 0]
    assert np.asarray(sampling.greedy(logits)).tolist() == [1, 0]


def test_sample_frequencies_match_processed_distribution():
    logits = jnp.asarray(np.random.default_rng(1).normal(size=8), jnp.float32)
    params = sampling.SamplingParams(temperature=0.7, top_k=6, top_p=0.9)
    draws = jax.jit(lambda k: sampling.sample(k, jnp.broadcast_to(logits, (100_000, 8)), params))(
        key(3)
    )
    counts = np.bincount(np.asarray(draws), minlength=8)
    probs = reference_probs(np.asarray(logits), 0.7, 6, 0.9)
    assert counts[probs == 0].sum() == 0
    assert chi_square_pvalue(counts, probs) > 1e-3


def test_stop_helpers():
    stops = jnp.asarray([3, -1])
    assert np.asarray(sampling.is_stop(jnp.asarray([0, 3, -1]), stops)).tolist() == [
        False,
        True,
        False,
    ]
    assert not np.asarray(sampling.is_stop(jnp.asarray([3]), None)).any()
    tokens = jnp.asarray([[3, 1, 3, 2, 2], [1, 1, 1, 1, 0], [1, 2, 2, 3, 9]])
    out, lengths = sampling.truncate_at_stop(
        tokens, jnp.asarray([5, 4, 3]), jnp.asarray([1, 1, 1]), stops, pad_id=0
    )
    # The stop at position 0 is in the prompt (ignored); row 2 is cut by its length.
    assert np.asarray(lengths).tolist() == [3, 4, 3]
    assert np.asarray(out).tolist() == [[3, 1, 3, 0, 0], [1, 1, 1, 1, 0], [1, 2, 2, 0, 0]]


VOCAB = 4


@pytest.fixture(scope="module")
def bigram():
    return tabulated.random_table(key(7), (VOCAB, VOCAB))


@pytest.fixture(scope="module")
def generate_fn():
    lm = tabulated.bigram_lm(VOCAB)

    def run(k, table, prompt, prompt_lengths, params, stops):
        return generate.generate(
            k,
            lm,
            table,
            prompt,
            prompt_lengths,
            max_len=6,
            sampling_params=params,
            stop_tokens=stops,
        )

    return jax.jit(run)


def test_generate_distribution_is_the_bigram_chain(bigram, generate_fn):
    batch = 30_000
    prompt = jnp.zeros((batch, 2), jnp.int32).at[:, 1].set(2)
    out = generate_fn(
        key(1),
        bigram,
        prompt,
        jnp.full(batch, 2),
        sampling.SamplingParams(),
        jnp.asarray([-1]),
    )
    assert np.all(np.asarray(out.lengths) == 6)
    assert np.all(np.asarray(out.num_calls) == 4)
    tokens = np.asarray(out.tokens[:, 2:5])
    counts = np.bincount(tokens @ np.asarray([16, 4, 1]), minlength=64)
    p = np.exp(np.asarray(bigram, np.float64))
    p /= p.sum(1, keepdims=True)
    probs = np.einsum("a,ab,bc->abc", p[2], p, p).ravel()
    assert chi_square_pvalue(counts, probs) > 1e-3


def test_generate_greedy_with_ragged_prompts_and_stops(bigram, generate_fn):
    prompt = jnp.asarray([[0, 1], [2, 0], [3, 3], [1, 2]])
    lengths = jnp.asarray([2, 1, 2, 1])
    out = generate_fn(
        key(2), bigram, prompt, lengths, sampling.SamplingParams(temperature=0.0), jnp.asarray([3])
    )
    table = np.asarray(bigram)
    for row in range(4):
        seq = list(np.asarray(prompt[row, : lengths[row]]))
        while len(seq) < 6:
            seq.append(int(np.argmax(table[seq[-1]])))
            if seq[-1] == 3:
                break
        got = np.asarray(out.tokens[row])
        assert int(out.lengths[row]) == len(seq)
        assert got[: len(seq)].tolist() == seq
        assert np.all(got[len(seq) :] == 0)
        assert int(out.num_calls[row]) == len(seq) - int(lengths[row])


def test_generate_rejects_bad_prompt_shapes(bigram):
    lm = tabulated.bigram_lm(VOCAB)
    prompt, ones = jnp.zeros((2, 4), jnp.int32), jnp.ones(2, jnp.int32)
    with pytest.raises(ValueError, match="max_len"):
        generate.generate(key(0), lm, bigram, prompt, ones, max_len=4)
    # its own validation of the shapes (in generate's helper check_prompt: checks off to reach it)
    with pytest.raises(ValueError, match="prompt_lengths"), checks_off():
        generate.generate(key(0), lm, bigram, prompt, jnp.ones(3, jnp.int32), max_len=8)
