"""Training D-TSN and its baselines from oracle demonstrations, and held-out evaluation.

One :class:`LearnerConfig` describes a run on ``"maze"`` (``grid-maze``, learned latent world
model) or ``"game24"`` (known model, learned value) with ``method``:

* ``"dtsn"``: the D-TSN objective (``dtsn.dtsn_loss``: root-Q cross-entropy through a stochastic
  best-first search, latent/reward consistency, REINFORCE with the telescoping baseline);
* ``"fixed"``: the same networks and losses, but the search expands breadth-first (a fixed,
  non-learned expansion policy; no REINFORCE term);
* ``"bc"``: behaviour cloning with the same encoder and (matched) parameter count.

Data: ``num_demos`` oracle episodes (BFS shortest paths / the stored solutions of training Game
of 24 instances, drawn uniformly), flattened to transitions; every step draws a batch uniformly
with the key kept in the state, so a run is a pure function of its config and seed (bit-identical
resume). Evaluation plays greedy episodes on held-out layouts (maze keys disjoint from the
training ones) or held-out instances (a fixed 20 % split of the solvable pool): success rate and,
for mazes, the ratio of steps taken to the BFS optimum on solved episodes.

The optimiser is a :class:`jaxlab.core.optim.OptimConfig` (default :data:`OPTIM`: global-norm
clipping at 10, then Adam at 1e-3); its learning rate is traced (``LearnerState.hparams``, keyed
``optim.lr``), so a sweep over it is one program.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray

from jaxlab.core import optim as optim_lib
from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig
from jaxlab.envs import demonstrations as demos_lib
from jaxlab.envs import game24, grid_maze
from jaxlab.rl.search import bc, dtsn, models

#: the learner's optimiser: global-norm clipping at 10, then Adam at 1e-3
OPTIM = OptimConfig(name="adam", lr=1e-3, clip_norm=10.0)

#: the traced hyper-parameters (keys of ``LearnerState.hparams``; recipes hold the optimiser at
#: ``optim``): the learning rate (the update rule has no weight decay)
TRACED: tuple[str, ...] = ("optim.lr",)


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """Static configuration of one D-TSN / baseline run.

    Attributes:
        env: ``"maze"`` or ``"game24"``.
        method: ``"dtsn"``, ``"fixed"`` (breadth-first search) or ``"bc"``.
        height, width: training maze grid size (with the border wall); for
            ``layout="perfect"`` the largest one.
        wall_prob: maze interior wall probability (``layout="random"``).
        layout: ``"random"`` (independent walls) or ``"perfect"`` (Procgen-style perfect mazes
            of per-layout size, ``grid_maze.generate_perfect``).
        min_size: ``layout="perfect"``: the smallest side drawn (0: always the largest).
        observation: ``"symbolic"`` (wall, agent, goal planes) or ``"pixels"`` (RGB,
            ``cell_pixels`` per cell).
        map_height, map_width: the static map every maze is embedded in (extra cells are walls;
            0: the training size); the networks' input has its shape.
        eval_height, eval_width: held-out maze size of the second evaluation (0: the training
            size, no second evaluation), e.g. 1.5-2x the training size; at most the map size.
        num_demos: demonstration episodes (training layouts / instances).
        demo_length: steps per demonstration episode (longer ones are cut).
        num_expansions: ``K``.
        temperature: ``T`` of the expansion policy.
        gamma: discount.
        latent_dim, hidden, channels: network sizes (maze); ``hidden`` is the value MLP width
            for Game of 24.
        maze_model: ``"vector"`` (CNN encoder to a ``latent_dim`` vector, MLP transition) or
            ``"spatial"`` (the latent is a ``[H, W, channels]`` map, convolutional transition;
            ``models.SpatialMazeWorldModel``); BC uses the same encoder either way.
        latent_weight, reward_weight: consistency-loss weights (maze; 0 for the known model).
        batch_size: transitions per step.
        eval_episodes: held-out episodes (maze) per evaluation; Game of 24 uses every held-out
            instance.
        eval_max_steps: step limit of a maze evaluation episode.
        holdout_fraction: Game of 24 instances held out.
    """

    env: str = "maze"  # "maze" | "game24" (checked in __post_init__: ConfigError)
    method: str = "dtsn"  # "dtsn" | "fixed" | "bc"
    height: int = 8
    width: int = 8
    wall_prob: float = 0.3
    layout: str = "random"  # "random" | "perfect"
    min_size: int = 0
    observation: str = "symbolic"  # "symbolic" | "pixels"
    cell_pixels: int = 4
    map_height: int = 0
    map_width: int = 0
    eval_height: int = 0
    eval_width: int = 0
    num_demos: int = 500
    demo_length: int = 32
    num_expansions: int = 10
    temperature: float = 1.0
    gamma: float = 0.9
    latent_dim: int = 32
    hidden: int = 64
    channels: int = 16
    maze_model: str = "vector"  # "vector" | "spatial"
    latent_weight: float = 0.01
    reward_weight: float = 0.1
    batch_size: int = 64
    eval_episodes: int = 200
    eval_max_steps: int = 48
    holdout_fraction: float = 0.2

    def __post_init__(self):
        if self.observation not in ("symbolic", "pixels"):
            raise ConfigError("observation", self.observation, "'symbolic' or 'pixels'")
        if self.maze_model not in ("vector", "spatial"):
            raise ConfigError("maze_model", self.maze_model, "'vector' or 'spatial'")
        if self.env not in ("maze", "game24"):
            raise ConfigError("env", self.env, "'maze' or 'game24'")
        if self.method not in ("dtsn", "fixed", "bc"):
            raise ConfigError("method", self.method, "'dtsn', 'fixed' or 'bc'")
        for name in ("num_demos", "demo_length", "batch_size", "eval_episodes", "eval_max_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(name, v, "an int >= 1")
        for name in ("latent_dim", "hidden", "channels"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an int >= 1")
        if not 0.0 < self.holdout_fraction < 1.0:
            raise ConfigError("holdout_fraction", self.holdout_fraction, "a float in (0, 1)")
        self.search_config()  # validates K, T, gamma
        self.loss_config()  # validates the consistency-loss weights
        if self.env == "maze":
            maze_env(self)  # validates height, width, wall_prob, the map and eval_max_steps
            for name in ("eval_height", "eval_width"):
                v = getattr(self, name)
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise ConfigError(name, v, "0 (the training size) or an int >= 4")
            eh, ew = self.eval_shape
            mh, mw = self.map_height or self.height, self.map_width or self.width
            grid_maze.check_map_size(eh, ew, mh, mw, prefix="eval_")
            maze_env(self, eval_size=True)  # the held-out size's own checks (>= 4, min_size)

    @property
    def eval_shape(self) -> tuple[int, int]:
        """``(height, width)`` of the second held-out evaluation."""
        return (self.eval_height or self.height, self.eval_width or self.width)

    @property
    def num_actions(self) -> int:
        return grid_maze.NUM_ACTIONS if self.env == "maze" else game24.NUM_ACTIONS

    def search_config(self) -> dtsn.SearchConfig:
        return dtsn.SearchConfig(
            num_expansions=self.num_expansions,
            num_actions=self.num_actions,
            gamma=self.gamma,
            temperature=self.temperature,
            expansion="breadth_first" if self.method == "fixed" else "best_first",
        )

    def loss_config(self) -> dtsn.LossConfig:
        known = self.env == "game24"
        return dtsn.LossConfig(
            latent_weight=0.0 if known else self.latent_weight,
            reward_weight=0.0 if known else self.reward_weight,
        )


@flax.struct.dataclass
class LearnerState:
    """Train state: ``params``, the optimiser's ``opt_state``, the step's PRNG ``key``, ``step``
    count, the demonstration ``data`` (transitions, fixed during the run) and the traced
    ``hparams`` (:data:`TRACED` -> float32 scalar)."""

    params: Any
    opt_state: Any
    key: PRNGKeyArray
    step: Int[Array, ""]
    data: dtsn.Transitions
    hparams: dict[str, Array] = flax.struct.field(default_factory=dict)


def maze_env(cfg: LearnerConfig, eval_size: bool = False):
    """The grid-maze env (no auto-reset) and params of a config: training layouts, or with
    ``eval_size`` those of the held-out size (the same map, so either plays any layout)."""
    height, width = cfg.eval_shape if eval_size else (cfg.height, cfg.width)
    return grid_maze.make_grid_maze(
        height=height,
        width=width,
        observation_type=cfg.observation,
        cell_pixels=cfg.cell_pixels,
        wall_prob=cfg.wall_prob,
        max_steps=cfg.eval_max_steps,
        auto_reset=False,
        layout=cfg.layout,
        min_size=cfg.min_size,
        map_height=cfg.map_height or cfg.height,
        map_width=cfg.map_width or cfg.width,
    )


def _game24_pools(cfg: LearnerConfig):
    """``(train instances, their stored solutions, held-out instances)``."""
    inst, sol = game24.solvable_instances(), game24.stored_solutions()
    rows = np.arange(len(inst))
    train, held = game24.split_instances(rows, cfg.holdout_fraction, seed=0)
    return inst[train], sol[train], inst[held]


@functools.cache
def networks(cfg: LearnerConfig):
    """``(module, example_obs)`` of the config's method (BC width matched to D-TSN's count)."""
    if cfg.env == "maze":
        space = maze_env(cfg)[0].observation_space()
        obs = np.zeros(space.shape, space.dtype)  # numpy: cached outside traces
        na = grid_maze.NUM_ACTIONS
        if cfg.maze_model == "spatial":
            wm = models.SpatialMazeWorldModel(na, cfg.hidden, cfg.channels)
            make_bc = lambda w: models.SpatialMazeBC(na, w, cfg.channels)  # noqa: E731
        else:
            wm = models.MazeWorldModel(na, cfg.latent_dim, cfg.hidden, cfg.channels)
            make_bc = lambda w: models.MazeBC(na, cfg.latent_dim, w, cfg.channels)  # noqa: E731
        if cfg.method != "bc":
            return wm, obs
        target = models.param_count(jax.eval_shape(wm.init, jax.random.key(0), obs))

        def count(w):
            return models.param_count(jax.eval_shape(make_bc(w).init, jax.random.key(0), obs))

        return make_bc(models.matched_width(count, target)), obs
    obs = np.zeros((8,), np.float32)
    value = models.Game24Value(cfg.hidden)
    if cfg.method != "bc":
        return value, obs
    target = models.param_count(jax.eval_shape(value.init, jax.random.key(0), obs[:4], obs[4:] > 0))

    def count(w):
        return models.param_count(jax.eval_shape(models.Game24BC(w).init, jax.random.key(0), obs))

    return models.Game24BC(models.matched_width(count, target)), obs


def search_model(cfg: LearnerConfig) -> dtsn.SearchModel:
    net, _ = networks(cfg)
    if cfg.env == "maze":
        return models.maze_search_model(net)
    return models.game24_search_model(net)


def make_demonstrations(key: PRNGKeyArray, cfg: LearnerConfig) -> dtsn.Transitions:
    """``num_demos`` oracle episodes on training layouts / instances, as masked transitions."""
    if cfg.env == "maze":
        env, params = maze_env(cfg)
        policy = demos_lib.maze_oracle_policy
        length = cfg.demo_length
        d = demos_lib.oracle_demonstrations(
            key, env, params, policy, num_episodes=cfg.num_demos, length=length
        ).transitions()
    else:
        inst, sol, _ = _game24_pools(cfg)
        env, params = game24.make_game24(instances=inst, auto_reset=False)
        starts = jax.vmap(env.init_state)(jnp.asarray(inst))
        d = demos_lib.replay_demonstrations(
            key, env, params, starts, jnp.asarray(sol), num_episodes=cfg.num_demos
        ).transitions()
    return dtsn.Transitions(
        obs=d.obs,
        action=d.action,
        reward=d.reward,
        next_obs=d.next_obs,
        weight=d.mask.astype(jnp.float32),
    )


def optimizer(
    optim: OptimConfig, total_steps: int, hparams: dict[str, Array] | None = None
) -> optax.GradientTransformation:
    """``optim``'s transformation for a run of ``total_steps`` steps, its learning rate read from
    ``hparams`` (traced; default ``optim.lr``)."""
    return optim_lib.from_hparams(optim, total_steps, hparams or {})


def init(
    key: PRNGKeyArray, cfg: LearnerConfig, *, optim: OptimConfig = OPTIM, total_steps: int = 1
) -> LearnerState:
    """Demonstrations (from a key split off ``key``), parameters, the state of ``optim`` (for a
    run of ``total_steps`` steps) and the traced hyper-parameters."""
    k_data, k_params, k_run = jax.random.split(key, 3)
    data = make_demonstrations(k_data, cfg)
    net, obs = networks(cfg)
    obs = jnp.asarray(obs)  # an example observation (NumPy) -> the array the model is given
    if cfg.env == "game24" and cfg.method != "bc":
        params = net.init(k_params, obs[:4], obs[4:] > 0)
    else:
        params = net.init(k_params, obs)
    return LearnerState(
        params=params,
        opt_state=optimizer(optim, total_steps).init(params),
        key=k_run,
        step=jnp.zeros((), jnp.int32),
        data=data,
        hparams={"optim.lr": jnp.float32(optim.lr)},
    )


def sample_batch(key: PRNGKeyArray, data: dtsn.Transitions, batch_size: int) -> dtsn.Transitions:
    """A uniform batch of real (weight > 0) transitions, drawn with replacement."""
    idx = jax.random.choice(
        key, data.weight.shape[0], (batch_size,), p=data.weight / jnp.sum(data.weight)
    )
    return jax.tree.map(lambda x: x[idx], data)


def objective(key, params, batch: dtsn.Transitions, cfg: LearnerConfig):
    """The method's loss: ``dtsn_loss`` (``dtsn``/``fixed``) or ``bc_loss``."""
    if cfg.method == "bc":
        net, _ = networks(cfg)
        return bc.bc_loss(params, batch, net.apply)
    return dtsn.dtsn_loss(
        key,
        params,
        batch,
        model=search_model(cfg),
        config=cfg.search_config(),
        loss=cfg.loss_config(),
    )


def train_step(
    state: LearnerState,
    cfg: LearnerConfig,
    constrain: Callable[[Array], Array] | None = None,
    *,
    optim: OptimConfig = OPTIM,
    total_steps: int = 1,
) -> tuple[LearnerState, dict[str, Array]]:
    """One step of ``optim`` (a run of ``total_steps`` steps; rate from ``state.hparams``) on
    ``jax.grad`` of the method's objective. ``constrain`` (e.g. ``lambda x:
    jaxlab.core.sharding.constrain_leading(x, mesh)``) places every leaf of the sampled batch, so
    the step runs data parallel."""
    key, k_batch, k_search = jax.random.split(state.key, 3)
    batch = sample_batch(k_batch, state.data, cfg.batch_size)
    if constrain is not None:
        batch = jax.tree.map(constrain, batch)
    grads, metrics = jax.grad(lambda p: objective(k_search, p, batch, cfg), has_aux=True)(
        state.params
    )
    tx = optimizer(optim, total_steps, state.hparams)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics["grad_norm"] = optax.global_norm(grads)
    new = state.replace(params=params, opt_state=opt_state, key=key, step=state.step + 1)
    return new, metrics


def act(params, obs, cfg: LearnerConfig) -> Int[Array, ""]:
    """The evaluation policy for one observation: greedy search's arg max Q, or BC's arg max."""
    if cfg.method == "bc":
        net, _ = networks(cfg)
        return bc.bc_action(params, obs, net.apply)
    search_cfg = dataclasses.replace(cfg.search_config())
    return dtsn.greedy_action(params, obs, model=search_model(cfg), config=search_cfg)


def heldout_mazes(
    key: PRNGKeyArray, cfg: LearnerConfig, num: int, eval_size: bool = False
) -> grid_maze.Maze:
    """``num`` layouts from keys folded away from the training ones (unseen layouts), of the
    training size or (``eval_size``) of the held-out size, in the map."""
    keys = jax.random.split(jax.random.fold_in(key, 0x5EED), num)
    env, params = maze_env(cfg, eval_size)
    return jax.vmap(lambda k: env.sample_maze(k, params))(keys)


def maze_episodes(params, mazes: grid_maze.Maze, cfg: LearnerConfig):
    """Greedy episodes on ``mazes``: ``(solved [M], steps [M], optimal [M])``."""
    env, env_params = maze_env(cfg)

    def one(maze):
        state = env.state_from_maze(maze)
        optimal = grid_maze.distances(maze.walls, maze.goal)[maze.start[0], maze.start[1]]

        def body(carry, _):
            s, done, steps = carry
            a = act(params, env.get_obs(s, env_params), cfg)
            _, s2, _, term, _, _ = env.step_env(jax.random.key(0), s, a, env_params)
            s2 = jax.tree.map(lambda x, y: jnp.where(done, x, y), s, s2)
            return (s2, done | term, steps + (~done).astype(jnp.int32)), s.pos

        (_, solved, steps), path = jax.lax.scan(
            body, (state, jnp.asarray(False), jnp.int32(0)), None, length=cfg.eval_max_steps
        )
        return solved, steps, optimal

    return jax.vmap(one)(mazes)


def game24_episodes(params, instances: Int[Array, "P 4"], cfg: LearnerConfig):
    """Greedy episodes on ``instances``: ``solved [P]``."""
    env, env_params = game24.make_game24(instances=np.zeros((1, 4), np.int32) + 1)

    def one(inst):
        s = env.init_state(inst)
        total = jnp.float32(0.0)
        for _ in range(3):
            a = act(params, env.get_obs(s, env_params), cfg)
            _, s2, r, term, _, _ = env.step_env(jax.random.key(0), s, a, env_params)
            total = total + r
            s = s2
        return total > 0

    return jax.vmap(one)(instances)


def evaluate(key: PRNGKeyArray, params, cfg: LearnerConfig) -> dict[str, Float[Array, ""]]:
    """Held-out success rate (and maze path-length ratio to the BFS optimum on solved episodes);
    mazes of a different held-out size (``eval_height``/``eval_width``) add
    ``eval_size_success_rate`` and ``eval_size_path_length_ratio``."""
    if cfg.env == "maze":
        out = {}
        sizes = [("", False)]
        if cfg.eval_shape != (cfg.height, cfg.width):
            sizes.append(("eval_size_", True))
        for prefix, eval_size in sizes:
            solved, steps, optimal = maze_episodes(
                params, heldout_mazes(key, cfg, cfg.eval_episodes, eval_size), cfg
            )
            found = jnp.maximum(jnp.sum(solved), 1)
            out[prefix + "success_rate"] = jnp.mean(solved)
            out[prefix + "path_length_ratio"] = (
                jnp.sum(jnp.where(solved, steps / optimal, 0.0)) / found
            )
        return out
    held = jnp.asarray(_game24_pools(cfg)[2])
    solved = game24_episodes(params, held, cfg)
    return {"success_rate": jnp.mean(solved), "path_length_ratio": jnp.float32(1.0)}


def make_train(cfg: LearnerConfig, num_steps: int, *, optim: OptimConfig = OPTIM):
    """``train(key) -> (state, metrics [num_steps])``: a whole run of ``optim`` as one pure
    function (vmappable over seeds)."""
    run = dict(optim=optim, total_steps=num_steps)

    def train(key):
        state = init(key, cfg, **run)
        return jax.lax.scan(lambda s, _: train_step(s, cfg, **run), state, None, length=num_steps)

    return train
