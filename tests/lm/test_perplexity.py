"""Perplexity and bits per token of a decoder over packed windows equal the mean next-token
loss computed in one pass (the padded last batch is masked out)."""

import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.lm import perplexity
from jaxlab.lm.hub import load_hf
from jaxlab.lm.model import Decoder, next_token_loss

FIXTURE = Path(__file__).parent / "fixtures" / "tiny_llama"


def test_metrics_equal_the_mean_loss_of_all_windows():
    loaded = load_hf(FIXTURE)
    model = Decoder(loaded.cfg)
    tokens = np.random.default_rng(0).integers(0, loaded.cfg.vocab_size, 5 * 9 + 4)
    windows = perplexity.windows_of(tokens, 8)  # 5 windows of 9, the last 4 ids dropped
    assert windows.shape == (5, 9)
    got = perplexity.evaluate(model, loaded.params, windows, batch_size=2, num_bytes=100)
    logits = jax.jit(model.apply)(loaded.params, jnp.asarray(windows[:, :-1]))
    want = float(next_token_loss(logits, jnp.asarray(windows[:, 1:])))
    assert got["tokens"] == 40 and got["windows"] == 5
    assert got["nats_per_token"] == pytest.approx(want, rel=1e-5)
    assert got["perplexity"] == pytest.approx(math.exp(want), rel=1e-5)
    assert got["bits_per_token"] == pytest.approx(want / math.log(2), rel=1e-5)
    assert got["bits_per_byte"] == pytest.approx(40 * want / (100 * math.log(2)), rel=1e-5)


def test_too_few_tokens_for_a_window_is_refused():
    with pytest.raises(ValueError, match="make no window"):
        perplexity.windows_of(np.arange(5), 8)
