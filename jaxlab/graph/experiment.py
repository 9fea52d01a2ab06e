"""The node-classification experiment of the JDR paper: its config and its data pipeline.

graph (cSBM or karate)  ->  rewiring (none | DIGL | JDR)  ->  GCN normalisation (dense or edges)
->  many seeds of GCN/GPRGNN in one ``vmap`` (:mod:`jaxlab.graph.node_classification`).

:class:`GnnConfig` is the frozen, nested config shared by the ``gnn`` recipe (one run through the
shared loop, also swept by ``jaxlab sweep gnn graph.phi=-0.5,0,0.5 rewire=none,jdr --seeds 10``) and
by :func:`run_experiment`; dotted overrides such as ``graph.phi=0.25 rewire=jdr trainer.model=gprgnn
num_seeds=10`` address its fields.

The whole data pipeline is one pure function (:func:`make_data_fn`) that is traced inside the
recipe's ``init``, so large arrays never become compile-time constants. The only host work is
sizing the edge list: the number of edges of the un-rewired graph is counted once in
:func:`edge_capacity`; rewired graphs have exactly ``top_k`` slots per column.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.optim import OptimConfig
from jaxlab.core.sharding import MeshConfig
from jaxlab.graph.csbm import CSBMParams, sample_csbm
from jaxlab.graph.datasets import KARATE_NUM_NODES, NodeGraph, karate_club
from jaxlab.graph.digl import digl
from jaxlab.graph.gnn import gcn_normalize
from jaxlab.graph.graph import DenseGraph, dense_to_edges
from jaxlab.graph.jdr import JDRParams, JDRStatic, jdr
from jaxlab.graph.node_classification import OPTIM, NodeData, SeedState, TrainerSpec, train
from jaxlab.graph.splits import split_sizes


@dataclasses.dataclass(frozen=True)
class GraphConfig:
    """Which graph, and how it is stored.

    Attributes:
      name: ``csbm`` (synthetic, any size) or ``karate`` (Zachary's karate club, networkx).
      n: cSBM nodes.
      p: cSBM feature dimension.
      d: cSBM mean degree.
      epsilon: cSBM distance above the detection threshold (paper 3.25).
      phi: cSBM angle in [-1, 1]: -1 heterophilic graph only, 0 features only, 1 homophilic graph.
      seed: seed of the graph sample (the data); the run's ``seed`` drives splits and inits.
      split: ``sparse`` (2.5% / 2.5% / 95%) or ``dense`` (60% / 20% / 20%).
      layout: message passing on an ``edges`` list (segment sums) or a ``dense`` matrix.
    """

    name: Literal["csbm", "karate"] = "csbm"
    n: int = 1000
    p: int = 400
    d: float = 5.0
    epsilon: float = 3.25
    phi: float = 0.0
    seed: int = 0
    split: Literal["sparse", "dense"] = "sparse"
    layout: Literal["edges", "dense"] = "edges"

    def __post_init__(self):
        if not -1.0 <= self.phi <= 1.0:
            raise ConfigError("phi", self.phi, "a value in [-1, 1]")
        if self.n < 8:
            raise ConfigError("n", self.n, "an integer >= 8")
        if self.p < 1:
            raise ConfigError("p", self.p, "an integer >= 1")
        if self.epsilon < 0:
            raise ConfigError("epsilon", self.epsilon, "a value >= 0")
        if not 0 < self.d or self.d + math.sqrt(self.d * (1 + self.epsilon)) > self.n:
            raise ConfigError("d", self.d, "a mean degree > 0 with d + sqrt(d (1 + epsilon)) <= n")

    @property
    def num_nodes(self) -> int:
        return KARATE_NUM_NODES if self.name == "karate" else self.n

    @property
    def num_features(self) -> int:
        return KARATE_NUM_NODES if self.name == "karate" else self.p


@dataclasses.dataclass(frozen=True)
class JdrConfig:
    """JDR settings (see :mod:`jaxlab.graph.jdr`; paper names in brackets).

    The defaults are the paper's tuned cSBM values for phi = 0.375 (its
    ``configs/csbm_phi_0.375.yaml``), which also work for phi = -0.375 with the abs ordering
    (see the sweep); the paper's generic defaults are ``iterations=10, l_x=l_a=100,
    eta_x=eta_a=eta_final=0.1``. The LOBPCG solver is the default: it needs only the leading
    ``max(l_x, l_a) + offset`` eigenpairs, O(n^2 k) per iteration instead of O(n^3), so it
    pays off on large graphs (``benchmarks/bench_graph.py`` times both against n).

    Attributes:
      iterations: K [denoise_iterations].
      l_x: L_X [rewired_index_X].
      l_a: L_A [rewired_index_A].
      eta_x: [rewired_ratio_X].
      eta_a: [rewired_ratio_A].
      eta_final: eta' [rewired_ratio_X_non_binary].
      top_k: entries kept per column of the rewired graph [denoise_A_k]; 0 = threshold at eps.
      eps: threshold when top_k = 0 [denoise_A_eps].
      ordering: ``value``, ``abs`` [abs_ordering] or ``auto`` (abs for cSBM with phi < 0).
      offset: leading eigenvectors of A skipped [denoise_offset].
      denoise_x: update the features [denoise_x].
      denoise_a: update the graph [denoise_A].
      solver: ``dense`` eigh/SVD or ``lobpcg`` top-k eigensolver (larger graphs).
      lobpcg_iterations: LOBPCG iteration cap.
    """

    iterations: int = 18
    l_x: int = 10
    l_a: int = 10
    eta_x: float = 0.023
    eta_a: float = 0.856
    eta_final: float = 0.228
    top_k: int = 64
    eps: float = 0.01
    ordering: Literal["auto", "value", "abs"] = "auto"
    offset: int = 0
    denoise_x: bool = True
    denoise_a: bool = True
    solver: Literal["dense", "lobpcg"] = "lobpcg"
    lobpcg_iterations: int = 40

    def __post_init__(self):
        for name in ("iterations", "l_x", "l_a", "lobpcg_iterations"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an integer >= 1")
        for name in ("eta_x", "eta_a", "eta_final"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(name, getattr(self, name), "a rate in [0, 1]")
        if self.top_k < 0:
            raise ConfigError("top_k", self.top_k, "an integer >= 0 (0 = threshold at eps)")
        if self.offset < 0:
            raise ConfigError("offset", self.offset, "an integer >= 0")
        if not self.eps >= 0.0:
            raise ConfigError("eps", self.eps, "a threshold >= 0")


@dataclasses.dataclass(frozen=True)
class DiglConfig:
    """DIGL settings: PPR teleport ``alpha`` in (0, 1] and entries kept per column ``top_k``."""

    alpha: float = 0.1
    top_k: int = 64

    def __post_init__(self):
        if not 0.0 < self.alpha <= 1.0:
            raise ConfigError("alpha", self.alpha, "a teleport probability in (0, 1]")
        if self.top_k < 1:
            raise ConfigError("top_k", self.top_k, "an integer >= 1")


@dataclasses.dataclass(frozen=True)
class GnnConfig:
    """Node classification with optional rewiring; ``num_seeds`` seeds trained in one vmap.

    Attributes:
      seed: seed of splits, initialisations and dropout (seed i of the vmap uses a key derived
        from it).
      rewire: ``none``, ``digl`` or ``jdr``.
      num_seeds: random splits x inits trained at once.
      trainer: the model and early stopping (``trainer.model`` ``gcn`` or ``gprgnn``,
        ``trainer.hidden``, ``trainer.dropout``, ``trainer.patience``, ...; paper values by
        default); its ``num_classes``, ``train_per_class`` and ``num_val`` are set from ``graph``
        (2 classes, ``graph.split``).
      optim: the optimiser (paper: Adam at 0.01 with an L2 term 5e-4 added to the gradient;
        :func:`jaxlab.graph.node_classification.make_optimizer`); ``optim.lr`` and
        ``optim.weight_decay`` are traced (a sweep over them is one program).
      graph: the data.
      jdr: JDR settings (used when ``rewire=jdr``).
      digl: DIGL settings (used when ``rewire=digl``).
      mesh: the device mesh; the ``num_seeds`` seeds are split over its data axes (when they
        divide ``num_seeds``), the graph is replicated.
      loop: run control; ``loop.total_steps`` is the number of epochs (one full-batch step each).
    """

    seed: int = 0
    rewire: Literal["none", "digl", "jdr"] = "none"
    num_seeds: int = 10
    trainer: TrainerSpec = TrainerSpec()
    optim: OptimConfig = OPTIM
    graph: GraphConfig = GraphConfig()
    jdr: JdrConfig = JdrConfig()
    digl: DiglConfig = DiglConfig()
    mesh: MeshConfig = MeshConfig()
    loop: LoopConfig = LoopConfig(
        total_steps=500, steps_per_call=50, log_every=50, eval_every=0, checkpoint_every=0
    )

    def __post_init__(self):
        if self.num_seeds < 1:
            raise ConfigError("num_seeds", self.num_seeds, "an integer >= 1")
        n, f = self.graph.num_nodes, self.graph.num_features
        if self.rewire == "jdr":
            try:
                jdr_static(self).check(n, f)
            except ValueError as e:
                raise ConfigError("jdr", self.jdr, str(e)) from None
            if self.graph.layout == "edges" and self.jdr.top_k == 0:
                raise ConfigError(
                    "jdr.top_k",
                    0,
                    "top_k >= 1 with graph.layout=edges (a thresholded graph "
                    "has no static edge count; use graph.layout=dense)",
                )
        try:
            split_sizes(n, 2, self.graph.split)
        except ValueError as e:
            raise ConfigError("graph.split", self.graph.split, str(e)) from None


def abs_ordering(cfg: GnnConfig) -> bool:
    """JDR's eigenvalue ordering: explicit, or ``auto`` = by magnitude for cSBM with phi < 0."""
    if cfg.jdr.ordering == "auto":
        return cfg.graph.name == "csbm" and cfg.graph.phi < 0
    return cfg.jdr.ordering == "abs"


def jdr_static(cfg: GnnConfig) -> JDRStatic:
    """The static JDR settings of a config."""
    j = cfg.jdr
    return JDRStatic(
        iterations=j.iterations,
        l_x=j.l_x,
        l_a=j.l_a,
        top_k=j.top_k,
        abs_ordering=abs_ordering(cfg),
        offset=j.offset,
        denoise_x=j.denoise_x,
        denoise_a=j.denoise_a,
        solver=j.solver,
        lobpcg_iterations=j.lobpcg_iterations,
    )


def jdr_params(cfg: GnnConfig) -> JDRParams:
    """The traced JDR rates of a config."""
    j = cfg.jdr
    return JDRParams(eta_x=j.eta_x, eta_a=j.eta_a, eta_final=j.eta_final, eps=j.eps)


def trainer_spec(cfg: GnnConfig) -> TrainerSpec:
    """``cfg.trainer`` with the split of ``cfg.graph`` (2 classes for both offline graphs)."""
    per_class, num_val = split_sizes(cfg.graph.num_nodes, 2, cfg.graph.split)
    return dataclasses.replace(
        cfg.trainer, num_classes=2, train_per_class=per_class, num_val=num_val
    )


def load_graph(cfg: GraphConfig) -> NodeGraph:
    """The raw graph (jit-able: the cSBM is drawn from ``PRNGKey(cfg.seed)``)."""
    if cfg.name == "karate":
        g = karate_club()
        return NodeGraph(
            adjacency=jnp.asarray(g.adjacency),
            features=jnp.asarray(g.features),
            labels=jnp.asarray(g.labels),
        )
    s = sample_csbm(
        jax.random.PRNGKey(cfg.seed),
        CSBMParams(d=cfg.d, epsilon=cfg.epsilon, phi=cfg.phi),
        n=cfg.n,
        p=cfg.p,
    )
    return NodeGraph(adjacency=s.adjacency, features=s.features, labels=s.labels)


def rewire(cfg: GnnConfig, g: NodeGraph) -> NodeGraph:
    """Applies the configured rewiring (jit-able)."""
    if cfg.rewire == "digl":
        return g.replace(adjacency=digl(g.adjacency, cfg.digl.alpha, top_k=cfg.digl.top_k))
    if cfg.rewire == "jdr":
        out = jdr(g.adjacency, g.features, jdr_params(cfg), static=jdr_static(cfg))
        return g.replace(adjacency=out.adjacency, features=out.features)
    return g


def edge_capacity(cfg: GnnConfig) -> int:
    """Edge-list slots for the (rewired) graph: ``n * top_k`` after top-k, else counted (host)."""
    n = cfg.graph.num_nodes
    if cfg.rewire == "digl":
        return n * min(cfg.digl.top_k, n)
    if cfg.rewire == "jdr" and cfg.jdr.denoise_a:
        return n * min(cfg.jdr.top_k, n)
    adjacency = jax.jit(lambda: load_graph(cfg.graph).adjacency)()
    return max(1, int(np.count_nonzero(np.asarray(adjacency))))


def make_data_fn(cfg: GnnConfig, capacity: int | None = None) -> Callable[[], NodeData]:
    """A pure, jit-able ``() -> NodeData``: load, rewire, normalise, store as configured.

    Args:
      cfg: the experiment config.
      capacity: edge slots for ``graph.layout=edges`` (default: :func:`edge_capacity`).
    """
    if cfg.graph.layout == "edges" and capacity is None:
        capacity = edge_capacity(cfg)

    def data_fn() -> NodeData:
        g = rewire(cfg, load_graph(cfg.graph))
        if cfg.graph.layout == "edges":
            graph = dense_to_edges(g.adjacency, capacity)
        else:
            graph = DenseGraph(g.adjacency)
        return NodeData(features=g.features, labels=g.labels, graph=gcn_normalize(graph))

    return data_fn


def run_experiment(cfg: GnnConfig) -> tuple[SeedState, dict[str, np.ndarray]]:
    """A whole run without the loop: data, then ``loop.total_steps`` epochs for all seeds.

    Returns:
      ``(seeds, history)`` as :func:`jaxlab.graph.node_classification.train`.
    """
    # eagerly: the jitted pieces inside (cSBM sampler, JDR, DIGL) are then compiled once for
    # all phis of a sweep, phi being a traced parameter
    data = make_data_fn(cfg)()
    seeds, history = train(
        jax.random.PRNGKey(cfg.seed),
        data,
        trainer_spec(cfg),
        num_seeds=cfg.num_seeds,
        epochs=cfg.loop.total_steps,
        optim=cfg.optim,
    )
    return seeds, jax.device_get(history)
