"""jaxlab.causal: causal discovery under selection bias with interventions (CDIS, Dai et al.,
ICLR 2025), with batched conditional-independence tests in JAX.

Modules (one concept each):

* ``graphs``: DAGs and PAG marks, batched d-separation, selection and interventional twin graphs,
  random DAGs (Erdős–Rényi, scale-free), edge kinds and meanings.
* ``scm``: additive-noise SCMs (linear-Gaussian, nonlinear), selection mechanisms applied before
  soft interventions, dataset samplers, pooling with the indicator ``zeta``.
* ``ci_tests``: the CI tests' host API (batching, caching, non-finite p-values), Fisher-z, and
  the oracle; ``kernel_ci``: RCIT and exact KCI on one query (float64); ``discrete_ci``:
  chi-square and G^2 on one query.
* ``fci``: stable adjacency search, separating-set rules (first, union, majority), possible-d-sep
  refinement, orientation rules R0-R10.
* ``cdis``: CDIS (data and oracle modes) and the selection-ignoring interventional baseline.
* ``input_checks``: the per-context checks of the CLI's datasets against the chosen test.
* ``cli``: ``jaxlab causal discover data.csv --context-column k [--test T] [--out DIR]``.

Python API: ``cdis_from_data([obs, interv_1, ...]).final`` is the PAG as a marks matrix
(``m[i, j]`` = the mark at j); ``graphs.pag_edges`` groups its edges by kind.
"""
