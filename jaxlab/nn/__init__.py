"""jaxlab.nn."""
