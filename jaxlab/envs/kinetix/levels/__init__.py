"""Kinetix level files: the original JSON format, read and written losslessly.

``load_level`` -> ``Level(state, static_params, params)``; ``save_level`` writes the bytes the
original writes, so read -> write reproduces every original file byte for byte. The modules:

- ``schema``: the format (field tables, ``Level``, ``LevelFormatError``);
- ``checks``: the validating JSON reader and the value checks (bounds, references, shapes);
- ``read``: files and JSON objects -> ``Level``; ``write``: ``Level`` -> JSON and files;
- ``sizes``: padding into larger capacities, stacking, the uniform reset over a stack;
- ``demo``: the built-in demo level.

The same folder ships the project's own levels as JSON (``<size>/<name>.json`` and
``solutions.json``; see ``jaxlab.envs.kinetix.library``).
"""

from jaxlab.envs.kinetix.levels.demo import demo_level
from jaxlab.envs.kinetix.levels.read import (
    MAX_LEVEL_BYTES,
    MAX_LEVEL_DEPTH,
    level_from_json,
    level_from_text,
    load_level,
    load_levels,
)
from jaxlab.envs.kinetix.levels.schema import Level, LevelFormatError, collision_matrix_np
from jaxlab.envs.kinetix.levels.sizes import (
    expand_level,
    make_reset_fn,
    stack_levels,
    static_sizes_of,
)
from jaxlab.envs.kinetix.levels.write import level_to_json, save_level

__all__ = [
    "MAX_LEVEL_BYTES",
    "MAX_LEVEL_DEPTH",
    "Level",
    "LevelFormatError",
    "collision_matrix_np",
    "demo_level",
    "expand_level",
    "level_from_json",
    "level_from_text",
    "level_to_json",
    "load_level",
    "load_levels",
    "make_reset_fn",
    "save_level",
    "stack_levels",
    "static_sizes_of",
]
