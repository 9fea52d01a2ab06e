"""One run per run directory; a SIGKILLed run resumes with every metric step once and the same
final state as an uninterrupted run."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from jaxlab.core import config as C
from jaxlab.core import loop
from jaxlab.core.resume import truncate_metrics
from jaxlab.core.run_lock import RunLock, RunLockedError
from jaxlab.core.tracking import read_metrics
from tests.core.toy_recipe import TOY, ToyConfig

# the child processes import ``tests.core.toy_recipe`` from the repository root (their cwd)
REPO_ROOT = Path(__file__).resolve().parents[2]

OVERRIDES = {
    "loop.total_steps": 16,
    "loop.checkpoint_every": 5,
    "loop.log_every": 1,
    "loop.async_checkpoint": True,
}


def test_second_run_is_refused_and_a_killed_run_resumes_exactly(tmp_path):
    run_dir = tmp_path / "run"
    script = textwrap.dedent(f"""
        import sys, time
        from jaxlab.core import config as C, loop
        from tests.core.toy_recipe import TOY, ToyConfig
        c = C.replace(ToyConfig(), **{OVERRIDES!r})
        def hang(step, state, m):
            if step == 11:  # the async save of step 10 was started just before
                print("READY", flush=True)
                time.sleep(600)
        loop.run(TOY, c, {str(run_dir)!r}, hooks=[loop.Hook(hang, 1)])
    """)
    p = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT
    )
    try:
        assert p.stdout.readline().strip() == "READY"
        cfg = C.replace(ToyConfig(), **OVERRIDES)
        with pytest.raises(RunLockedError, match=f"in use by another run \\(pid {p.pid} on host"):
            loop.run(TOY, cfg, run_dir)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, 12))
    assert json.loads((run_dir / ".lock").read_text())["pid"] == p.pid  # left behind, stale

    resumed = loop.run(TOY, cfg, run_dir)  # takes the stale lock over, restores step 10
    assert not (run_dir / ".lock").exists()
    steps = [r["step"] for r in read_metrics(run_dir) if "loss" in r]
    assert steps == list(range(1, 17))
    full = loop.run(TOY, cfg, tmp_path / "full")
    assert np.asarray(full.state.w).tobytes() == np.asarray(resumed.state.w).tobytes()
    assert np.array_equal(full.state.key, resumed.state.key)


def test_lock_from_another_host_is_not_taken_over(tmp_path):
    (tmp_path / ".lock").write_text(json.dumps({"pid": 1, "host": socket.gethostname() + "-x"}))
    with pytest.raises(RunLockedError, match="pid 1 on host .*-x") as e:
        RunLock(tmp_path).acquire()
    assert "delete" in e.value.hint
    (tmp_path / ".lock").write_text(json.dumps({"pid": 2**22 + 1, "host": socket.gethostname()}))
    with RunLock(tmp_path) as lock:  # a dead pid on this host: stale, taken over
        assert lock.stale_holder["pid"] == 2**22 + 1
        assert json.loads((tmp_path / ".lock").read_text())["pid"] == os.getpid()
        with pytest.raises(RunLockedError):
            RunLock(tmp_path).acquire()
    assert not (tmp_path / ".lock").exists()


def test_refused_run_leaves_no_directory_behind(tmp_path):
    with pytest.raises(C.ConfigError):
        loop.run(TOY, ToyConfig(), tmp_path / "new" / "run", allow_change=("nope",))
    assert not (tmp_path / "new").exists()


def test_truncate_metrics_drops_later_and_torn_rows(tmp_path):
    rows = [json.dumps({"step": s, "loss": 1.0}) for s in (1, 2, 3, 4)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(rows) + '\n{"step": 5, "lo')
    assert truncate_metrics(tmp_path, 2) == 3
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]
