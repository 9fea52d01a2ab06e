"""The docs site builds in strict mode (any warning, such as a broken link or a docstring the
API pages cannot parse, fails) and its API pages carry the documented names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    pages = {
        "api/recipe/index.html": "Parts",
        "api/optim/index.html": "OptimConfig",
        "api/kinetix/index.html": "KinetixEnv",
        "api/physics/index.html": "step",
        "api/envs/index.html": "final_observation",
        "cli/index.html": "jaxlab sweep",
        "getting-started/index.html": "kinetix-ppo",
        "results/index.html": "core_speed_cpu",
    }
    for page, name in pages.items():
        assert name in (tmp_path / page).read_text(), page
