"""KV-cached generation with the project's decoder equals recomputing the full forward pass, and
`jaxlab generate` samples from a trained run."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab import cli
from jaxlab.commands.generate import decoder_lm
from jaxlab.core import loop
from jaxlab.core import recipe as recipe_lib
from jaxlab.decoding.generate import generate
from jaxlab.decoding.interface import from_logits_fn
from jaxlab.decoding.sampling import SamplingParams
from jaxlab.lm.model import Decoder, DecoderConfig


def test_cached_greedy_equals_uncached_greedy():
    cfg = DecoderConfig(d_model=32, n_layers=2, n_heads=2, head_dim=16, d_ff=64, max_len=32)
    model = Decoder(cfg)
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32))
    prompt = jnp.array([[256, 72, 105, 0], [256, 65, 0, 0]], jnp.int32)
    lengths = jnp.array([3, 2], jnp.int32)
    kw = dict(max_len=20, sampling_params=SamplingParams(temperature=0.0))
    cached = jax.jit(
        lambda p: generate(jax.random.PRNGKey(1), decoder_lm(model), p, prompt, lengths, **kw)
    )(params)
    full = from_logits_fn(lambda p, t: model.apply(p, t), cfg.vocab_size)
    uncached = jax.jit(lambda p: generate(jax.random.PRNGKey(1), full, p, prompt, lengths, **kw))(
        params
    )
    np.testing.assert_array_equal(cached.tokens, uncached.tokens)
    np.testing.assert_array_equal(cached.lengths, uncached.lengths)
    assert int(cached.lengths.min()) == 20


def test_generate_command(tmp_path, capsys):
    r = recipe_lib.get("lm-tiny")
    loop.run(r, r.config("tiny"), tmp_path)
    code = cli.main(
        [
            "generate",
            "lm-tiny",
            "--run-dir",
            str(tmp_path),
            "--prompt",
            "def ",
            "--max-new-tokens",
            "8",
            "--temperature",
            "0",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("def ")
