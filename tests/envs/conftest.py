"""Fixtures of the env tests; the compiled-once helpers live in ``env_probes.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_LEVELS = Path(__file__).resolve().parents[3] / "shared" / "kinetix-levels"


@pytest.fixture(scope="session")
def shared_levels() -> Path:
    assert SHARED_LEVELS.is_dir(), f"{SHARED_LEVELS} not found (the shared Kinetix levels)"
    return SHARED_LEVELS
