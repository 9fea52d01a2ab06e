"""jaxlab.graph."""
