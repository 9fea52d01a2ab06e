"""AFlow's selection rule and convergence test (pure functions, hand-checkable).

Selection (paper §4, ``data_utils.py`` of FoundationAgents/AFlow): the candidates are the
initial workflow (round 1) and the best other rounds, ``sample`` in all; with scores ``s_i`` in
percent,

    P(i) = lambda / n + (1 - lambda) · exp(alpha (s_i - s_max)) / sum_j exp(alpha (s_j - s_max))

with ``alpha = 0.2``, ``lambda = 0.3``: a uniform part that keeps exploring and a softmax part
that exploits. (The original code keeps round 1 only when it is among the top ``sample``; the
paper and this module always keep it, as the issue asks.)

Convergence (``convergence_utils.py``): ``Y_i`` is the mean of the top-``k`` round scores among
rounds ``1 … i``; the search has converged when ``|Y_i - Y_{i-1}| <= z · sigma`` for
``consecutive`` successive rounds, with ``k = 3``, ``z = 0`` (so: the top-3 mean unchanged for 5
rounds), and never before ``k + 1`` rounds exist.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

ALPHA = 0.2
LAMBDA = 0.3
SAMPLE = 4
TOP_K = 3
CONSECUTIVE = 5
EPS = 1e-9
"""Floating-point slack of the rule: with ``z = 0`` the original compares means exactly, and
the mean of three equal scores can differ from one of them in the last bit."""


def selection_probabilities(
    scores: Sequence[float], *, alpha: float = ALPHA, lam: float = LAMBDA
) -> np.ndarray:
    """``P = lambda/n + (1-lambda) softmax(alpha (s - s_max))`` for scores in percent."""
    s = np.asarray(scores, np.float64)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"scores={scores!r}: expected a non-empty 1-D sequence")
    w = np.exp(alpha * (s - s.max()))
    return lam / s.size + (1.0 - lam) * w / w.sum()


def candidates(round_scores: dict[int, float], *, sample: int = SAMPLE) -> list[int]:
    """Round 1 plus the ``sample - 1`` best other rounds (ties: earlier round first)."""
    if 1 not in round_scores:
        raise ValueError("round 1 (the initial workflow) has no score")
    others = sorted((r for r in round_scores if r != 1), key=lambda r: (-round_scores[r], r))
    return [1, *others[: sample - 1]]


def select_round(
    rng: np.random.Generator,
    round_scores: dict[int, float],
    *,
    sample: int = SAMPLE,
    alpha: float = ALPHA,
    lam: float = LAMBDA,
) -> tuple[int, dict[int, float]]:
    """Draws the parent round; returns it and the candidates' probabilities (scores in [0, 1]
    are scaled by 100 as in the original)."""
    rounds = candidates(round_scores, sample=sample)
    probs = selection_probabilities([100.0 * round_scores[r] for r in rounds], alpha=alpha, lam=lam)
    choice = int(rng.choice(len(rounds), p=probs))
    return rounds[choice], dict(zip(rounds, probs.tolist(), strict=True))


def top_k_means(scores: Sequence[float], *, top_k: int = TOP_K) -> np.ndarray:
    """``Y_i``: the mean of the ``top_k`` best of ``scores[:i+1]`` for every ``i``."""
    s = np.asarray(scores, np.float64)
    return np.asarray([np.mean(np.sort(s[: i + 1])[::-1][:top_k]) for i in range(s.size)])


def converged(
    scores: Sequence[float],
    stds: Sequence[float] | None = None,
    *,
    top_k: int = TOP_K,
    z: float = 0.0,
    consecutive: int = CONSECUTIVE,
) -> int | None:
    """The round (1-based) at which the convergence rule first fires, else ``None``.

    Args:
        scores: mean score of each round in round order.
        stds: per-round standard deviations over validation runs (only used when ``z > 0``;
            ``sigma_Y = sqrt(sum of top-k variances) / k``).
        top_k, z, consecutive: the rule's parameters (module docstring).
    """
    s = np.asarray(scores, np.float64)
    if s.size < top_k + 1:
        return None
    sd = np.zeros_like(s) if stds is None else np.asarray(stds, np.float64)
    count, prev_y, prev_sigma = 0, None, None
    for i in range(s.size):
        top = np.argsort(-s[: i + 1], kind="stable")[:top_k]
        y = float(np.mean(s[top]))
        sigma = float(np.sqrt(np.sum(sd[top] ** 2)) / top_k)
        if prev_y is not None:
            if abs(y - prev_y) <= z * np.sqrt(sigma**2 + prev_sigma**2) + EPS:
                count += 1
                if count >= consecutive:
                    return i + 1
            else:
                count = 0
        prev_y, prev_sigma = y, sigma
    return None
