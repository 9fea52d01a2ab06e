"""dept recipe: the tiny preset trains through core.loop.run and evaluates; its round on 4
simulated devices (sources over the data axis) equals one device; config errors; a start from a
Hugging Face directory (``init_from=hf:DIR``)."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core import config as C
from jaxlab.core import loop
from jaxlab.core import recipe as recipe_lib
from jaxlab.core import run as run_lib
from jaxlab.core.testing import sharded_step_matches
from jaxlab.lm import dept as dept_lib
from jaxlab.lm.dept_data import make_sources
from jaxlab.lm.hub import load_hf, load_tokenizer
from jaxlab.lm.model import Decoder, next_token_loss

RECIPE = recipe_lib.get("dept")


def test_tiny_preset_runs_end_to_end(tmp_path):
    cfg = C.replace(RECIPE.config("tiny"), **{"dept.variant": "trim"})
    result = loop.run(RECIPE, cfg, tmp_path)
    assert result.step == cfg.loop.total_steps
    m = result.eval_metrics
    assert all(np.isfinite(m[f"ppl/source{i}"]) for i in range(3))
    assert m["client_embedding_params_max"] < m["server_embedding_params"]
    assert 0 < m["bytes_communicated"] < m["bytes_dp_equal_tokens"]
    assert (tmp_path / "checkpoints").exists()
    assert (tmp_path / "dept_summary.json").exists()


def test_sharded_round_equals_single_device():
    cfg = C.replace(
        RECIPE.config("tiny"),
        **{"dept.variant": "spec", "data.n_sources": 4, "dept.sources_per_round": 4},
    )
    sharded_step_matches(RECIPE, cfg, {"mesh.data": 4}, steps=1, rtol=2e-5, atol=2e-6)


def test_config_errors():
    with pytest.raises(C.ConfigError, match="'dept.variant'"):
        RECIPE.config("tiny", ["dept.variant=global"])
    with pytest.raises(C.ConfigError, match="sources_per_round"):
        RECIPE.config("tiny", ["dept.sources_per_round=4"])
    for fewer in ("0", "-1"):  # fewer participating sources than one
        with pytest.raises(C.ConfigError, match="'dept.sources_per_round'"):
            RECIPE.config("tiny", [f"dept.sources_per_round={fewer}"])
    with pytest.raises(C.ConfigError, match="'optim.outer.momentum'"):
        RECIPE.config("tiny", ["optim.outer.momentum=1.0"])
    assert RECIPE.config("tiny", ["dept.variant=spec"]).dept.variant == "spec"


HF = Path(__file__).parents[1] / "lm" / "fixtures"


def test_init_from_hf_starts_from_the_directory():
    """GLOB from ``tiny_llama``: the body and server embeddings are the directory's and the
    sources are in its tokenizer, so every source's held-out loss is the loaded model's own."""
    cfg = RECIPE.config("tiny", [f"init_from=hf:{HF / 'tiny_llama'}", "mesh.data=1"])
    assert cfg.data.vocab_size == cfg.model.vocab_size == 128 and cfg.model.n_kv_heads == 2
    parts = run_lib.build(RECIPE, cfg)
    state = RECIPE.finetune(cfg, run_lib.init_state(parts, jax.random.PRNGKey(0)))
    loaded = load_hf(HF / "tiny_llama").params["params"]
    body, emb = dept_lib.split_params(loaded)
    assert jax.tree.all(jax.tree.map(np.array_equal, state.body, body))
    assert jax.tree.all(jax.tree.map(np.array_equal, state.server_emb, emb))
    src = make_sources(cfg.data, "glob", tokenizer=load_tokenizer(HF / "tiny_llama").tokenizer)
    first = dept_lib.round_windows(src.train, cfg.seed, 0, cfg.dept.local_steps, 4, 16)
    np.testing.assert_array_equal(next(parts.data())["tokens"], first)  # the recipe's tokens
    windows = dept_lib.eval_windows(src.val, cfg.data.eval_windows, cfg.data.seq_len)
    dept = dept_lib.Dept(cfg.dept, cfg.model, src.vocabs)
    model = Decoder(cfg.model)

    def losses(state, params, w):
        own = lambda w: next_token_loss(model.apply({"params": params}, w[:, :-1]), w[:, 1:])  # noqa: E731
        return dept.evaluate(state, w), jax.vmap(own)(w)

    got, want = jax.jit(losses)(state, loaded, jnp.asarray(windows))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5)


def test_spec_sources_each_start_from_the_pretrained_embeddings():
    loaded = load_hf(HF / "tiny_llama_tied").params["params"]
    body, emb = dept_lib.split_params(loaded)
    zeros = lambda t, lead=(): jax.tree.map(lambda x: jnp.zeros(lead + x.shape, x.dtype), t)  # noqa: E731
    optim = dept_lib.DeptOptim()
    hparams = {"optim.outer.lr": jnp.float32(0.7)}
    outer = dept_lib.outer_optimizer(optim, 4, hparams)
    fresh = dept_lib.DeptState(
        body=zeros(body), server_emb={}, client_emb=zeros(emb, (3,)),
        outer_opt=outer.init({"body": zeros(body), "emb": {}}), key=jax.random.PRNGKey(0),
        round=jnp.zeros((), jnp.int32), rows_sent=jnp.zeros((), jnp.int32), hparams=hparams,
    )  # fmt: skip
    state = dept_lib.from_pretrained(fresh, loaded, "spec", outer)
    assert jax.tree.all(jax.tree.map(np.array_equal, state.body, body))
    assert set(state.client_emb) == {"embed"}  # tied: no head
    for k in range(3):
        assert np.array_equal(state.client_emb["embed"][k], emb["embed"])
    with pytest.raises(ValueError, match=r"client_emb\['embed'\]: pretrained shape \(128, 32\)"):
        small = dict(fresh.client_emb, embed=jnp.zeros((3, 64, 32)))
        dept_lib.from_pretrained(fresh.replace(client_emb=small), loaded, "spec", outer)


def test_init_from_hf_refuses_what_does_not_fit():
    with pytest.raises(C.ConfigError, match="'init_from'.*a dense model, as the recipe's"):
        RECIPE.config("tiny", [f"init_from=hf:{HF / 'tiny_olmoe'}"])
    with pytest.raises(C.ConfigError, match="'init_from'"):
        RECIPE.config("tiny", ["init_from=runs/x"])
