"""jaxlab.causal: causal discovery under selection bias with interventions (CDIS, Dai et al.,
ICLR 2025), with batched conditional-independence tests in JAX.

Modules (one concept each):

* ``graphs``: DAGs and PAG marks, batched d-separation, selection and interventional twin graphs,
  random DAGs (Erdős–Rényi, scale-free), edge kinds and meanings.
* ``scm``: additive-noise SCMs (linear-Gaussian, nonlinear), selection mechanisms applied before
  soft interventions, dataset samplers, pooling with the indicator ``zeta``.
* ``ci_tests``: Fisher-z, random-feature kernel (RCIT) and oracle CI tests, many triples per
  jitted call.
* ``fci``: stable adjacency search, possible-d-sep refinement, orientation rules R0-R10.
* ``cdis``: CDIS (data and oracle modes) and the selection-ignoring interventional baseline.
* ``cli``: ``jaxlab causal discover data.csv --context-column k``.

Python API: ``cdis_from_data([obs, interv_1, ...]).final`` is the PAG as a marks matrix
(``m[i, j]`` = the mark at j); ``graphs.pag_edges`` groups its edges by kind.
"""
