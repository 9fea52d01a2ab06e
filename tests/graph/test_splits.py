"""Random planetoid splits: sizes, class balance, disjointness, determinism, vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.graph.splits import planetoid_split, split_sizes
from tests.typecheck import unchecked


@pytest.fixture(scope="module")
def labels():
    return jnp.asarray(np.random.default_rng(0).integers(0, 3, size=200), jnp.int32)


def test_sizes_and_disjoint(labels):
    keys = jax.random.split(jax.random.PRNGKey(0), 5)
    sp = jax.vmap(lambda k: planetoid_split(k, labels, train_per_class=4, num_val=10))(keys)
    tr, va, te = (np.asarray(m) for m in (sp.train, sp.val, sp.test))
    assert tr.shape == (5, 200)
    np.testing.assert_array_equal(tr.astype(int) + va + te, 1)
    np.testing.assert_array_equal(va.sum(1), 10)
    for c in range(3):
        np.testing.assert_array_equal(tr[:, np.asarray(labels) == c].sum(1), 4)
    assert not np.array_equal(tr[0], tr[1])  # different keys, different splits
    again = planetoid_split(keys[0], labels, train_per_class=4, num_val=10)
    np.testing.assert_array_equal(again.train, tr[0])


def test_split_sizes():
    assert split_sizes(1000, 2, "sparse") == (12, 25)
    assert split_sizes(1000, 2, "dense") == (300, 200)
    assert split_sizes(34, 2, "sparse") == (1, 1)
    with pytest.raises(ValueError, match="split"):
        unchecked(split_sizes)(100, 2, "medium")  # its own validation
    with pytest.raises(ValueError, match="no test nodes"):
        split_sizes(3, 2, "dense")
