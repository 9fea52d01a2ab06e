"""jaxlab.envs."""
