"""jaxlab.rl.search: D-TSN (differentiable tree search from demonstrations) and its baselines."""
