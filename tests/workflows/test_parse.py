"""Workflows with control flow: code printing and parsing, rejections by reason, execution."""

import jax
import numpy as np
import pytest

from jaxlab.workflows import interpreter, optimizer, tasks
from jaxlab.workflows.parse import ParseError, parse_workflow
from jaxlab.workflows.program import Step, Workflow, WorkflowError, initial_workflow, validate
from jaxlab.workflows.standin import StandInExecutor, StandInParams

RICH = Workflow(
    (
        Step.make(
            "md_ensemble",
            solver="answer_generate",
            n=3,
            prompt="plain",
            instruction='Mind "units".',
        ),
        Step.make("review", prompt="careful"),
        Step.make("if", cond="rejected", body=(Step.make("custom", instruction="Solve again."),)),
        Step.make(
            "loop",
            n=2,
            body=(Step.make("review", prompt="plain"), Step.make("revise", prompt="plain")),
        ),
        Step.make("if", cond="invalid", body=(Step.make("format"),)),
        Step.make("test", max_loops=1),
    )
)


def test_programs_with_control_flow_print_and_parse_back():
    code = RICH.to_code()
    assert "    for _ in range(2):\n        feedback = review(" in code
    assert "    if not valid(answer):\n        answer = format(problem, answer)\n" in code
    assert parse_workflow(code) == RICH and Workflow.from_json(RICH.to_json()) == RICH
    assert parse_workflow(f"Some analysis.\n<graph>\n{code}</graph>") == RICH
    assert RICH.num_calls() == 4 + 1 + 1 + 2 * 2 + 2
    for p in optimizer.edits(initial_workflow()):
        assert parse_workflow(p.workflow.to_code()) == p.workflow


def test_grammar_edits_of_a_program_with_the_new_operators_stay_valid():
    proposals = optimizer.edits(RICH)
    assert proposals and all(validate(p.workflow) for p in proposals)
    assert not any("remove review at step 1" in p.modification for p in proposals)
    assert {p.workflow.steps[0].replace(prompt="plain") for p in proposals} == {RICH.steps[0]}


_OK = 'def workflow(problem):\n    answer = generate(problem, prompt="plain")\n'


@pytest.mark.parametrize(
    "text, reason, where",
    [
        ("I would add a review step.", "no_program", "no <graph>"),
        ("def workflow(problem):\n    answer = (\n", "syntax", "line"),
        (_OK + "    answer = summon(problem)\n    return answer\n", "unknown_operator", "'summon'"),
        (
            _OK + "    answer = open('PWNED', 'w')\n    return answer\n",
            "unknown_operator",
            "'open'",
        ),
        (_OK + "    import os\n    return answer\n", "malformed", "line 3: Import"),
        (_OK + "    while True:\n        pass\n    return answer\n", "malformed", "While"),
        (
            _OK + "    answer = generate(problem, prompt=x)\n    return answer\n",
            "malformed",
            "literals",
        ),
        (_OK + "    answer = custom(problem)\n    return answer\n", "invalid", "instruction"),
        (
            _OK
            + '    answer = revise(problem, answer, feedback, prompt="plain")\n    return answer\n',
            "invalid",
            "must directly follow a review",
        ),
        (
            _OK
            + "    if not feedback:\n        answer = format(problem, answer)\n    return answer\n",
            "invalid",
            "needs a review before it",
        ),
        (_OK, "malformed", "'return answer' last"),
    ],
    ids=[
        "prose",
        "syntax",
        "unknown",
        "open",
        "import",
        "while",
        "name-arg",
        "custom-bare",
        "lone-revise",
        "if-no-review",
        "no-return",
    ],
)
def test_bad_texts_are_rejected_with_a_reason_and_never_run(
    text, reason, where, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ParseError) as e:
        parse_workflow(text)
    assert e.value.reason == reason and where in str(e.value)
    assert not (tmp_path / "PWNED").exists()


def test_nested_control_flow_and_bad_loop_bodies_are_refused():
    inner = Step.make("if", cond="invalid", body=(Step.make("format"),))
    with pytest.raises(WorkflowError, match="not nested"):
        validate(
            Workflow((*initial_workflow().steps, Step.make("if", cond="invalid", body=(inner,))))
        )
    with pytest.raises(WorkflowError, match="exactly review, revise"):
        validate(
            Workflow(
                (*initial_workflow().steps, Step.make("loop", n=2, body=(Step.make("format"),)))
            )
        )


@pytest.fixture(scope="module")
def problems():
    return tasks.make_problems(0, 400)


def test_conditionals_and_loops_act_and_charge_only_where_their_condition_holds(problems):
    key = jax.random.key(0)
    perfect_review = StandInExecutor(StandInParams(p_review=1.0, p_revise=1.0, p_generate=0.5))
    loop = Workflow(
        (
            Step.make("generate", prompt="plain"),
            Step.make(
                "loop",
                n=3,
                body=(Step.make("review", prompt="plain"), Step.make("revise", prompt="plain")),
            ),
        )
    )
    cost = {}
    answers = interpreter.run_workflow(key, loop, perfect_review, problems, cost=cost)
    assert interpreter.accuracy(answers, problems) == 1.0
    first = interpreter.run_workflow(key, initial_workflow(), perfect_review, problems)
    wrong = len(problems) - round(interpreter.accuracy(first, problems) * len(problems))
    # one solve + one review each; the wrong ones: one revise, then an accepting review
    assert cost["calls"] == len(problems) * 2 + wrong * 2
    straight = Workflow((loop.steps[0], *loop.steps[1].arg("body")))
    cost = {}
    interpreter.run_workflow(key, straight, perfect_review, problems, cost=cost)
    assert cost["calls"] == len(problems) * 2 + wrong  # revise only where the review said no
    fmt = Workflow(
        (
            Step.make("programmer", prompt="plain"),
            Step.make("if", cond="invalid", body=(Step.make("format"),)),
        )
    )
    plain = interpreter.run_workflow(key, Workflow(fmt.steps[:1]), StandInExecutor(), problems)
    fixed = interpreter.run_workflow(key, fmt, StandInExecutor(), problems)
    np.testing.assert_array_equal(
        np.asarray(fixed.value)[np.asarray(plain.valid)],
        np.asarray(plain.value)[np.asarray(plain.valid)],
    )
    assert np.mean(np.asarray(fixed.valid)) > 0.95 > np.mean(np.asarray(plain.valid))


def test_md_ensemble_picks_a_right_candidate_and_an_instruction_keyword_helps(problems):
    key = jax.random.key(1)
    ex = StandInExecutor(
        StandInParams(p_choose=1.0, p_generate=0.3, instruction_bonus=(("units", 0.5),))
    )
    md = Workflow((Step.make("md_ensemble", solver="generate", n=5, prompt="plain"),))
    single = interpreter.evaluate(key, initial_workflow(), ex, problems, 1)
    picked = interpreter.evaluate(key, md, ex, problems, 1)
    assert abs(picked.mean - (1 - 0.7**5)) < 0.06 and single.mean < 0.4
    assert picked.cost["calls"] == 6 and single.cost["calls"] == 1
    told = Workflow((Step.make("custom", instruction="Check the units."),))
    assert interpreter.evaluate(key, told, ex, problems, 1).mean > 0.75
