"""The scene-clustered mode test of ``experiments/planner_modes/planner_study.py``
(``_hotelling``): it keeps its size when a scene's samples are correlated, and it detects a skew
of the planner's shares."""

import numpy as np
from scipy.stats import chisquare

from experiments.planner_modes.planner_study import _hotelling


def _scenes(rng, n, samples, skew=0.0):
    """Per-scene route probabilities that vary (cues reveal part of the route); the logged mode
    and the planner's samples drawn from them; ``skew`` moves planner mass to the middle mode."""
    probs = rng.dirichlet([1.0, 1.0, 1.0], n)
    logged = np.array([rng.choice(3, p=p) for p in probs])
    planner = probs * (1 - skew) + skew * np.eye(3)[1]
    draws = np.array([rng.multinomial(samples, p) for p in planner]) / samples
    return draws, logged


def test_calibrated_planner_passes_and_a_skew_is_found():
    rng = np.random.default_rng(0)
    p_values, p_per_sample = [], []
    for _ in range(200):
        share, logged = _scenes(rng, 128, 8)
        p_values.append(_hotelling(share - np.eye(3)[logged])[1])
        counts = np.round(share * 8).sum(0)
        expected = np.bincount(logged, minlength=3) / len(logged) * counts.sum()
        p_per_sample.append(chisquare(counts, expected)[1])
    # its size: under calibration about 5 % of p-values fall below 0.05 although the 8 samples of
    # a scene are strongly correlated; a chi-square over the 1024 samples rejects most of the time
    assert 0.02 <= np.mean(np.array(p_values) < 0.05) <= 0.09
    assert np.mean(np.array(p_per_sample) < 0.05) > 0.5
    share, logged = _scenes(np.random.default_rng(1), 512, 8, skew=0.15)
    assert _hotelling(share - np.eye(3)[logged])[1] < 1e-4
    assert _hotelling(share - 1 / 3)[1] < 1e-4


def test_mixture_x0_is_the_posterior_mean_of_a_weighted_finite_mixture():
    """``mixture_x0`` (the ego floor's optimal x_0 estimate) against Bayes' rule done by hand:
    p(k | x_t) ~ pi_k N(x_t; alpha m_k, sigma^2 I); one-hot priors pick their future whatever x_t
    is, and with the noise small the nearest future wins over its prior."""
    from experiments.planner_modes.planner_study import mixture_x0

    rng = np.random.default_rng(0)
    b, k, d = 5, 3, 6
    m = rng.normal(size=(b, k, d))
    prior = rng.dirichlet(np.ones(k), b)
    alpha, sigma = rng.uniform(0.3, 1.0, b), rng.uniform(0.2, 1.0, b)
    x = alpha[:, None] * m[:, 1] + sigma[:, None] * rng.normal(size=(b, d))
    like = np.exp(
        -((x[:, None] - alpha[:, None, None] * m) ** 2).sum(-1) / (2 * sigma[:, None] ** 2)
    )
    post = prior * like / (prior * like).sum(1, keepdims=True)
    got = np.asarray(mixture_x0(x, m, np.log(prior), alpha, sigma))
    np.testing.assert_allclose(got, np.einsum("bk,bkd->bd", post, m), rtol=1e-4, atol=1e-5)
    onehot = np.where(np.eye(k)[[2] * b] > 0, 0.0, -1e9)
    np.testing.assert_allclose(
        np.asarray(mixture_x0(x, m, onehot, alpha, sigma)), m[:, 2], atol=1e-5
    )
    near = np.asarray(mixture_x0(alpha[:, None] * m[:, 0], m, np.log(prior), alpha, sigma * 1e-3))
    np.testing.assert_allclose(near, m[:, 0], atol=1e-5)
