"""Task-vector algebra on hand-made parameter trees."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.lm import task_vectors as tv


def _tree(a, b, c):
    return {
        "layer": {"kernel": jnp.asarray(a, jnp.float32), "bias": jnp.asarray(b, jnp.float32)},
        "scale": jnp.asarray(c, jnp.float32),
    }


P0 = _tree([[1.0, 2.0], [3.0, 4.0]], [0.5, -0.5], 1.0)
P1 = _tree([[2.0, 2.0], [3.0, 6.0]], [0.5, 0.5], 3.0)
P2 = _tree([[1.0, 0.0], [4.0, 4.0]], [-0.5, -0.5], 1.0)


def _close(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6), a, b)


def test_algebra_on_hand_trees():
    d1 = tv.task_vector(P1, P0)
    d2 = tv.task_vector(P2, P0)
    _close(d1, _tree([[1, 0], [0, 2]], [0, 1], 2))
    _close(d2, _tree([[0, -2], [1, 0]], [-1, 0], 0))
    _close(tv.add(d1, d2), _tree([[1, -2], [1, 2]], [-1, 1], 2))
    _close(tv.negate(d1), _tree([[-1, 0], [0, -2]], [0, -1], -2))
    _close(tv.scale(d1, 0.5), _tree([[0.5, 0], [0, 1]], [0, 0.5], 1))
    # Ψ0 + 1·Δ1 = Ψ1; Ψ0 + Δ1 − 2Δ2 by hand
    _close(tv.edit(P0, [d1, d2], jnp.array([1.0, 0.0])), P1)
    _close(
        tv.edit(P0, [d1, d2], jnp.array([1.0, -2.0])),
        _tree([[2, 6], [1, 6]], [2.5, 0.5], 3),
    )


def test_edit_vmaps_over_a_lambda_grid_like_a_loop():
    d1, d2 = tv.task_vector(P1, P0), tv.task_vector(P2, P0)
    lams = jnp.array([[0.0, 0.0], [1.0, 1.0], [-1.5, 0.5]])
    batched = jax.jit(jax.vmap(lambda lam: tv.edit(P0, [d1, d2], lam)))(lams)
    for i, lam in enumerate(lams):
        _close(jax.tree.map(lambda x, i=i: x[i], batched), tv.edit(P0, [d1, d2], lam))


def test_low_rank_matches_numpy_svd_truncation():
    rng = np.random.default_rng(0)
    m = rng.normal(size=(5, 4)).astype(np.float32)
    u, s, vt = np.linalg.svd(m, full_matrices=False)
    out = tv.low_rank({"w": jnp.asarray(m), "b": jnp.arange(3.0)}, 1)
    np.testing.assert_allclose(out["w"], s[0] * np.outer(u[:, 0], vt[0]), atol=1e-5)
    np.testing.assert_array_equal(out["b"], np.arange(3.0))  # vectors untouched
    assert np.linalg.matrix_rank(np.asarray(out["w"]), tol=1e-4) == 1
    full = tv.low_rank({"w": jnp.asarray(m)}, 4)
    np.testing.assert_allclose(full["w"], m, atol=1e-5)


def test_magnitude_prune_keeps_the_largest_half():
    x = jnp.array([[0.1, -4.0], [3.0, -0.2]])
    out = tv.magnitude_prune({"w": x}, 0.5)["w"]
    np.testing.assert_array_equal(out, [[0.0, -4.0], [3.0, 0.0]])
    np.testing.assert_array_equal(tv.magnitude_prune({"w": x}, 1.0)["w"], x)


def test_cosine():
    d = tv.task_vector(P1, P0)
    assert float(tv.cosine(d, d)) == pytest.approx(1.0)
    assert float(tv.cosine(d, tv.negate(d))) == pytest.approx(-1.0)


def test_different_shapes_are_a_clear_error():
    other = _tree([[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]], [0.5, -0.5], 1.0)
    with pytest.raises(ValueError, match=r"finetuned: leaf .*kernel.* shape \(2, 3\) vs \(2, 2\)"):
        tv.task_vector(other, P0)
    d1 = tv.task_vector(P1, P0)
    with pytest.raises(ValueError, match=r"vectors\[1\]"):
        tv.edit(P0, [d1, {"other": jnp.zeros(2)}], jnp.ones(2))
    with pytest.raises(ValueError, match="coefficients"):
        tv.edit(P0, [d1], jnp.ones(2))
    with pytest.raises(ValueError, match="rank"):
        tv.low_rank(d1, 0)
    with pytest.raises(ValueError, match="keep"):
        tv.magnitude_prune(d1, 0.0)
