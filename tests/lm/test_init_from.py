"""``init_from=hf:DIR`` (a Hugging Face directory fine-tuned through the loop), ``jaxlab
export-hf`` (a run back to the format) and ``jaxlab eval --hf-dir`` on the tiny Llama fixture."""

import json
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxlab import cli
from jaxlab.core import run as run_lib
from jaxlab.core.config import ConfigError
from jaxlab.core.recipe import get
from jaxlab.lm import training
from jaxlab.lm.hub import load_hf

FIXTURE = Path(__file__).parent / "fixtures" / "tiny_llama"


def _equal_trees(a, b) -> bool:
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    return ta == tb and all(
        x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(la, lb, strict=True)
    )


@pytest.fixture(scope="module")
def tokens(tmp_path_factory) -> Path:
    """The shipped corpus' first 300 documents, one per line, prepared with the fixture's
    tokenizer by ``jaxlab data prepare``."""
    from jaxlab.lm.data import load_corpus

    where = tmp_path_factory.mktemp("tokens")
    text = where / "corpus.txt"
    text.write_text("\n".join(d.replace("\n", " ") for d in load_corpus()[:300]) + "\n")
    out = where / "tokens.npy"
    argv = ["data", "prepare", str(text), str(out), "--tokenizer", str(FIXTURE), "--no-progress"]
    assert cli.main(argv) == 0
    return out


def _config(*overrides: str):
    return get("lm-tiny").config("tiny", overrides)


def test_the_model_section_comes_from_config_json(tokens):
    cfg = _config(f"init_from=hf:{FIXTURE}", f"data.source={tokens}")
    m = cfg.model
    assert (m.vocab_size, m.d_model, m.n_heads, m.n_kv_heads, m.head_dim) == (128, 32, 4, 2, 8)
    assert m.max_len == 32  # the preset's context is kept


def test_precision_keeps_its_fake_quantisation_on_a_loaded_model(tokens):
    over = [f"init_from=hf:{FIXTURE}", f"data.source={tokens}", "model.quant.w_bits=4"]
    cfg = get("precision").config(None, over)
    assert cfg.model.quant.w_bits == 4 and cfg.model.n_kv_heads == 2 and cfg.model.max_len == 64


def test_an_olmoe_directory_sets_the_olmoe_recipe_model(tokens):
    olmoe = FIXTURE.parent / "tiny_olmoe"
    cfg = get("olmoe").config("tiny", [f"init_from=hf:{olmoe}", f"data.source={tokens}"])
    assert cfg.model.qk_norm and cfg.model.n_kv_heads == 2
    assert (cfg.model.moe.num_experts, cfg.model.moe.top_k, cfg.model.moe.expert_ff) == (4, 2, 16)
    assert cfg.model.moe.tile_size == 64  # how the MoE is computed stays the recipe's
    with pytest.raises(ConfigError, match="a dense model, as the recipe's"):
        _config(f"init_from=hf:{olmoe}", f"data.source={tokens}")


@pytest.mark.parametrize(
    "overrides, key",
    [
        (("init_from=runs/x",), "init_from"),
        ((f"init_from=hf:{FIXTURE}",), "data.source"),
        ((f"init_from=hf:{FIXTURE}", "data.source=c.txt", "data.tokenizer=byte"), "data.tokenizer"),
    ],
    ids=["not-hf", "no-token-file", "byte-tokenizer"],
)
def test_bad_init_from_is_refused_by_key(overrides, key):
    with pytest.raises(ConfigError) as e:
        _config(*overrides)
    assert e.value.key == key


def test_a_fresh_state_takes_the_checkpoint_parameters():
    """``with_params``: the loaded tensors bitwise, boxes and placement kept, a fresh optimiser."""
    import flax.linen as nn
    import jax.numpy as jnp
    import optax

    from jaxlab.lm.hub.init_from import with_params

    loaded = load_hf(FIXTURE).params
    fresh = jax.tree.map(lambda x: nn.Partitioned(jnp.zeros_like(x), (None,) * x.ndim), loaded)
    opt = optax.adam(1e-3)
    state = training.LmState(fresh, opt.init(fresh), jnp.zeros((), jnp.int32))
    out = with_params(jax.tree.map(lambda x: x, state), loaded, opt.init)
    assert isinstance(out.params["params"]["final_norm"]["scale"], nn.Partitioned)
    assert _equal_trees(nn.meta.unbox(out.params), loaded)
    assert int(out.opt_state[0].count) == 0


def test_finetune_export_and_eval_from_the_command_line(tokens, tmp_path, capsys):
    """Train 8 steps from the fixture, export the run, reload it bitwise; its bits per token on
    the token file fall below the fixture's."""
    run_dir, out = tmp_path / "run", tmp_path / "exported"
    args = ["train", "lm-tiny", "--preset", "tiny", "--run-dir", str(run_dir)]
    assert cli.main([*args, f"init_from=hf:{FIXTURE}", f"data.source={tokens}"]) == 0
    assert cli.main(["export-hf", str(run_dir), str(out)]) == 0
    opened = run_lib.open_run(run_dir)
    import flax.linen as nn

    exported = load_hf(out).params
    assert _equal_trees(exported, nn.meta.unbox(opened.state.params))
    # 8 Adam steps at lr <= 3e-3 move no weight further than ~0.024 from the fixture's
    moved = jax.tree.map(lambda a, b: float(np.abs(a - b).max()), exported, load_hf(FIXTURE).params)
    assert 0 < max(jax.tree.leaves(moved)) < 0.03, moved
    assert (out / "tokenizer.json").read_bytes() == (FIXTURE / "tokenizer.json").read_bytes()
    assert json.loads((out / "config.json").read_text())["eos_token_id"] == 1
    capsys.readouterr()
    scores = []
    for directory in (FIXTURE, out):
        argv = ["eval", "--hf-dir", str(directory), "--data", str(tokens), "--seq-len", "31"]
        assert cli.main([*argv, "--max-windows", "16"]) == 0
        scores.append(json.loads(capsys.readouterr().out.splitlines()[-1]))
    assert scores[0]["tokens"] == scores[1]["tokens"] == 16 * 31
    assert scores[1]["bits_per_token"] < scores[0]["bits_per_token"]
    assert cli.main(["export-hf", str(run_dir), str(out)]) == 2  # not an empty directory


def test_token_ids_beyond_the_model_are_refused_at_load(tmp_path):
    from jaxlab.lm.data import ByteLMDataConfig, train_iterator

    path = tmp_path / "t.npy"
    np.save(path, np.arange(300, dtype=np.uint16) % 200)
    cfg = ByteLMDataConfig(seq_len=8, batch_size=2, source=str(path))
    with pytest.raises(ValueError, match=r"holds id 199.*vocab_size=128"):
        train_iterator(cfg, vocab_size=128)
    assert next(iter(train_iterator(cfg, vocab_size=200)))["tokens"].shape == (2, 9)
