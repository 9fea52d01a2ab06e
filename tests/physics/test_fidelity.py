"""Trajectory parity of jaxlab.physics with the original Jax2D on all 74 Kinetix levels.

Each fixture (``tests/physics/fixtures``, recorded with jax2d 1.0.1, float32 CPU) gives a
level's initial state and the reference positions and rotations for 240 zero-action engine
steps and 120 steps with the all-+1 engine action. jaxlab's engine replays both from the same
initial state (one vmapped ``lax.scan`` per size class, see ``fidelity_rollout``), and the
deviation at step k is the maximum over active shapes of the position error (infinity norm, m)
and the rotation error (rad).

Tolerances. One step must agree to float32 round-off (a parity goal of 1e-4; the
test asks 1e-5, which a 1 % gravity error already violates). Over longer horizons contacts are
chaotic, so sums of simultaneous impulses that differ in the last bit can grow: the bounds are
tight for the median level (round-off level, ~1e-6 measured) and loose, but finite, for the
worst level. Measured values (``experiments/physics_fidelity/physics_fidelity_report.py``) are in
the comments.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from experiments.physics_fidelity.physics_fidelity import (
    ACT_STEPS,
    ZERO_STEPS,
    SizeBatch,
    deviations,
    max_up_to,
)
from experiments.physics_fidelity.physics_fixtures import fixture_paths

STEP1_TOL = 1e-5  # measured max over all 74 levels and both variants: 2.4e-7
# horizon (s): (bound on the median level, bound on every level)
# Measured (CPU) running max over steps so far, worst size/variant (fast and reference alike):
#   median level: 0.5 s 1.1e-6, 1 s 3.3e-6, 2 s 1.8e-5, 4 s 2.5e-6 (zero actions only)
#   worst level:  0.5 s 4.8e-5, 1 s 1.5e-2, 2 s 3.3e-2 (l_mjc_walker, +1), 4 s 5.6e-2
# Both solvers stay within the original's one-extra-iteration sensitivity at 1 s on every level
# (experiments/physics_fidelity/physics_fidelity_report.py --sensitivity).
BOUNDS = {
    0.5: (1e-5, 1e-3),
    1.0: (2e-5, 5e-2),
    2.0: (1e-4, 1e-1),
    4.0: (1e-4, 2.5e-1),
}
# At 2 s, at most one level in ten drifts beyond 1e-3 (measured: 0-1 per size and variant,
# L +1: 2 of 40, l_mjc_walker and l_mjc_walker_easy).
TIGHT_2S, MAX_LOOSE_PER_TEN = 1e-3, 1
_STEPS = {"zero": ZERO_STEPS, "act": ACT_STEPS}


@functools.cache
def _batch(size: str) -> SizeBatch:
    return SizeBatch(size)


@pytest.fixture(
    scope="module",
    # The reference solver at L costs the largest compile and L's fast solver uses the same
    # scene-major layout (engine._lanes_pays); its L figures are in the report script.
    params=[("s", "fast"), ("s", "reference"), ("m", "fast"), ("m", "reference"), ("l", "fast")],
    ids=lambda p: "-".join(p),
)
def size_run(request):
    """``(batch, {"zero": [L, 240], "act": [L, 120]})`` for one size class and solver (the fast
    solver changes round-off, so both are held to the same bounds)."""
    size, solver = request.param
    batch = _batch(size)
    return batch, deviations(batch, solver)


def test_every_level_is_covered():
    counts = {s: len(fixture_paths(s)) for s in ("s", "m", "l")}
    assert counts == {"s": 10, "m": 24, "l": 40}, counts


def test_shapes_and_actuated_levels(size_run):
    batch, dev = size_run
    n = len(batch.names)
    assert dev["zero"].shape == (n, ZERO_STEPS)
    assert dev["act"].shape == (n, ACT_STEPS)
    assert np.all(np.isfinite(dev["zero"]))
    # Every Kinetix level has a motor or a thruster, so every level has the +1 trajectory.
    missing = [m for m, h in zip(batch.names, batch.has_act, strict=True) if not h]
    assert not missing, missing
    assert np.all(np.isfinite(dev["act"]))


@pytest.mark.parametrize("variant", ["zero", "act"])
def test_one_step_matches_to_float32_roundoff(size_run, variant):
    batch, dev = size_run
    step1 = dev[variant][:, 0]
    worst = int(np.argmax(step1))
    assert step1[worst] < STEP1_TOL, (batch.names[worst], float(step1[worst]))


@pytest.mark.parametrize(
    ("variant", "horizon"),
    [(v, h) for v in ("zero", "act") for h in sorted(BOUNDS) if h * 60 <= _STEPS[v]],
)
def test_drift_is_bounded(size_run, variant, horizon):
    batch, dev = size_run
    d = max_up_to(dev[variant], horizon)
    median_bound, all_bound = BOUNDS[horizon]
    worst = int(np.argmax(d))
    assert np.median(d) < median_bound, (float(np.median(d)), median_bound)
    assert d[worst] < all_bound, (batch.names[worst], float(d[worst]), all_bound)


@pytest.mark.parametrize("variant", ["zero", "act"])
def test_most_levels_stay_tight_for_two_seconds(size_run, variant):
    batch, dev = size_run
    d = max_up_to(dev[variant], 2.0)
    loose = [(n, float(x)) for n, x in zip(batch.names, d, strict=True) if x >= TIGHT_2S]
    assert 10 * len(loose) <= MAX_LOOSE_PER_TEN * len(d), loose


def test_tolerances_detect_a_one_percent_gravity_error():
    """The same comparison fails for an engine whose gravity is 1 % too strong."""
    batch = SizeBatch("s")
    dev = deviations(batch, gravity_scale=1.01)
    d = dev["zero"]
    assert d[:, 0].max() > STEP1_TOL
    assert np.median(max_up_to(d, 1.0)) > BOUNDS[1.0][0]
