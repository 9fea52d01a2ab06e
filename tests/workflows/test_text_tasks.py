"""Searches on the shipped sample of each benchmark format with scripted executor and optimizer
models: official scoring, the sandboxed Test operator, resume (the Hugging Face fixture model
runs both roles through the command in ``test_workflows_show.py``)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.workflows import formats, interpreter, search
from jaxlab.workflows.lm_optimizer import LMOptimizer
from jaxlab.workflows.parse import parse_workflow
from jaxlab.workflows.program import initial_workflow
from jaxlab.workflows.sandbox import Sandbox, SandboxUnavailable
from jaxlab.workflows.text_executor import TextExecutor


def _optimizer(prompt, seed):
    """A scripted optimizer: an ensemble with a review, or a reply without a program."""
    if seed % 3 == 0:
        return "Add more checks."
    return (
        "<modification>ensemble and review</modification>\n<graph>\ndef workflow(problem):\n"
        '    answer = sc_ensemble([generate(problem, prompt="plain") for _ in range(3)])\n'
        '    feedback = review(problem, answer, prompt="plain")\n'
        '    answer = revise(problem, answer, feedback, prompt="plain")\n'
        "    return answer\n</graph>"
    )


@pytest.fixture(scope="module")
def sandbox():
    return Sandbox(timeout_s=2.0)


def _oracle(task):
    """A scripted executor model: the reference answer for items 0, 2, 4 (and for every item
    once a previous answer is shown), nonsense otherwise; ``yes`` to reviews; ``A`` to picks."""

    def reply(prompt, i):
        if prompt.endswith("Correct:"):
            return "yes"
        if prompt.endswith("letter:"):
            return "A"
        if i % 2 and "Previous answer" not in prompt:
            return "I am not sure."
        ref = task.reference(i)
        if task.format == "math":
            return f"So it is \\boxed{{{ref}}}."
        if task.format in ("humaneval", "mbpp"):
            return f"```python\n{ref}```"
        return f"The answer is {ref}" if task.format == "gsm8k" else ref

    def generate(prompts, seed):
        out = []
        for p in prompts:
            i = max(range(len(task)), key=lambda j: task.questions[j] in p)
            out.append(reply(p, i))
        return out

    return generate


@pytest.mark.parametrize("fmt", sorted(formats.FIELDS))
def test_a_search_runs_end_to_end_on_each_format(fmt, sandbox, tmp_path):
    task = formats.load_task(fmt, formats.sample_path(fmt))
    executor = TextExecutor(_oracle(task), task, sandbox)
    config = search.SearchConfig(seed=0, max_rounds=2, validation_runs=1, max_expansion_tries=2)
    args = (initial_workflow(), executor, executor.problems(), LMOptimizer(_optimizer), config)
    state = search.run_search(*args, run_dir=tmp_path / "run")
    first = state.rounds[0]
    assert first["score"] == pytest.approx(0.6)  # items 0, 2, 4 of 5
    assert first["failures"]["wrong_value"] + first["failures"]["out_of_format"] == 2
    assert {e["expected"] for e in first["failures"]["examples"]} <= {
        task.reference(i) for i in range(len(task))
    }
    assert first["cost"]["calls"] == 1.0 and first["cost"]["generated_tokens"] > 0
    rejected = sum(state.rejection_counts().values())
    assert rejected + len(state.rounds) - 1 == state.optimizer_usage()["calls"]
    # the ensemble + review child: where the odd items' nonsense has no answer in the format
    # (no number, no \boxed{}), the review rejects it and the revision is right
    extractable = fmt in ("gsm8k", "math")
    assert state.rounds[1]["score"] == pytest.approx(1.0 if extractable else 0.6)
    assert state.rounds[1]["cost"]["calls"] == pytest.approx(3 + 1 + 0.4 * extractable)
    if fmt == "gsm8k":  # resume: the same record from the saved state
        again = search.run_search(*args, run_dir=tmp_path / "run")
        assert again.to_json() == state.to_json()


REVISE_AND_TEST = """def workflow(problem):
    answer = generate(problem, prompt="plain")
    answer = test(problem, answer, max_loops=1)
    return answer
"""


@pytest.mark.parametrize("fmt", ["humaneval", "mbpp"])
def test_the_test_operator_runs_unit_tests_in_the_sandbox_and_revises_failures(fmt, sandbox):
    task = formats.load_task(fmt, formats.sample_path(fmt))
    executor = TextExecutor(_oracle(task), task, sandbox)
    problems, key = executor.problems(), jax.random.key(0)
    plain = interpreter.evaluate(key, initial_workflow(), executor, problems, 1)
    tested = interpreter.evaluate(key, parse_workflow(REVISE_AND_TEST), executor, problems, 1)
    assert plain.mean == pytest.approx(0.6) and tested.mean == 1.0
    assert tested.cost["calls"] == 3.0  # solve + the operator's check and revision


def test_without_a_sandbox_the_test_operator_is_refused_by_name():
    task = formats.load_task("mbpp", formats.sample_path("mbpp"))
    executor = TextExecutor(_oracle(task), task, sandbox=None)
    with pytest.raises(SandboxUnavailable, match="the Test operator is refused"):
        interpreter.run_workflow(
            jax.random.key(0), parse_workflow(REVISE_AND_TEST), executor, executor.problems()
        )


def test_the_programmer_reply_is_evaluated_by_the_whitelisting_interpreter(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    task = formats.load_task("gsm8k", formats.sample_path("gsm8k"))
    replies = ["12+3*4\nso 24", "__import__('os').system('touch PWNED')", "150-45-60"]

    def generate(prompts, seed):
        return [replies[j % 3] for j in range(len(prompts))]

    executor = TextExecutor(generate, task)
    problems = executor.problems([0, 1, 2])
    out = executor.solve(jax.random.key(0), "programmer", "plain", problems, 1)
    texts = [executor.text(v) for v in out.value[0]]
    assert texts[0] == "24" and texts[2] == "45" and texts[1] == ""  # no number: no answer
    assert not (tmp_path / "PWNED").exists()


def _picker(letter_of):
    """A scripted chooser: answers ``letter_of(listed candidate texts)`` to each choice prompt
    and ``7`` to every question (so the candidates come from the solve call's replies)."""

    def generate(prompts, seed):
        out = []
        for p in prompts:
            if p.endswith("letter:"):
                listed = [ln[3:] for ln in p.splitlines() if ln[:1].isupper() and ln[1:3] == ": "]
                out.append(letter_of(listed))
            else:
                out.append("7")
        return out

    return generate


def _choose(executor, candidates):
    task = executor.task
    value = np.asarray([[executor._intern(t) for t in candidates]], np.int32).T  # [n, 1]
    cands = interpreter.Answers(value=jnp.asarray(value), valid=jnp.asarray(value != 0))
    out = executor.choose(jax.random.key(3), executor.problems([0]), cands)
    return executor.text(out.value[0]), task


def test_md_ensemble_choice_is_the_majority_of_picks_over_shuffled_orders():
    task = formats.load_task("gsm8k", formats.sample_path("gsm8k"))
    seen_orders = []

    def pick(listed):  # "40" when it is listed in the first two places, else the first listed
        seen_orders.append(tuple(listed))
        return "ABC"[listed.index("40")] if listed.index("40") < 2 else "A"

    executor = TextExecutor(_picker(pick), task, choose_votes=7)
    chosen, _ = _choose(executor, ["30", "40", "50"])
    assert len(seen_orders) == 7 and len(set(seen_orders)) > 1  # one prompt per shuffled order
    assert executor.stats["calls"] == 1  # every vote in one batched call
    votes = ["40" if o.index("40") < 2 else o[0] for o in seen_orders]
    counts = {c: votes.count(c) for c in ("30", "40", "50")}
    assert counts["40"] > max(counts["30"], counts["50"]) and chosen == "40"
    # the first two picks name "30", the other five "40": the majority, not the first, wins
    order = iter(["30", "30"] + ["40"] * 5)
    later = TextExecutor(
        _picker(lambda listed: "ABC"[listed.index(next(order))]), task, choose_votes=7
    )
    assert _choose(later, ["30", "40", "50"])[0] == "40"
    assert executor.stats["unparsed_choices"] == 0


def test_md_ensemble_choice_counts_unparseable_letters_and_keeps_going():
    task = formats.load_task("gsm8k", formats.sample_path("gsm8k"))
    replies = iter(["no idea", "Z", "B", "The best is B", "(B)"] * 3)

    def pick(listed):
        reply = next(replies)
        return reply.replace("B", "ABC"[listed.index("9")])  # B: where "9" is listed

    executor = TextExecutor(_picker(pick), task, choose_votes=5)
    chosen, _ = _choose(executor, ["8", "9", "10"])
    assert chosen == "9" and executor.stats["unparsed_choices"] == 2
    nothing = TextExecutor(_picker(lambda listed: "I cannot tell."), task, choose_votes=3)
    chosen, _ = _choose(nothing, ["8", "9", "10"])
    assert chosen == "8" and nothing.stats["unparsed_choices"] == 3  # no vote: the first stays


def test_md_ensemble_is_charged_its_samples_and_its_votes():
    task = formats.load_task("gsm8k", formats.sample_path("gsm8k"))
    executor = TextExecutor(_picker(lambda listed: "A"), task, choose_votes=4)
    code = (
        "def workflow(problem):\n"
        '    answer = md_ensemble(problem, [generate(problem, prompt="plain") for _ in range(3)])\n'
        "    return answer\n"
    )
    problems = executor.problems()
    ev = interpreter.evaluate(jax.random.key(0), parse_workflow(code), executor, problems, 1)
    assert ev.cost["calls"] == 3 + 4 and executor.stats["prompts"] == (3 + 4) * len(problems)
    assert ev.mean == pytest.approx(float(np.mean([task.score("7", i) for i in range(5)])))
