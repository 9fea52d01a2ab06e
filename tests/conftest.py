"""Test-wide settings: 8 simulated CPU devices, set before JAX initialises its backends; the
runtime type-check switch."""

import os

# XLA's CPU backend at LLVM optimisation level 1 (XLA's default is 3): compilation dominates the
# suite, and on its programs level 1 compiles faster and runs as fast or faster (planner tiny recipe
# 80 -> 60 s, kinetix-ppo cpu-single learning test 62 -> 44 s). Only LLVM's passes change, not
# XLA's HLO passes; library code and benchmarks run at XLA's default. Subprocesses inherit it.
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_backend_optimization_level" not in _flags:
    _flags += " --xla_backend_optimization_level=1"
os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# LAPACK (eigh/svd) threads spin on a 2-core machine: one thread is several times faster.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")

# Runtime type checks (jaxtyping + beartype, ``tests/typecheck.py``, ``docs/types.md``): on in
# every run of the suite; every annotated function and dataclass of jaxlab is checked against
# what the tests pass. The hook is installed here, before any jaxlab module is imported.
# ``JAXLAB_TYPECHECK=0`` turns it off (to time the library unchecked). Its cost is mostly the
# hooked imports (~11 CPU-s per process); the checks themselves run at trace time.
TYPECHECK = os.environ.get("JAXLAB_TYPECHECK", "1") == "1"
if TYPECHECK:
    import jaxtyping  # noqa: E402

    import tests.typecheck  # noqa: E402, F401  (the checker the hook names)

    _HOOK = jaxtyping.install_import_hook(["jaxlab"], "tests.typecheck.checker")

# Bounded worker memory. An xdist worker runs ~1,100 tests in one process, and JAX keeps every
# compiled executable its jit caches have seen for the life of the process, which can outgrow the
# machine ("node down" late in the suite). After a test module, if the worker holds more than
# ``JAXLAB_TEST_RSS_GIB`` (default 4) GiB, the caches are dropped and freed memory handed back to
# the OS; programs shared across modules below that mark are kept. ``JAXLAB_TEST_MEMLOG=path`` logs each module's RSS.
import ctypes  # noqa: E402
import gc  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402

_RSS_LIMIT = float(os.environ.get("JAXLAB_TEST_RSS_GIB", "4")) * 2**30
_MEMLOG = os.environ.get("JAXLAB_TEST_MEMLOG")

# With ``JAXLAB_TEST_MEMLOG``, each module's seconds of JAX tracing, lowering and XLA compiling
# too (JAX's monitoring events; no listener otherwise).
_PHASES = {"trace": 0.0, "lower": 0.0, "compile": 0.0}
_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}


def _count_phase(event: str, duration: float, **_) -> None:
    if event in _EVENTS:
        _PHASES[_EVENTS[event]] += duration


if _MEMLOG:
    jax.monitoring.register_event_duration_secs_listener(_count_phase)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


@pytest.fixture(autouse=True, scope="module")
def _bounded_memory(request):
    start = time.perf_counter()
    phases_at_start = dict(_PHASES)
    yield
    before = _rss()
    if before > _RSS_LIMIT:
        jax.clear_caches()
        gc.collect()
        _trim()
    if _MEMLOG:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        phases = " ".join(f"{k} {v - phases_at_start[k]:.1f}s" for k, v in _PHASES.items())
        with open(_MEMLOG, "a") as f:
            f.write(
                f"{worker} {request.node.nodeid} {time.perf_counter() - start:.1f}s [{phases}] "
                f"rss {before / 2**30:.2f} -> {_rss() / 2**30:.2f} GiB\n"
            )
