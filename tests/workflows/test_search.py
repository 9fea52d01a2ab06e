"""The search on the stand-in: improvement, convergence, resume, and bad input on disk."""

import dataclasses

import pytest

from jaxlab.workflows import search, tasks
from jaxlab.workflows.optimizer import EditOptimizer, Proposal
from jaxlab.workflows.program import Step, Workflow, WorkflowError, initial_workflow
from jaxlab.workflows.standin import StandInExecutor, StandInParams


@pytest.fixture(scope="module")
def val():
    return tasks.split(tasks.make_problems(0, 1000), 0)[0]


def test_twenty_rounds_raise_the_validation_score_from_about_point_six(val):
    state = search.run_search(
        initial_workflow(), StandInExecutor(), val, EditOptimizer(), search.SearchConfig(seed=0)
    )
    assert abs(state.rounds[0]["score"] - 0.6) < 0.06
    assert state.best()["score"] >= 0.80
    assert len(state.rounds) <= 20
    assert len({Workflow.from_json(r["workflow"]).key() for r in state.rounds}) == len(state.rounds)
    fails = state.rounds[0]["failures"]
    assert fails["out_of_format"] + fails["wrong_value"] == round(
        (1 - state.rounds[0]["scores"][0]) * 200
    )
    assert len(fails["examples"]) == 3 and all(
        e["answer"] != e["expected"] for e in fails["examples"]
    )
    for rec in state.rounds[1:]:
        assert 1 <= rec["parent"] < rec["round"]
        assert abs(sum(rec["selection"].values()) - 1.0) < 1e-12 and "1" in rec["selection"]


def test_search_stops_on_convergence(val):
    perfect = StandInExecutor(
        StandInParams(
            p_generate=1.0, p_programmer=1.0, unformatted_programmer=0.0, p_review=1.0, p_revise=1.0
        )
    )
    state = search.run_search(
        initial_workflow(), perfect, val, EditOptimizer(), search.SearchConfig(seed=0)
    )
    assert state.stopped == "converged at round 6" and len(state.rounds) == 6


def test_interrupted_search_resumes_to_the_same_result(val, tmp_path):
    config = search.SearchConfig(seed=3, max_rounds=10, check_convergence=False)
    args = (initial_workflow(), StandInExecutor(), val, EditOptimizer(), config)
    whole = search.run_search(*args, run_dir=tmp_path / "a")

    def interrupt(rec, state):
        if rec["round"] == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        search.run_search(*args, run_dir=tmp_path / "b", on_round=interrupt)
    assert len(search.load_state(tmp_path / "b").rounds) == 4
    resumed = search.run_search(*args, run_dir=tmp_path / "b")
    assert resumed.to_json() == whole.to_json()
    # other settings: a clear error, file untouched
    before = (tmp_path / "b" / search.STATE_FILE).read_bytes()
    with pytest.raises(search.SearchStateError, match="config"):
        search.run_search(*args[:4], dataclasses.replace(config, seed=4), run_dir=tmp_path / "b")
    assert (tmp_path / "b" / search.STATE_FILE).read_bytes() == before


@dataclasses.dataclass(frozen=True)
class _BadOptimizer:
    """Proposes a workflow with an operator that does not exist from round 3 on."""

    def propose(self, rng, parent, *, parent_score, experience, failures, is_duplicate):
        if parent.steps[-1].op == "format":
            bad = Workflow((*parent.steps, Step.make("summon_demon")))
            return Proposal(bad, "add summon_demon", "bad")
        return Proposal(Workflow((*parent.steps, Step.make("format"))), "add format", "format")


def test_bad_proposal_names_the_item_and_leaves_the_state_intact(val, tmp_path):
    config = search.SearchConfig(seed=0, max_rounds=5, check_convergence=False)
    snapshots = []
    with pytest.raises(
        WorkflowError, match=r"round 3 \(add summon_demon\).*unknown operator 'summon_demon'"
    ):
        search.run_search(
            initial_workflow(),
            StandInExecutor(),
            val,
            _BadOptimizer(),
            config,
            run_dir=tmp_path,
            on_round=lambda rec, st: snapshots.append((tmp_path / search.STATE_FILE).read_bytes()),
        )
    assert (tmp_path / search.STATE_FILE).read_bytes() == snapshots[-1]
    assert len(search.load_state(tmp_path).rounds) == 2
