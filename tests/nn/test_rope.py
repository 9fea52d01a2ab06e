"""Rotary embeddings: NumPy (complex) reference and the relative-position property."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.nn.rope import apply_rope, rope_inverse_frequencies


def _rope_reference(x, positions, base):
    """Rotation of the complex pairs z_i = x_i + i x_{i+d/2} by e^{i m θ_i}."""
    x = np.asarray(x, np.float64)
    half = x.shape[-1] // 2
    theta = base ** (-np.arange(half) * 2.0 / x.shape[-1])
    z = x[..., :half] + 1j * x[..., half:]
    z = z * np.exp(1j * np.asarray(positions, np.float64)[:, :, None, None] * theta)
    return np.concatenate([z.real, z.imag], axis=-1)


def test_rope_matches_complex_reference():
    x = jax.random.normal(jax.random.key(0), (2, 6, 3, 8))
    positions = jnp.array([[0, 1, 2, 3, 4, 5], [7, 9, 11, 40, 41, 100]], jnp.int32)
    y = jax.jit(apply_rope)(x, positions)
    np.testing.assert_allclose(np.asarray(y), _rope_reference(x, positions, 1e4), atol=2e-5)


def test_rope_position_zero_is_identity_and_norm_preserving():
    x = jax.random.normal(jax.random.key(1), (1, 4, 2, 16))
    y0 = apply_rope(x, jnp.zeros((1, 4), jnp.int32))
    np.testing.assert_allclose(np.asarray(y0), np.asarray(x), atol=1e-7)
    y = apply_rope(x, jnp.arange(4, dtype=jnp.int32)[None, :] * 13)
    np.testing.assert_allclose(
        np.linalg.norm(np.asarray(y), axis=-1), np.linalg.norm(np.asarray(x), axis=-1), rtol=1e-5
    )


@pytest.mark.parametrize("offset", [0, 3, 17], ids=lambda o: f"offset{o}")
def test_rope_scores_depend_only_on_offset(offset):
    key_q, key_k = jax.random.split(jax.random.key(2))
    q = jax.random.normal(key_q, (1, 1, 1, 32))
    k = jax.random.normal(key_k, (1, 1, 1, 32))
    starts = jnp.array([0, 5, 31, 120], jnp.int32)

    def score(m, n):
        qm = apply_rope(q, jnp.full((1, 1), m, jnp.int32))
        kn = apply_rope(k, jnp.full((1, 1), n, jnp.int32))
        return jnp.sum(qm * kn)

    scores = jax.vmap(lambda m: score(m, m + offset))(starts)
    np.testing.assert_allclose(np.asarray(scores), np.full(4, scores[0]), rtol=1e-4, atol=1e-4)
    # and the score does change with the offset (the property is not trivially true)
    assert abs(float(score(0, offset + 1)) - float(scores[0])) > 1e-3


def test_rope_rejects_odd_head_dim():
    with pytest.raises(ValueError, match="head_dim=7"):
        rope_inverse_frequencies(7)
