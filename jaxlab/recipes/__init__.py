"""jaxlab.recipes."""
