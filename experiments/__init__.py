"""Research studies: one folder per question, each with its script(s) and a README.md (the
question, the command, where the results are, the conclusion). Run a study from the checkout
root as a module, e.g. ``python -m experiments.moe_vs_dense.moe_vs_dense``."""
