"""Test-wide settings: 8 simulated CPU devices, set before JAX initialises its backends; the
runtime type-check switch."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# LAPACK (eigh/svd) threads spin on a 2-core machine: one thread is several times faster.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")

# Runtime type checks (jaxtyping + beartype, ``tests/typecheck.py``, ``docs/types.md``): the one
# switch. ``JAXLAB_TYPECHECK=1`` checks every annotated function and dataclass of jaxlab against
# what the tests pass; the hook is installed here, before any jaxlab module is imported.
# Still off by default: the checked suite is not yet clean (lm, and the families not yet run
# checked; docs/types.md "Status"). Its cost is mostly the hooked imports (~11 CPU-s per process).
TYPECHECK = os.environ.get("JAXLAB_TYPECHECK", "0") == "1"
if TYPECHECK:
    import jaxtyping  # noqa: E402

    import tests.typecheck  # noqa: E402, F401  (the checker the hook names)

    _HOOK = jaxtyping.install_import_hook(["jaxlab"], "tests.typecheck.checker")
