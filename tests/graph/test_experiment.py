"""GnnConfig validation and the data pipeline (load -> rewire -> normalise -> layout)."""

import jax
import numpy as np
import pytest

from jaxlab.core.config import ConfigError, replace, resolve
from jaxlab.graph.experiment import (
    GnnConfig,
    abs_ordering,
    edge_capacity,
    load_graph,
    make_data_fn,
)
from jaxlab.graph.graph import edges_to_dense

SMALL = replace(
    GnnConfig(),
    **{
        "graph.n": 60,
        "graph.p": 16,
        "graph.phi": 0.5,
        "jdr.top_k": 6,
        "digl.top_k": 6,
        "jdr.iterations": 2,
        "jdr.solver": "dense",
        "jdr.l_x": 2,
        "jdr.l_a": 2,
    },
)


@pytest.mark.parametrize("rewire", ["none", "digl", "jdr"])
def test_edges_layout_equals_dense_layout(rewire):
    cfg = replace(SMALL, rewire=rewire)
    edges = make_data_fn(cfg)()
    dense = make_data_fn(replace(cfg, **{"graph.layout": "dense"}))()
    np.testing.assert_allclose(edges_to_dense(edges.graph), dense.graph.adjacency, atol=1e-6)
    np.testing.assert_array_equal(edges.features, dense.features)
    np.testing.assert_array_equal(edges.labels, dense.labels)
    if rewire == "none":
        raw = np.asarray(load_graph(cfg.graph).adjacency)
        assert edge_capacity(cfg) == np.count_nonzero(raw)
        assert bool(edges.graph.mask.all())
    else:
        assert edge_capacity(cfg) == 60 * 6
        np.testing.assert_array_less((np.asarray(dense.graph.adjacency) != 0).sum(0), 6 + 2)


def test_karate_pipeline():
    cfg = resolve(
        GnnConfig,
        overrides=[
            "graph.name=karate",
            "graph.split=dense",
            "rewire=jdr",
            "jdr.l_x=2",
            "jdr.l_a=2",
            "jdr.top_k=8",
            "jdr.solver=dense",
        ],
    )
    data = jax.jit(make_data_fn(cfg))()
    assert data.features.shape == (34, 34)
    assert set(np.unique(np.asarray(data.labels))) == {0, 1}
    assert not abs_ordering(cfg)


def test_auto_ordering():
    assert abs_ordering(replace(SMALL, **{"graph.phi": -0.25}))
    assert not abs_ordering(replace(SMALL, **{"graph.phi": 0.25}))
    assert not abs_ordering(replace(SMALL, **{"graph.phi": -0.25, "jdr.ordering": "value"}))


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["graph.phi=1.5"], "graph.phi"),
        (["rewire=jdr", "jdr.l_x=500"], "jdr"),
        (["rewire=jdr", "jdr.top_k=0"], "jdr.top_k"),
        (["jdr.eta_a=1.5"], "jdr.eta_a"),
        (["digl.alpha=0"], "digl.alpha"),
        (["num_seeds=0"], "num_seeds"),
        (["trainer.dropout=1.0"], "trainer.dropout"),
        (["graph.d=900", "graph.n=900"], "graph.d"),
        (["rewire=rewire"], "rewire"),
    ],
)
def test_config_errors(overrides, key):
    with pytest.raises(ConfigError) as err:
        resolve(GnnConfig, overrides=overrides)
    assert err.value.key == key


def test_threshold_mode_needs_dense_layout():
    """JDR thresholding (top_k = 0) has no static edge count: refused with the edge-list layout,
    accepted with the dense one."""
    with pytest.raises(ConfigError, match="jdr.top_k.*graph.layout=dense"):
        resolve(GnnConfig, overrides=["rewire=jdr", "jdr.top_k=0", "graph.layout=edges"])
    cfg = resolve(GnnConfig, overrides=["rewire=jdr", "jdr.top_k=0", "graph.layout=dense"])
    assert cfg.jdr.top_k == 0
