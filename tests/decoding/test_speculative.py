"""Tests for jaxlab.decoding.speculative: exactness, deferral targets, cascades, statistics."""

import collections
import itertools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.commands.generate import decoder_lm
from jaxlab.decoding import sampling, speculative, tabulated
from jaxlab.lm.hub import load_hf, load_tokenizer
from jaxlab.lm.model import Decoder
from tests.decoding.decoding_toys import chi_square_pvalue

SAMPLES = 200_000
BATCH = 40_000


def key(seed):
    return jax.random.key(seed, impl="rbg")


def softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def reference_target(q, p, q_raw, p_raw, name, alpha):
    """Independent NumPy transcription of the paper's deferral rules (one row)."""
    if name in ("speed", "lossy"):
        return p
    if name in ("chow", "diff", "opt"):
        threshold = {
            "chow": 1 - alpha,
            "diff": p_raw.max() - alpha,
            "opt": p_raw.max() - alpha * np.maximum(q - p, 0).sum(),
        }[name]
        return q if q_raw.max() >= threshold else p
    accepted = {
        "token_v1": q_raw >= p_raw.max() - alpha,
        "token_v2": p_raw >= p_raw.max() - alpha,
        "token_v3": p_raw >= (1 - alpha) * p_raw.max(),
    }[name]
    return q * accepted + (1 - (q * accepted).sum()) * p


def lossy_output(q, p, lenience):
    """Analytic output law of lossy speculative sampling (one position)."""
    kept = np.minimum(q, p / (1 - lenience))
    residual = np.maximum(p - q, 0)
    return kept + (1 - kept.sum()) * residual / residual.sum()


RULES = [
    ("speed", 0.0),
    ("lossy", 0.3),
    ("chow", 0.6),
    ("diff", 0.1),
    ("opt", 0.5),
    ("token_v1", 0.05),
    ("token_v2", 0.1),
    ("token_v3", 0.5),
]


@pytest.fixture(scope="module")
def target_fn():
    return jax.jit(speculative.target_from_logits)


def test_deferral_targets_match_numpy_reference(target_fn):
    rng = np.random.default_rng(0)
    q_logits = rng.normal(size=(20, 7)) * 1.5
    p_logits = rng.normal(size=(20, 7)) * 1.5
    params = sampling.SamplingParams(temperature=0.7)
    q = np.exp(np.asarray(sampling.processed_log_probs(jnp.asarray(q_logits), params)))
    p = np.exp(np.asarray(sampling.processed_log_probs(jnp.asarray(p_logits), params)))
    target = target_fn
    for name, alpha in RULES + [("opt", 3.0), ("token_v1", 0.3), ("chow", 0.3), ("diff", -0.1)]:
        got = np.asarray(
            target(
                jnp.asarray(q_logits),
                jnp.asarray(p_logits),
                speculative.cascade_rule(name, alpha),
                params,
            )
        )
        for row in range(20):
            want = reference_target(
                q[row], p[row], softmax(q_logits[row]), softmax(p_logits[row]), name, alpha
            )
            np.testing.assert_allclose(got[row], want, atol=1e-5, err_msg=f"{name} {alpha} {row}")
        np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)


def test_chow_alpha_limits_give_large_then_small_model(target_fn):
    rng = np.random.default_rng(1)
    q_logits = rng.normal(size=(20, 7))
    p_logits = rng.normal(size=(20, 7))
    params = sampling.SamplingParams(temperature=1.0)
    rules = [speculative.cascade_rule("chow", a) for a in (0.0, 1.0)]
    at0, at1 = (np.asarray(target_fn(q_logits, p_logits, r, params)) for r in rules)
    np.testing.assert_allclose(at0, softmax(p_logits), atol=1e-6)
    np.testing.assert_allclose(at1, softmax(q_logits), atol=1e-6)


@pytest.fixture(scope="module")
def first_token_fn():
    """Draft ``x ~ q``, verify one position; returns the emitted token and the acceptance."""

    def run(k, q_logits, p_logits, rule, params):
        q = jnp.exp(sampling.processed_log_probs(q_logits, params))
        p = jnp.exp(sampling.processed_log_probs(p_logits, params))
        q_raw, p_raw = jax.nn.softmax(q_logits), jax.nn.softmax(p_logits)

        def one(k):
            k_draft, k_verify = jax.random.split(k)
            x = jax.random.categorical(k_draft, jnp.log(q)).astype(jnp.int32)
            out = speculative.verify(
                k_verify,
                q[None, None],
                p[None, None],
                q_raw[None, None],
                p_raw[None, None],
                x[None, None],
                p[None],
                rule,
            )
            accepted = out.num_accepted[0] == 1
            return jnp.where(accepted, x, out.next_token[0]), accepted

        return jax.vmap(one)(jax.random.split(k, SAMPLES))

    return jax.jit(run)


@pytest.mark.parametrize("temperature", [1.0, 0.7], ids=["T1", "T0.7"])
def test_each_rule_emits_its_target_and_accepts_at_one_minus_tv(first_token_fn, temperature):
    vocab = 8
    rng = np.random.default_rng(2)
    q_logits = jnp.asarray(rng.normal(size=vocab) * 1.2, jnp.float32)
    p_logits = jnp.asarray(rng.normal(size=vocab) * 1.2, jnp.float32)
    params = sampling.SamplingParams(temperature=temperature, top_k=7)
    q = np.exp(np.asarray(sampling.processed_log_probs(q_logits, params), np.float64))
    p = np.exp(np.asarray(sampling.processed_log_probs(p_logits, params), np.float64))
    for i, (name, alpha) in enumerate(RULES):
        rule = speculative.cascade_rule(name, alpha)
        tokens, accepted = first_token_fn(key(10 + i), q_logits, p_logits, rule, params)
        if name == "lossy":
            law = lossy_output(q, p, alpha)
            accept_prob = np.minimum(q, p / (1 - alpha)).sum()
        else:
            law = np.asarray(speculative.target_from_logits(q_logits, p_logits, rule, params))
            accept_prob = 1 - 0.5 * np.abs(q - law).sum()  # 1 - TV(q, pi)
        counts = np.bincount(np.asarray(tokens), minlength=vocab)
        assert chi_square_pvalue(counts, law) > 1e-3, name
        rate = float(np.mean(np.asarray(accepted)))
        sigma = np.sqrt(accept_prob * (1 - accept_prob) / SAMPLES) + 1e-9
        assert abs(rate - accept_prob) < 4 * sigma + 1e-6, (name, rate, accept_prob)


VOCAB = 4
PROMPT_LEN = 2
MAX_LEN = 6


@pytest.fixture(scope="module")
def tables():
    p = tabulated.random_table(key(100), (VOCAB, VOCAB), scale=1.5)
    q = tabulated.mix_tables(p, tabulated.random_table(key(101), (VOCAB, VOCAB), scale=1.5), 0.6)
    return np.asarray(q), np.asarray(p)


def make_decoder(config):
    lm = tabulated.bigram_lm(VOCAB)

    def run(k, q_table, p_table, prompt, lengths, rule, params, stops):
        return speculative.speculative_decode(
            k,
            lm,
            lm,
            q_table,
            p_table,
            prompt,
            lengths,
            config=config,
            rule=rule,
            sampling_params=params,
            stop_tokens=stops,
        )

    return jax.jit(run)


@pytest.fixture(scope="module")
def decode_fn():
    # One compiled decoder for all bigram tests. With cascade_bonus the bonus token is drawn
    # from pi_{gamma+1}, which is p for SPEED; the default bonus path is covered by the trigram
    # test below.
    return make_decoder(speculative.SpeculativeConfig(gamma=3, max_len=MAX_LEN, cascade_bonus=True))


def single_prompt(first):
    prompt = jnp.zeros((BATCH, PROMPT_LEN), jnp.int32).at[:, 0].set(first)
    return prompt, jnp.ones(BATCH, jnp.int32)


NO_STOP = jnp.asarray([-1])
SPEED = speculative.cascade_rule("speed")


def chain_law(steps, first, num_tokens):
    """Joint law of ``num_tokens`` tokens where ``steps(prev) -> next-token probabilities``."""
    law = {}
    for seq in itertools.product(range(VOCAB), repeat=num_tokens):
        prob, prev = 1.0, first
        for tok in seq:
            prob *= steps(prev)[tok]
            prev = tok
        law[seq] = prob
    return law


def counts_against(tokens, law):
    counts = collections.Counter(map(tuple, np.asarray(tokens).tolist()))
    keys = list(law)
    assert set(counts) <= set(keys), set(counts) - set(keys)
    return np.asarray([counts.get(k, 0) for k in keys]), np.asarray([law[k] for k in keys])


def test_speculative_decoding_is_exact_at_temperature_one(tables, decode_fn):
    q_table, p_table = tables
    prompt, lengths = single_prompt(2)
    out = decode_fn(
        key(1), q_table, p_table, prompt, lengths, SPEED, sampling.SamplingParams(), NO_STOP
    )
    assert np.all(np.asarray(out.lengths) == MAX_LEN)
    p = np.exp(p_table)
    law = chain_law(lambda prev: p[prev], 2, 4)
    counts, probs = counts_against(out.tokens[:, 1:5], law)
    assert chi_square_pvalue(counts, probs) > 1e-3
    stats = out.stats
    assert np.all(np.asarray(stats.generated) == MAX_LEN - 1)
    assert 1.0 < float(stats.tokens_per_target_call) <= 4.0
    assert np.all(np.asarray(stats.draft_calls) == 4 * np.asarray(stats.target_calls))


def test_temperature_zero_equals_greedy_decoding_of_the_large_model(tables, decode_fn):
    q_table, p_table = tables
    rng = np.random.default_rng(3)
    prompt = jnp.asarray(rng.integers(0, VOCAB, size=(BATCH, PROMPT_LEN)), jnp.int32)
    lengths = jnp.asarray(rng.integers(1, PROMPT_LEN + 1, size=BATCH), jnp.int32)
    params = sampling.SamplingParams(temperature=0.0)
    out = decode_fn(key(2), q_table, p_table, prompt, lengths, SPEED, params, NO_STOP)
    tokens = np.asarray(out.tokens)
    for row in range(0, BATCH, 997):
        seq = list(np.asarray(prompt[row, : lengths[row]]))
        while len(seq) < MAX_LEN:
            seq.append(int(np.argmax(p_table[seq[-1]])))
        assert tokens[row].tolist() == seq, row


def test_identical_models_accept_every_draft(tables, decode_fn):
    _, p_table = tables
    prompt, lengths = single_prompt(0)
    out = decode_fn(
        key(3), p_table, p_table, prompt, lengths, SPEED, sampling.SamplingParams(), NO_STOP
    )
    stats = out.stats
    assert float(stats.acceptance_rate) == 1.0
    assert np.all(np.asarray(stats.target_calls) == 2)  # 5 new tokens, blocks of gamma + 1 = 4
    assert np.all(np.asarray(stats.accepted) == 6)


def test_stop_tokens_end_rows_and_keep_the_law_of_truncated_sequences(tables, decode_fn):
    q_table, p_table = tables
    prompt, lengths = single_prompt(1)
    stop = 3
    out = decode_fn(
        key(4),
        q_table,
        p_table,
        prompt,
        lengths,
        SPEED,
        sampling.SamplingParams(),
        jnp.asarray([stop]),
    )
    tokens, out_len = np.asarray(out.tokens), np.asarray(out.lengths)
    p = np.exp(p_table.astype(np.float64))
    p /= p.sum(1, keepdims=True)
    law = {}
    for n in range(1, MAX_LEN):
        for seq in itertools.product(range(VOCAB), repeat=n):
            if stop in seq[:-1] or (n < MAX_LEN - 1 and seq[-1] != stop):
                continue
            prob, prev = 1.0, 1
            for tok in seq:
                prob *= p[prev, tok]
                prev = tok
            law[seq] = prob
    assert abs(sum(law.values()) - 1) < 1e-9  # every row stops or reaches max_len
    observed = []
    for row in range(BATCH):
        gen = tokens[row, 1 : out_len[row]]
        assert np.all(tokens[row, out_len[row] :] == 0)
        observed.append(tuple(gen.tolist()))
    counts = collections.Counter(observed)
    assert set(counts) <= set(law)
    keys = list(law)
    assert chi_square_pvalue([counts.get(k, 0) for k in keys], [law[k] for k in keys]) > 1e-3


CASCADE_RULES = [
    ("opt", 0.3),
    ("chow", 0.0),
    ("chow", 1.0),
    ("diff", 0.1),
    ("token_v1", 0.05),
    ("token_v3", 0.5),
]


@pytest.mark.parametrize("name,alpha", CASCADE_RULES, ids=[f"{n}-{a}" for n, a in CASCADE_RULES])
def test_cascade_output_follows_the_per_position_target(tables, decode_fn, name, alpha):
    q_table, p_table = tables
    params = sampling.SamplingParams(temperature=0.9)
    rule = speculative.cascade_rule(name, alpha)
    prompt, lengths = single_prompt(0)
    out = decode_fn(key(5), q_table, p_table, prompt, lengths, rule, params, NO_STOP)
    pi = np.asarray(
        speculative.target_from_logits(jnp.asarray(q_table), jnp.asarray(p_table), rule, params),
        np.float64,
    )
    if (name, alpha) == ("chow", 0.0):
        p = np.exp(np.asarray(sampling.processed_log_probs(jnp.asarray(p_table), params)))
        np.testing.assert_allclose(pi, p, atol=1e-6)
    if (name, alpha) == ("chow", 1.0):
        q = np.exp(np.asarray(sampling.processed_log_probs(jnp.asarray(q_table), params)))
        np.testing.assert_allclose(pi, q, atol=1e-6)
    # 5 tokens: a first block of 3 drafts, the cascade bonus (4th) and a second block.
    law = chain_law(lambda prev: pi[prev], 0, 5)
    counts, probs = counts_against(out.tokens[:, 1:6], law)
    assert chi_square_pvalue(counts, probs) > 1e-3, name


@pytest.mark.parametrize("name,alpha", [("speed", 0.0), ("opt", 0.4), ("token_v2", 0.2)])
def test_statistics_match_analytic_acceptance_with_context_free_models(decode_fn, name, alpha):
    rng = np.random.default_rng(4)
    q_row = np.log(softmax(rng.normal(size=VOCAB)))
    p_row = np.log(softmax(rng.normal(size=VOCAB)))
    q_table = np.tile(q_row, (VOCAB, 1)).astype(np.float32)
    p_table = np.tile(p_row, (VOCAB, 1)).astype(np.float32)
    rule = speculative.cascade_rule(name, alpha)
    prompt, lengths = single_prompt(0)
    out = decode_fn(
        key(6), q_table, p_table, prompt, lengths, rule, sampling.SamplingParams(), NO_STOP
    )
    pi = np.asarray(speculative.target_from_logits(jnp.asarray(q_row), jnp.asarray(p_row), rule))
    beta = 1 - 0.5 * np.abs(np.exp(q_row) - pi).sum()
    stats = out.stats
    verified = float(np.sum(np.asarray(stats.verified)))
    sigma = np.sqrt(beta * (1 - beta) / verified)
    assert abs(float(stats.acceptance_rate) - beta) < 5 * sigma, (stats.acceptance_rate, beta)
    expected_block = sum(beta**j for j in range(1, 4))
    assert abs(float(stats.mean_accepted_length) - expected_block) < 0.03, (
        stats.mean_accepted_length,
        expected_block,
    )


def test_stateful_trigram_decoding_is_exact():
    vocab = 3
    p = tabulated.random_table(key(200), (vocab, vocab, vocab), scale=1.5)
    q = tabulated.mix_tables(p, tabulated.random_table(key(201), (vocab, vocab, vocab)), 0.7)
    lm = tabulated.trigram_lm(vocab)
    config = speculative.SpeculativeConfig(gamma=2, max_len=6)
    prompt = jnp.tile(jnp.asarray([[1, 2]]), (20_000, 1))
    out = jax.jit(
        lambda k: speculative.speculative_decode(
            k, lm, lm, q, p, prompt, jnp.full(20_000, 2), config=config
        )
    )(key(7))
    probs = np.exp(np.asarray(p, np.float64))
    law = {}
    for seq in itertools.product(range(vocab), repeat=4):
        prob, (a, b) = 1.0, (1, 2)
        for tok in seq:
            prob *= probs[a, b, tok]
            a, b = b, tok
        law[seq] = prob
    counts, expected = counts_against(out.tokens[:, 2:6], law)
    assert chi_square_pvalue(counts, expected) > 1e-3
    assert float(out.stats.acceptance_rate) < 1.0


HF_FIXTURES = Path(__file__).parents[1] / "lm" / "fixtures"
LOADED_SAMPLES = 4096


def test_loaded_hugging_face_pair_keeps_the_target_distribution():
    """Target ``tiny_llama`` and drafter ``tiny_llama_tied`` (one tokenizer; TV 0.56 between
    their next-token laws after the prompt): the first two sampled tokens follow the target's
    exact softmax. One program samples and computes the exact laws."""
    target, draft = load_hf(HF_FIXTURES / "tiny_llama"), load_hf(HF_FIXTURES / "tiny_llama_tied")
    tok = load_tokenizer(HF_FIXTURES / "tiny_llama", model_vocab_size=target.cfg.vocab_size)
    assert draft.cfg.vocab_size == target.cfg.vocab_size
    prompt = jnp.asarray(tok.encode("the cat", add_bos=True))
    width, vocab = prompt.shape[0], target.cfg.vocab_size
    config = speculative.SpeculativeConfig(gamma=2, max_len=width + 2)
    target_model, draft_model = Decoder(target.cfg), Decoder(draft.cfg)

    def run(k, dp, tp):
        out = speculative.speculative_decode(
            k,
            decoder_lm(draft_model),
            decoder_lm(target_model),
            dp,
            tp,
            jnp.tile(prompt[None], (LOADED_SAMPLES, 1)),
            jnp.full(LOADED_SAMPLES, width),
            config=config,
        )
        # every prompt + one token: the target's law of token 1, and of token 2 given token 1
        both = jnp.concatenate([jnp.tile(prompt[None], (vocab, 1)), jnp.arange(vocab)[:, None]], 1)
        p = jax.nn.softmax(target_model.apply(tp, both)[:, -2:].astype(jnp.float32))
        q1 = jax.nn.softmax(draft_model.apply(dp, prompt[None])[0, -1].astype(jnp.float32))
        return out.tokens[:, width:], out.stats.acceptance_rate, p[0, 0], p[:, 1], q1

    tokens, rate, p1, p2_given_1, q1 = map(
        np.asarray, jax.jit(run)(key(11), draft.params, target.params)
    )
    p1 = p1.astype(np.float64)
    laws = (p1, p1 @ p2_given_1.astype(np.float64))  # token 1; token 2's marginal
    assert 0.5 * np.abs(p1 - q1).sum() > 0.5  # the drafter's own law would show
    for position, law in enumerate(laws):
        counts = np.bincount(tokens[:, position], minlength=vocab)
        assert chi_square_pvalue(counts, law) > 1e-3, position
        assert 0.5 * np.abs(counts / LOADED_SAMPLES - law).sum() < 0.1, position
    assert 0.0 < float(rate) < 1.0


def test_bad_configuration_raises():
    with pytest.raises(ValueError, match="gamma"):
        speculative.SpeculativeConfig(gamma=0)
    with pytest.raises(ValueError, match="rule"):
        speculative.cascade_rule("fastest")
    small, big = tabulated.bigram_lm(3), tabulated.bigram_lm(4)
    with pytest.raises(ValueError, match="vocab_size"):
        speculative.speculative_decode(
            key(0),
            small,
            big,
            jnp.zeros((3, 3)),
            jnp.zeros((4, 4)),
            jnp.zeros((1, 1), jnp.int32),
            jnp.ones(1, jnp.int32),
            config=speculative.SpeculativeConfig(gamma=2, max_len=4),
        )
