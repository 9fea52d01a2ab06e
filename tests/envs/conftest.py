"""Fixtures of the env tests; the compiled-once helpers live in ``env_probes.py``.

``SHARED_LEVELS`` is the one place the suite reads test data from outside the checkout: the
original Kinetix S and M levels (``h0_weak_thrust``, ``h5_angry_birds``, ...) in a
``shared/kinetix-levels`` folder beside the repository, used by the round-trip and parity tests
of ``tests/envs/kinetix``. The folder is optional: without it those tests skip.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_LEVELS = Path(__file__).resolve().parents[3] / "shared" / "kinetix-levels"


@pytest.fixture(scope="session")
def shared_levels() -> Path:
    """The optional original Kinetix levels folder; skips the test where it is absent."""
    if not SHARED_LEVELS.is_dir():
        pytest.skip(f"optional original Kinetix levels not found at {SHARED_LEVELS}")
    return SHARED_LEVELS
