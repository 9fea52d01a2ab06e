"""Speculative decoding and cascades with two jaxlab decoder LMs (KV-cached, through
``commands.generate.decoder_lm``): at temperature 0 the output is the large model's greedy
decoding, and Chow's rule with alpha = 1 (always keep the drafter, bonus token from the cascade
target too) is the small model's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.commands.generate import decoder_lm
from jaxlab.decoding import generate, speculative
from jaxlab.decoding.sampling import SamplingParams
from jaxlab.lm.model import Decoder, DecoderConfig
from jaxlab.lm.tokenizer import BOS_ID

MAX_LEN, GAMMA = 20, 3
GREEDY = SamplingParams(temperature=0.0)


def make_model(d_model: int, n_layers: int, seed: int):
    # LeCun-normal init gives peaked logits, so greedy choices are not decided by rounding.
    cfg = DecoderConfig(
        d_model=d_model,
        n_layers=n_layers,
        n_heads=2,
        head_dim=8,
        d_ff=2 * d_model,
        max_len=32,
        init="lecun_normal",
    )
    model = Decoder(cfg)
    return decoder_lm(model), model.init(jax.random.key(seed), jnp.zeros((1, 4), jnp.int32))


@pytest.fixture(scope="module")
def setup():
    small, small_params = make_model(16, 1, seed=0)
    large, large_params = make_model(32, 2, seed=1)
    prompt = jnp.asarray([[BOS_ID, *b"def f", 0, 0], [BOS_ID, *b"The"] + [0] * 4], jnp.int32)
    lengths = jnp.asarray([6, 4], jnp.int32)

    def greedy(lm):
        fn = jax.jit(
            lambda p: generate.generate(
                jax.random.key(0), lm, p, prompt, lengths, max_len=MAX_LEN, sampling_params=GREEDY
            )
        )
        return fn

    @jax.jit
    def spec(key, small_params, large_params, rule):
        return speculative.speculative_decode(
            key,
            small,
            large,
            small_params,
            large_params,
            prompt,
            lengths,
            config=speculative.SpeculativeConfig(gamma=GAMMA, max_len=MAX_LEN, cascade_bonus=True),
            rule=rule,
            sampling_params=GREEDY,
        )

    return {
        "large_greedy": greedy(large)(large_params),
        "small_greedy": greedy(small)(small_params),
        "spec": lambda key, rule: spec(key, small_params, large_params, rule),
    }


def test_speculative_decoding_at_temperature_zero_is_greedy_decoding_of_the_large_model(setup):
    want = setup["large_greedy"]
    for seed in range(2):
        out = setup["spec"](jax.random.key(seed), speculative.cascade_rule("speed"))
        np.testing.assert_array_equal(out.tokens, want.tokens)
        np.testing.assert_array_equal(out.lengths, want.lengths)
        generated = int(jnp.sum(out.stats.generated))
        assert generated == int(jnp.sum(want.lengths - jnp.asarray([6, 4])))
        assert int(jnp.sum(out.stats.target_calls)) <= generated
    # the two random models disagree somewhere, so this is not trivially the drafter's output
    assert not np.array_equal(setup["small_greedy"].tokens, want.tokens)


def test_chow_cascade_alpha_one_is_the_drafter_and_alpha_zero_the_verifier(setup):
    keep_drafter = setup["spec"](jax.random.key(0), speculative.cascade_rule("chow", 1.0))
    np.testing.assert_array_equal(keep_drafter.tokens, setup["small_greedy"].tokens)
    assert float(keep_drafter.stats.acceptance_rate) == 1.0
    defer = setup["spec"](jax.random.key(0), speculative.cascade_rule("chow", 0.0))
    np.testing.assert_array_equal(defer.tokens, setup["large_greedy"].tokens)
