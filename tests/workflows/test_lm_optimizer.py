"""The language-model optimizer with scripted generators: prompts, rejections, resume, cost."""

import pytest

from jaxlab.workflows import search, tasks
from jaxlab.workflows.lm_optimizer import LMOptimizer, build_prompt
from jaxlab.workflows.optimizer import Experience
from jaxlab.workflows.program import Step, Workflow, initial_workflow
from jaxlab.workflows.standin import StandInExecutor

HEAD = "def workflow(problem):\n"
GOOD = [
    HEAD + '    answer = programmer(problem, prompt="plain")\n    return answer\n',
    HEAD + '    answer = sc_ensemble([generate(problem, prompt="plain") for _ in range(5)])\n'
    "    return answer\n",
    HEAD + '    answer = programmer(problem, prompt="plain")\n    if not valid(answer):\n'
    "        answer = format(problem, answer)\n    return answer\n",
    HEAD + '    answer = custom(problem, instruction="Add the numbers in order.")\n'
    "    return answer\n",
]
BAD = {
    "no_program": "I would add an ensemble.",
    "syntax": HEAD + "    answer = (\n",
    "unknown_operator": HEAD + "    answer = open('PWNED', 'w')\n    return answer\n",
    "malformed": HEAD + "    import os\n    return answer\n",
    "invalid": HEAD + "    answer = custom(problem)\n    return answer\n",
    "duplicate": initial_workflow().to_code(),
}


@pytest.fixture(scope="module")
def val():
    return tasks.split(tasks.make_problems(0, 200), 0)[0]


class _Counting(StandInExecutor):
    """The stand-in, remembering every solver it ran."""

    def __init__(self):
        super().__init__()
        object.__setattr__(self, "solvers", [])

    def solve(self, key, solver, prompt, problems, n, instruction=""):
        self.solvers.append(solver)
        return super().solve(key, solver, prompt, problems, n, instruction)


def test_every_rejection_is_counted_and_nothing_rejected_runs(val, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    replies = iter([*BAD.values(), GOOD[0], BAD["duplicate"], GOOD[1]])
    prompts = []

    def scripted(prompt, seed):
        prompts.append(prompt)
        return f"The answer is often off.\n<modification>try it</modification>\n{next(replies)}"

    executor = _Counting()
    config = search.SearchConfig(seed=0, max_rounds=3, check_convergence=False)
    state = search.run_search(
        initial_workflow(), executor, val, LMOptimizer(scripted), config, run_dir=tmp_path / "run"
    )
    assert [r["modification"] for r in state.rounds[1:]] == ["try it", "try it"]
    assert state.rejection_counts() == {r: 1 + (r == "duplicate") for r in BAD}
    assert all(r["round"] == 2 for r in state.rejected[:6]) and state.rejected[-1]["round"] == 3
    assert "'open' is not an operator" in state.rejected[2]["detail"]
    assert set(executor.solvers) == {"generate", "programmer"}  # only the two good programs
    assert not (tmp_path / "PWNED").exists()
    assert state.optimizer_usage()["calls"] == len(prompts) == 9
    assert state.rounds[1]["optimizer_cost"]["calls"] == 7
    assert search.load_state(tmp_path / "run").rejection_counts() == state.rejection_counts()


def test_the_prompt_holds_parent_scores_experience_and_k_failures():
    parent = Workflow((Step.make("programmer", prompt="plain"),))
    experience = [
        Experience("add format", "lm", 0.6, 0.8),
        Experience("wrap in an ensemble", "lm", 0.6, 0.5),
    ]
    failures = {
        "out_of_format": 4,
        "wrong_value": 1,
        "examples": [{"question": f"Q{i}?", "answer": None, "expected": i} for i in range(3)],
    }
    args = dict(parent_round=2, parent_score=0.6, scores={1: 0.5, 2: 0.6}, failures=failures, k=2)
    prompt = build_prompt(parent, experience=experience, **args)
    assert parent.to_code() in prompt and "round 2, validation score 0.6000" in prompt
    assert "1: 0.5000\n2: 0.6000" in prompt
    assert "Helped: add format (0.6000 -> 0.8000)" in prompt
    assert "Did not help: wrap in an ensemble (0.6000 -> 0.5000)" in prompt
    assert "Q1?" in prompt and "Q2?" not in prompt and "4 answers out of format" in prompt
    assert "md_ensemble" in prompt and "<graph>" in prompt
    bare = build_prompt(parent, experience=(), **args)
    assert "Helped" not in bare and "none yet" in bare


def _seeded(prompt, seed):
    """A generator whose reply depends only on its inputs (as a sampled model's does)."""
    return GOOD[seed % len(GOOD)] if seed % 5 else BAD["syntax"]


def test_lm_search_resumes_identically_and_reports_cost(val, tmp_path):
    config = search.SearchConfig(seed=1, max_rounds=5, check_convergence=False)
    args = (initial_workflow(), StandInExecutor(), val, LMOptimizer(_seeded), config)
    whole = search.run_search(*args, run_dir=tmp_path / "a")

    def interrupt(rec, state):
        if rec["round"] == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        search.run_search(*args, run_dir=tmp_path / "b", on_round=interrupt)
    resumed = search.run_search(*args, run_dir=tmp_path / "b")
    assert resumed.to_json() == whole.to_json()
    assert set(resumed.timing) == {str(r) for r in range(1, len(resumed.rounds) + 1)}
    assert all(t["round_s"] >= t["evaluation_s"] > 0 for t in resumed.timing.values())
    first = whole.rounds[0]["cost"]
    assert first["calls"] == 1.0 and first["generated_tokens"] == 8.0
    assert first["prompt_tokens"] == pytest.approx(sum(len(q) for q in val.questions) / len(val))
    front = whole.front()
    assert whole.best() in front
    assert [r["cost"]["calls"] for r in front] == sorted(r["cost"]["calls"] for r in front)
    assert [r["score"] for r in front] == sorted(r["score"] for r in front)
