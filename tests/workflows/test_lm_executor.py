"""The LM executor end to end on a tiny jaxlab decoder: batched constrained calls always give
answers in format, programs in the arithmetic grammar, and a search runs on it."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.commands.workflows import byte_text_lm
from jaxlab.lm.model import Decoder, DecoderConfig
from jaxlab.lm.tokenizer import VOCAB_SIZE
from jaxlab.workflows import interpreter, lm_executor, search, tasks
from jaxlab.workflows.optimizer import EditOptimizer
from jaxlab.workflows.program import Step, Workflow, initial_workflow


@pytest.fixture(scope="module")
def executor():
    cfg = DecoderConfig(
        d_model=16, n_layers=1, n_heads=2, head_dim=8, d_ff=32, max_len=192, vocab_size=VOCAB_SIZE
    )
    model = Decoder(cfg)
    # random weights from the parameter shapes (no compiled init: the test is about the executor)
    shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 4), jnp.int32))
    leaves, tree = jax.tree.flatten(shapes)
    rng = np.random.default_rng(0)
    params = jax.tree.unflatten(
        tree, [jnp.asarray(0.3 * rng.standard_normal(x.shape), x.dtype) for x in leaves]
    )
    text_lm = byte_text_lm(model, params)
    return lm_executor.LMExecutor(text_lm, num_particles=2, width_bucket=64)


@pytest.fixture(scope="module")
def problems():
    return tasks.make_problems(0, 4)


def test_constrained_outputs_parse(executor, problems):
    key = jax.random.key(0)
    texts = [lm_executor.prompt_text("programmer", "plain", q) for q in problems.questions]
    for text in executor.generate_texts(key, "expr", texts):
        assert text is not None and re.fullmatch(r"[0-9()+-]+", text)
    texts = [lm_executor.prompt_text("review", "plain", q, 3) for q in problems.questions]
    assert set(executor.generate_texts(key, "review", texts)) <= {"yes", "no"}


def test_every_operator_runs_batched_and_a_search_runs(executor, problems):
    wf = Workflow(
        (
            Step.make("sc_ensemble", solver="programmer", n=2, prompt="plain"),
            Step.make("review", prompt="plain"),
            Step.make("revise", prompt="plain"),
            Step.make("format"),
        )
    )
    answers = interpreter.run_workflow(jax.random.key(1), wf, executor, problems)
    assert np.asarray(answers.valid).all()
    calls = executor.stats["calls"]
    assert executor.stats["prompts"] >= 2 * len(problems) and executor.stats["tokens"] > 0
    state = search.run_search(
        initial_workflow(),
        executor,
        problems,
        EditOptimizer(),
        search.SearchConfig(seed=0, max_rounds=2, validation_runs=1),
    )
    assert len(state.rounds) == 2 and executor.stats["calls"] > calls
    assert all(0.0 <= r["score"] <= 1.0 for r in state.rounds)
