"""Env registry: ``make(name, **options) -> (env, params)``.

Registered names (see ``describe(name)`` for each one's options):

* ``"point-mass"``: the tiny 1-D point mass of ``jaxlab.envs.point_mass`` (contract-test env).
* ``"point-mass-2d"``: a 2-D point mass with continuous velocity actions in an open arena
  (``jaxlab.envs.point_mass_2d``; skill discovery and SAC), ``info["xy"]`` its position.
* ``"point-maze"``: the same point mass in a maze given by a small text layout
  (``jaxlab.envs.point_maze``).
* ``"kinetix-s"``, ``"kinetix-m"``, ``"kinetix-l"``: Kinetix at the paper's S/M/L sizes; the
  episode distribution is a level file (``level=PATH``), several files (``levels=[...]``, one
  drawn uniformly per episode), a ``reset_fn(key) -> EnvState``, or (default) the built-in demo
  level of that size.
* ``"kinetix-morphology"``: one Kinetix body (default ``l/knee_walker``) with continuous motors,
  goal/death roles cleared (no termination) and ``info["xy"]`` the agent's position
  (``jaxlab.envs.kinetix.morphology``; skill discovery).
* ``"game24"``: Game of 24 (``jaxlab.envs.game24``), 48 actions, reset pool of instances.
* ``"grid-maze"``: procedurally generated grid mazes with a BFS oracle (``jaxlab.envs.grid_maze``).
* ``"open-world"``: egocentric pixel world with a small, distant target (``jaxlab.envs.open_world``).
* ``"kinetix-level"``: one Kinetix level file at the sizes stored in the file
  (``make("kinetix-level", level=PATH, action_type=..., observation_type=...)``).

Factories are imported lazily, so ``import jaxlab.envs`` stays cheap. Unknown names and options
raise ``ValueError`` naming what is allowed.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """A registered env.

    Attributes:
        name: registry name.
        target: ``"module:function"``; the function takes the options as keyword arguments and
            returns ``(env, params)``.
        description: one line.
        options: allowed option names -> one-line help.
        test_options: options the contract tests use (small and fast).
    """

    name: str
    target: str
    description: str
    options: Mapping[str, str]
    test_options: Mapping[str, Any]

    def factory(self) -> Callable[..., tuple[Any, Any]]:
        """The imported factory function."""
        module, fn = self.target.split(":")
        return getattr(importlib.import_module(module), fn)


_REGISTRY: dict[str, EnvSpec] = {}


def register(
    name: str,
    target: str,
    *,
    description: str,
    options: Mapping[str, str] | None = None,
    test_options: Mapping[str, Any] | None = None,
) -> EnvSpec:
    """Register ``name`` -> ``target`` (``"module:function"``); re-registering replaces it."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"env name={name!r}; expected a non-empty string")
    if not isinstance(target, str) or target.count(":") != 1:
        raise ValueError(f"env target={target!r}; expected 'module:function'")
    spec = EnvSpec(
        name=name,
        target=target,
        description=description,
        options=MappingProxyType(dict(options or {})),
        test_options=MappingProxyType(dict(test_options or {})),
    )
    _REGISTRY[name] = spec
    return spec


def names() -> list[str]:
    """Registered env names, sorted."""
    return sorted(_REGISTRY)


def spec(name: str) -> EnvSpec:
    """The ``EnvSpec`` of ``name``."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown env name={name!r}; expected one of {names()}")
    return _REGISTRY[name]


def describe(name: str) -> str:
    """A multi-line description of ``name`` and its options."""
    s = spec(name)
    lines = [f"{s.name}: {s.description}"]
    lines += [f"  {k}: {v}" for k, v in s.options.items()]
    return "\n".join(lines)


def make(name: str, **options) -> tuple[Any, Any]:
    """Build the env registered as ``name``: ``(env, default_params)``.

    Raises:
        ValueError: unknown name, unknown option, or an invalid option value.
    """
    s = spec(name)
    unknown = sorted(set(options) - set(s.options))
    if unknown:
        raise ValueError(
            f"make({name!r}): unknown option(s) {unknown}; expected a subset of {sorted(s.options)}"
        )
    return s.factory()(**options)


_POINT_MASS_OPTIONS = {
    "auto_reset": "start a new episode when one ends (default True)",
    "max_steps": "episode length (PointMassParams.max_steps, default 20)",
}

_KINETIX_OPTIONS = {
    "level": "path of a Kinetix level JSON file (the episode always starts from it)",
    "levels": "list of level JSON paths; each episode starts from one drawn uniformly",
    "reset_fn": "callable reset_fn(key) -> EnvState drawing the initial state of each episode",
    "action_type": "'multi_discrete' (default), 'continuous' or 'discrete'",
    "observation_type": (
        "'symbolic_entity' (default), 'symbolic_flat', 'symbolic_flat_padded' or 'pixels'"
    ),
    "auto_reset": "start a new episode when one ends (default True)",
    "max_timesteps": "episode length limit (EnvParams.max_timesteps, default 256)",
    "dense_reward_scale": "weight of the green-blue distance shaping (default 0.1, original's)",
    "frame_skip": "physics substeps per env step (default 2)",
}


def _make_point_mass(auto_reset: bool = True, max_steps: int | None = None):
    from jaxlab.envs.point_mass import PointMass

    env = PointMass(auto_reset=auto_reset)
    params = env.default_params
    if max_steps is not None:
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps={max_steps!r}; expected an int >= 1")
        params = params.replace(max_steps=max_steps)
    return env, params


register(
    "point-mass",
    "jaxlab.envs.registry:_make_point_mass",
    description="1-D point mass (tiny contract-test env, Discrete(3) actions, Box(3) obs)",
    options=_POINT_MASS_OPTIONS,
    test_options={"max_steps": 5},
)
for _size in ("s", "m", "l"):
    register(
        f"kinetix-{_size}",
        f"jaxlab.envs.kinetix.env:make_kinetix_{_size}",
        description=f"Kinetix, size {_size.upper()} (level file(s), reset_fn, or the demo level)",
        options=_KINETIX_OPTIONS,
        test_options={"observation_type": "symbolic_flat", "max_timesteps": 4},
    )
register(
    "kinetix-level",
    "jaxlab.envs.kinetix.env:make_kinetix_level",
    description="one Kinetix level JSON at the sizes stored in the file (level=PATH required)",
    options={k: v for k, v in _KINETIX_OPTIONS.items() if k not in ("levels", "reset_fn")},
    # Same configuration as kinetix-s's test options on the same (demo) level, so the contract
    # tests share one compiled program.
    test_options={"level": "@demo-s", "observation_type": "symbolic_flat", "max_timesteps": 4},
)
register(
    "kinetix-morphology",
    "jaxlab.envs.kinetix.morphology:make_kinetix_morphology",
    description="a Kinetix body with continuous motors, no goal, info['xy'] (skill discovery)",
    options={
        "level": "level file or shipped name, e.g. 'l/knee_walker' (default), 's/car_left'",
        "auto_reset": "start a new episode when one ends (default True)",
        "max_timesteps": "episode length (default 200)",
        "frame_skip": "physics substeps per env step (default: the level's)",
    },
    test_options={"level": "s/car_left", "max_timesteps": 4},
)
register(
    "game24",
    "jaxlab.envs.game24:make_game24",
    description="Game of 24 (four numbers, 48 pair-operator actions, reward 1 on reaching 24)",
    options={
        "auto_reset": "start a new episode when one ends (default True)",
        "instances": "list of [a, b, c, d] instances in 1..13 (default: all 1362 solvable ones)",
    },
    test_options={},
)
register(
    "grid-maze",
    "jaxlab.envs.grid_maze:make_grid_maze",
    description="procedurally generated grid mazes, BFS oracle, symbolic or pixel observations",
    options={
        "height": "grid rows including the border wall (default 8)",
        "width": "grid columns including the border wall (default 8)",
        "observation_type": "'symbolic' (float32[H, W, 3]) or 'pixels' (uint8 RGB)",
        "cell_pixels": "pixels per cell of the pixel observation (default 4)",
        "wall_prob": "probability of an interior wall (default 0.3)",
        "max_steps": "episode length limit (default 64)",
        "auto_reset": "start a new episode when one ends (default True)",
    },
    test_options={"height": 6, "width": 6, "max_steps": 4},
)
register(
    "procgen-maze",
    "jaxlab.envs.grid_maze:make_procgen_maze",
    description="Procgen-style perfect mazes of per-layout size in a fixed map, pixels, BFS oracle",
    options={
        "height": "map rows, the largest layout (default 13)",
        "width": "map columns, the largest layout (default 13)",
        "min_size": "smallest layout side drawn, >= 5 (default 5)",
        "observation_type": "'pixels' (default, uint8 RGB) or 'symbolic' (float32[H, W, 3])",
        "cell_pixels": "pixels per cell of the pixel observation (default 4)",
        "max_steps": "episode length limit (default 64)",
        "auto_reset": "start a new episode when one ends (default True)",
    },
    test_options={"height": 9, "width": 9, "max_steps": 4},
)


_POINT_2D_OPTIONS = {
    "auto_reset": "start a new episode when one ends (default True)",
    "max_steps": "episode length (PointMass2DParams.max_steps, default 50)",
    "goal": "(x, y) goal of the reward, inside the arena",
}


def _params_2d(env, max_steps, goal):
    import jax.numpy as jnp

    from jaxlab.core.config import ConfigError
    from jaxlab.envs.point_mass_2d import check_goal

    params = env.default_params
    if max_steps is not None:
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ConfigError("max_steps", max_steps, "an int >= 1")
        params = params.replace(max_steps=max_steps)
    if goal is not None:
        low, high = env.observation_space().low.min(), env.observation_space().high.max()
        params = params.replace(goal=check_goal(goal, float(low), float(high)))
        if hasattr(env, "free") and not bool(env.is_free(jnp.asarray(params.goal, jnp.float32))):
            raise ConfigError("goal", goal, "a point in a free cell of the maze (not in a wall)")
    return params


def _make_point_mass_2d(auto_reset=True, max_steps=None, goal=None, size=1.0):
    from jaxlab.envs.point_mass_2d import PointMass2D

    env = PointMass2D(size=size, auto_reset=auto_reset)
    return env, _params_2d(env, max_steps, goal)


def _make_point_maze(auto_reset=True, max_steps=None, goal=None, layout=None):
    from jaxlab.envs.point_maze import U_MAZE, PointMaze

    env = PointMaze(layout=U_MAZE if layout is None else layout, auto_reset=auto_reset)
    return env, _params_2d(env, max_steps, goal)


register(
    "point-mass-2d",
    "jaxlab.envs.registry:_make_point_mass_2d",
    description="2-D point mass, Box(2) velocity actions in an open arena, Box(2) x-y obs",
    options={**_POINT_2D_OPTIONS, "size": "arena half-width (default 1.0)"},
    test_options={"max_steps": 5},
)
register(
    "point-maze",
    "jaxlab.envs.registry:_make_point_maze",
    description="2-D point mass in a maze from a text layout ('#' wall, '.' free, 'S' start)",
    options={**_POINT_2D_OPTIONS, "layout": "rows of '#', '.', 'S' (default: a small U-maze)"},
    test_options={"max_steps": 5},
)
register(
    "open-world",
    "jaxlab.envs.open_world:make_open_world",
    description="egocentric pixel open world: collect a small, distant target (LS-Imagine)",
    options={
        "variant": "'easy' (target 1.5-3 away) or 'hard' (6-10 away, default)",
        "obs_size": "observation side in pixels, 32 (default) or 64",
        "num_distractors": "grey rocks scattered in the arena (default 4)",
        "max_steps": "episode length limit (default 64)",
        "auto_reset": "start a new episode when one ends (default True)",
    },
    test_options={"variant": "easy", "max_steps": 4},
)
register(
    "driving",
    "jaxlab.envs.driving:make_driving",
    description="driving world: straight/intersection/merge scenes, IDM neighbours, plan actions",
    options={
        "auto_reset": "start a new episode when one ends (default True)",
        "scene_type": "-1 random, 0 straight, 1 intersection, 2 merge (default -1)",
        "max_steps": "episode length in 0.1 s steps (default 60)",
        "route_visible": "give the ego's route lane to the planner (default True)",
        "n_neighbours": "neighbour capacity (default 4)",
        "horizon": "plan length in steps (the action shape is (horizon, 4); default 16)",
        "history": "past steps of the neighbour tokens (default 5)",
    },
    test_options={"max_steps": 5},
)
