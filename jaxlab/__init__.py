"""jaxlab: pure-JAX, accelerator-native research methods on one shared training core.

The public surface kept small on purpose; families are imported as sub-packages
(``jaxlab.physics``, ``jaxlab.lm``, ``jaxlab.diffusion``, ...).
"""

from jaxlab.core.config import ConfigError
from jaxlab.core.loop import Hook, LoopConfig, NonFiniteLossError, RunResult, run
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.core.recipe import get as get_recipe
from jaxlab.core.sharding import MeshConfig, make_mesh

__version__ = "0.3.0"

__all__ = [
    "ConfigError",
    "Hook",
    "LoopConfig",
    "MeshConfig",
    "NonFiniteLossError",
    "Recipe",
    "RunResult",
    "Parts",
    "get_recipe",
    "make_mesh",
    "register",
    "run",
]
