"""jaxlab.workflows: AFlow (Zhang et al., ICLR 2025), automated agentic workflow search.

Modules (import them directly):

* ``program``: workflows as data (a straight-line program over operators), printed as code.
* ``programmer``: the safe arithmetic-expression evaluator of the programmer operator.
* ``tasks``: synthetic arithmetic word problems, the 1:4 validation/test split, task files.
* ``interpreter``: the executor interface, the interpreter, the plurality vote, evaluation.
* ``standin``: a seeded executor with known per-operator accuracies.
* ``lm_executor``: operators as batched, constrained SMC calls to an injected ``CausalLM``.
* ``optimizer``: the optimizer interface and the experience-aware grammar-of-edits optimizer.
* ``selection``: AFlow's selection probabilities and convergence rule.
* ``search``: the tree search with its state saved to the run directory every round.
* ``cli``: ``jaxlab workflows search ...``.

Models are injected (the LM executor takes a ``decoding.CausalLM``); nothing here imports
``jaxlab.lm``.
"""
