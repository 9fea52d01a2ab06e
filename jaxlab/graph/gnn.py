"""Node-classification GNNs on weighted graphs: GCN (Kipf & Welling) and GPRGNN (Chien et al.).

Both propagate with the GCN operator of PyTorch Geometric's ``gcn_norm``, which the JDR code uses
for both models:

    Â = D^{-1/2} (A + L) D^{-1/2},   D = diag(column sums of A + L),     H' = Â^T H,

where ``L`` adds the *remaining* self-loops: a node that already has a non-zero self-loop keeps its
weight, every other node gets a loop of weight 1 (``add_remaining_self_loops(fill_value=1)``).
Degrees are taken at the receiver (column sums), so the operator is the symmetric normalisation
for symmetric graphs and PyG's convention for the non-symmetric top-k graphs of JDR/DIGL. A node
whose degree is not positive (possible with the signed weights JDR produces) gets
``D^{-1/2} = 0`` instead of PyG's ``inf``/``NaN``.

The modules take the normalised graph as an argument, either a :class:`~jaxlab.graph.graph.DenseGraph`
(``Â^T H`` as a matrix product) or an :class:`~jaxlab.graph.graph.EdgeGraph` (gather + segment
sum); both give the same result.

* GCN (the JDR repo's ``GCN_Net``): ``log_softmax(Â^T relu(Â^T X W1 + b1) W2 + b2)`` with dropout
  after the hidden layer; weights Glorot-uniform, biases zero (``GCNConv``).
* GPRGNN: ``Z = MLP(X)`` (dropout, linear, ReLU, dropout, linear), dropout ``dprate``, then the
  generalised PageRank ``sum_{k=0}^{K} gamma_k (Â^T)^k Z`` with learnable ``gamma`` initialised
  as PPR, ``gamma_k = alpha (1 - alpha)^k`` for ``k < K`` and ``gamma_K = (1 - alpha)^K``
  (Chien et al. 2021, eq. 2-3 and the ``PPR`` init). Linear layers use PyTorch's default init.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.graph.graph import DenseGraph, EdgeGraph

Graph = DenseGraph | EdgeGraph


def _inv_sqrt_degree(deg: Float[Array, " n"]) -> Float[Array, " n"]:
    return jnp.where(deg > 0, jax.lax.rsqrt(jnp.where(deg > 0, deg, 1.0)), 0.0)


def gcn_normalize(graph: Graph, *, add_self_loops: bool = True) -> Graph:
    """PyG ``gcn_norm``: remaining self-loops of weight 1, then ``D^{-1/2} A D^{-1/2}``.

    Args:
      graph: dense ``(n, n)`` or edge-list graph with weights ``a[s, r]``.
      add_self_loops: add the remaining self-loops first (GCN default).

    Returns:
      The normalised graph in the same format. An edge list grows by ``n`` slots (one self-loop
      per node; existing self-loop slots are zeroed and their weight moved to the new slot).
    """
    if isinstance(graph, DenseGraph):
        a = graph.adjacency
        if add_self_loops:
            diag = jnp.diagonal(a)
            a = a + jnp.diag(jnp.where(diag != 0, 0.0, 1.0).astype(a.dtype))
        dinv = _inv_sqrt_degree(a.sum(axis=0))
        return DenseGraph(adjacency=dinv[:, None] * a * dinv[None, :])
    if not isinstance(graph, EdgeGraph):
        raise ValueError(f"graph: got {type(graph).__name__}, expected DenseGraph or EdgeGraph")
    n = graph.num_nodes
    s, r = graph.senders, graph.receivers
    w = jnp.where(graph.mask, graph.weights, 0.0)
    mask = graph.mask
    if add_self_loops:
        is_loop = (s == r) & (w != 0)
        loop_w = jax.ops.segment_sum(jnp.where(is_loop, w, 0.0), r, num_segments=n)
        has_loop = jax.ops.segment_sum(is_loop.astype(jnp.int32), r, num_segments=n) > 0
        w = jnp.where(s == r, 0.0, w)
        nodes = jnp.arange(n, dtype=s.dtype)
        s = jnp.concatenate([s, nodes])
        r = jnp.concatenate([r, nodes])
        w = jnp.concatenate([w, jnp.where(has_loop, loop_w, 1.0).astype(w.dtype)])
        mask = jnp.concatenate([mask, jnp.ones((n,), bool)])
    dinv = _inv_sqrt_degree(jax.ops.segment_sum(w, r, num_segments=n))
    return EdgeGraph(senders=s, receivers=r, weights=dinv[s] * w * dinv[r], mask=mask, num_nodes=n)


def _torch_linear_bias_init(fan_in: int):
    bound = 1.0 / math.sqrt(fan_in)

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


class TorchLinear(nn.Module):
    """``y = x W + b`` with ``torch.nn.Linear``'s init: ``W, b ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))``."""

    features: int

    @nn.compact
    def __call__(self, x: Float[Array, "n f"]) -> Float[Array, "n o"]:
        fan_in = x.shape[-1]
        kernel = self.param(
            "kernel",
            nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform"),
            (fan_in, self.features),
        )
        bias = self.param("bias", _torch_linear_bias_init(fan_in), (self.features,))
        return x @ kernel + bias[None, :]


class GCNConv(nn.Module):
    """One GCN layer ``Â^T (H W) + b`` on an already normalised graph (Kipf & Welling 2017, eq. 2)."""

    features: int

    @nn.compact
    def __call__(self, h: Float[Array, "n f"], graph: Graph) -> Float[Array, "n o"]:
        kernel = self.param(
            "kernel", nn.initializers.glorot_uniform(), (h.shape[-1], self.features)
        )
        bias = self.param("bias", nn.initializers.zeros_init(), (self.features,))
        return graph.propagate(h @ kernel) + bias[None, :]


class GCN(nn.Module):
    """Two-layer GCN returning log-probabilities; dropout after the hidden layer (``GCN_Net``).

    Attributes:
      hidden: hidden width.
      num_classes: output classes.
      dropout: dropout rate after the first layer.
    """

    hidden: int
    num_classes: int
    dropout: float = 0.5

    @nn.compact
    def __call__(
        self, x: Float[Array, "n f"], graph: Graph, *, deterministic: bool = True
    ) -> Float[Array, "n c"]:
        h = nn.relu(GCNConv(self.hidden, name="conv1")(x, graph))
        h = nn.Dropout(self.dropout)(h, deterministic=deterministic)
        h = GCNConv(self.num_classes, name="conv2")(h, graph)
        return jax.nn.log_softmax(h, axis=-1)


def ppr_coefficients(k: int, alpha: float) -> Float[Array, " k1"]:
    """GPRGNN's PPR init: ``gamma_j = alpha (1-alpha)^j`` (j < K), ``gamma_K = (1-alpha)^K``."""
    j = jnp.arange(k + 1, dtype=jnp.float32)
    gamma = alpha * (1.0 - alpha) ** j
    return gamma.at[k].set((1.0 - alpha) ** k)


class GPRProp(nn.Module):
    """Generalised PageRank propagation ``sum_{j=0}^{K} gamma_j (Â^T)^j z`` with learnable gamma."""

    k: int
    alpha: float

    @nn.compact
    def __call__(self, z: Float[Array, "n c"], graph: Graph) -> Float[Array, "n c"]:
        gamma = self.param("gamma", lambda key, shape: ppr_coefficients(self.k, self.alpha), ())

        def hop(carry, g):
            h, acc = carry
            h = graph.propagate(h)
            return (h, acc + g * h), None

        (_, out), _ = jax.lax.scan(hop, (z, gamma[0] * z), gamma[1:])
        return out


class GPRGNN(nn.Module):
    """GPRGNN (Chien et al. 2021): MLP features then learnable generalised PageRank; log-probs.

    Attributes:
      hidden: MLP hidden width.
      num_classes: output classes.
      k: propagation hops K.
      alpha: PPR teleport used to initialise gamma.
      dropout: dropout on the input and after the hidden layer.
      dprate: dropout before propagation.
    """

    hidden: int
    num_classes: int
    k: int = 10
    alpha: float = 0.1
    dropout: float = 0.5
    dprate: float = 0.5

    @nn.compact
    def __call__(
        self, x: Float[Array, "n f"], graph: Graph, *, deterministic: bool = True
    ) -> Float[Array, "n c"]:
        h = nn.Dropout(self.dropout)(x, deterministic=deterministic)
        h = nn.relu(TorchLinear(self.hidden, name="lin1")(h))
        h = nn.Dropout(self.dropout)(h, deterministic=deterministic)
        h = TorchLinear(self.num_classes, name="lin2")(h)
        if self.dprate > 0:
            h = nn.Dropout(self.dprate)(h, deterministic=deterministic)
        h = GPRProp(self.k, self.alpha, name="prop1")(h, graph)
        return jax.nn.log_softmax(h, axis=-1)
