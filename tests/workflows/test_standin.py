"""The plurality vote and the stand-in executor against closed forms (binomial tests)."""

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from jaxlab.workflows import interpreter, tasks
from jaxlab.workflows.interpreter import Answers, majority, majority_accuracy
from jaxlab.workflows.program import Step, Workflow
from jaxlab.workflows.standin import StandInExecutor, StandInParams

N = 20_000


def _problems(n):
    return tasks.Problems(tuple(f"q{i}" for i in range(n)), np.arange(n, dtype=np.int32), ("",) * n)


def test_majority_matches_a_numpy_plurality_reference():
    rng = np.random.default_rng(0)
    value = rng.integers(0, 3, (6, 200)).astype(np.int32)
    valid = rng.random((6, 200)) < 0.8
    out = majority(Answers(jnp.asarray(value), jnp.asarray(valid)))
    for p in range(200):
        votes = [
            (np.sum((value[:, p] == value[i, p]) & valid[:, p]) if valid[i, p] else 0)
            for i in range(6)
        ]
        best = int(np.argmax(votes))
        assert bool(out.valid[p]) == bool(valid[:, p].any())
        if valid[:, p].any():
            assert int(out.value[p]) == value[best, p]


def test_majority_of_five_closed_form_and_stand_in_ensemble():
    assert abs(majority_accuracy(0.6, 5) - 0.68256) < 1e-12
    assert abs(majority_accuracy(0.6, 1) - 0.6) < 1e-12
    problems = _problems(N)
    wf = Workflow((Step.make("sc_ensemble", solver="generate", n=5, prompt="plain"),))
    acc = interpreter.accuracy(
        interpreter.run_workflow(jax.random.key(0), wf, StandInExecutor(), problems), problems
    )
    k = int(round(acc * N))
    assert stats.binomtest(k, N, 0.68256).pvalue > 1e-3, acc


def test_stand_in_review_revise_and_format_closed_forms():
    problems = _problems(N)
    ex = StandInExecutor(StandInParams(unformatted_programmer=0.3))
    # review (r = .8) then revise (q = .7) after generate (p = .6):
    # p (r + (1 - r) q) + (1 - p) r q = .6 * .94 + .4 * .56 = .788
    wf = Workflow(
        (
            Step.make("generate", prompt="plain"),
            Step.make("review", prompt="plain"),
            Step.make("revise", prompt="plain"),
        )
    )
    # programmer (.9) in format with .7, format fixes with .95: .9 * (.7 + .3 * .95) = .8865
    fmt = Workflow((Step.make("programmer", prompt="plain"), Step.make("format")))
    for w, p, seed in ((wf, 0.788, 1), (fmt, 0.8865, 2)):
        acc = interpreter.accuracy(
            interpreter.run_workflow(jax.random.key(seed), w, ex, problems), problems
        )
        assert stats.binomtest(int(round(acc * N)), N, p).pvalue > 1e-3, (w, acc, p)
