"""Full-batch semi-supervised node classification, many seeds in one ``vmap``.

One *seed* is one random split (:func:`~jaxlab.graph.splits.planetoid_split`), one parameter
initialisation and one dropout stream, as in the JDR paper's evaluation (100 seeds there). All seeds
share the graph and the features (:class:`NodeData`); their states (:class:`SeedState`) are stacked
along a leading axis and stepped together by :func:`train_epoch`, so a whole multi-seed run is one
``lax.scan`` (:func:`train`).

Training (the paper's defaults): Adam with L2 weight decay added to the gradient (PyTorch's
``Adam(weight_decay=...)``; for GPRGNN not on the propagation coefficients), negative
log-likelihood on the training nodes, one full-batch step per epoch. After every step the model is
evaluated without dropout; early stopping is on validation accuracy: the test accuracy at the
epoch of the best validation accuracy (strict improvement) is the seed's result, and a seed stops
(its parameters freeze) after ``patience`` epochs without improvement.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Literal

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Bool, Float, Int

from jaxlab.graph.gnn import GCN, GPRGNN, Graph
from jaxlab.graph.splits import Split, planetoid_split


@dataclasses.dataclass(frozen=True)
class TrainerSpec:
    """Model and optimiser settings (hashable; a static argument).

    Attributes:
      model: ``gcn`` or ``gprgnn``.
      num_classes: number of classes C.
      hidden: hidden width (paper 64).
      dropout: dropout rate (paper 0.5).
      dprate: GPRGNN dropout before propagation (paper 0.5).
      gpr_k: GPRGNN hops K (paper 10).
      gpr_alpha: GPRGNN PPR init teleport (paper 0.1).
      lr: Adam learning rate (paper 0.01).
      weight_decay: L2 coefficient (paper 5e-4).
      patience: epochs without a validation-accuracy improvement before a seed stops (paper 200).
      train_per_class: training nodes per class of each random split.
      num_val: validation nodes of each random split.
    """

    model: Literal["gcn", "gprgnn"] = "gcn"
    num_classes: int = 2
    hidden: int = 64
    dropout: float = 0.5
    dprate: float = 0.5
    gpr_k: int = 10
    gpr_alpha: float = 0.1
    lr: float = 0.01
    weight_decay: float = 5e-4
    patience: int = 200
    train_per_class: int = 20
    num_val: int = 500

    def __post_init__(self):
        self.check()  # a spec validates itself when made, as every config of the house does

    def check(self) -> None:
        """Raises ValueError naming the field for invalid settings."""
        if self.model not in ("gcn", "gprgnn"):
            raise ValueError(f"model: got {self.model!r}, expected 'gcn' or 'gprgnn'")
        for name in ("num_classes", "hidden", "patience", "train_per_class", "num_val"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: got {getattr(self, name)}, expected an integer >= 1")
        for name in ("dropout", "dprate"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name}: got {getattr(self, name)}, expected a rate in [0, 1)")
        if self.gpr_k < 1:
            raise ValueError(f"gpr_k: got {self.gpr_k}, expected an integer >= 1")
        if not 0.0 <= self.gpr_alpha <= 1.0:
            raise ValueError(f"gpr_alpha: got {self.gpr_alpha}, expected a value in [0, 1]")
        if self.lr <= 0 or self.weight_decay < 0:
            raise ValueError(
                f"lr/weight_decay: got {self.lr}/{self.weight_decay}, expected lr > 0, wd >= 0"
            )


@flax.struct.dataclass
class NodeData:
    """What all seeds share.

    Attributes:
      features: ``(n, f)`` node features.
      labels: ``(n,)`` class ids.
      graph: the GCN-normalised graph (:func:`~jaxlab.graph.gnn.gcn_normalize`), dense or edges.
    """

    features: Float[Array, "n f"]
    labels: Int[Array, " n"]
    graph: Graph


@flax.struct.dataclass
class SeedState:
    """Per-seed training state (stacked along a leading ``seeds`` axis).

    Attributes:
      params: model parameters.
      opt_state: optimiser state.
      key: dropout PRNG key.
      split: train/val/test masks of this seed.
      epoch: epochs trained (frozen once stopped).
      best_val_acc: best validation accuracy so far.
      test_acc_at_best: test accuracy at the epoch of ``best_val_acc``.
      best_epoch: that epoch (1-based; 0 before any improvement).
      since_best: epochs since the last improvement.
      stopped: early-stopped; parameters no longer change.
    """

    params: dict
    opt_state: optax.OptState
    key: jax.Array
    split: Split
    epoch: Int[Array, ""]
    best_val_acc: Float[Array, ""]
    test_acc_at_best: Float[Array, ""]
    best_epoch: Int[Array, ""]
    since_best: Int[Array, ""]
    stopped: Bool[Array, ""]


def make_model(spec: TrainerSpec) -> nn.Module:
    """The Flax module named by ``spec.model``."""
    if spec.model == "gcn":
        return GCN(hidden=spec.hidden, num_classes=spec.num_classes, dropout=spec.dropout)
    return GPRGNN(
        hidden=spec.hidden,
        num_classes=spec.num_classes,
        k=spec.gpr_k,
        alpha=spec.gpr_alpha,
        dropout=spec.dropout,
        dprate=spec.dprate,
    )


def make_optimizer(
    spec: TrainerSpec,
    lr: float | Float[Array, ""] | None = None,
    weight_decay: float | Float[Array, ""] | None = None,
) -> optax.GradientTransformation:
    """Adam with coupled L2 decay (PyTorch semantics); GPRGNN's ``gamma`` is not decayed.

    ``lr``/``weight_decay`` (traced values allowed, e.g. a sweep's) default to ``spec``'s."""
    lr = spec.lr if lr is None else lr
    weight_decay = spec.weight_decay if weight_decay is None else weight_decay

    def decay_mask(params):
        return jax.tree_util.tree_map_with_path(
            lambda path, _: not any(getattr(p, "key", None) == "prop1" for p in path), params
        )

    return optax.chain(
        optax.add_decayed_weights(weight_decay, mask=decay_mask),
        optax.adam(lr),
    )


#: ``(lr, weight_decay)``: the optimiser's traced rates
Rates = tuple[Float[Array, ""], Float[Array, ""]]


def _accuracy(correct: Bool[Array, " n"], mask: Bool[Array, " n"]) -> Float[Array, ""]:
    return jnp.sum(correct & mask) / jnp.maximum(jnp.sum(mask), 1)


def _init_one(key: jax.Array, data: NodeData, spec: TrainerSpec) -> SeedState:
    k_split, k_init, k_drop = jax.random.split(key, 3)
    split = planetoid_split(
        k_split, data.labels, train_per_class=spec.train_per_class, num_val=spec.num_val
    )
    params = make_model(spec).init(k_init, data.features, data.graph)["params"]
    zero_i = jnp.zeros((), jnp.int32)
    return SeedState(
        params=params,
        opt_state=make_optimizer(spec).init(params),
        key=k_drop,
        split=split,
        epoch=zero_i,
        best_val_acc=jnp.zeros((), jnp.float32),
        test_acc_at_best=jnp.zeros((), jnp.float32),
        best_epoch=zero_i,
        since_best=zero_i,
        stopped=jnp.zeros((), bool),
    )


@partial(jax.jit, static_argnames=("spec", "num_seeds"))
def init_seeds(key: jax.Array, data: NodeData, spec: TrainerSpec, num_seeds: int) -> SeedState:
    """Initial states of ``num_seeds`` seeds (splits, parameters, keys), stacked on axis 0."""
    return jax.vmap(_init_one, in_axes=(0, None, None))(
        jax.random.split(key, num_seeds), data, spec
    )


def _step_one(
    st: SeedState, data: NodeData, spec: TrainerSpec, rates: Rates | None
) -> tuple[SeedState, dict]:
    model = make_model(spec)
    tx = make_optimizer(spec, *(rates if rates is not None else (None, None)))
    key, k_drop = jax.random.split(st.key)
    onehot = jax.nn.one_hot(data.labels, spec.num_classes)
    train = st.split.train

    def loss_fn(params):
        logp = model.apply(
            {"params": params},
            data.features,
            data.graph,
            deterministic=False,
            rngs={"dropout": k_drop},
        )
        nll = -jnp.sum(logp * onehot, axis=-1)
        return jnp.sum(jnp.where(train, nll, 0.0)) / jnp.maximum(jnp.sum(train), 1)

    loss, grads = jax.value_and_grad(loss_fn)(st.params)
    updates, opt_state = tx.update(grads, st.opt_state, st.params)
    params = optax.apply_updates(st.params, updates)
    keep = st.stopped
    params = jax.tree.map(lambda old, new: jnp.where(keep, old, new), st.params, params)
    opt_state = jax.tree.map(lambda old, new: jnp.where(keep, old, new), st.opt_state, opt_state)

    logp = model.apply({"params": params}, data.features, data.graph, deterministic=True)
    correct = jnp.argmax(logp, axis=-1) == data.labels
    train_acc = _accuracy(correct, train)
    val_acc = _accuracy(correct, st.split.val)
    test_acc = _accuracy(correct, st.split.test)

    epoch = st.epoch + jnp.where(keep, 0, 1)
    improved = (val_acc > st.best_val_acc) & ~keep
    since_best = jnp.where(improved, 0, st.since_best + jnp.where(keep, 0, 1))
    new = SeedState(
        params=params,
        opt_state=opt_state,
        key=key,
        split=st.split,
        epoch=epoch,
        best_val_acc=jnp.where(improved, val_acc, st.best_val_acc),
        test_acc_at_best=jnp.where(improved, test_acc, st.test_acc_at_best),
        best_epoch=jnp.where(improved, epoch, st.best_epoch),
        since_best=since_best,
        stopped=keep | (since_best >= spec.patience),
    )
    metrics = {
        "loss": loss,
        "train_acc": train_acc,
        "val_acc": val_acc,
        "test_acc": test_acc,
    }
    return new, metrics


def train_epoch(
    data: NodeData, seeds: SeedState, spec: TrainerSpec, rates: Rates | None = None
) -> tuple[SeedState, dict[str, Float[Array, ""]]]:
    """One full-batch step of every seed, then evaluation and early-stopping bookkeeping.

    Pure and jit-able (``spec`` static). ``rates``: ``(lr, weight_decay)`` as traced scalars
    (default ``spec``'s), so a sweep over them is one program. Metrics are means over seeds: ``loss`` (training NLL
    before the step), ``train_acc``/``val_acc``/``test_acc`` (after the step),
    ``best_val_acc``, ``test_acc_at_best`` and ``active_seeds`` (not yet stopped).
    """
    seeds, per_seed = jax.vmap(_step_one, in_axes=(0, None, None, None))(seeds, data, spec, rates)
    metrics = {k: jnp.mean(v) for k, v in per_seed.items()}
    metrics["best_val_acc"] = jnp.mean(seeds.best_val_acc)
    metrics["test_acc_at_best"] = jnp.mean(seeds.test_acc_at_best)
    metrics["active_seeds"] = jnp.sum(~seeds.stopped).astype(jnp.float32)
    return seeds, metrics


@partial(jax.jit, static_argnames=("spec", "num_seeds", "epochs"))
def train(
    key: jax.Array, data: NodeData, spec: TrainerSpec, *, num_seeds: int, epochs: int
) -> tuple[SeedState, dict[str, Float[Array, " epochs"]]]:
    """A whole multi-seed run as one function: init, then ``epochs`` steps in a ``lax.scan``.

    Returns:
      ``(seeds, history)``: final stacked :class:`SeedState` and the per-epoch metrics of
      :func:`train_epoch` (each of shape ``(epochs,)``).
    """
    seeds = init_seeds(key, data, spec, num_seeds)

    def body(s, _):
        return train_epoch(data, s, spec)

    return jax.lax.scan(body, seeds, None, length=epochs)
