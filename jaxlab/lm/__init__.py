"""jaxlab.lm."""
