"""jaxlab.core."""
