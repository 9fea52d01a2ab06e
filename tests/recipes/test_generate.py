"""KV-cached generation with the project's decoder equals recomputing the full forward pass, and
`jaxlab generate` samples from a trained run."""

import json
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import cli
from jaxlab.commands.generate import decoder_lm
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


def _greedy_reference(model, params, prompt: str, n: int) -> str:
    """Greedy continuation by full forward passes (no cache, one prompt at a time)."""
    from jaxlab.lm.tokenizer import ByteTokenizer

    tok = ByteTokenizer()
    ids = list(tok.encode(prompt, add_bos=True, add_eos=False))
    start = len(ids)

    # one program: the ids padded to the model's context (causal, so the padding after position
    # i leaves its logits as they are), the greedy token after position i
    @jax.jit
    def next_id(tokens, i):
        return jnp.argmax(model.apply(params, tokens)[0, i])

    for _ in range(n):
        padded = np.zeros((1, model.cfg.max_len), np.int32)
        padded[0, : len(ids)] = ids
        ids.append(int(next_id(padded, len(ids) - 1)))
    return tok.decode(np.asarray(ids[start:], np.int32), stop_at_eos=True)


def test_train_eval_generate_from_the_command_line(tmp_path, capsys):
    """`jaxlab train` (with evaluations every 4 steps), `jaxlab eval` and `jaxlab generate` with
    two prompts of different lengths at temperature 0: each line is the prompt followed by the
    greedy continuation of the trained model computed without the cache."""
    import json

    from jaxlab.core import run

    run_dir = str(tmp_path / "r")
    assert (
        cli.main(
            ["train", "lm-tiny", "--preset", "tiny", "--run-dir", run_dir, "loop.eval_every=4"]
        )
        == 0
    )
    capsys.readouterr()
    rows = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "eval/val_loss" in r] == [4, 8]
    assert cli.main(["eval", "lm-tiny", "--run-dir", run_dir]) == 0
    ev = json.loads(capsys.readouterr().out)
    # reopened on one device; the run evaluated on 8 (a different reduction order)
    assert ev["step"] == 8 and ev["val_loss"] == pytest.approx(rows[-1]["eval/val_loss"], rel=1e-5)
    prompts = ["def ", "import x"]
    code = cli.main(
        [
            "generate",
            "lm-tiny",
            "--run-dir",
            run_dir,
            "--prompt",
            prompts[0],
            "--prompt",
            prompts[1],
            "--max-new-tokens",
            "6",
            "--temperature",
            "0",
        ]
    )
    out = capsys.readouterr().out.splitlines()
    assert code == 0 and len(out) == 2
    opened = run.open_run(run_dir)
    model = Decoder(opened.cfg.model)
    for p, line in zip(prompts, out, strict=True):
        want = _greedy_reference(model, opened.state.params, p, 6)
        assert line == p + want, (line, want)


def test_train_refuses_a_tpu_config_of_another_recipe(tmp_path, capsys):
    from pathlib import Path

    cfg = Path(__file__).resolve().parents[2] / "tpu_configs" / "olmoe-1b-7b-v5p-128.yaml"
    code = cli.main(
        ["train", "lm-tiny", "--tpu-config", str(cfg), "--run-dir", str(tmp_path / "x")]
    )
    err = capsys.readouterr().err
    assert code == 2 and "olmoe" in err and "lm-tiny" in err
    assert not (tmp_path / "x").exists()


HF_FIXTURES = Path(__file__).parents[1] / "lm" / "fixtures"


@pytest.mark.parametrize("name", ["tiny_llama", "tiny_olmoe"])
def test_generate_from_a_hugging_face_directory_equals_transformers_greedy(capsys, name):
    """`jaxlab generate --hf-dir` at temperature 0 continues the fixture's prompt with the tokens
    of `transformers`' greedy `generate`, decoded by the directory's own tokenizer."""
    from jaxlab.lm.hub import load_tokenizer

    directory = HF_FIXTURES / name
    ref = np.load(directory / "reference.npz")
    tok = load_tokenizer(directory)
    prompt = tok.decode(ref["tokens"])
    args = ["generate", "--hf-dir", str(directory), "--prompt", prompt, "--temperature", "0"]
    assert cli.main([*args, "--max-new-tokens", str(ref["greedy"].shape[1])]) == 0
    assert capsys.readouterr().out == prompt + tok.decode(ref["greedy"][0]) + "\n"


def test_smc_from_a_hugging_face_directory_keeps_to_the_regex(capsys):
    """`--method smc --hf-dir`: the regex reads each token's bytes (``Ġ`` a space), so every
    completion matches it; the posterior sums to one."""
    pattern = " [a-z]+( [a-z]+)?\\."
    args = ["generate", "--hf-dir", str(HF_FIXTURES / "tiny_llama"), "--prompt", "the cat"]
    args += ["--method", "smc", "--regex", pattern, "--particles", "8", "--max-new-tokens", "8"]
    assert cli.main(args) == 0
    *lines, stats = capsys.readouterr().out.splitlines()
    assert lines and json.loads(stats)["particles"] == 8
    for line in lines:
        weight, text = line.split("\t")
        assert text.startswith("the cat") and re.fullmatch(pattern, text[7:]), text
    assert sum(float(line.split("\t")[0]) for line in lines) == pytest.approx(1.0, abs=1e-2)


def test_generate_needs_exactly_one_model(capsys):
    assert cli.main(["generate", "--prompt", "x"]) != 0
    assert "exactly one model" in capsys.readouterr().err
