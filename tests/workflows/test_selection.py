"""AFlow's selection mixture and convergence rule against hand-computed cases."""

import math

import numpy as np
import pytest

from jaxlab.workflows import selection


def test_selection_probabilities_hand_case():
    # scores 80 and 70 (percent): softmax(0.2 * [0, -10]) = [1, e^-2] / (1 + e^-2)
    soft = np.array([1.0, math.exp(-2.0)]) / (1.0 + math.exp(-2.0))
    want = 0.3 / 2 + 0.7 * soft
    got = selection.selection_probabilities([80.0, 70.0])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(got, [0.766558, 0.233442], atol=1e-6)
    # equal scores: uniform; lambda = 1: uniform whatever the scores
    np.testing.assert_allclose(selection.selection_probabilities([50, 50, 50]), [1 / 3] * 3)
    np.testing.assert_allclose(selection.selection_probabilities([90, 10], lam=1.0), [0.5, 0.5])


def test_candidates_always_hold_round_one_and_the_best_others():
    scores = {1: 0.2, 2: 0.9, 3: 0.5, 4: 0.7, 5: 0.7, 6: 0.1}
    assert selection.candidates(scores, sample=4) == [1, 2, 4, 5]
    rng = np.random.default_rng(0)
    draws = [selection.select_round(rng, scores)[0] for _ in range(4000)]
    _, probs = selection.select_round(rng, scores)
    for r, p in probs.items():
        assert abs(np.mean(np.asarray(draws) == r) - p) < 0.03


@pytest.mark.parametrize(
    "scores, fired",
    [
        # Y = .5 .55 .6 .7 .7 .7 .7 .7 .7: unchanged at rounds 5..9 -> fires at round 9
        ([0.5, 0.6, 0.7, 0.8, 0.1, 0.1, 0.1, 0.1, 0.1], 9),
        ([0.5, 0.6, 0.7, 0.8, 0.1, 0.1, 0.1, 0.1], None),
        # a new top-3 entry at round 7 resets the count: unchanged again at rounds 8..12
        ([0.5, 0.6, 0.7, 0.8, 0.1, 0.1, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1], 12),
        # constant scores: Y unchanged from round 2, but never before top_k + 1 = 4 rounds
        ([0.4] * 6, 6),
        ([0.4] * 3, None),
    ],
)
def test_convergence_rule_hand_cases(scores, fired):
    assert selection.converged(scores) == fired


def test_convergence_with_z_tolerates_changes_within_the_noise():
    # Y = .5 .55 .6 .7 .77 .8033 (x5); with sd .05 per round sigma_dY = .0408, so the step
    # .77 -> .8033 counts as unchanged when z = 1 (fires at round 10) but not when z = 0.
    scores = [0.5, 0.6, 0.7, 0.8, 0.81] + [0.8] * 5
    assert selection.converged(scores) is None
    assert selection.converged(scores, [0.05] * len(scores), z=1.0) == 10
