"""Test-wide settings: 8 simulated CPU devices, set before JAX initialises its backends."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# LAPACK (eigh/svd) threads spin on a 2-core machine: one thread is several times faster.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
