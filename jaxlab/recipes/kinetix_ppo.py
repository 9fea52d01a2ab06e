"""``kinetix-ppo``: the Kinetix general agent — PPO with the entity transformer (or an MLP on flat
observations), level curricula (uniform / SFL / PLR / ACCEL), zero-shot evaluation and
fine-tuning, on the shared training loop.

One loop step is one PPO update (a rollout of ``ppo.num_envs x ppo.num_steps`` env steps, then
``update_epochs x num_minibatches`` Adam steps); the env state and the PRNG key live in the train
state, so checkpoints resume bit-identically on the CPU. ``make_train(cfg)(key)`` is the same run
as one pure function (``jax.vmap`` it over keys for many seeds).

Levels (``env.train_levels``, ``eval.levels``): a level file, a directory, ``library[/sub]`` (the
levels shipped in ``jaxlab/envs/kinetix/levels``), a library name like ``s/h2_one_wheel_car``, or a
comma-separated list; ``random`` uses the procedural generator
(``jaxlab.envs.kinetix.generator``), optionally through the original's no-op filter
(``env.noop_filter``). Levels are padded to
the size ``env.size``.

Fine-tuning: ``init_from=RUN_DIR`` starts from the parameters of the latest checkpoint of a
pretrained run (same network and observation/action types); the optimiser starts fresh.

Multi-device: ``mesh.data = D > 1`` splits the envs (and the SFL buffer) over the ``data`` mesh
axis with ``shard_map``; each device rolls out its share and the gradients are averaged
(``tpu_configs/kinetix-ppo-*.yaml``).

After training, ``run_dir`` holds ``agent.gif`` (the agent playing up to ``eval.gif_levels`` of
its evaluation levels) and ``eval_levels.txt``/``eval_levels.json`` (the per-level solve table).
``jaxlab eval kinetix-ppo --run-dir DIR [--levels SPEC] [--attempts K]`` prints the table for any
level set.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from jaxlab.core import config as config_lib
from jaxlab.core.checkpoint import Checkpointer
from jaxlab.core.config import ConfigError
from jaxlab.core.loop import Hook, LoopConfig
from jaxlab.core.recipe import Recipe, Task, register
from jaxlab.core.sharding import MeshConfig, make_mesh, shard_map
from jaxlab.envs.kinetix import (
    KinetixEnv,
    StaticEnvParams,
    expand_level,
    load_level,
    make_render_pixels,
    save_gif,
    stack_levels,
    to_image,
)
from jaxlab.envs.kinetix.actions import noop_action, random_action
from jaxlab.envs.kinetix.levels import make_reset_fn
from jaxlab.rl import evaluate as ev
from jaxlab.rl.action_heads import head_for_space
from jaxlab.rl.networks import ActorCritic, NetworkConfig, check_network_for_observation
from jaxlab.rl.ppo import PPO, PPOConfig, PPOState
from jaxlab.rl.ued import CurriculumConfig, make_curriculum

SIZE_ORDER = ("s", "m", "l")


@dataclasses.dataclass(frozen=True)
class KinetixEnvConfig:
    """The environment.

    Attributes:
        size: static sizes (S/M/L, paper Table 3); levels are padded into them.
        train_levels: training level distribution (module docstring).
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


@dataclasses.dataclass(frozen=True)
class KinetixEvalConfig:
    """Evaluation (during training, at the end, and in ``jaxlab eval``).

    Attributes:
        levels: level spec; empty = the training levels (or ``library`` for random levels).
        num_attempts: episodes per level (the paper: 20).
        max_steps: steps per attempt; 0 = ``env.max_timesteps``.
        gif_levels: levels shown in ``agent.gif`` (0: no GIF).
    """

    levels: str = ""
    num_attempts: int = 20
    max_steps: int = 0
    gif_levels: int = 4

    def __post_init__(self):
        if self.num_attempts < 1:
            raise ConfigError("eval.num_attempts", self.num_attempts, "an integer >= 1")
        if self.max_steps < 0 or self.gif_levels < 0:
            raise ConfigError("eval.max_steps/gif_levels", self.max_steps, "integers >= 0")


@dataclasses.dataclass(frozen=True)
class KinetixPPOConfig:
    """The recipe's whole configuration (see the module docstring)."""

    seed: int = 0
    env: KinetixEnvConfig = KinetixEnvConfig()
    network: NetworkConfig = NetworkConfig()
    ppo: PPOConfig = PPOConfig()
    curriculum: CurriculumConfig = CurriculumConfig()
    eval: KinetixEvalConfig = KinetixEvalConfig()
    init_from: str = ""
    mesh: MeshConfig = MeshConfig(data=1)
    loop: LoopConfig = LoopConfig(
        total_steps=200, steps_per_call=10, log_every=10, eval_every=0, checkpoint_every=50
    )

    def __post_init__(self):
        check_network_for_observation(self.network, self.env.observation_type)
        data = self.mesh.data
        if data > 1:
            if self.ppo.num_envs % data:
                raise ConfigError(
                    "ppo.num_envs", self.ppo.num_envs, f"a multiple of mesh.data={data}"
                )
            if (self.ppo.num_envs // data * self.ppo.num_steps) % self.ppo.num_minibatches:
                raise ConfigError(
                    "ppo.num_minibatches",
                    self.ppo.num_minibatches,
                    f"a divisor of the per-device batch {self.ppo.num_envs // data * self.ppo.num_steps}",
                )
            if self.curriculum.kind in ("plr", "accel"):
                raise ConfigError(
                    "curriculum.kind",
                    self.curriculum.kind,
                    "'uniform' or 'sfl' when mesh.data > 1 (PLR/ACCEL buffers are single-device)",
                )
            if self.curriculum.kind == "sfl":
                s = self.curriculum.sfl
                for name in ("buffer_size", "batch_size"):
                    if getattr(s, name) % data:
                        raise ConfigError(
                            f"curriculum.sfl.{name}",
                            getattr(s, name),
                            f"a multiple of mesh.data={data}",
                        )
        if self.fsdp_like_axes():
            raise ConfigError(
                "mesh", self.mesh.sizes(), "only the data axis > 1 (envs are data-parallel)"
            )

    def fsdp_like_axes(self) -> bool:
        return any(s not in (1,) for s in self.mesh.sizes()[1:])


# ---------------------------------------------------------------------------------------------
# Levels


def static_params_for(cfg: KinetixPPOConfig, size: str | None = None) -> StaticEnvParams:
    """The StaticEnvParams of ``size`` (default ``env.size``) with the configured frame skip."""
    return StaticEnvParams.from_size(size or cfg.env.size, frame_skip=cfg.env.frame_skip)


def _fits(level_static: StaticEnvParams, target: StaticEnvParams) -> bool:
    keys = ("num_polygons", "num_circles", "num_joints", "num_thrusters")
    return all(getattr(level_static, k) <= getattr(target, k) for k in keys)


def _env_params(cfg: KinetixPPOConfig, params):
    return params.replace(
        max_timesteps=cfg.env.max_timesteps, dense_reward_scale=cfg.env.dense_reward_scale
    )


def load_level_batch(files, static: StaticEnvParams):
    """Loads ``files``, pads each into ``static`` and stacks them; returns ``(levels, params)``."""
    states, params = [], None
    for f in files:
        lv = load_level(f)
        if not _fits(lv.static_params, static):
            raise ValueError(
                f"level {f} needs sizes larger than the training size (polygons/circles/joints/"
                f"thrusters {lv.static_params.num_polygons}/{lv.static_params.num_circles}/"
                f"{lv.static_params.num_joints}/{lv.static_params.num_thrusters}); expected a "
                "level that fits env.size"
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
    (``jaxlab.envs.kinetix.noop_filter.filter_levels`` on a pair), so self-solving levels become
    rare. Raises a ConfigError when the generator is not installed."""
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
    sample = make(static, env_params=env_params)
    if not noop_filter:
        return sample
    from jaxlab.envs.kinetix.noop_filter import filter_levels

    def filtered(key: jax.Array):
        k_gen, k_pick = jax.random.split(key)
        candidates = jax.vmap(sample)(jax.random.split(k_gen, 2))
        picked = filter_levels(k_pick, candidates, 1, static, env_params)[0]
        return jax.tree.map(lambda x: x[0], picked)

    return filtered


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


def eval_level_spec(cfg: KinetixPPOConfig) -> str:
    """The evaluation level spec: ``eval.levels``, else the training levels, else the library."""
    if cfg.eval.levels.strip():
        return cfg.eval.levels
    if cfg.env.train_levels.strip() != "random":
        return cfg.env.train_levels
    return "library"


# ---------------------------------------------------------------------------------------------
# Parts


@dataclasses.dataclass(frozen=True)
class KinetixParts:
    """The pure pieces of one run (shared by the loop, tests, benchmarks and TPU lowering)."""

    cfg: KinetixPPOConfig
    env: KinetixEnv
    env_params: Any
    static: StaticEnvParams
    network: ActorCritic
    ppo: PPO
    init: Callable[[jax.Array], PPOState]
    train_step: Callable[[PPOState], tuple[PPOState, dict]]
    mesh: jax.sharding.Mesh
    state_sharding: Callable[[Any], Any] | None
    train_files: tuple[Path, ...]


def _per_env_fields() -> tuple[str, ...]:
    return ("env_state", "obs", "levels", "curriculum")


def state_specs(state: PPOState) -> PPOState:
    """PartitionSpecs of a PPOState: per-env leaves (and the SFL buffer) split over ``data``."""
    split = set(_per_env_fields())
    specs = {}
    for f in dataclasses.fields(state):
        sub = getattr(state, f.name)
        spec = PartitionSpec("data") if f.name in split else PartitionSpec()
        specs[f.name] = jax.tree.map(lambda _, s=spec: s, sub)
    return PPOState(**specs)


def _mesh(cfg: KinetixPPOConfig, devices=None) -> jax.sharding.Mesh:
    devices = list(devices if devices is not None else jax.devices())
    sizes = cfg.mesh.sizes()
    if -1 not in sizes:
        devices = devices[: int(np.prod(sizes))]
    return make_mesh(cfg.mesh, devices)


def build_parts(cfg: KinetixPPOConfig, devices=None) -> KinetixParts:
    """Env, network, PPO and (for ``mesh.data > 1``) the ``shard_map``-ed update."""
    static = static_params_for(cfg)
    files: tuple[Path, ...] = ()
    if cfg.env.train_levels.strip() == "random":
        from jaxlab.envs.kinetix.state import EnvParams

        env_params = _env_params(cfg, EnvParams())
        sample_level = random_level_sampler(static, env_params, cfg.env.noop_filter)
    else:
        try:
            files = tuple(ev.resolve_level_files(cfg.env.train_levels))
            batch, params = load_level_batch(files, static)
        except (ValueError, FileNotFoundError) as e:
            raise ConfigError("env.train_levels", cfg.env.train_levels, str(e)) from None
        env_params = _env_params(cfg, params)
        sample_level = make_reset_fn(batch)
    env = KinetixEnv(
        static,
        action_type=cfg.env.action_type,
        observation_type=cfg.env.observation_type,
        reset_fn=sample_level,
        params=env_params,
    )
    obs_ndim = 2 if cfg.env.observation_type == "symbolic_flat_padded" else 1
    network = ActorCritic(cfg.network, head_for_space(env.action_space(env_params)), obs_ndim)
    mutate = None
    if cfg.curriculum.kind == "accel":
        mutate = mutate_function(static, env_params)
    num_updates = cfg.loop.total_steps

    def make_ppo(ppo_cfg: PPOConfig, cur_cfg: CurriculumConfig, axis_name=None) -> PPO:
        curriculum = make_curriculum(cur_cfg, sample_level, ppo_cfg.num_envs, mutate_fn=mutate)
        return PPO(
            ppo_cfg,
            env,
            env_params,
            network,
            num_updates=num_updates,
            curriculum=curriculum,
            axis_name=axis_name,
        )

    ppo = make_ppo(cfg.ppo, cfg.curriculum)
    mesh = _mesh(cfg, devices)
    data = mesh.shape["data"]
    if cfg.ppo.num_envs % data:
        raise ConfigError("ppo.num_envs", cfg.ppo.num_envs, f"a multiple of the {data} data shards")
    pretrained = load_pretrained_params(cfg) if cfg.init_from.strip() else None

    def init(key: jax.Array) -> PPOState:
        state = ppo.init(key)
        if pretrained is not None:
            params = jax.tree.map(jnp.asarray, pretrained)
            state = state.replace(params=params, opt_state=ppo.optimizer.init(params))
        return state

    if data == 1:
        return KinetixParts(
            cfg, env, env_params, static, network, ppo, init, ppo.update, mesh, None, files
        )

    local_ppo = dataclasses.replace(cfg.ppo, num_envs=cfg.ppo.num_envs // data)
    sfl = cfg.curriculum.sfl
    local_cur = dataclasses.replace(
        cfg.curriculum,
        sfl=dataclasses.replace(
            sfl, buffer_size=sfl.buffer_size // data, batch_size=sfl.batch_size // data
        ),
    )
    local = make_ppo(local_ppo, local_cur, axis_name="data")
    specs = state_specs(jax.eval_shape(init, jax.random.PRNGKey(0)))
    update = shard_map(local.update, mesh, in_specs=(specs,), out_specs=(specs, PartitionSpec()))

    def state_sharding(abstract):
        return jax.tree.map(lambda _, s: NamedSharding(mesh, s), abstract, state_specs(abstract))

    return KinetixParts(
        cfg, env, env_params, static, network, ppo, init, update, mesh, state_sharding, files
    )


def make_train(cfg: KinetixPPOConfig) -> Callable[[jax.Array], Any]:
    """``train(key) -> (final PPOState, metrics [loop.total_steps])`` as one pure function."""
    return build_parts(cfg).ppo.make_train(cfg.loop.total_steps)


# ---------------------------------------------------------------------------------------------
# Fine-tuning


def load_run_config(run_dir: Path) -> KinetixPPOConfig:
    """The resolved config a run was trained with (``run_dir/config.yaml``)."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise ConfigError("init_from", str(run_dir), "a kinetix-ppo run directory with config.yaml")
    return config_lib.from_dict(KinetixPPOConfig, config_lib.load_yaml(path))


def restore_state(cfg: KinetixPPOConfig, run_dir: Path, build_cfg: KinetixPPOConfig | None = None):
    """The latest checkpointed PPOState of the run in ``run_dir`` (trained with ``cfg``) and its
    step. ``build_cfg`` may differ from ``cfg`` in fields that do not change shapes (e.g. the
    level files) when the original levels are not available here."""
    parts = build_parts(build_cfg or cfg, devices=jax.devices()[:1])
    ck = Checkpointer(Path(run_dir) / "checkpoints", cfg)
    try:
        if ck.latest_step() is None:
            raise FileNotFoundError(f"no checkpoint in {Path(run_dir) / 'checkpoints'}")
        abstract = jax.eval_shape(parts.init, jax.random.PRNGKey(cfg.seed))
        return ck.restore(abstract)
    finally:
        ck.close()


def load_pretrained_params(cfg: KinetixPPOConfig) -> Any:
    """Parameters of the pretrained run ``cfg.init_from`` (checked to be compatible)."""
    run_dir = Path(cfg.init_from).expanduser()
    pre = load_run_config(run_dir)
    checks = {
        "network": (pre.network, cfg.network),
        "env.observation_type": (pre.env.observation_type, cfg.env.observation_type),
        "env.action_type": (pre.env.action_type, cfg.env.action_type),
        "ppo.normalize_obs": (pre.ppo.normalize_obs, cfg.ppo.normalize_obs),
    }
    if cfg.network.kind != "transformer":
        checks["env.size"] = (pre.env.size, cfg.env.size)
    for key, (a, b) in checks.items():
        if a != b:
            raise ConfigError(key, b, f"the pretrained run's value {a!r} (init_from={run_dir})")
    # Shapes depend on the size and the run's own settings, not on which level files were used,
    # so the pretrained run's state is rebuilt on this run's levels when the sizes agree.
    levels = cfg.env.train_levels if pre.env.size == cfg.env.size else pre.env.train_levels
    build = config_lib.replace(pre, **{"env.train_levels": levels, "init_from": "", "mesh.data": 1})
    state, _ = restore_state(pre, run_dir, build)
    return jax.device_get(state.params)


# ---------------------------------------------------------------------------------------------
# Evaluation, GIF, table


def _size_for(level_static: StaticEnvParams, cfg: KinetixPPOConfig) -> str:
    train = static_params_for(cfg)
    if _fits(level_static, train):
        return cfg.env.size
    if cfg.network.kind != "transformer":
        raise ValueError(
            f"a level with {level_static.num_polygons} polygons / {level_static.num_circles} "
            f"circles does not fit env.size={cfg.env.size!r}; only the transformer evaluates on "
            "larger sizes"
        )
    for s in SIZE_ORDER:
        if _fits(level_static, static_params_for(cfg, s)):
            return s
    raise ValueError("level larger than size L")


@dataclasses.dataclass
class EvalGroup:
    """Levels of one static size: names, stacked states, and the env to play them in."""

    names: list[str]
    levels: Any
    env: KinetixEnv
    env_params: Any


def load_eval_groups(cfg: KinetixPPOConfig, spec: str) -> list[EvalGroup]:
    """Evaluation levels grouped by the static size they are played at."""
    files = ev.resolve_level_files(spec)
    by_size: dict[str, list[tuple[str, Any, Any]]] = {}
    for f in files:
        lv = load_level(f)
        size = _size_for(lv.static_params, cfg)
        static = static_params_for(cfg, size)
        state = expand_level(lv.state, lv.static_params, static, source=str(f))
        by_size.setdefault(size, []).append((ev.level_name(f), state, lv.params))
    groups = []
    for size in SIZE_ORDER:
        if size not in by_size:
            continue
        names = [n for n, _, _ in by_size[size]]
        levels = stack_levels([s for _, s, _ in by_size[size]])
        params = _env_params(cfg, by_size[size][0][2])
        env = KinetixEnv(
            static_params_for(cfg, size),
            action_type=cfg.env.action_type,
            observation_type=cfg.env.observation_type,
            level=levels,
            params=params,
        )
        groups.append(EvalGroup(names, levels, env, params))
    return groups


def policy_fn_for(parts: KinetixParts, kind: str = "agent") -> Callable:
    """``policy(params, obs_stats) -> (key, obs [B]) -> actions [B]``: the agent (sampling from
    its policy), ``random`` (the original's random actions) or ``noop``."""
    sp, at = parts.static, parts.cfg.env.action_type
    batch = lambda obs: jax.tree.leaves(obs)[0].shape[0]
    if kind == "random":
        return lambda params, stats: (
            lambda key, obs: jax.vmap(lambda k: random_action(k, at, sp))(
                jax.random.split(key, batch(obs))
            )
        )
    if kind == "noop":
        a = noop_action(at, sp)
        return lambda params, stats: lambda key, obs: jnp.broadcast_to(a, (batch(obs),) + a.shape)
    if kind != "agent":
        raise ValueError(f"policy kind={kind!r}; expected agent, random or noop")

    def make(params, stats):
        return lambda key, obs: parts.ppo.policy(params, stats, obs)[0].sample(seed=key)

    return make


class Evaluator:
    """A run's evaluation levels with one compiled evaluation per (level group, policy kind);
    parameters are arguments, so evaluating a new checkpoint does not recompile."""

    def __init__(self, parts: KinetixParts, spec: str, *, num_attempts: int, max_steps: int):
        self.parts = parts
        self.groups = load_eval_groups(parts.cfg, spec)
        self.num_attempts = num_attempts
        self.max_steps = max_steps
        self.record = parts.cfg.eval.gif_levels
        self._fns: dict[tuple[int, str], Callable] = {}

    def _fn(self, i: int, kind: str) -> Callable:
        if (i, kind) not in self._fns:
            g, make = self.groups[i], policy_fn_for(self.parts, kind)
            record = self.record if i == 0 else 0

            def run(key, levels, params, stats):
                return ev.evaluate_levels(
                    key,
                    make(params, stats),
                    g.env,
                    g.env_params,
                    levels,
                    num_attempts=self.num_attempts,
                    max_steps=self.max_steps,
                    record=record,
                )

            self._fns[(i, kind)] = jax.jit(run)
        return self._fns[(i, kind)]

    def __call__(self, state: PPOState, key: jax.Array, kind: str = "agent"):
        """``(names, LevelResults over all groups, recorded states of the first group)``."""
        names, results, shown = [], [], None
        params, stats = jax.device_get((state.params, state.obs_stats))
        for i, g in enumerate(self.groups):
            key, sub = jax.random.split(key)
            res, rec = jax.device_get(self._fn(i, kind)(sub, g.levels, params, stats))
            results.append(res)
            names += g.names
            shown = rec if i == 0 else shown
        cat = lambda f: np.concatenate([np.asarray(getattr(r, f)) for r in results])
        res = ev.LevelResults(
            solve_rate=cat("solve_rate"),
            mean_return=cat("mean_return"),
            mean_length=cat("mean_length"),
            num_attempts=self.num_attempts,
        )
        return names, res, shown


def write_gif(group: EvalGroup, shown: Any, path: Path) -> None:
    """``path``: recorded states ``[T, G]`` of ``group`` rendered side by side as a GIF."""
    render = jax.jit(jax.vmap(make_render_pixels(group.env.static_params), in_axes=(0, None)))
    steps = jax.tree.leaves(shown)[0].shape[0]
    frames = []
    for t in range(steps):
        imgs = np.asarray(render(jax.tree.map(lambda x, t=t: x[t], shown), group.env_params))
        frames.append(np.concatenate([to_image(im) for im in imgs], axis=1))
    save_gif(path, frames, fps=30)


def build(cfg: KinetixPPOConfig) -> Task:
    parts = build_parts(cfg)
    max_steps = cfg.eval.max_steps or cfg.env.max_timesteps
    cache: list[Evaluator] = []

    def evaluator() -> Evaluator:
        if not cache:
            cache.append(
                Evaluator(
                    parts,
                    eval_level_spec(cfg),
                    num_attempts=cfg.eval.num_attempts,
                    max_steps=max_steps,
                )
            )
        return cache[0]

    last: dict[str, Any] = {}

    def evaluate(state: PPOState) -> dict[str, float]:
        names, res, shown = evaluator()(state, jax.random.PRNGKey(cfg.seed + 1))
        last.update(update=int(jax.device_get(state.update)), out=(names, res, shown))
        s = ev.summary(res)
        if cfg.loop.progress:
            _write(
                f"eval @ update {last['update']}: solve rate {s['solve_rate']:.2f} on "
                f"{len(names)} level(s) x {res.num_attempts} attempts, return {s['return']:.3f}"
            )
        return {"solve_rate": s["solve_rate"], "return": s["return"], "length": s["length"]}

    def finalize(state: PPOState, run_dir: Path) -> None:
        if last.get("update") == int(jax.device_get(state.update)):
            names, res, shown = last["out"]  # the loop's final evaluation of this same state
        else:
            names, res, shown = evaluator()(state, jax.random.PRNGKey(cfg.seed + 1))
        write_table(Path(run_dir), names, res)
        if cfg.eval.gif_levels > 0 and shown is not None:
            write_gif(evaluator().groups[0], shown, Path(run_dir) / "agent.gif")

    return Task(
        init=parts.init,
        train_step=lambda state, batch: parts.train_step(state),
        evaluate=evaluate,
        finalize=finalize,
        units_per_step=(cfg.ppo.num_envs * cfg.ppo.num_steps, "env-step"),
        state_sharding=parts.state_sharding,
    )


def _write(line: str) -> None:
    """Prints a line without breaking the loop's progress bar."""
    from tqdm.auto import tqdm

    tqdm.write(line)


def progress_hooks(cfg: KinetixPPOConfig, run_dir: Path) -> list[Hook]:
    """A one-line training summary every ``loop.log_every`` updates (with ``loop.progress``)."""
    if not cfg.loop.progress or cfg.loop.log_every < 1:
        return []
    per = cfg.ppo.num_envs * cfg.ppo.num_steps

    def show(step: int, state: PPOState, m: dict[str, Any]) -> None:
        _write(
            f"update {step}/{cfg.loop.total_steps}  env steps {step * per:,}  "
            f"train solve rate {float(m['solve_rate']):.2f}  "
            f"return {float(m['episode_return']):.3f}  "
            f"episode length {float(m['episode_length']):.0f}  entropy {float(m['entropy']):.2f}"
        )

    return [Hook(show, cfg.loop.log_every)]


def write_table(run_dir: Path, names: list[str], res: ev.LevelResults) -> None:
    """``eval_levels.txt`` (the printed table) and ``eval_levels.json`` (per level + summary)."""
    (run_dir / "eval_levels.txt").write_text(ev.format_table(names, res) + "\n")
    rows = [
        {
            "level": n,
            "solve_rate": float(res.solve_rate[i]),
            "return": float(res.mean_return[i]),
            "length": float(res.mean_length[i]),
        }
        for i, n in enumerate(names)
    ]
    out = {"levels": rows, "summary": ev.summary(res), "attempts": res.num_attempts}
    (run_dir / "eval_levels.json").write_text(json.dumps(out, indent=1) + "\n")


def eval_main(cfg: KinetixPPOConfig, run_dir: Path, argv: list[str]) -> int:
    """``jaxlab eval kinetix-ppo --run-dir DIR [--levels SPEC] [--attempts K] [--seed S]
    [--baselines]``: prints the per-level solve table of the latest checkpoint."""
    p = argparse.ArgumentParser(prog="jaxlab eval kinetix-ppo")
    p.add_argument("--levels", default=None, help="level spec (default: the run's eval levels)")
    p.add_argument("--attempts", type=int, default=cfg.eval.num_attempts)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--baselines", action="store_true", help="also random and no-op policies")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = p.parse_args(argv)
    if args.attempts < 1:
        raise ConfigError("--attempts", args.attempts, "an integer >= 1")
    spec = args.levels or eval_level_spec(cfg)
    try:
        ev.resolve_level_files(spec)
    except ValueError as e:
        raise ConfigError("--levels", spec, str(e)) from None
    state, step = restore_state(cfg, run_dir)
    parts = build_parts(cfg, devices=jax.devices()[:1])
    max_steps = cfg.eval.max_steps or cfg.env.max_timesteps
    try:
        evaluator = Evaluator(parts, spec, num_attempts=args.attempts, max_steps=max_steps)
    except ValueError as e:
        raise ConfigError("--levels", spec, str(e)) from None
    key = jax.random.PRNGKey(args.seed)
    names, res, _ = evaluator(state, key)
    extra = {}
    if args.baselines:
        for kind in ("random", "noop"):
            extra[kind] = evaluator(state, key, kind)[1].solve_rate
    if args.json:
        out = {
            "step": step,
            "levels": {n: float(res.solve_rate[i]) for i, n in enumerate(names)},
            "summary": ev.summary(res),
        }
        out.update({f"{k}_solve_rate": float(np.mean(v)) for k, v in extra.items()})
        print(json.dumps(out))
    else:
        print(f"checkpoint step {step} of {run_dir}")
        print(ev.format_table(names, res, extra=extra))
    return 0


RECIPE = register(
    Recipe(
        name="kinetix-ppo",
        config_cls=KinetixPPOConfig,
        build=build,
        description="Kinetix general agent: PPO + entity transformer, SFL/PLR curricula, fine-tuning",
        presets_dir=Path(__file__).parent / "presets" / "kinetix-ppo",
        default_preset="cpu-single",
        eval_main=eval_main,
        hooks=progress_hooks,
    )
)
