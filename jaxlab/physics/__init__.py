"""jaxlab.physics."""
