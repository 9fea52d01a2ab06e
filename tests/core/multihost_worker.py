"""One process of the two-process CPU test (run by test_multihost.py, not collected by pytest)."""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402

try:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
except (AttributeError, ValueError):
    pass

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from jaxlab.core import sharding  # noqa: E402


def main():
    assert sharding.maybe_initialize_distributed()
    pid = jax.process_index()
    assert jax.process_count() == 2 and jax.device_count() == 4 and jax.local_device_count() == 2
    mesh = sharding.make_mesh(sharding.MeshConfig(data=-1))

    # Cross-process reduction: each process contributes its local rows; the global sum is known.
    local = np.full((2, 3), pid + 1, np.float32)  # process 0 -> ones, process 1 -> twos
    batch = sharding.shard_batch({"x": local}, mesh)["x"]
    assert batch.shape == (4, 3)
    total = jax.jit(jnp.sum)(batch)
    assert float(total) == 2 * 3 * 1 + 2 * 3 * 2, float(total)

    # A sharded train step: least squares gradient step with data parallelism over 4 devices.
    rng = np.random.default_rng(0)
    x_all = rng.normal(size=(8, 3)).astype(np.float32)
    y_all = x_all @ np.array([1.0, -2.0, 0.5], np.float32)
    x_local, y_local = x_all[pid * 4 : (pid + 1) * 4], y_all[pid * 4 : (pid + 1) * 4]
    data = sharding.shard_batch({"x": x_local, "y": y_local}, mesh)

    @jax.jit
    def step(w, d):
        g = jax.grad(lambda w: jnp.mean((d["x"] @ w - d["y"]) ** 2))(w)
        return w - 0.1 * g

    w = step(jnp.zeros(3), data)
    g_ref = -2 * x_all.T @ y_all / 8
    np.testing.assert_allclose(np.asarray(w), -0.1 * g_ref, rtol=1e-5, atol=1e-6)

    # shard_map with an explicit psum across both processes.
    f = sharding.shard_map(
        lambda a: jax.lax.psum(a.sum(), ("data",)), mesh, in_specs=P(("data",)), out_specs=P()
    )
    assert float(jax.jit(f)(batch)) == 18.0
    print(f"OK {pid}", flush=True)


if __name__ == "__main__":
    main()
    sys.exit(0)
