"""Node-classification graphs available offline.

* ``csbm``: the contextual SBM (:mod:`jaxlab.graph.csbm`), any size, generated from a seed.
* ``karate``: Zachary's karate club from ``networkx`` (34 nodes, 78 undirected edges). Labels are
  the two factions after the split (the ``club`` node attribute: 0 = "Mr. Hi", 1 = "Officer");
  features are one-hot node ids (as PyTorch Geometric's ``KarateClub``); edges unweighted.

Not available offline: the real benchmarks of the JDR paper (Cora, Citeseer, PubMed, Amazon
Computers/Photo, Chameleon, Squirrel, Actor, Texas, Cornell, ...). Their loaders in PyTorch
Geometric download the data at run time, which this environment cannot do, and no installable
package ships them; they would need a local copy of the raw files.
"""

from __future__ import annotations

import flax.struct
import networkx as nx
import numpy as np
from jaxtyping import Array, Float, Int


@flax.struct.dataclass
class NodeGraph:
    """A graph with node features and labels.

    Attributes:
      adjacency: ``(n, n)`` adjacency ``a[s, r]``.
      features: ``(n, f)`` node features.
      labels: ``(n,)`` class ids.
    """

    adjacency: Float[Array, "n n"]
    features: Float[Array, "n f"]
    labels: Int[Array, " n"]


KARATE_NUM_NODES = 34


def karate_club() -> NodeGraph:
    """Zachary's karate club: unweighted symmetric adjacency, one-hot features, faction labels."""
    g = nx.karate_club_graph()
    n = g.number_of_nodes()
    adjacency = np.zeros((n, n), np.float32)
    for u, v in g.edges():
        adjacency[u, v] = adjacency[v, u] = 1.0
    labels = np.array([0 if g.nodes[i]["club"] == "Mr. Hi" else 1 for i in range(n)], np.int32)
    return NodeGraph(adjacency=adjacency, features=np.eye(n, dtype=np.float32), labels=labels)
