"""Task arithmetic on the paper's data model and one-layer transformer (arXiv 2504.10957).

One compiled program fine-tunes both tasks and evaluates the λ grid {-2,-1,0,1,2}² for the three
task relations at once (vmap over α); every assertion reads that shared result.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.lm import task_arithmetic as ta

CFG = ta.ExperimentConfig(eval_samples=256, grid=5)
T1, T2, OOD = 0, 1, 2


@pytest.fixture(scope="module")
def results():
    alphas = jnp.asarray(list(ta.RELATIONS.values()))
    run = jax.jit(jax.vmap(ta.run_experiment, (None, None, 0)), static_argnums=1)
    out = jax.device_get(run(jax.random.PRNGKey(0), CFG, alphas))
    return {
        name: {k: np.asarray(v[r]) for k, v in out.items()} for r, name in enumerate(ta.RELATIONS)
    }


def _at(res, variant, lam1, lam2):
    i, j = ta.grid_index(res["grid"], lam1, lam2)
    return res[variant][i, j]


def test_finetuning_learns_each_task(results):
    for name, res in results.items():
        assert _at(res, "full", 0, 0)[:2].max() < 0.8, name  # Ψ0 knows neither task
        assert _at(res, "full", 1, 0)[T1] >= 0.97, name
        assert _at(res, "full", 0, 1)[T2] >= 0.97, name


@pytest.mark.parametrize("relation", ["irrelevant", "aligned"])
def test_addition_learns_both_tasks(results, relation):
    acc = _at(results[relation], "full", 1, 1)
    assert acc[T1] >= 0.95 and acc[T2] >= 0.95, acc


def test_no_lambda_gives_both_contradictory_tasks(results):
    full = results["contradictory"]["full"]
    both = np.minimum(full[..., T1], full[..., T2])
    assert both.max() < 0.9, both


@pytest.mark.parametrize("relation", ["irrelevant", "contradictory"])
def test_negation_unlearns_t2_and_keeps_t1(results, relation):
    acc = _at(results[relation], "full", 1, -1)
    assert acc[T1] >= 0.95, acc
    assert acc[T2] <= 0.5, acc  # at or below chance


def _best_negation(res):
    """``(T1, T2)`` accuracy on the row λ1 = 1 at the negative λ2 that unlearns T2 the most."""
    i, _ = ta.grid_index(res["grid"], 1, 0)
    negative = res["grid"][i, :, 1] < 0
    row = res["full"][i][negative][:, :2]
    return row[int(np.argmin(row[:, T2]))]


@pytest.mark.parametrize("relation", ["irrelevant", "aligned", "contradictory"])
def test_negation_unlearns_t2_but_harms_t1_only_when_aligned(results, relation):
    """A negative λ2 unlearns T2 for every relation; the best such edit keeps T1 for irrelevant
    and contradictory tasks, and costs T1 for aligned ones (they share the features)."""
    t1, t2 = _best_negation(results[relation])
    assert t2 <= 0.2, (relation, t1, t2)
    if relation == "aligned":
        assert t1 <= 0.9, (t1, t2)
    else:
        assert t1 >= 0.95, (relation, t1, t2)


@pytest.mark.parametrize("variant", ["low_rank", "pruned"])
def test_rank1_and_pruned_vectors_stay_close(results, variant):
    """Rank-1 / 50 %-pruned task vectors give the same edits: addition within a few points on both
    tasks, negation within a few points on T1 and T2 still unlearned (<= chance)."""
    for name, res in results.items():
        full, other = _at(res, "full", 1, 1), _at(res, variant, 1, 1)
        assert np.abs(full[:2] - other[:2]).max() <= 0.12, (name, full, other)
        full, other = _at(res, "full", 1, -1), _at(res, variant, 1, -1)
        assert abs(full[T1] - other[T1]) <= 0.12, (name, full, other)
        if full[T2] <= 0.5:
            assert other[T2] <= 0.5, (name, full, other)


def test_out_of_domain_target_in_the_span(results):
    # μ' ∝ μ1 + μ2: some λ with λ1, λ2 > 0 generalises to it (irrelevant and aligned tasks)
    for name in ("irrelevant", "aligned"):
        res = results[name]
        grid = res["grid"]
        positive = (grid[..., 0] > 0) & (grid[..., 1] > 0)
        assert res["full"][..., OOD][positive].max() >= 0.9, name


def test_heatmap_png(results, tmp_path):
    res = results["irrelevant"]
    paths = ta.write_heatmaps(
        tmp_path, "h", res["grid"], {"T1": res["full"][..., 0], "T2": res["full"][..., 1]}
    )
    assert [p.name for p in paths] == ["h_T1.png", "h_T2.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


def test_bad_data_config():
    with pytest.raises(ConfigError, match="confusion_tokens"):
        dataclasses.replace(ta.TaskDataConfig(), confusion_tokens=4)
    with pytest.raises(ValueError, match="not a point"):
        ta.grid_index(ta.lambda_grid(num=5), 0.5, 0.0)
