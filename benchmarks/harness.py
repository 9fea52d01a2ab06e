"""The one helper every benchmark uses: steady-state timing, the JSON-line emitter (each line
carries the machine and the device it was measured on, the UTC date and the command that printed
it, so ``python -m benchmarks.report`` can say where every figure came from), and the runner of peer scripts in the
original Jax2D / Kinetix virtual environment (``benchmarks/peers/.venv-kinetix``, made by
``setup_kinetix_peer.sh``; ``JAXLAB_PEER_PYTHON`` names another interpreter).

Benchmarks run from a source checkout, as modules of the checkout root (``python -m
benchmarks.bench_x`` or ``jaxlab bench x``); they are not part of the installed package.
"""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import jax

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers"
# the folder that holds ``shared/`` next to a checkout (``REPO.parent / "shared"``)
REPO = HERE.parent
PEER_PY = Path(os.environ.get("JAXLAB_PEER_PYTHON", PEERS / ".venv-kinetix" / "bin" / "python"))


def device() -> str:
    """``platform:device_kind`` of the first device, e.g. ``cpu:cpu`` or ``gpu:NVIDIA H200``."""
    d = jax.devices()[0]
    return f"{d.platform}:{getattr(d, 'device_kind', '')}"


@functools.cache
def machine() -> dict:
    """Host and software facts added to every emitted line (computed once)."""
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "n_devices": jax.device_count(),
    }


def invocation() -> str:
    """How this process was started: ``python -m <module> <args>`` for a module run (``python -m
    benchmarks.bench_x`` or ``jaxlab bench x``), else ``python <script> <args>``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        head = "python -m " + spec.name.removesuffix(".__main__")
    else:
        head = "python " + (sys.argv[0] if sys.argv else "")
    return " ".join([head, shlex.join(sys.argv[1:])]).rstrip()


def utc_now() -> str:
    """The current UTC time, ISO 8601 to the second (``2026-12-07T14:22:56Z``)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def emit(record: dict | None = None, **fields) -> dict:
    """Print one JSON line: ``record`` and ``fields`` plus ``device``, ``date`` (UTC, ISO 8601)
    and ``command`` (:func:`invocation`), each unless given, and ``machine``; floats are kept as
    measured. Returns the line's dict."""
    row = {**(record or {}), **fields}
    row.setdefault("device", device())
    row.setdefault("date", utc_now())
    row.setdefault("command", invocation())
    row["machine"] = machine()
    print(json.dumps(row, default=float), flush=True)
    return row


def emit_rate(what: str, size: dict, compile_s: float, time_s: float, rate: float, unit: str, **kw):
    """:func:`emit` of the house row ``what, size, compile_s, time_s, rate, unit`` (+ extras)."""
    return emit(what=what, size=size, compile_s=round(compile_s, 4), time_s=round(time_s, 5),
                rate=round(rate, 3), unit=unit, **kw)  # fmt: skip


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


def timed(fn, *args, repeats: int = 3):
    """``(compile_s, best wall seconds over repeats, output, compiled)`` of a jitted ``fn``:
    compiled ahead of time (``fn.lower(*args).compile()``), run once to warm up, then timed."""
    t0 = time.perf_counter()
    compiled = fn.lower(*args).compile()
    compile_s = time.perf_counter() - t0
    out = jax.block_until_ready(compiled(*args))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        best = min(best, time.perf_counter() - t0)
    return compile_s, best, out, compiled


def timed_mean(fn, *args, repeats: int) -> tuple[float, float]:
    """``(first-call seconds incl. compile, mean seconds per call over repeats)`` of any
    callable returning arrays (calls dispatched back to back, one sync at the end)."""
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(repeats):
        out = fn(*args)
    jax.block_until_ready(out)
    return first, (time.perf_counter() - t0) / repeats


def peer_available(no_peer: bool) -> bool:
    """Whether to run the peer side; says on stderr how to get it when it is missing."""
    if no_peer:
        return False
    if not PEER_PY.exists():
        print(
            f"# no peer venv at {PEER_PY}: run `bash benchmarks/peers/setup_kinetix_peer.sh`"
            " (or set JAXLAB_PEER_PYTHON)",
            file=sys.stderr,
        )
        return False
    return True


def peer_env() -> dict[str, str]:
    """The environment a peer process runs in: ours without ``XLA_FLAGS`` (the original at XLA's
    defaults, as its users get it), or with ``XLA_FLAGS=$JAXLAB_PEER_XLA_FLAGS`` when that is set
    (to measure the original under jaxlab's compile options, :mod:`jaxlab.core.compile`)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if os.environ.get("JAXLAB_PEER_XLA_FLAGS"):
        env["XLA_FLAGS"] = os.environ["JAXLAB_PEER_XLA_FLAGS"]
    return env


def run_peer(script: str, args: list[str], label: str) -> list[dict]:
    """JSON lines printed by ``benchmarks/peers/<script>`` run with the peer venv's Python in
    :func:`peer_env` (empty, with a note on stderr, when it fails)."""
    cmd = [str(PEER_PY), str(PEERS / script), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=peer_env(), cwd=HERE)
    if proc.returncode != 0:
        print(f"# peer failed for {label}: {proc.stderr.strip()[-800:]}", file=sys.stderr)
        return []
    return [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]


def compile_timed(fn, *args):
    """``(compiled, compile seconds)`` of ``fn`` jitted with jaxlab's compile options
    (:mod:`jaxlab.core.compile`) and lowered for ``args``."""
    from jaxlab.core.compile import jit

    t0 = time.perf_counter()
    compiled = jit(fn).lower(*args).compile()
    return compiled, time.perf_counter() - t0


def wall_cpu(fns: dict[str, tuple[Callable, tuple]], reps: int) -> dict[str, tuple]:
    """Best-of-``reps`` wall and CPU seconds and mean wall and CPU seconds per call, for each
    compiled ``name -> (fn, args)``; calls interleaved round-robin after one warm-up each.

    CPU seconds = process CPU time of all threads. On a shared machine they are the robust cost
    measure (wall time includes waiting for a core); the *mean* CPU time is the one to compare:
    the kernel charges CPU time of the XLA worker threads lazily (at scheduler ticks), so a single
    short call can read well below its true cost and the best-of-``reps`` CPU time is biased low.
    Interleaving exposes all variants to the same machine load, so their ratios stay meaningful.
    """
    for fn, args in fns.values():
        jax.block_until_ready(fn(*args))  # warm-up
    best = {name: (float("inf"), float("inf")) for name in fns}
    total = {name: (0.0, 0.0) for name in fns}
    for _ in range(reps):
        for name, (fn, args) in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            jax.block_until_ready(fn(*args))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
            total[name] = (total[name][0] + wall, total[name][1] + cpu)
    return {name: (*best[name], total[name][0] / reps, total[name][1] / reps) for name in fns}


def dot_flops(jaxpr) -> float:
    """Floating-point operations of every ``dot_general`` in a (closed) jaxpr: ``2 * |out| * K``
    each (``K`` the contracted size), bodies of ``scan`` times their length, nested calls
    (``pjit``, ``custom_jvp``/``custom_vjp``, ``remat``) once, the costliest ``cond`` branch; a
    ``while`` body is counted once (its trip count is not static). The matmul work of the
    computation as written (dense layers, attention, one-hot gathers)."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    total = 0.0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (lhs_contract, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            k = math.prod(lhs[i] for i in lhs_contract)
            total += 2.0 * math.prod(eqn.outvars[0].aval.shape) * k
            continue
        times = eqn.params.get("length", 1) if eqn.primitive.name == "scan" else 1
        for name, value in eqn.params.items():
            if name == "branches":
                total += max((dot_flops(b) for b in value), default=0.0)
            elif hasattr(value, "eqns") or hasattr(getattr(value, "jaxpr", None), "eqns"):
                total += times * dot_flops(value)
    return total


def gemm_peak(n: int = 2048, repeats: int = 18) -> float:
    """This machine's float32 matmul rate (FLOP/s): the best of ``repeats`` timed
    ``[n, n] @ [n, n]`` products through XLA (the backend and threads JAX uses)."""
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jax.numpy.float32)
    _, best, _, _ = timed(jax.jit(jax.numpy.matmul), a, a, repeats=repeats)
    return 2.0 * n**3 / best
