"""The optimizer's reply grammar: every reply it admits parses, printed workflows are in it, and
constrained decoding with an untrained decoder writes only replies that parse (its unconstrained
samples are byte noise: ``python -m benchmarks.bench_workflows --parts constrained`` counts
them)."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.commands.workflows import constrained_generator
from jaxlab.lm.model import Decoder, DecoderConfig
from jaxlab.workflows import program_grammar
from jaxlab.workflows.parse import parse_workflow
from jaxlab.workflows.program import OPERATORS, Step, Workflow

MAX_TEXT = 8


@pytest.fixture(scope="module")
def dfa():
    return program_grammar.reply_dfa(MAX_TEXT)


def _reply(code: str) -> str:
    return f"<modification>Add one.</modification>\n<graph>\n{code}</graph>"


def _walk(dfa, live, rng) -> str:
    """A uniformly random path of the automaton through live states to acceptance."""
    state, out = dfa.start, []
    while not dfa.accepting[state]:
        c = rng.choice(np.flatnonzero(live[dfa.transitions[state]]))
        out.append(dfa.alphabet[c])
        state = dfa.transitions[state, c]
    return "".join(out)


def _ops(steps, seen):
    for s in steps:
        seen[s.op if s.op != "if" else f"if {s.arg('cond')}"] += 1
        if s.op in ("if", "loop"):
            _ops(s.arg("body"), seen)


def test_every_reply_the_grammar_admits_parses_and_every_operator_occurs(dfa):
    live, rng, seen = dfa.live(), np.random.default_rng(0), collections.Counter()
    for _ in range(60):
        _ops(parse_workflow(_walk(dfa, live, rng)).steps, seen)
    expected = {op for op in OPERATORS if op != "if"} | {"if invalid", "if rejected"}
    assert set(seen) == expected


BODY = '    answer = generate(problem, prompt="plain")\n'
PRINTED = [
    Workflow((Step.make("custom", instruction="Terse."),)),
    Workflow(
        (
            Step.make("md_ensemble", solver="programmer", n=9, prompt="careful"),
            Step.make("test", max_loops=3),
            Step.make("review", prompt="plain", instruction="Check it"),
            Step.make("revise", prompt="step_by_step"),
            Step.make("if", cond="rejected", body=(Step.make("format"),)),
            Step.make(
                "loop",
                n=2,
                body=(Step.make("review", prompt="plain"), Step.make("revise", prompt="plain")),
            ),
        )
    ),
    Workflow(
        (
            Step.make("sc_ensemble", solver="answer_generate", n=2, prompt="plain"),
            Step.make(
                "if",
                cond="invalid",
                body=(
                    Step.make("custom", instruction="Retry."),
                    Step.make("review", prompt="plain"),
                    Step.make("revise", prompt="plain"),
                ),
            ),
            Step.make("format"),
        )
    ),
]


@pytest.mark.parametrize("workflow", PRINTED, ids=["custom", "controls", "if-body"])
def test_printed_workflows_are_in_the_grammar(dfa, workflow):
    assert dfa.accepts(_reply(workflow.to_code()))


REFUSED = {
    "unknown-operator": BODY + "    answer = vote(problem, answer)\n",
    "revise-without-review": BODY
    + '    answer = revise(problem, answer, feedback, prompt="plain")\n',
    "rejected-before-review": BODY
    + "    if not feedback:\n        answer = format(problem, answer)\n",
    "second-top-solver": BODY + BODY,
    "ensemble-of-ten": '    answer = sc_ensemble([generate(problem, prompt="plain") for _ in range(10)])\n',
    "text-too-long": '    answer = custom(problem, instruction="twelve chars")\n',
}


@pytest.mark.parametrize("body", REFUSED.values(), ids=REFUSED.keys())
def test_replies_the_parser_refuses_are_outside_the_grammar(dfa, body):
    code = "def workflow(problem):\n" + body + "    return answer\n"
    assert not dfa.accepts(_reply(code))


def test_a_budget_too_small_for_any_reply_is_refused_by_name():
    strings = tuple(chr(i) for i in range(128))
    with pytest.raises(ValueError, match="max_tokens=50: the shortest workflow reply takes"):
        program_grammar.reply_potential(strings, max_tokens=50, max_text=MAX_TEXT)


def test_constrained_decoding_of_an_untrained_decoder_writes_replies_that_parse():
    cfg = DecoderConfig(d_model=8, n_layers=1, n_heads=1, head_dim=8, d_ff=16, max_len=288)
    model = Decoder(cfg)
    params = model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))
    prompt = "Improve the workflow.\n"
    constrained = constrained_generator(
        model, params, max_new_tokens=144, num_particles=2, max_text=MAX_TEXT
    )
    replies = [constrained(prompt, seed) for seed in range(3)]
    assert all(usage["generated_tokens"] == len(text) for text, usage in replies)
    assert [type(parse_workflow(text)) for text, _ in replies] == [Workflow] * 3
