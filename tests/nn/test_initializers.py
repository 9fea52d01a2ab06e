"""Initialisers: OLMo truncated normal and fan-in LeCun normal on 3-D kernels."""

import jax
import numpy as np
import pytest

from jaxlab.nn.initializers import embedding_init, kernel_init


def test_truncated_normal_std_and_bounds():
    w = np.asarray(kernel_init(0.02)(jax.random.key(0), (256, 512)))
    assert np.abs(w).max() <= 3 * 0.02 + 1e-7
    # the std of N(0, σ²) truncated at ±3σ is 0.9866σ
    np.testing.assert_allclose(w.std(), 0.02 * 0.9866, rtol=0.02)


def test_lecun_uses_given_fan_in_axes():
    w = np.asarray(kernel_init(None, in_axis=0, out_axis=(1, 2))(jax.random.key(0), (64, 8, 32)))
    np.testing.assert_allclose(w.std(), 1 / np.sqrt(64), rtol=0.05)
    w = np.asarray(kernel_init(None, in_axis=(0, 1), out_axis=2)(jax.random.key(1), (8, 32, 64)))
    np.testing.assert_allclose(w.std(), 1 / np.sqrt(8 * 32), rtol=0.05)


def test_embedding_init_default_is_unit_normal():
    e = np.asarray(embedding_init(None)(jax.random.key(0), (512, 64)))
    np.testing.assert_allclose(e.std(), 1.0, rtol=0.03)


def test_bad_std_raises():
    with pytest.raises(ValueError, match="init_std=-1"):
        kernel_init(-1.0)


def test_orthogonal_equals_flax_per_key_and_under_vmap():
    from flax.linen.initializers import orthogonal as flax_orthogonal

    from jaxlab.nn.initializers import orthogonal

    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    ours = jax.jit(jax.vmap(lambda k: orthogonal(0.5)(k, (8, 6))))(keys)
    for k, w in zip(keys, ours, strict=True):
        np.testing.assert_array_equal(np.asarray(w), np.asarray(flax_orthogonal(0.5)(k, (8, 6))))
    np.testing.assert_allclose(np.asarray(ours[0].T @ ours[0]), 0.25 * np.eye(6), atol=1e-5)
    nested = jax.vmap(jax.vmap(lambda k: orthogonal()(k, (4, 4))))(keys.reshape(3, 1, -1))
    np.testing.assert_array_equal(np.asarray(nested[:, 0]), np.asarray(jax.vmap(
        lambda k: orthogonal()(k, (4, 4)))(keys)))  # fmt: skip


def test_orthogonal_under_vmap_does_not_deadlock_the_cpu_thread_pool():
    """Sixteen 64x64 orthogonal kernels for two vmapped seeds in one program: with flax's
    initialiser (batched LAPACK QR) this deadlocks on a 2-core CPU with every thread idle
    (jaxlib 0.10); ours maps the batch. Run in a subprocess with a deadline."""
    import subprocess
    import sys

    code = (
        "import jax\n"
        "from jaxlab.nn.initializers import orthogonal\n"
        "init = orthogonal(1.0)\n"
        "f = jax.jit(jax.vmap(lambda key: [init(k, (64, 64)) for k in jax.random.split(key, 16)]))\n"
        "for i in range(10):\n"
        "    jax.block_until_ready(f(jax.random.split(jax.random.PRNGKey(i), 2)))\n"
        "print('done')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0 and "done" in out.stdout, out.stderr[-2000:]
