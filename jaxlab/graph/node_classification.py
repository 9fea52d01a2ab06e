"""Full-batch semi-supervised node classification, many seeds in one ``vmap``.

One *seed* is one random split (:func:`~jaxlab.graph.splits.planetoid_split`), one parameter
initialisation and one dropout stream, as in the JDR paper's evaluation (100 seeds there). All seeds
share the graph and the features (:class:`NodeData`); their states (:class:`SeedState`) are stacked
along a leading axis and stepped together by :func:`train_epoch`, so a whole multi-seed run is one
``lax.scan`` (:func:`train`).

Training (the paper's defaults, :data:`OPTIM`): Adam with L2 weight decay added to the gradient
(PyTorch's ``Adam(weight_decay=...)``; for GPRGNN not on the propagation coefficients), negative
log-likelihood on the training nodes, one full-batch step per epoch. After every step the model is
evaluated without dropout; early stopping is on validation accuracy: the test accuracy at the
epoch of the best validation accuracy (strict improvement) is the seed's result, and a seed stops
(its parameters freeze) after ``patience`` epochs without improvement.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import partial
from typing import Any, Literal

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Bool, Float, Int

from jaxlab.core import optim as optim_lib
from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig
from jaxlab.graph.gnn import GCN, GPRGNN, Graph
from jaxlab.graph.splits import Split, planetoid_split

#: the paper's optimiser: Adam at 0.01 with an L2 term 5e-4 added to the gradient
OPTIM = OptimConfig(name="adam", lr=0.01, weight_decay=5e-4)


@dataclasses.dataclass(frozen=True)
class TrainerSpec:
    """Model and early-stopping settings (hashable; a static argument).

    Attributes:
      model: ``gcn`` or ``gprgnn``.
      num_classes: number of classes C.
      hidden: hidden width (paper 64).
      dropout: dropout rate (paper 0.5).
      dprate: GPRGNN dropout before propagation (paper 0.5).
      gpr_k: GPRGNN hops K (paper 10).
      gpr_alpha: GPRGNN PPR init teleport (paper 0.1).
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
    patience: int = 200
    train_per_class: int = 20
    num_val: int = 500

    def __post_init__(self):
        self.check()  # a spec validates itself when made, as every config of the house does

    def check(self) -> None:
        """Raises ConfigError (a ValueError) naming the field for invalid settings."""
        if self.model not in ("gcn", "gprgnn"):
            raise ConfigError("model", self.model, "'gcn' or 'gprgnn'")
        for name in ("num_classes", "hidden", "patience", "train_per_class", "num_val", "gpr_k"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an integer >= 1")
        for name in ("dropout", "dprate"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(name, getattr(self, name), "a rate in [0, 1)")
        if not 0.0 <= self.gpr_alpha <= 1.0:
            raise ConfigError("gpr_alpha", self.gpr_alpha, "a value in [0, 1]")


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


def _decay_mask(params):
    """True for every parameter but GPRGNN's propagation coefficients (``prop1``)."""
    return jax.tree_util.tree_map_with_path(
        lambda path, _: not any(getattr(p, "key", None) == "prop1" for p in path), params
    )


def make_optimizer(
    optim: OptimConfig,
    total_steps: int,
    hparams: Mapping[str, Any] | None = None,
) -> optax.GradientTransformation:
    """``optim``'s transformation (:func:`jaxlab.core.optim.make`) with its weight decay masked:
    GPRGNN's ``gamma`` is not decayed. ``adam``/``sgd`` add the decay to the gradient as an L2
    term (PyTorch's coupled decay, the paper's), ``adamw`` decouples it.

    Args:
      optim: the optimiser.
      total_steps: the run's epochs (the schedule's length).
      hparams: traced ``optim.lr`` / ``optim.weight_decay`` (e.g. a sweep's; a missing key keeps
        ``optim``'s value).
    """
    hp = hparams or {}
    lr = hp.get("optim.lr")
    decay = hp.get("optim.weight_decay", optim.weight_decay)
    if optim.name == "adamw":
        rate = optim_lib.learning_rate(optim, total_steps, lr)
        rule = optax.adamw(
            rate, b1=optim.b1, b2=optim.b2, eps=optim.eps, weight_decay=decay, mask=_decay_mask
        )
    else:
        plain = dataclasses.replace(optim, weight_decay=0.0, clip_norm=0.0)
        rule = optax.chain(
            optax.add_decayed_weights(decay, mask=_decay_mask),
            optim_lib.make(plain, total_steps, lr=lr),
        )
    if optim.clip_norm > 0:
        rule = optax.chain(optax.clip_by_global_norm(optim.clip_norm), rule)
    return rule


def _accuracy(correct: Bool[Array, " n"], mask: Bool[Array, " n"]) -> Float[Array, ""]:
    return jnp.sum(correct & mask) / jnp.maximum(jnp.sum(mask), 1)


def _init_one(
    key: jax.Array, data: NodeData, spec: TrainerSpec, optim: OptimConfig, total_steps: int
) -> SeedState:
    k_split, k_init, k_drop = jax.random.split(key, 3)
    split = planetoid_split(
        k_split, data.labels, train_per_class=spec.train_per_class, num_val=spec.num_val
    )
    params = make_model(spec).init(k_init, data.features, data.graph)["params"]
    zero_i = jnp.zeros((), jnp.int32)
    return SeedState(
        params=params,
        opt_state=make_optimizer(optim, total_steps).init(params),
        key=k_drop,
        split=split,
        epoch=zero_i,
        best_val_acc=jnp.zeros((), jnp.float32),
        test_acc_at_best=jnp.zeros((), jnp.float32),
        best_epoch=zero_i,
        since_best=zero_i,
        stopped=jnp.zeros((), bool),
    )


@partial(jax.jit, static_argnames=("spec", "num_seeds", "optim", "total_steps"))
def init_seeds(
    key: jax.Array,
    data: NodeData,
    spec: TrainerSpec,
    num_seeds: int,
    *,
    optim: OptimConfig = OPTIM,
    total_steps: int = 1,
) -> SeedState:
    """Initial states of ``num_seeds`` seeds (splits, parameters, keys, ``optim``'s state for a
    run of ``total_steps`` epochs), stacked on axis 0."""
    one = partial(_init_one, spec=spec, optim=optim, total_steps=total_steps)
    return jax.vmap(one, in_axes=(0, None))(jax.random.split(key, num_seeds), data)


def _step_one(
    st: SeedState,
    data: NodeData,
    spec: TrainerSpec,
    tx: optax.GradientTransformation,
) -> tuple[SeedState, dict]:
    model = make_model(spec)
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
    data: NodeData,
    seeds: SeedState,
    spec: TrainerSpec,
    *,
    optim: OptimConfig = OPTIM,
    total_steps: int = 1,
    hparams: Mapping[str, Any] | None = None,
) -> tuple[SeedState, dict[str, Float[Array, ""]]]:
    """One full-batch step of every seed, then evaluation and early-stopping bookkeeping.

    Pure and jit-able (``spec``, ``optim`` and ``total_steps``, the run's epochs, static).
    ``hparams``: traced ``optim.lr`` / ``optim.weight_decay`` (default ``optim``'s), so a sweep
    over them is one program. Metrics are means over seeds: ``loss`` (training NLL before the
    step), ``train_acc``/``val_acc``/``test_acc`` (after the step), ``best_val_acc``,
    ``test_acc_at_best`` and ``active_seeds`` (not yet stopped).
    """
    tx = make_optimizer(optim, total_steps, hparams)
    step = partial(_step_one, data=data, spec=spec, tx=tx)
    seeds, per_seed = jax.vmap(step)(seeds)
    metrics = {k: jnp.mean(v) for k, v in per_seed.items()}
    metrics["best_val_acc"] = jnp.mean(seeds.best_val_acc)
    metrics["test_acc_at_best"] = jnp.mean(seeds.test_acc_at_best)
    metrics["active_seeds"] = jnp.sum(~seeds.stopped).astype(jnp.float32)
    return seeds, metrics


@partial(jax.jit, static_argnames=("spec", "num_seeds", "epochs", "optim"))
def train(
    key: jax.Array,
    data: NodeData,
    spec: TrainerSpec,
    *,
    num_seeds: int,
    epochs: int,
    optim: OptimConfig = OPTIM,
) -> tuple[SeedState, dict[str, Float[Array, " epochs"]]]:
    """A whole multi-seed run as one function: init, then ``epochs`` steps of ``optim`` in a
    ``lax.scan``.

    Returns:
      ``(seeds, history)``: final stacked :class:`SeedState` and the per-epoch metrics of
      :func:`train_epoch` (each of shape ``(epochs,)``).
    """
    seeds = init_seeds(key, data, spec, num_seeds, optim=optim, total_steps=epochs)

    def body(s, _):
        return train_epoch(data, s, spec, optim=optim, total_steps=epochs)

    return jax.lax.scan(body, seeds, None, length=epochs)


@partial(jax.jit, static_argnums=0)
def current_accuracy(
    model: nn.Module, data: NodeData, seeds: SeedState
) -> dict[str, Float[Array, " seeds"]]:
    """Per-seed validation and test accuracy of the current parameters (no dropout)."""

    def one(params, split):
        logp = model.apply({"params": params}, data.features, data.graph)
        correct = jnp.argmax(logp, axis=-1) == data.labels
        return {
            name: jnp.sum(correct & mask) / jnp.maximum(jnp.sum(mask), 1)
            for name, mask in (("val", split.val), ("test", split.test))
        }

    return jax.vmap(one)(seeds.params, seeds.split)


def seeds_summary(seeds: SeedState, current: dict[str, Any]) -> dict[str, float]:
    """The run's result over its seeds (host floats): mean best validation accuracy, the mean
    test accuracy at it with its standard deviation and 95 % interval half-width, the mean best
    epoch, the seeds still training, and the mean ``current`` accuracies
    (:func:`current_accuracy`)."""
    s, current = jax.device_get((seeds, current))
    test = np.asarray(s.test_acc_at_best, np.float64)
    return {
        "best_val_acc": float(np.mean(s.best_val_acc)),
        "test_acc_at_best": float(np.mean(test)),
        "test_acc_at_best_std": float(np.std(test)),
        "test_acc_at_best_ci95": float(1.96 * np.std(test) / np.sqrt(test.shape[0])),
        "best_epoch": float(np.mean(s.best_epoch)),
        "active_seeds": float(np.sum(~np.asarray(s.stopped))),
        "val_acc": float(np.mean(current["val"])),
        "test_acc": float(np.mean(current["test"])),
    }


def per_seed_results(seeds: SeedState) -> dict[str, list]:
    """Each seed's test accuracy at its best validation accuracy, that accuracy and its epoch."""
    s = jax.device_get(seeds)
    return {
        "test_acc_at_best": [float(v) for v in s.test_acc_at_best],
        "best_val_acc": [float(v) for v in s.best_val_acc],
        "best_epoch": [int(v) for v in s.best_epoch],
    }
