"""``planner``: Diffusion Planner (``jaxlab.diffusion.planner``) trained on expert logs of the
driving world (``jaxlab.envs.driving``) and evaluated in closed loop.

Data: the rule-based expert (route choice with known proportions, IDM speed control) is rolled out
on ``n_scenes`` procedurally generated scenes (:func:`jaxlab.envs.driving.evaluation.expert_logs`);
every step of every rollout is a sample (scene tokens, the agents' logged futures). The logs are
made once on the host, when the data iterator is first created (so building or lowering the recipe
stays cheap; cached per world and size, so runs differing only in mesh or optimiser share them), and
served by a grain loader (shuffled, repeated, batched; its position is checkpointed with the run):
the batch is an input of the train step, split over the mesh's data axes (parameters replicated),
never a constant of the compiled program. Training: the ego state perturbation of the original
(:mod:`jaxlab.envs.driving.perturbation`: half the samples re-planned from a perturbed current
state, so the planner learns to recover from its own closed-loop drift), the x_0 loss with neighbour
validity masks, AdamW with a linear warm-up then a constant rate (with an optional linear decay
tail, ``decay_fraction``) or (``lr_schedule: cosine``) a cosine decay to zero at
``loop.total_steps``, all scaled by the traced ``lr``; EMA of the weights used for sampling.

Evaluation: open-loop ADE/FDE of the sampled ego plans against held-out expert logs and the
closed-loop score (:mod:`jaxlab.envs.driving.evaluation`) of the guided planner on ``eval_scenes``
scenes of ``eval_steps`` steps at 10 Hz. ``jaxlab eval planner --run-dir DIR`` prints the
closed-loop table of the expert, the constant-velocity planner and the diffusion planner without and
with guidance, and writes ``planner.gif`` (sampled plans and neighbour predictions on a few scenes).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
from pathlib import Path
from typing import Any, Literal

import flax.struct
import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.core.run import batch_spec
from jaxlab.core.sharding import MeshConfig
from jaxlab.diffusion import planner as pl
from jaxlab.envs.driving import DrivingStatic, DrivingWorld, make_driving
from jaxlab.envs.driving import evaluation as de
from jaxlab.envs.driving.perturbation import StatePerturbation, perturb_ego_state

TRACED: tuple[str, ...] = ("lr",)


@dataclasses.dataclass(frozen=True)
class PlannerRecipeConfig:
    """Attributes:
    model: the planner (sizes, sampler, guidance; its capacities match the world's).
    scene_type, route_visible: the world's scenes (-1: all three types) and whether the planner
        sees the ego's route lane.
    n_scenes, log_steps: expert rollouts and the samples taken from each (training data).
    augment: the ego state perturbation of the training samples (the original's
        ``StatePerturbation``; ``augment.prob`` 0 turns it off).
    batch_size, lr, warmup_steps, weight_decay, ema_decay: optimisation.
    lr_schedule: after the warm-up, ``constant`` (the default) or ``cosine`` (decays to 0 at
        ``loop.total_steps``). Measured on the hidden-route intersection run (4096 scenes, 18000
        steps): cosine ends at a lower loss but leans neighbour 0's samples further to straight
        (40.8 % vs about 38 % at a constant rate, ``benchmarks/results/planner_cpu.jsonl``), so it
        is not the default.
    decay_fraction: with ``constant``, the last ``decay_fraction`` of ``loop.total_steps`` takes
        the rate linearly to 0 (warm-up, stable, decay: Hagele et al. 2024). 0 (the default)
        never decays. A float, so that a resumed run can be given a decay tail
        (``--allow-change decay_fraction`` with ``loop.total_steps`` raised).
    static_scene_weight: the loss weight of a training scene with a static obstacle (a parked
        car: any ``static_valid``) relative to one without (``planner_loss``'s ``scene_weight``);
        1 (the default) weighs all scenes alike. A float, so that a resumed run can change it
        (``--allow-change static_scene_weight``).
    eval_scenes, eval_steps: closed-loop evaluation size.
    gif_scenes: scenes of the closed-loop GIF ``finalize`` writes (0: none).
    """

    seed: int = 0
    model: pl.PlannerConfig = pl.PlannerConfig()
    scene_type: int = -1
    route_visible: bool = True
    n_scenes: int = 256
    log_steps: int = 30
    augment: StatePerturbation = StatePerturbation()
    batch_size: int = 256
    lr: float = 5e-4
    warmup_steps: int = 100
    lr_schedule: Literal["constant", "cosine"] = "constant"
    decay_fraction: float = 0.0
    weight_decay: float = 1e-4
    ema_decay: float = 0.999
    static_scene_weight: float = 1.0
    eval_scenes: int = 32
    eval_steps: int = 50
    gif_scenes: int = 2
    mesh: MeshConfig = MeshConfig()
    loop: LoopConfig = LoopConfig(total_steps=2000, steps_per_call=50, log_every=100)

    def __post_init__(self):
        for name in ("n_scenes", "log_steps", "batch_size", "eval_scenes", "eval_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(name, v, "a positive int")
        if self.scene_type not in (-1, 0, 1, 2):
            raise ConfigError("scene_type", self.scene_type, "-1, 0, 1 or 2")
        if not self.lr > 0:
            raise ConfigError("lr", self.lr, "a float > 0")
        if not self.static_scene_weight > 0:
            raise ConfigError("static_scene_weight", self.static_scene_weight, "a float > 0")
        if self.lr_schedule not in ("constant", "cosine"):
            raise ConfigError("lr_schedule", self.lr_schedule, "'constant' or 'cosine'")
        if not 0.0 <= self.decay_fraction < 1.0:
            raise ConfigError("decay_fraction", self.decay_fraction, "a float in [0, 1)")
        if self.decay_fraction and self.lr_schedule != "constant":
            raise ConfigError(
                "decay_fraction", self.decay_fraction, "0 unless lr_schedule is 'constant'"
            )


@flax.struct.dataclass
class PlannerState:
    params: Any
    ema_params: Any
    opt_state: Any
    key: jax.Array
    step: jax.Array
    hparams: dict[str, jax.Array] = flax.struct.field(default_factory=dict)


def world(cfg: PlannerRecipeConfig) -> tuple[DrivingWorld, Any]:
    """The driving world whose capacities match the planner's."""
    m = cfg.model
    env, params = make_driving(
        auto_reset=False,
        scene_type=cfg.scene_type,
        route_visible=cfg.route_visible,
        n_neighbours=m.n_neighbours,
        horizon=m.horizon,
        history=m.history,
    )
    sp = env.static
    want = DrivingStatic(
        n_neighbours=m.n_neighbours,
        n_static=m.n_static,
        n_lanes=m.n_lanes,
        lane_points=m.lane_points,
        history=m.history,
        horizon=m.horizon,
    )
    if sp != want:
        raise ConfigError("model", (m.n_static, m.n_lanes, m.lane_points), f"capacities of {sp}")
    return env, params


def expert_data(cfg: PlannerRecipeConfig, split: str = "train") -> dict[str, np.ndarray]:
    """Expert logs of the run's world as host (NumPy) arrays, ``split`` "train" (``n_scenes``
    rollouts) or "valid" (``max(eval_scenes, 8)`` rollouts of other scenes). Cached on the fields
    that define them, so runs differing only in mesh or optimiser share them; both splits share
    one compiled generator when their sizes agree."""
    m = cfg.model
    sizes = (m.n_neighbours, m.n_static, m.n_lanes, m.lane_points, m.history, m.horizon)
    seed = cfg.seed if split == "train" else cfg.seed + 10_000
    n = cfg.n_scenes if split == "train" else max(cfg.eval_scenes, 8)
    return _expert_data(sizes, cfg.scene_type, cfg.route_visible, n, cfg.log_steps, seed)


@functools.cache
def _expert_data(sizes, scene_type, route_visible, n_scenes, log_steps, seed):
    gen = _expert_generator(sizes, scene_type, route_visible, n_scenes, log_steps)
    logs = jax.device_get(gen(jax.random.PRNGKey(seed)))
    pl.check_finite("future", logs["future"])
    return logs


@functools.cache
def _expert_generator(sizes, scene_type, route_visible, n_scenes, log_steps):
    """The jitted ``key -> expert logs`` of one world and size (compiled once per process)."""
    n_nb, _, _, _, history, horizon = sizes
    env, params = make_driving(
        auto_reset=False,
        scene_type=scene_type,
        route_visible=route_visible,
        n_neighbours=n_nb,
        horizon=horizon,
        history=history,
    )
    return jax.jit(lambda k: de.expert_logs(k, env, params, n_scenes=n_scenes, steps=log_steps))


BATCH_KEYS: tuple[str, ...] = (*pl.SCENE_KEYS, "future")


def abstract_batch(cfg: PlannerRecipeConfig, mesh: jax.sharding.Mesh) -> dict:
    """One step's global batch (scene tokens and ``future``), split over the mesh's data axes."""
    shapes = cfg.model.input_shapes()
    m = cfg.model
    shapes["future"] = (1 + m.n_neighbours, m.horizon, 4)
    example = {
        k: jax.ShapeDtypeStruct(
            (cfg.batch_size,) + shapes[k], np.bool_ if k.endswith("_valid") else np.float32
        )
        for k in BATCH_KEYS
    }
    return batch_spec(example, mesh)


def train_iterator(
    cfg: PlannerRecipeConfig, *, shard_index: int = 0, shard_count: int = 1
) -> grain.DatasetIterator:
    """Checkpointable iterator of training batches: the expert samples (this host's shard)
    shuffled with the run's seed, repeated, ``batch_size // shard_count`` indices per batch, then
    gathered (``{key: array[indices]}`` for :data:`BATCH_KEYS`)."""
    if cfg.batch_size % shard_count:
        raise ConfigError("batch_size", cfg.batch_size, f"a multiple of the {shard_count} hosts")
    data = expert_data(cfg)
    n = data["future"].shape[0]

    def gather(idx: np.ndarray) -> dict[str, np.ndarray]:
        return {k: data[k][idx] for k in BATCH_KEYS}

    ds = grain.MapDataset.range(n)[shard_index::shard_count].shuffle(seed=cfg.seed).repeat()
    ds = ds.batch(cfg.batch_size // shard_count, drop_remainder=True).map(gather)
    return iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)))


def scene_of(batch: dict) -> dict:
    return {k: batch[k] for k in pl.SCENE_KEYS}


def lr_unit(cfg: PlannerRecipeConfig) -> optax.Schedule:
    """The learning-rate multiplier per step (warm-up, then constant or cosine to 0; a constant
    rate's last ``decay_fraction`` of the steps decays linearly to 0)."""
    warmup = max(cfg.warmup_steps, 1)
    if cfg.lr_schedule == "cosine":
        total = max(cfg.loop.total_steps, warmup + 1)
        return optax.warmup_cosine_decay_schedule(0.0, 1.0, warmup, total, end_value=0.0)
    up = optax.linear_schedule(0.0, 1.0, warmup)
    if not cfg.decay_fraction:
        return up
    decay = max(int(round(cfg.decay_fraction * cfg.loop.total_steps)), 1)
    start = max(cfg.loop.total_steps - decay, warmup)
    down = optax.linear_schedule(1.0, 0.0, max(cfg.loop.total_steps - start, 1))
    return optax.join_schedules([up, down], [start])


def scene_weights(cfg: PlannerRecipeConfig, scene: dict) -> jax.Array | None:
    """The training scenes' loss weights (``static_scene_weight`` where a static obstacle is
    present, 1 elsewhere), or None when all weigh alike."""
    if cfg.static_scene_weight == 1.0:
        return None
    parked = jnp.any(scene["static_valid"], -1)
    return jnp.where(parked, cfg.static_scene_weight, 1.0).astype(jnp.float32)


def _optimizer(cfg: PlannerRecipeConfig, lr):
    unit = lr_unit(cfg)
    return optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(lambda c: lr * unit(c), weight_decay=cfg.weight_decay),
    )


def dummy_scene(cfg: pl.PlannerConfig, batch: int = 1) -> dict:
    shapes = cfg.input_shapes()
    return {
        k: jnp.zeros((batch,) + s, bool if k.endswith("_valid") else jnp.float32)
        for k, s in shapes.items()
    }


def planner_plan_fn(cfg: pl.PlannerConfig, params, guidance=None):
    """A closed-loop ``plan_fn(key, obs, state)`` sampling the ego plan with the planner."""

    def plan_fn(key, obs, state):
        del state
        traj = pl.sample_trajectories(params, key, scene_of(obs), cfg, guidance=guidance)
        return traj[:, 0]

    return plan_fn


def build(cfg: PlannerRecipeConfig, mesh: jax.sharding.Mesh) -> Parts:
    m = cfg.model

    def init(key):
        kp, kk = jax.random.split(key)
        params = pl.init_planner(kp, m, dummy_scene(m))
        return PlannerState(
            params=params,
            ema_params=params,
            opt_state=_optimizer(cfg, cfg.lr).init(params),
            key=kk,
            step=jnp.zeros((), jnp.int32),
            hparams={"lr": jnp.float32(cfg.lr)},
        )

    def train_step(state: PlannerState, b: dict):
        key, kl, ka = jax.random.split(state.key, 3)
        opt = _optimizer(cfg, state.hparams["lr"])
        scene, future = perturb_ego_state(ka, scene_of(b), b["future"], cfg.augment, dt=m.dt)
        (loss, aux), grads = jax.value_and_grad(pl.planner_loss, has_aux=True)(
            state.params, kl, scene, future, m, scene_weight=scene_weights(cfg, scene)
        )
        updates, opt_state = opt.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        k = state.step.astype(jnp.float32)
        decay = jnp.minimum(cfg.ema_decay, (1.0 + k) / (10.0 + k))
        ema = optax.incremental_update(params, state.ema_params, 1.0 - decay)
        new = state.replace(
            params=params, ema_params=ema, opt_state=opt_state, key=key, step=state.step + 1
        )
        return new, {**aux, "grad_norm": optax.global_norm(grads)}

    def evaluate(state: PlannerState) -> dict[str, float]:
        return evaluate_run(cfg, state.ema_params, planners=("diffusion",))

    def finalize(state: PlannerState, run_dir: Path) -> None:
        if cfg.gif_scenes > 0:
            write_gif(
                cfg, state.ema_params, run_dir / "planner.gif", n_scenes=cfg.gif_scenes, steps=20
            )

    return Parts(
        init=init,
        train_step=train_step,
        abstract_batch=abstract_batch(cfg, mesh),
        data=lambda: train_iterator(
            cfg, shard_index=jax.process_index(), shard_count=jax.process_count()
        ),
        evaluate=evaluate,
        finalize=finalize,
        units_per_step=(cfg.batch_size, "ex"),
    )


def evaluate_run(
    cfg: PlannerRecipeConfig,
    params,
    *,
    planners: tuple[str, ...] = ("expert", "constant_velocity", "unguided", "diffusion"),
    seed: int = 1,
    n_scenes: int | None = None,
    steps: int | None = None,
) -> dict[str, float]:
    """Open-loop ADE/FDE (held-out expert logs) and closed-loop metrics of each planner:
    ``expert``, ``constant_velocity``, ``unguided`` (diffusion, no guidance) and ``diffusion``
    (with the config's guidance). Keys ``<planner>/<metric>``."""
    m = cfg.model
    env, params_w = world(cfg)
    n = cfg.eval_scenes if n_scenes is None else n_scenes
    t = cfg.eval_steps if steps is None else steps
    key = jax.random.PRNGKey(seed)
    held = expert_data(cfg, "valid")
    k = min(256, held["future"].shape[0])
    sc = {kk: v[:k] for kk, v in held.items() if kk in pl.SCENE_KEYS}
    traj = jax.jit(lambda p, key, s: pl.sample_trajectories(p, key, s, m))(params, key, sc)
    ade, fde = de.ade_fde(traj[:, 0], jnp.asarray(held["future"][:k, 0]))
    out = {"open_loop/ade": float(ade), "open_loop/fde": float(fde)}

    def run(make_plan_fn, expert_progress=None):
        # parameters enter as arguments (closed-over arrays would be folded as XLA constants)
        f = jax.jit(
            lambda key, ep, p: de.closed_loop(
                key, env, params_w, make_plan_fn(p), n_scenes=n, steps=t, expert_progress=ep
            )
        )
        return f(key, expert_progress, params)

    expert = run(lambda p: de.expert_plan_fn(env, params_w))
    ref = expert["progress_m"]
    fns = {
        "expert": None,
        "constant_velocity": lambda p: de.constant_velocity_plan_fn(m.horizon, float(params_w.dt)),
        "unguided": lambda p: planner_plan_fn(m, p, guidance=()),
        "diffusion": lambda p: planner_plan_fn(m, p),
    }
    for name in planners:
        res = expert if name == "expert" else run(fns[name], ref)
        if name == "expert":
            res = dict(res, progress=jnp.ones_like(res["progress"]))
        for key_, v in de.summarize(res).items():
            out[f"{name}/{key_}"] = v
    return out


def write_gif(cfg: PlannerRecipeConfig, params, path: Path, *, n_scenes: int, steps: int) -> None:
    """Closed-loop GIF of the guided planner: ego plan (green) and neighbour predictions (yellow)."""
    from jaxlab.media import save_gif

    m = cfg.model
    env, params_w = world(cfg)

    def make_plan_fn(p):
        return lambda key, obs, state: pl.sample_trajectories(p, key, scene_of(obs), m)

    res = jax.jit(
        lambda key, p: de.closed_loop(
            key, env, params_w, make_plan_fn(p), n_scenes=n_scenes, steps=steps, record=True
        )
    )(jax.random.PRNGKey(2), params)
    log = jax.device_get(res["log"])
    frames = []
    for i in range(steps):
        row = []
        for b in range(n_scenes):
            st = jax.tree.map(lambda v, i=i, b=b: v[i, b], log["state"])
            traj = np.asarray(log["plan"][i, b])
            valid = np.asarray(st.nb_valid)
            row.append(env.render(st, plan=traj[0], predictions=traj[1:][valid], size=128))
        frames.append(np.concatenate(row, 1))
    save_gif(path, frames, fps=10)


TABLE_KEYS = (
    "score",
    "collision",
    "drivable",
    "progress",
    "ttc_ok",
    "comfortable",
    "offroad_time",
    "score_straight",
    "score_intersection",
    "score_merge",
)


def format_table(res: dict[str, float], planners) -> str:
    head = f"{'planner':<18}" + "".join(f"{k[:12]:>13}" for k in TABLE_KEYS)
    lines = [head]
    for p in planners:
        cells = "".join(
            f"{res.get(f'{p}/{k}', float('nan')):>13.3f}" if f"{p}/{k}" in res else f"{'-':>13}"
            for k in TABLE_KEYS
        )
        lines.append(f"{p:<18}{cells}")
    return "\n".join(lines)


def eval_main(cfg: PlannerRecipeConfig, run_dir: Path, argv: list[str]) -> int:
    """``jaxlab eval planner --run-dir DIR [--scenes N] [--steps T] [--seed S] [--json]
    [--no-gif]``: the closed-loop table (score = no-collision x drivable x making-progress x
    (5 TTC + 5 progress + 4 speed + 2 comfort) / 16, x100) and ``planner.gif``."""
    from jaxlab.core.run import open_run

    p = argparse.ArgumentParser(prog="jaxlab eval planner")
    p.add_argument("--scenes", type=int, default=cfg.eval_scenes)
    p.add_argument("--steps", type=int, default=cfg.eval_steps)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-gif", action="store_true")
    args = p.parse_args(argv)
    for name in ("scenes", "steps"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name}", getattr(args, name), "an integer >= 1")
    run = open_run(run_dir, recipe=RECIPE)
    planners = ("expert", "constant_velocity", "unguided", "diffusion")
    res = evaluate_run(
        run.cfg, run.state.ema_params, seed=args.seed, n_scenes=args.scenes, steps=args.steps
    )
    if args.json:
        print(json.dumps({"step": run.step, **res}))
    else:
        print(f"checkpoint step {run.step} of {run_dir}; guidance {run.cfg.model.guidance}")
        print(
            f"open loop: ADE {res['open_loop/ade']:.3f} m, FDE {res['open_loop/fde']:.3f} m "
            f"(horizon {run.cfg.model.horizon} x 0.1 s)"
        )
        print(format_table(res, planners))
    if not args.no_gif:
        write_gif(
            run.cfg, run.state.ema_params, Path(run_dir) / "planner.gif", n_scenes=3, steps=30
        )
        print(f"wrote {Path(run_dir) / 'planner.gif'}")
    return 0


RECIPE = register(
    Recipe(
        name="planner",
        config_cls=PlannerRecipeConfig,
        build=build,
        description="Diffusion Planner: joint prediction + planning in the driving world, guidance",
        traced=TRACED,
        eval_main=eval_main,
    )
)
