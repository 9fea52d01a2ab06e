"""jaxlab.decoding: model-agnostic decoding algorithms; language models are injected functions.

Modules (import them directly, e.g. ``from jaxlab.decoding import speculative``):

* ``interface``: the :class:`~jaxlab.decoding.interface.CausalLM` contract
  ``apply(params, state, tokens, start) -> (logits, state)`` and adapters.
* ``sampling``: greedy / temperature / top-k / top-p next-token sampling, stop tokens.
* ``generate``: target-only autoregressive decoding (the baseline).
* ``speculative``: speculative decoding and speculative cascades (deferral rules, statistics).
* ``potentials``: potentials over token sequences (regex / bounded-CFG DFAs, sequence functions,
  products, coercion); ``dfa``, ``regex``, ``grammar`` compile them on the host.
* ``resampling``, ``smc``: properly weighted token samplers, SMC, IS and sample-then-rerank.
* ``tabulated``: exact n-gram table models for tests and benchmarks.
* ``arithmetic``: the demonstration task on jaxlab's own LMs: a bounded arithmetic-expression
  grammar, a semantic critic (value in a range) as the expensive potential, and one runner for
  sampling, grammar-only decoding/SMC, sample-then-rerank and critic-twisted SMC.
* ``length_bound``: a grammar potential that only admits prefixes completable within a token
  budget (so grammar-constrained samplers never get stuck at ``max_tokens``).
"""
