"""jaxlab."""
