"""jaxlab.diffusion."""
