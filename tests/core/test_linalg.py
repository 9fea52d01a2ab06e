"""jaxlab.core.linalg: values equal jnp.linalg's per matrix (leading axes, vmap, nested vmap),
gradients equal jnp.linalg's, accelerators keep the batched solver, bad shapes are named, and the
concurrent batched decompositions that hang jaxlib 0.10 on the CPU finish."""

import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import TypeCheckError

from jaxlab.core import linalg

KEY = jax.random.PRNGKey(0)
GENERAL = jax.random.normal(KEY, (2, 3, 5, 5))
SYMMETRIC = GENERAL + jnp.swapaxes(GENERAL, -1, -2)
SPD = GENERAL @ jnp.swapaxes(GENERAL, -1, -2) + 5.0 * jnp.eye(5)[None, None]

CASES = {
    "qr": (linalg.qr, jnp.linalg.qr, GENERAL),
    "eigh": (linalg.eigh, jnp.linalg.eigh, SYMMETRIC),
    "svd": (linalg.svd, lambda a: jnp.linalg.svd(a, full_matrices=False), GENERAL),
    "cholesky": (linalg.cholesky, jnp.linalg.cholesky, SPD),
    "inv": (linalg.inv, jnp.linalg.inv, SPD),
}


def _assert_same(ours, ref):
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref), strict=True):
        assert a.shape == b.shape
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_equal_jnp_linalg_per_matrix(name):
    ours, ref, a = CASES[name]
    per_matrix = [[ref(a[i, j]) for j in range(a.shape[1])] for i in range(a.shape[0])]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *[jax.tree.map(lambda *ys: jnp.stack(ys), *row) for row in per_matrix])  # fmt: skip
    _assert_same(jax.jit(ours)(a), stacked)  # leading batch axes
    _assert_same(jax.vmap(jax.vmap(ours))(a), stacked)  # nested vmap
    _assert_same(ours(a[1, 2]), ref(a[1, 2]))  # one matrix


def test_cpu_maps_the_batch_and_accelerators_keep_the_batched_solver():
    fn = jax.jit(jax.vmap(linalg.eigh))
    cpu = fn.trace(SYMMETRIC[0]).lower(lowering_platforms=("cpu",)).as_text()
    tpu = fn.trace(SYMMETRIC[0]).lower(lowering_platforms=("tpu",)).as_text()
    assert "while" in cpu
    assert "while" not in tpu


def test_gradients_equal_jnp_linalg():
    def top(eig):
        return lambda a: eig(a)[0][..., -1].sum()

    np.testing.assert_allclose(
        jax.grad(top(linalg.eigh))(SYMMETRIC), jax.grad(top(jnp.linalg.eigh))(SYMMETRIC), rtol=1e-6
    )
    ours = jax.vmap(jax.grad(lambda a: linalg.svd(a)[1].sum()))(GENERAL[0])
    ref = jax.vmap(jax.grad(lambda a: jnp.linalg.svd(a, compute_uv=False).sum()))(GENERAL[0])
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


def test_bad_shapes_are_named():
    """Under the suite's runtime type checks jaxtyping names the function and the shape; without
    them the module's own check does (run both ways)."""
    checks = {"eigh": (3, 4), "svd": (3,), "inv": (2, 3), "cholesky": (4,)}
    for name, shape in checks.items():
        with pytest.raises((ValueError, TypeCheckError)) as err:
            getattr(linalg, name)(jnp.zeros(shape))
        text = str(err.value)
        assert name in text and (str(shape) in text or f"f32[{','.join(map(str, shape))}]" in text)
    for name, shape in checks.items():  # the module's own message, past the boundary check
        fn = getattr(linalg, name)
        fn = getattr(fn, "__wrapped__", fn)
        with pytest.raises(ValueError, match=rf"{name}: expected .*shape {re.escape(str(shape))}"):
            fn(jnp.zeros(shape))
    with pytest.raises(ValueError, match="mode='r'"):
        linalg.qr(jnp.zeros((3, 3)), mode="r")


# Four independent decompositions of each kind under a vmap over 8, the pattern that hangs with
# jnp.linalg on a 2-core CPU (jaxlib 0.10.2: QR and SVD of 128x128, eigh and Cholesky of 32x32,
# inv of 128x128 already with two). Run with OPS="jnp.linalg" to see the hang.
_REPRO = """
import sys, jax, jax.numpy as jnp
from jaxlab.core import linalg
ops = jnp.linalg if sys.argv[1] == "jnp.linalg" else linalg
def f(key):
    out = 0.0
    for i, k in enumerate(jax.random.split(key, 4)):
        g = jax.random.normal(k, (128, 128))
        s = g[:32, :32] @ g[:32, :32].T + 32.0 * jnp.eye(32)
        out += ops.qr(g)[0].sum() + ops.svd(g, full_matrices=False)[1].sum()
        out += ops.eigh(s)[0].sum() + ops.cholesky(s).sum() + ops.inv(g @ g.T + jnp.eye(128)).sum()
    return out
for i in range(2):
    jax.block_until_ready(jax.jit(jax.vmap(f))(jax.random.split(jax.random.PRNGKey(i), 8)))
print("done")
"""


def test_concurrent_batched_decompositions_finish():
    out = subprocess.run(
        [sys.executable, "-c", _REPRO, "jaxlab"], capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0 and "done" in out.stdout, out.stderr[-2000:]
