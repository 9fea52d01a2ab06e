"""Tests for jaxlab.decoding.smc on a toy LM whose target can be enumerated exactly.

Toy: random bigram LM over 6 tokens + EOS, at most 5 tokens; condition ``Phi_eff`` = a regex
over multi-character tokens; critic ``Phi_exp`` = "the sum's value is even and <= 9" (a
:class:`SequencePotential` used as a twist). ``g`` and ``Z`` come from enumerating all 9331
sequences on the host with Python's ``re`` and ``eval``.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.decoding import potentials, smc, tabulated
from tests.decoding.decoding_toys import (
    EOS,
    MAX_TOKENS,
    PATTERN,
    TOKENS,
    all_sequences,
    exact_target,
    sequence_index,
    toy_lm_table,
    value_critic,
)

LM = tabulated.bigram_lm(EOS + 1)
PROMPT = jnp.asarray([EOS])  # the EOS row doubles as the BOS context
NUM_SEQS = sum(len(TOKENS) ** n for n in range(MAX_TOKENS + 1))


def seeds(n, offset=0):
    return jax.random.split(jax.random.key(1234 + offset, impl="rbg"), n)


@pytest.fixture(scope="module")
def toy():
    table = toy_lm_table(0)
    g, z, lcd = exact_target(table)
    g_eff, z_eff, _ = exact_target(table, use_critic=False)
    lengths = np.asarray([len(s) for s in all_sequences()])
    return {
        "table": table,
        "g": jnp.asarray(g, jnp.float32),
        "z": z,
        "z_eff": z_eff,
        "lcd": lcd,
        "g_np": g,
        "g_eff_lengths": np.bincount(lengths, weights=g_eff, minlength=MAX_TOKENS + 1),
        "lcd_lengths": np.bincount(lengths, weights=lcd, minlength=MAX_TOKENS + 1),
        "regex": potentials.regex_potential(PATTERN, TOKENS),
        "critic": value_critic(),
    }


def summarise(result, target):
    """Per-run statistics: TV of the particle posterior to ``target``, log Z, ESS, lengths."""
    weights = result.posterior_weights
    idx = sequence_index(result.tokens, result.lengths)
    posterior = jax.ops.segment_sum(weights, idx, num_segments=NUM_SEQS)
    lengths = jax.ops.segment_sum(weights, result.lengths, num_segments=MAX_TOKENS + 1)
    return {
        "tv": 0.5 * jnp.sum(jnp.abs(posterior - target)),
        "log_ml": result.log_ml,
        "ess": 1.0 / jnp.sum(weights**2),
        "resampled": jnp.any(result.resampled),
        "lengths": lengths,
    }


@functools.partial(jax.jit, static_argnames=("config", "use_critic"))
def run_smc(keys, table, target, condition, critic, threshold, *, config, use_critic):
    def one(k):
        result = smc.smc(
            k,
            LM,
            table,
            PROMPT,
            config=config,
            condition=condition,
            critic=critic if use_critic else None,
            ess_threshold=threshold,
        )
        return summarise(result, target)

    return jax.vmap(one)(keys)


def smc_stats(
    toy,
    keys,
    n,
    *,
    proposal="constrained",
    scheme="multinomial",
    threshold=0.5,
    critic=True,
    trivial_critic=False,
):
    config = smc.SMCConfig(
        num_particles=n, max_tokens=MAX_TOKENS, proposal=proposal, resampling=scheme
    )
    out = run_smc(
        keys,
        toy["table"],
        toy["g"],
        toy["regex"],
        value_critic(10**6, 1) if trivial_critic else toy["critic"],
        jnp.float32(threshold),
        config=config,
        use_critic=critic,
    )
    return jax.tree.map(np.asarray, out)


def assert_unbiased(log_ml, z):
    ratio = np.exp(np.asarray(log_ml, np.float64)) / z
    stderr = ratio.std() / np.sqrt(ratio.size)
    assert abs(ratio.mean() - 1.0) < 4 * stderr + 0.01, (ratio.mean(), stderr)


@pytest.fixture(scope="module")
def tv_by_particles(toy):
    tv = {}
    small = smc_stats(toy, seeds(2000), 10)
    tv[10] = small["tv"].mean()
    tv[100] = smc_stats(toy, seeds(16, 1), 100)["tv"].mean()
    tv[1000] = smc_stats(toy, seeds(16, 2), 1000)["tv"].mean()
    return tv, small


def test_smc_posterior_tv_falls_with_the_number_of_particles(tv_by_particles):
    tv, _ = tv_by_particles
    assert tv[10] > tv[100] > tv[1000], tv
    assert tv[1000] < 0.25, tv
    assert tv[100] < 0.8 * tv[10] and tv[1000] < 0.6 * tv[100], tv


def test_evidence_estimate_is_unbiased_with_and_without_resampling(toy, tv_by_particles):
    _, adaptive = tv_by_particles
    assert adaptive["resampled"].mean() > 0.5
    assert_unbiased(adaptive["log_ml"], toy["z"])
    for threshold in (0.0, 1.0):
        out = smc_stats(toy, seeds(2000, 3), 10, threshold=threshold)
        assert_unbiased(out["log_ml"], toy["z"])
        assert out["resampled"].any() == (threshold > 0)  # threshold 0 is importance sampling


def test_residual_resampling_keeps_the_evidence_unbiased(toy):
    # The other schemes share this code path; their counts are tested in test_resampling.py.
    out = smc_stats(toy, seeds(1000, 4), 10, scheme="residual", threshold=1.0, critic=False)
    assert out["resampled"].mean() > 0.5
    assert_unbiased(out["log_ml"], toy["z_eff"])


def test_locally_constrained_decoding_without_weights_stays_biased(toy, tv_by_particles):
    tv, _ = tv_by_particles
    lcd = smc_stats(toy, seeds(8, 5), 1000, proposal="constrained_unweighted", critic=False)
    analytic = 0.5 * np.abs(toy["lcd"] - toy["g_np"]).sum()
    assert analytic > 0.5
    assert abs(lcd["tv"].mean() - analytic) < 0.05  # plateaus at the analytic bias
    assert lcd["tv"].mean() > tv[1000] + 0.3
    # Unweighted: surviving particles count the same; only length-limit dead ends are dropped.
    assert np.all(lcd["ess"] > 900)
    # Against the grammar-only target, LCD is myopic (wrong length law) while SMC is not.
    lcd_len = lcd["lengths"].mean(0)
    np.testing.assert_allclose(lcd_len, toy["lcd_lengths"], atol=0.02)
    want = toy["g_eff_lengths"]
    assert 0.5 * np.abs(lcd_len - want).sum() > 0.15
    # The constant-one critic reuses the compiled N = 1000 run of the TV test.
    grammar_smc = smc_stats(toy, seeds(16, 6), 1000, trivial_critic=True)
    assert 0.5 * np.abs(grammar_smc["lengths"].mean(0) - want).sum() < 0.03


def test_sample_then_rerank_is_consistent_but_less_efficient(toy, tv_by_particles):
    tv, _ = tv_by_particles

    @jax.jit
    def rerank(keys, table, target, regex, critic):
        def one(k):
            result = smc.sample_rerank(
                k,
                LM,
                table,
                PROMPT,
                num_samples=1000,
                max_tokens=MAX_TOKENS,
                potentials=[regex, critic],
            )
            return summarise(result, target)

        return jax.vmap(one)(keys)

    out = jax.tree.map(
        np.asarray, rerank(seeds(16, 7), toy["table"], toy["g"], toy["regex"], toy["critic"])
    )
    assert_unbiased(out["log_ml"], toy["z"])
    assert out["tv"].mean() < 0.5
    assert out["tv"].mean() > tv[1000]  # fewer useful samples than SMC at the same N
    assert out["ess"].mean() < 1000 * toy["z"] * 3  # only ~N·Z samples survive the rerank


def test_posterior_over_sequences_sums_particle_weights():
    result = smc.SMCResult(
        tokens=jnp.asarray([[1, 2, 0], [1, 2, 0], [3, 0, 0], [4, 4, 4]]),
        lengths=jnp.asarray([2, 2, 1, 3]),
        log_weights=jnp.log(jnp.asarray([0.1, 0.3, 0.6, 0.0])),
        log_ml=jnp.float32(0.0),
        ess=jnp.zeros(4),
        resampled=jnp.zeros(4, bool),
    )
    posterior = smc.posterior_over_sequences(result)
    assert posterior.keys() == {(1, 2), (3,)}
    assert posterior[(1, 2)] == pytest.approx(0.4) and posterior[(3,)] == pytest.approx(0.6)


def test_validation(toy):
    config = smc.SMCConfig(num_particles=4, max_tokens=3)
    with pytest.raises(ValueError, match="proposal"):
        smc.SMCConfig(num_particles=4, max_tokens=3, proposal="greedy")
    with pytest.raises(ValueError, match="resampling"):
        smc.SMCConfig(num_particles=4, max_tokens=3, resampling="best")
    with pytest.raises(ValueError, match="num_particles"):
        smc.SMCConfig(num_particles=0, max_tokens=3)
    with pytest.raises(ValueError, match="condition.vocab_size"):
        smc.smc(
            jax.random.key(0),
            LM,
            toy["table"],
            PROMPT,
            config=config,
            condition=potentials.regex_potential("a", ("a",)),
        )
    with pytest.raises(ValueError, match="prompt"):
        smc.smc(jax.random.key(0), LM, toy["table"], jnp.zeros((0,), jnp.int32), config=config)
