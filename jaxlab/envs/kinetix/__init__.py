"""jaxlab.envs.kinetix."""
