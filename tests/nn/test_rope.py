"""Rotary embeddings: NumPy (complex) reference and the relative-position property."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.nn.rope import apply_rope, rope_inverse_frequencies

rope = jax.jit(apply_rope)


def _rope_reference(x, positions, base):
    """Rotation of the complex pairs z_i = x_i + i x_{i+d/2} by e^{i m θ_i}."""
    x = np.asarray(x, np.float64)
    half = x.shape[-1] // 2
    theta = base ** (-np.arange(half) * 2.0 / x.shape[-1])
    z = x[..., :half] + 1j * x[..., half:]
    z = z * np.exp(1j * np.asarray(positions, np.float64)[:, :, None, None] * theta)
    return np.concatenate([z.real, z.imag], axis=-1)


def test_rope_matches_complex_reference():
    x = np.random.default_rng(0).standard_normal((2, 6, 3, 8)).astype(np.float32)
    positions = np.array([[0, 1, 2, 3, 4, 5], [7, 9, 11, 40, 41, 100]], np.int32)
    y = rope(x, positions)
    np.testing.assert_allclose(np.asarray(y), _rope_reference(x, positions, 1e4), atol=2e-5)
    # position 0 is the identity and every rotation preserves the norm
    np.testing.assert_allclose(np.asarray(y)[0, 0], x[0, 0], atol=1e-7)
    np.testing.assert_allclose(
        np.linalg.norm(np.asarray(y), axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5
    )


@pytest.mark.parametrize("offset", [0, 3, 17], ids=lambda o: f"offset{o}")
def test_rope_scores_depend_only_on_offset(offset):
    rng = np.random.default_rng(2)
    q = rng.standard_normal((1, 1, 1, 32)).astype(np.float32)
    k = rng.standard_normal((1, 1, 1, 32)).astype(np.float32)
    starts = np.array([0, 5, 31, 120], np.int32)
    # one call: row i rotates q by starts[i] and k by starts[i] + offset (or + offset + 1)
    qs = rope(np.broadcast_to(q, (4, 1, 1, 32)), starts[:, None])
    ks = rope(np.broadcast_to(k, (4, 1, 1, 32)), starts[:, None] + offset)
    ks_next = rope(np.broadcast_to(k, (4, 1, 1, 32)), starts[:, None] + offset + 1)
    scores = np.sum(np.asarray(qs) * np.asarray(ks), axis=(1, 2, 3))
    np.testing.assert_allclose(scores, np.full(4, scores[0]), rtol=1e-4, atol=1e-4)
    # the score does change with the offset (the property is not trivially true)
    scores_next = np.sum(np.asarray(qs) * np.asarray(ks_next), axis=(1, 2, 3))
    assert abs(scores_next[0] - scores[0]) > 1e-3


def test_rope_frequencies_and_odd_head_dim():
    np.testing.assert_allclose(
        np.asarray(rope_inverse_frequencies(8, 100.0)), 100.0 ** (-np.arange(4) / 4), rtol=1e-6
    )
    with pytest.raises(ValueError, match="head_dim=7"):
        rope_inverse_frequencies(7)
    with pytest.raises(ValueError, match="head_dim=7"):
        apply_rope(jnp.ones((1, 1, 1, 7)), jnp.zeros((1, 1), jnp.int32))
