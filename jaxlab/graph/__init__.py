"""jaxlab.graph: GNNs, the contextual SBM, and JDR joint denoising and rewiring.

Modules (one concept each):

* ``graph``: dense and edge-list graph containers (``a[s, r]``, receiver aggregation).
* ``gnn``: GCN normalisation, GCN and GPRGNN (Flax), on either container.
* ``csbm``: the contextual stochastic block model with JDR's (n, p, d, epsilon, phi).
* ``datasets``: offline graphs (cSBM, Zachary's karate club from networkx).
* ``spectral``: leading eigenpairs / singular triplets (dense or LOBPCG).
* ``sparsify``: top-k per column and thresholding.
* ``jdr``: JDR (Linkerhägner et al., ICLR 2025) and the alignment it increases.
* ``digl``: the DIGL baseline (PPR diffusion + top-k).
* ``splits``: random class-balanced train/val/test splits.
* ``node_classification``: many seeds of full-batch training in one vmap, early stopping.
* ``experiment``: the ``GnnConfig`` and data pipeline shared by the ``gnn`` recipe and the sweep.
* ``sweep``: ``jaxlab sweep gnn``, the accuracy-vs-phi table for none / DIGL / JDR.
"""
