"""The benchmark harness's matmul counter (``dot_flops``), which the PPO floor rests on."""

import jax
import jax.numpy as jnp

from benchmarks.harness import dot_flops


def test_dot_flops_counts_scans_conds_and_gradients():
    a, w = jnp.ones((4, 3)), jnp.ones((3, 5))
    one = 2 * 4 * 5 * 3
    assert dot_flops(jax.make_jaxpr(jnp.matmul)(a, w)) == one

    def scanned(a, w):
        return jax.lax.scan(lambda c, _: (c, jnp.sum(a @ w)), 0.0, None, length=7)[1]

    assert dot_flops(jax.make_jaxpr(jax.jit(scanned))(a, w)) == 7 * one

    def cond(p, a, w):  # the costlier branch: two products
        return jax.lax.cond(p, lambda: a @ w, lambda: (a @ w) @ jnp.ones((5, 5)))

    assert dot_flops(jax.make_jaxpr(cond)(True, a, w)) == one + 2 * 4 * 5 * 5
    # d/dw sum(a @ w) = a^T @ ones: forward product plus one more of the same size
    grad = jax.make_jaxpr(jax.grad(lambda w: jnp.sum(a @ w)))(w)
    assert dot_flops(grad) == 2 * one
    # batched: [b, m, k] @ [b, k, n]
    bm = jax.make_jaxpr(jnp.matmul)(jnp.ones((2, 4, 3)), jnp.ones((2, 3, 5)))
    assert dot_flops(bm) == 2 * one
