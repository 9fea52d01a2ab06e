"""jaxlab: pure-JAX, accelerator-native research methods on one shared training core.

The public surface kept small on purpose; families are imported as sub-packages
(``jaxlab.physics``, ``jaxlab.lm``, ``jaxlab.diffusion``, ...).
"""

from jaxlab.core.config import ConfigError
from jaxlab.core.loop import Hook, LoopConfig, NonFiniteLossError, RunResult, run
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.core.recipe import get as get_recipe
from jaxlab.core.sharding import MeshConfig, make_mesh

__version__ = "0.1.0"


def _alias_checkout_benchmarks() -> None:
    """In a source checkout the benchmarks sit in ``../benchmarks``; an installed copy ships
    them as ``jaxlab/benchmarks`` (setup.py's ``package_dir``). Map ``jaxlab.benchmarks`` onto
    the checkout's folder so both layouts import the same names, without touching sys.path."""
    import importlib.util
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    init = here.parent / "benchmarks" / "__init__.py"
    if (here / "benchmarks").exists() or not init.exists() or "jaxlab.benchmarks" in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(
        "jaxlab.benchmarks", init, submodule_search_locations=[str(init.parent)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["jaxlab.benchmarks"] = module
    spec.loader.exec_module(module)


_alias_checkout_benchmarks()

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
