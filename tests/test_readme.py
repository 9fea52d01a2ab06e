"""README's quick start stays true: exactly two commands, and CI runs the second one verbatim."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Quick start.*?```bash\n(.*?)```", text, re.S).group(1)
    return [ln for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]


def test_two_commands_and_ci_runs_the_test_command():
    main_job, tests = quick_start_commands()
    assert "jaxlab train" in main_job and "pip install -e ." in main_job
    test_cmd = tests.split("&& ", 2)[-1]  # after venv creation and activation
    assert "pytest" in test_cmd
    assert test_cmd in (ROOT / ".ci" / "run").read_text()
