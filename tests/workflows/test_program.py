"""Workflows as data: printing, JSON, validation errors, the edit grammar, the programmer."""

import pytest

from jaxlab.workflows import optimizer
from jaxlab.workflows.program import Step, Workflow, WorkflowError, initial_workflow, validate
from jaxlab.workflows.programmer import ProgrammerError, safe_eval

FULL = Workflow(
    (
        Step.make("sc_ensemble", solver="programmer", n=5, prompt="careful"),
        Step.make("review", prompt="plain"),
        Step.make("revise", prompt="step_by_step"),
        Step.make("format"),
        Step.make("test", max_loops=2),
    )
)


def test_workflow_prints_as_code_and_round_trips_through_json():
    assert FULL.to_code() == (
        "def workflow(problem):\n"
        '    answer = sc_ensemble([programmer(problem, prompt="careful") for _ in range(5)])\n'
        '    feedback = review(problem, answer, prompt="plain")\n'
        '    answer = revise(problem, answer, feedback, prompt="step_by_step")\n'
        "    answer = format(problem, answer)\n"
        "    answer = test(problem, answer, max_loops=2)\n"
        "    return answer\n"
    )
    assert Workflow.from_json(FULL.to_json()) == FULL
    assert validate(FULL) is FULL
    assert FULL.num_calls() == 5 + 1 + 1 + 2 * 2


@pytest.mark.parametrize(
    "steps, message",
    [
        (
            [{"op": "generate", "args": {"prompt": "plain"}}, {"op": "summon"}],
            "step 1: unknown operator 'summon'",
        ),
        ([{"op": "generate", "args": {"prompt": "loud"}}], "step 0 (generate): prompt='loud'"),
        ([{"op": "sc_ensemble", "args": {"solver": "generate", "n": 1, "prompt": "plain"}}], "n=1"),
        ([{"op": "review", "args": {"prompt": "plain"}}], "step 0 (review): the first step"),
        (
            [
                {"op": "generate", "args": {"prompt": "plain"}},
                {"op": "revise", "args": {"prompt": "plain"}},
            ],
            "step 1 (revise): must directly follow a review",
        ),
        ([{"op": "generate", "args": {}}], "step 0 (generate): arguments [], expected ['prompt']"),
    ],
    ids=["unknown-op", "bad-prompt", "bad-n", "no-solver", "lone-revise", "missing-arg"],
)
def test_bad_workflows_name_the_step_and_item(steps, message):
    with pytest.raises(WorkflowError) as e:
        Workflow.from_json(steps)
    assert message in str(e.value)


def test_every_edit_is_valid_unique_and_one_step_away():
    for parent in (initial_workflow(), FULL):
        proposals = optimizer.edits(parent)
        keys = [p.workflow.key() for p in proposals]
        assert len(set(keys)) == len(keys) and parent.key() not in keys
        for p in proposals:
            validate(p.workflow)
    kinds = {p.kind for p in optimizer.edits(initial_workflow())}
    assert kinds == {"solver", "ensemble", "prompt", "review_revise", "format", "test"}


@pytest.mark.parametrize("code", ["12+7-5", "3*(4-10)", "-(2+3)*4", " 99 - 100 ", "(((7)))"])
def test_programmer_evaluates_arithmetic_like_python(code):
    assert safe_eval(code) == eval(code)  # noqa: S307 - reference on trusted literals


@pytest.mark.parametrize(
    "code, what",
    [
        ("__import__('os').system('touch PWNED')", "Call"),
        ("open('PWNED', 'w')", "Call"),
        ("x + 1", "Name"),
        ("2 ** 64", "Pow"),
        ("7 / 2", "Div"),
        ("'a' * 3", "literal 'a'"),
        ("[1][0]", "Subscript"),
        ("(lambda: 1)()", "Call"),
        ("1; 2", "not an expression"),
        ("1.5 + 2", "literal 1.5"),
    ],
)
def test_programmer_rejects_non_arithmetic_code_without_running_it(
    code, what, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProgrammerError) as e:
        safe_eval(code)
    assert what in str(e.value) and repr(code) in str(e.value)
    assert not (tmp_path / "PWNED").exists()
