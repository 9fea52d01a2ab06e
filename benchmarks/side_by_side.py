"""Shared pieces of the side-by-side benchmarks (``bench_physics.py``, ``bench_kinetix.py``,
``bench_kinetix_generator.py``): steady-state timing and running a peer script in the original's
own virtual environment (``benchmarks/peers/.venv-kinetix``, made by ``setup_kinetix_peer.sh``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax

REPO = Path(__file__).resolve().parents[1]
PEER_PY = REPO / "benchmarks" / "peers" / ".venv-kinetix" / "bin" / "python"


def steady_rate(step: Callable, carry, args: tuple, seconds: float) -> tuple[float, int, object]:
    """Call ``carry = step(carry, *args)`` once untimed, then until ``seconds`` pass (at least
    twice). Returns ``(elapsed seconds, timed calls, final carry)``."""
    carry = step(carry, *args)
    jax.block_until_ready(carry)
    calls, t0 = 0, time.perf_counter()
    while True:
        carry = step(carry, *args)
        jax.block_until_ready(carry)
        calls += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds and calls >= 2:
            return elapsed, calls, carry


def peer_available(no_peer: bool) -> bool:
    """Whether to run the peer side; says on stderr how to get it when it is missing."""
    if no_peer:
        return False
    if not PEER_PY.exists():
        print(
            f"# no peer venv at {PEER_PY}: run `bash benchmarks/peers/setup_kinetix_peer.sh`",
            file=sys.stderr,
        )
        return False
    return True


def run_peer(script: str, args: list[str], label: str) -> list[dict]:
    """JSON lines printed by ``benchmarks/peers/<script>`` run with the peer venv's Python
    (empty, with a note on stderr, when it fails). ``XLA_FLAGS`` is not passed on."""
    cmd = [str(PEER_PY), str(REPO / "benchmarks" / "peers" / script), *args]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        print(f"# peer failed for {label}: {proc.stderr.strip()[-800:]}", file=sys.stderr)
        return []
    return [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
