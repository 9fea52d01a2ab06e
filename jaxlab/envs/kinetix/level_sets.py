"""Kinetix level sets: naming them as text, fitting them into the static sizes S/M/L, and turning
them into level samplers (training) or size groups (evaluation).

Level specs (``resolve_level_files``) are text: a JSON file, a directory (every ``*.json`` below
it, sorted), ``library`` or ``library/<sub>`` for the project's shipped levels
(``jaxlab/envs/kinetix/levels``), a name inside the library such as ``s/h2_one_wheel_car``, or
several of these separated by commas. A training spec may also be ``random``: levels drawn by the
procedural generator (``generator.py``), optionally through the original's no-op filter.

A level *fits* the sizes ``target`` when each of its capacities (polygons, circles, joints,
thrusters) is at most ``target``'s; it is then padded into them (``levels.expand_level``).
Observations of the flat views have the size's width, so a policy on them plays only levels that
fit its training size; the entity view (transformer) plays any size, and evaluation groups levels
by the smallest size they fit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import jax

from jaxlab.core.compile import jit
from jaxlab.core.config import ConfigError
from jaxlab.envs.kinetix.env import KinetixEnv
from jaxlab.envs.kinetix.levels import expand_level, load_level, make_reset_fn, stack_levels
from jaxlab.envs.kinetix.state import EnvParams, StaticEnvParams

#: The project's level library (shipped with the package).
LIBRARY = Path(__file__).resolve().parent / "levels"
SIZE_ORDER = ("s", "m", "l")
_CAPACITIES = ("num_polygons", "num_circles", "num_joints", "num_thrusters")


@dataclasses.dataclass(frozen=True)
class KinetixEnvConfig:
    """The environment of a Kinetix run (config keys ``env.*``).

    Attributes:
        size: static sizes (S/M/L, paper Table 3); levels are padded into them.
        train_levels: training level spec (module docstring) or ``random``.
        action_type: ``multi_discrete``, ``continuous`` or ``discrete``.
        observation_type: ``symbolic_entity`` (transformer), ``symbolic_flat`` (MLP), ...
        max_timesteps: episode length.
        dense_reward_scale: shaping weight ``kappa`` (the original's configs: 0.2).
        frame_skip: physics substeps per env step.
        noop_filter: with ``train_levels=random``, down-weight levels the no-op policy solves
            (the original's filtered distribution; costs 128 no-op env steps per drawn level).
    """

    size: Literal["s", "m", "l"] = "s"
    train_levels: str = "s/h2_one_wheel_car"
    action_type: Literal["multi_discrete", "continuous", "discrete"] = "multi_discrete"
    observation_type: Literal[
        "symbolic_entity", "symbolic_flat", "symbolic_flat_padded", "pixels"
    ] = "symbolic_entity"
    max_timesteps: int = 256
    dense_reward_scale: float = 0.2
    frame_skip: int = 2
    noop_filter: bool = True

    def __post_init__(self):
        if not self.train_levels.strip():
            raise ConfigError("env.train_levels", self.train_levels, "a level spec or 'random'")
        for name in ("max_timesteps", "frame_skip"):
            if getattr(self, name) < 1:
                raise ConfigError(f"env.{name}", getattr(self, name), "an integer >= 1")
        if not self.dense_reward_scale >= 0.0:
            raise ConfigError("env.dense_reward_scale", self.dense_reward_scale, "a weight >= 0")

    @property
    def random_levels(self) -> bool:
        return self.train_levels.strip() == "random"


def _inside(path: Path, root: Path) -> bool:
    """Whether ``path`` (resolved, links followed) lies in ``root``."""
    return path.resolve().is_relative_to(root.resolve())


def resolve_level_files(spec: str, *, library: Path = LIBRARY) -> list[Path]:
    """Level files named by ``spec`` (module docstring), in a stable order.

    Raises:
        ValueError: an empty spec, or a part that names no existing file, directory or library
            level (the message names the part and what was expected).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"levels={spec!r}; expected a level file, directory, or 'library[/sub]'")
    files: list[Path] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if part == "library" or part.startswith("library/"):
            root = library / part[len("library/") :] if part != "library" else library
            if not _inside(root, library):
                raise ValueError(
                    f"levels part {part!r}: {root} is outside the level library {library}; "
                    "expected 'library' or 'library/SUB' with SUB a folder inside it (s, m, l)"
                )
            # Levels live in the size folders; other JSON files (solutions.json) are not levels.
            found = (
                sorted(f for f in root.rglob("*.json") if f.parent != library)
                if root.is_dir()
                else []
            )
            if not found:
                raise ValueError(f"levels part {part!r}: no *.json level under {root}")
            files += found
            continue
        path = Path(part).expanduser()
        if path.is_dir():
            found = sorted(path.rglob("*.json"))
            if not found:
                raise ValueError(f"levels part {part!r}: directory has no *.json level files")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            lib = library / (part if part.endswith(".json") else part + ".json")
            if lib.is_file() and _inside(lib, library):
                files.append(lib)
            else:
                raise ValueError(
                    f"levels part {part!r}: expected an existing .json file, a directory, "
                    f"'library[/sub]' or a library level name (looked for {lib})"
                )
    seen: dict[Path, None] = {}
    for f in files:
        seen.setdefault(f.resolve(), None)
    return list(seen)


def level_name(path: Path, *, library: Path = LIBRARY) -> str:
    """A short display name: ``<size dir>/<stem>`` (e.g. ``s/h2_one_wheel_car``)."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(library.resolve()).with_suffix(""))
    except ValueError:
        return f"{path.parent.name}/{path.stem}"


def static_params_for(env: KinetixEnvConfig, size: str | None = None) -> StaticEnvParams:
    """The StaticEnvParams of ``size`` (default ``env.size``) with the configured frame skip."""
    return StaticEnvParams.from_size(size or env.size, frame_skip=env.frame_skip)


def fits(level_static: StaticEnvParams, target: StaticEnvParams) -> bool:
    """Whether every capacity of the level is at most ``target``'s."""
    return all(getattr(level_static, k) <= getattr(target, k) for k in _CAPACITIES)


def env_params_for(env: KinetixEnvConfig, params: EnvParams) -> EnvParams:
    """A level's ``EnvParams`` with the configured episode length and shaping weight."""
    return params.replace(
        max_timesteps=env.max_timesteps, dense_reward_scale=env.dense_reward_scale
    )


def make_env(env: KinetixEnvConfig, static: StaticEnvParams, params: EnvParams, **kw) -> KinetixEnv:
    """The KinetixEnv of ``env``'s action and observation types at ``static`` sizes."""
    return KinetixEnv(
        static,
        action_type=env.action_type,
        observation_type=env.observation_type,
        params=params,
        **kw,
    )


def load_level_batch(files: Sequence[Path], static: StaticEnvParams) -> tuple[Any, EnvParams]:
    """Loads ``files``, pads each into ``static`` and stacks them; returns ``(levels, params)``
    (the first file's params). A level that does not fit ``static`` is a ValueError."""
    states, params = [], None
    for f in files:
        lv = load_level(f)
        if not fits(lv.static_params, static):
            s = lv.static_params
            raise ValueError(
                f"level {f} needs sizes larger than the training size (polygons/circles/joints/"
                f"thrusters {s.num_polygons}/{s.num_circles}/{s.num_joints}/{s.num_thrusters}); "
                "expected a level that fits env.size"
            )
        states.append(expand_level(lv.state, lv.static_params, static, source=str(f)))
        params = lv.params if params is None else params
    return stack_levels(states), params


def generator_available() -> bool:
    """Whether the procedural level generator (``env.train_levels=random``) is installed."""
    try:
        from jaxlab.envs.kinetix import generator
    except ImportError:
        return False
    return hasattr(generator, "make_sample_level")


def random_level_sampler(static: StaticEnvParams, env_params, noop_filter: bool) -> Callable:
    """``sample(key) -> EnvState``: a random level from ``jaxlab.envs.kinetix.generator``.

    With ``noop_filter`` (the original's filtered distribution) two candidates are drawn and one
    is kept, with weight 0.001 for a candidate the no-op policy solves within 64 steps
    (``noop_filter.filter_levels`` on a pair), so self-solving levels become rare. Raises a
    ConfigError when the generator is not installed."""
    try:
        from jaxlab.envs.kinetix import generator
    except ImportError:
        generator = None
    make = getattr(generator, "make_sample_level", None) if generator is not None else None
    if make is None:
        raise ConfigError(
            "env.train_levels",
            "random",
            "a level file, directory or 'library[/sub]' until the procedural generator "
            "(jaxlab.envs.kinetix.generator.make_sample_level) is installed",
        )
    # jitted: the traces of init and of the train step (and of their eval_shape for shardings or
    # a restore) then share one trace of the generator (and filter) instead of each redoing it
    sample = make(static, env_params=env_params)
    if not noop_filter:
        return jit(sample)
    from jaxlab.envs.kinetix.noop_filter import filter_levels

    def filtered(key: jax.Array):
        k_gen, k_pick = jax.random.split(key)
        candidates = jax.vmap(sample)(jax.random.split(k_gen, 2))
        picked = filter_levels(k_pick, candidates, 1, static, env_params)[0]
        return jax.tree.map(lambda x: x[0], picked)

    return jit(filtered)


def mutate_function(static: StaticEnvParams, env_params) -> Callable:
    """``mutate(key, level) -> level`` for ACCEL: one edit of ``jaxlab.envs.kinetix.mutators``."""
    try:
        from jaxlab.envs.kinetix import mutators
    except ImportError:
        mutators = None
    edit = getattr(mutators, "mutate", None) if mutators is not None else None
    if edit is None:
        raise ConfigError(
            "curriculum.kind",
            "accel",
            "'uniform', 'sfl' or 'plr' until the level mutators "
            "(jaxlab.envs.kinetix.mutators.mutate) are installed",
        )
    return lambda key, level: edit(key, level, static, 1, env_params=env_params)[0]


@dataclasses.dataclass(frozen=True)
class TrainLevels:
    """The training level distribution: ``sample(key) -> EnvState`` at ``static`` sizes, the
    env parameters, and the files it draws from (empty for ``random``)."""

    sample: Callable[[jax.Array], Any]
    static: StaticEnvParams
    env_params: EnvParams
    files: tuple[Path, ...]


def train_levels(env: KinetixEnvConfig) -> TrainLevels:
    """``env.train_levels`` as a sampler (a ConfigError naming the key for a bad spec)."""
    static = static_params_for(env)
    if env.random_levels:
        params = env_params_for(env, EnvParams())
        return TrainLevels(
            random_level_sampler(static, params, env.noop_filter), static, params, ()
        )
    try:
        files = tuple(resolve_level_files(env.train_levels))
        batch, params = load_level_batch(files, static)
    except (ValueError, FileNotFoundError) as e:
        raise ConfigError("env.train_levels", env.train_levels, str(e)) from None
    return TrainLevels(make_reset_fn(batch), static, env_params_for(env, params), files)


def size_for(level_static: StaticEnvParams, env: KinetixEnvConfig, any_size: bool) -> str | None:
    """The size a level is played at: ``env.size`` if it fits, else (``any_size``, e.g. the
    entity transformer) the smallest size it fits; ``None`` when it fits none allowed."""
    if fits(level_static, static_params_for(env)):
        return env.size
    if not any_size:
        return None
    return next((s for s in SIZE_ORDER if fits(level_static, static_params_for(env, s))), None)


@dataclasses.dataclass
class EvalGroup:
    """Levels of one static size: names, stacked states, and the env to play them in."""

    names: list[str]
    levels: Any
    env: KinetixEnv
    env_params: Any


def split_playable(
    files: Sequence[Path], env: KinetixEnvConfig, any_size: bool
) -> tuple[list[Path], list[Path]]:
    """``(playable, unplayable)`` level files for a policy trained at ``env.size`` that plays
    other sizes only when ``any_size`` (see :func:`size_for`)."""
    ok, bad = [], []
    for f in files:
        (ok if size_for(load_level(f).static_params, env, any_size) else bad).append(Path(f))
    return ok, bad


def load_eval_groups(
    env: KinetixEnvConfig, files: Sequence[Path], any_size: bool
) -> list[EvalGroup]:
    """Evaluation levels grouped by the static size they are played at (:func:`size_for`);
    a level that cannot be played is a ValueError naming it."""
    by_size: dict[str, list[tuple[str, Any, Any]]] = {}
    for f in files:
        lv = load_level(f)
        size = size_for(lv.static_params, env, any_size)
        if size is None:
            s = lv.static_params
            raise ValueError(
                f"level {level_name(Path(f))} with {s.num_polygons} polygons / {s.num_circles} "
                f"circles does not fit env.size={env.size!r}; only the transformer "
                "(symbolic_entity) evaluates on larger sizes"
            )
        static = static_params_for(env, size)
        state = expand_level(lv.state, lv.static_params, static, source=str(f))
        by_size.setdefault(size, []).append((level_name(Path(f)), state, lv.params))
    groups = []
    for size in SIZE_ORDER:
        if size not in by_size:
            continue
        names = [n for n, _, _ in by_size[size]]
        levels = stack_levels([s for _, s, _ in by_size[size]])
        params = env_params_for(env, by_size[size][0][2])
        group_env = make_env(env, static_params_for(env, size), params, level=levels)
        groups.append(EvalGroup(names, levels, group_env, params))
    return groups
