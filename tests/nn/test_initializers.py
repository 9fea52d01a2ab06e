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
