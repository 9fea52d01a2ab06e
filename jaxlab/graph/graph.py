"""Graph containers: a dense weighted adjacency matrix and a fixed-capacity weighted edge list.

Both follow PyTorch Geometric's ``edge_index`` convention so that the column-wise operations of
JDR and DIGL ("top-k per column") mean the same thing as in the papers' code: entry ``a[s, r]`` is
the weight of the directed edge from sender ``s`` to receiver ``r``, and message passing aggregates
over the *incoming* edges of each receiver,

    (propagate h)_r = sum_s a[s, r] h_s,      i.e.  H' = A^T H.

For symmetric graphs (cSBM, karate) the distinction is moot; it matters for the rewired graphs,
which keep the top-k entries of each column and are therefore not symmetric.

The edge list has a static capacity so that shapes are fixed under ``jit``: unused slots carry
weight 0 (they then contribute nothing to sums or degrees) and ``mask=False``.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int


@flax.struct.dataclass
class DenseGraph:
    """A weighted directed graph as a dense matrix.

    Attributes:
      adjacency: ``a[s, r]``, weight of the edge ``s -> r``; shape ``(n, n)``.
    """

    adjacency: Float[Array, "n n"]

    @property
    def num_nodes(self) -> int:
        return self.adjacency.shape[0]

    def propagate(self, h: Float[Array, "n ..."]) -> Float[Array, "n ..."]:
        """``A^T h``: each receiver sums its weighted in-neighbours' rows of ``h``."""
        return jnp.tensordot(self.adjacency, h, axes=((0,), (0,)))


@flax.struct.dataclass
class EdgeGraph:
    """A weighted directed graph as an edge list of static capacity ``e``.

    Attributes:
      senders: source node of each edge slot, shape ``(e,)``.
      receivers: target node of each edge slot, shape ``(e,)``.
      weights: edge weights, 0 on unused slots, shape ``(e,)``.
      mask: True on used slots, shape ``(e,)``.
      num_nodes: number of nodes ``n`` (static).
    """

    senders: Int[Array, " e"]
    receivers: Int[Array, " e"]
    weights: Float[Array, " e"]
    mask: Bool[Array, " e"]
    num_nodes: int = flax.struct.field(pytree_node=False)

    def propagate(self, h: Float[Array, "n ..."]) -> Float[Array, "n ..."]:
        """``(A^T h)_r = sum_{(s->r)} w_sr h_s`` as a gather and a segment sum."""
        w = jnp.where(self.mask, self.weights, 0.0).astype(h.dtype)
        msgs = h[self.senders] * w.reshape((-1,) + (1,) * (h.ndim - 1))
        return jax.ops.segment_sum(msgs, self.receivers, num_segments=self.num_nodes)


def dense_to_edges(adjacency: Float[Array, "n n"], capacity: int) -> EdgeGraph:
    """Non-zero entries of ``adjacency`` as an :class:`EdgeGraph` with ``capacity`` slots (jit-able).

    Entries are listed in row-major order (as ``torch_geometric.utils.dense_to_sparse``). If the
    matrix has more than ``capacity`` non-zeros the surplus is dropped, so callers size
    ``capacity`` from an exact count (:func:`count_edges`) or a structural bound (``k * n`` after
    top-k sparsification).
    """
    n = adjacency.shape[0]
    if adjacency.ndim != 2 or adjacency.shape[1] != n:
        raise ValueError(f"adjacency: got shape {adjacency.shape}, expected a square (n, n) matrix")
    if capacity < 1:
        raise ValueError(f"capacity: got {capacity}, expected an integer >= 1")
    flat = adjacency.reshape(-1)
    (idx,) = jnp.nonzero(flat != 0, size=capacity, fill_value=-1)
    mask = idx >= 0
    safe = jnp.where(mask, idx, 0)
    return EdgeGraph(
        senders=(safe // n).astype(jnp.int32),
        receivers=(safe % n).astype(jnp.int32),
        weights=jnp.where(mask, flat[safe], 0.0),
        mask=mask,
        num_nodes=n,
    )


def edges_to_dense(graph: EdgeGraph) -> Float[Array, "n n"]:
    """The dense adjacency of an edge list; duplicate edges add up (jit-able)."""
    n = graph.num_nodes
    w = jnp.where(graph.mask, graph.weights, 0.0)
    return jnp.zeros((n, n), w.dtype).at[graph.senders, graph.receivers].add(w)


def count_edges(adjacency: Float[Array, "n n"] | np.ndarray) -> int:
    """Number of non-zero entries (host-side; used to size an edge list exactly)."""
    return int(np.count_nonzero(np.asarray(adjacency)))


def edges_from_pairs(
    senders: np.ndarray, receivers: np.ndarray, num_nodes: int, weights: np.ndarray | None = None
) -> EdgeGraph:
    """An :class:`EdgeGraph` from host arrays of sender and receiver ids (capacity = their length)."""
    senders = np.asarray(senders)
    receivers = np.asarray(receivers)
    if senders.shape != receivers.shape or senders.ndim != 1:
        raise ValueError(
            f"senders/receivers: got shapes {senders.shape} and {receivers.shape}, expected two "
            "1-D arrays of equal length"
        )
    for name, ids in (("senders", senders), ("receivers", receivers)):
        if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
            raise ValueError(
                f"{name}: got ids in [{ids.min()}, {ids.max()}], expected ids in [0, {num_nodes})"
            )
    w = np.ones(senders.shape, np.float32) if weights is None else np.asarray(weights, np.float32)
    return EdgeGraph(
        senders=jnp.asarray(senders, jnp.int32),
        receivers=jnp.asarray(receivers, jnp.int32),
        weights=jnp.asarray(w),
        mask=jnp.ones(senders.shape, bool),
        num_nodes=int(num_nodes),
    )
