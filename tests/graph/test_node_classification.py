"""Multi-seed node classification: early-stopping bookkeeping, vmap-vs-loop, learning on karate."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.graph.csbm import CSBMParams, sample_csbm
from jaxlab.graph.datasets import karate_club
from jaxlab.graph.gnn import gcn_normalize
from jaxlab.graph.graph import DenseGraph, dense_to_edges
from jaxlab.graph.node_classification import (
    OPTIM,
    NodeData,
    TrainerSpec,
    init_seeds,
    make_optimizer,
    train,
    train_epoch,
)
from jaxlab.graph.splits import split_sizes

SPEC = TrainerSpec(hidden=8, train_per_class=5, num_val=10, patience=4, gpr_k=3)


@pytest.fixture(scope="module")
def step():
    """One compiled multi-seed epoch, shared by the tests below."""
    return jax.jit(train_epoch, static_argnames="spec")


@pytest.fixture(scope="module")
def data():
    s = sample_csbm(jax.random.PRNGKey(0), CSBMParams(phi=0.4), n=80, p=20)
    nnz = int(np.count_nonzero(np.asarray(s.adjacency)))
    graph = gcn_normalize(dense_to_edges(s.adjacency, capacity=nnz))
    return NodeData(features=s.features, labels=s.labels, graph=graph)


def test_early_stopping_bookkeeping(data):
    """With one seed the history is that seed's: best/test-at-best/stop epoch follow from it."""
    spec = SPEC
    epochs = 30
    seeds, hist = train(jax.random.PRNGKey(1), data, spec, num_seeds=1, epochs=epochs)
    val, test = np.asarray(hist["val_acc"]), np.asarray(hist["test_acc"])
    best = int(np.argmax(val))
    assert float(seeds.best_val_acc[0]) == pytest.approx(val.max())
    assert int(seeds.best_epoch[0]) == best + 1
    assert float(seeds.test_acc_at_best[0]) == pytest.approx(test[best])
    if best + 1 + spec.patience <= epochs:
        assert bool(seeds.stopped[0])
        assert int(seeds.epoch[0]) == best + 1 + spec.patience
        # frozen after stopping: the evaluation no longer changes
        stop = best + spec.patience
        assert np.all(val[stop:] == val[stop]) and np.all(test[stop:] == test[stop])
    else:
        assert not bool(seeds.stopped[0]) and int(seeds.epoch[0]) == epochs


def test_stopped_seed_is_frozen(data, step):
    seeds = init_seeds(jax.random.PRNGKey(2), data, SPEC, 3)
    seeds = seeds.replace(stopped=jnp.array([True, False, False]))
    new, _ = step(data, seeds, SPEC)
    for old, upd in zip(jax.tree.leaves(seeds.params), jax.tree.leaves(new.params), strict=True):
        np.testing.assert_array_equal(old[0], upd[0])
        assert not np.array_equal(old[1], upd[1])
    assert new.epoch.tolist() == [0, 1, 1]


def test_vmap_over_seeds_equals_loop(data, step):
    seeds = init_seeds(jax.random.PRNGKey(3), data, SPEC, 3)
    together = seeds
    for _ in range(3):
        together, _ = step(data, together, SPEC)
    for i in range(3):
        one = jax.tree.map(lambda v, i=i: v[i : i + 1], seeds)
        for _ in range(3):
            one, _ = step(data, one, SPEC)
        for a, b in zip(jax.tree.leaves(together), jax.tree.leaves(one), strict=True):
            np.testing.assert_allclose(a[i], b[0], rtol=1e-5, atol=1e-6)


def test_seeds_differ(data):
    seeds = init_seeds(jax.random.PRNGKey(4), data, SPEC, 2)
    assert not np.array_equal(seeds.split.train[0], seeds.split.train[1])
    kernel = seeds.params["conv1"]["kernel"]
    assert not np.array_equal(kernel[0], kernel[1])


@pytest.mark.parametrize("model", ["gcn", "gprgnn"])
def test_learns_karate(model):
    g = karate_club()
    data = NodeData(
        features=jnp.asarray(g.features),
        labels=jnp.asarray(g.labels),
        graph=gcn_normalize(DenseGraph(jnp.asarray(g.adjacency))),
    )
    per_class, num_val = split_sizes(34, 2, "dense")
    spec = TrainerSpec(
        model=model,
        hidden=16,
        train_per_class=per_class,
        num_val=num_val,
        patience=100,
        gpr_k=4,
    )
    seeds, hist = train(jax.random.PRNGKey(0), data, spec, num_seeds=4, epochs=40)
    loss = np.asarray(hist["loss"])
    assert loss[-1] < 0.7 * loss[0]
    assert float(np.mean(seeds.test_acc_at_best)) > 0.75


def test_bad_spec():
    with pytest.raises(ValueError, match="model"):
        TrainerSpec(model="gat").check()
    with pytest.raises(ValueError, match="dropout"):
        TrainerSpec(dropout=1.0).check()
    TrainerSpec().check()


def test_optimizer_decays_every_weight_but_gprgnn_gamma():
    """Coupled L2 (PyTorch Adam semantics): the first Adam step of a zero gradient moves a
    weight by -lr * sign(wd * w) (Adam normalises wd * w), and leaves GPRGNN's propagation
    coefficients (``prop1``) untouched; the traced rates give the same update as the config's."""
    assert (OPTIM.name, OPTIM.lr, OPTIM.weight_decay) == ("adam", 0.01, 5e-4)
    params = {
        "lin1": {"kernel": jnp.array([[2.0, -3.0]])},
        "prop1": {"gamma": jnp.array([0.5, 0.25, 1.0])},
    }
    zeros = jax.tree.map(jnp.zeros_like, params)
    opt = make_optimizer(OPTIM, 1)
    upd, _ = opt.update(zeros, opt.init(params), params)
    np.testing.assert_allclose(upd["lin1"]["kernel"], [[-0.01, 0.01]], rtol=1e-4)
    np.testing.assert_array_equal(upd["prop1"]["gamma"], np.zeros(3))
    rates = {"optim.lr": jnp.float32(0.01), "optim.weight_decay": jnp.float32(5e-4)}
    traced = make_optimizer(OPTIM, 1, rates)
    upd2, _ = traced.update(zeros, traced.init(params), params)
    np.testing.assert_allclose(upd2["lin1"]["kernel"], upd["lin1"]["kernel"], rtol=1e-6)
