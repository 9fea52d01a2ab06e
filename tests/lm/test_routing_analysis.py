"""Routing analysis (OLMoE §4): router saturation and expert co-activation on hand-made top-k
assignments."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.lm import routing_analysis


def test_saturation_and_coactivation_analytic():
    a = jnp.array([[0, 1], [2, 3], [4, 5]])
    b = jnp.array([[1, 0], [2, 7], [6, 7]])
    # per token: 2/2, 1/2, 0/2
    assert float(routing_analysis.router_saturation(a, b)) == pytest.approx(0.5)
    assert float(routing_analysis.router_saturation(a, a)) == 1.0
    co = np.asarray(routing_analysis.coactivation(jnp.array([[0, 1], [0, 2], [0, 1], [3, 1]]), 4))
    # expert 0 is used by 3 tokens, with 1 twice and 2 once
    np.testing.assert_allclose(co[0], [0, 2 / 3, 1 / 3, 0])
    np.testing.assert_allclose(co[1], [2 / 3, 0, 0, 1 / 3])
    assert co[2, 0] == 1.0
