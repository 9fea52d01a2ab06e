"""An LD3 run: its config, the model whose steps are learned, the teacher's (noise, output)
pairs, the train state and step around :func:`jaxlab.diffusion.ld3.ld3_step`, and the held-out
comparison with the baseline steps.

``model="mixture"`` learns the steps for the analytic 2-D ring mixture (exact denoiser: no training
needed); ``model="checkpoint"`` for a model trained by the ``diffusion`` recipe. The teacher's pairs
are generated once when the problem is made (:func:`make_problem`); each train step is one LD3
iteration, a no-op once LD3's own stopping rule fires. The per-sample pieces of the LD3 state are
split over the mesh's data axes (:func:`per_sample_sharding`). Traced (``state.hparams``): the
starting rates of ``optim`` (:data:`jaxlab.diffusion.ld3.RATE_KEYS`), set into the LD3 state at the
first step (LD3 decays them itself); the other ``LD3Hyper`` values enter the validation at
``init`` and stay static.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

import flax.struct
import jax
import jax.numpy as jnp

from jaxlab.core import json_files
from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.sharding import MeshConfig, leading_axis_sharding, state_shardings
from jaxlab.diffusion import ld3 as ld3_lib
from jaxlab.diffusion import schedules as sched_lib
from jaxlab.diffusion.gmm import gmm_eps_fn, ring_mixture
from jaxlab.diffusion.samplers import SamplerSpec, sample
from jaxlab.diffusion.sliced_wasserstein import sliced_wasserstein

BASELINES: tuple[str, ...] = ("time_uniform", "time_quadratic", "logsnr", "edm")
#: the traced starting rates (config keys)
TRACED: tuple[str, ...] = tuple(ld3_lib.RATE_KEYS)
#: the per-sample fields of ``LD3State`` (split over the data axes)
PER_SAMPLE: tuple[str, ...] = (
    "ori_train",
    "train_latent",
    "train_target",
    "ori_valid",
    "valid_latent",
    "valid_target",
)


@dataclasses.dataclass(frozen=True)
class LD3Config:
    """LD3 settings; the defaults are the reference ``configs/cifar10.yml`` where they apply.

    ``model``: "mixture" (the exact denoiser of a ring of Gaussians under ``schedule``) or
    "checkpoint" (the EMA model of the ``diffusion`` run in ``checkpoint``; its own schedule).
    ``ld3``: LD3's static settings (the student ``ld3.sampler`` and ``ld3.nfe``, the pairs, batch,
    rounds and patience); its ``data_shape`` is the model's (set from ``model``). ``teacher``,
    ``teacher_nfe`` and ``teacher_steps``: the many-NFE solver whose outputs are distilled.
    ``prior_bound_scale`` sets the soft-loss ball radius r = scale * D / N^2 (the code's 0.001 for
    images; D = 2 on the mixture needs a larger value).
    """

    seed: int = 0
    model: Literal["mixture", "checkpoint"] = "mixture"
    checkpoint: str = ""
    schedule: Literal["vp_linear", "vp_cosine", "ve", "edm"] = "edm"
    ring_components: int = 8
    ring_radius: float = 1.0
    ring_std: float = 0.1
    ld3: ld3_lib.LD3Static = ld3_lib.LD3Static()
    teacher: SamplerSpec = ld3_lib.DEFAULT_TEACHER
    teacher_nfe: int = 64
    teacher_steps: Literal["time_uniform", "time_quadratic", "logsnr", "edm"] = "logsnr"
    n_test: int = 1000
    optim: ld3_lib.LD3Optim = ld3_lib.LD3Optim()
    prior_bound_scale: float = 0.05
    win_rate: float = 0.5
    mesh: MeshConfig = MeshConfig()
    loop: LoopConfig = LoopConfig(
        total_steps=175, steps_per_call=25, log_every=25, eval_every=0, checkpoint_every=0
    )

    def __post_init__(self):
        if self.model == "checkpoint" and not self.checkpoint:
            raise ConfigError("checkpoint", self.checkpoint, "a diffusion run directory")
        try:
            self.teacher.steps_for_nfe(self.teacher_nfe)
        except ValueError as e:
            raise ConfigError("teacher_nfe", self.teacher_nfe, str(e)) from None
        if self.n_test < 1:
            raise ConfigError("n_test", self.n_test, "an integer >= 1")
        if self.ring_components < 1:
            raise ConfigError("ring_components", self.ring_components, "an integer >= 1")
        for name in ("ring_radius", "ring_std"):
            if not getattr(self, name) > 0:
                raise ConfigError(name, getattr(self, name), "a positive float")
        if not 0 < self.win_rate <= 0.5:
            raise ConfigError("win_rate", self.win_rate, "a float in (0, 0.5]")
        if self.prior_bound_scale < 0:
            raise ConfigError("prior_bound_scale", self.prior_bound_scale, "a float >= 0")

    @property
    def static(self) -> ld3_lib.LD3Static:
        """``ld3`` with the data shape of ``model``."""
        shape = (2,) if self.model == "mixture" else (8, 8, 1)
        return dataclasses.replace(self.ld3, data_shape=shape)

    @property
    def hyper(self) -> ld3_lib.LD3Hyper:
        return self.optim.hyper(prior_bound_scale=self.prior_bound_scale, win_rate=self.win_rate)


@flax.struct.dataclass
class Ld3RunState:
    """The LD3 state, the loop steps done and the traced starting rates."""

    ld3: ld3_lib.LD3State
    step: jax.Array
    hparams: dict[str, jax.Array] = flax.struct.field(default_factory=dict)


def model_and_schedule(cfg: LD3Config):
    """(eps_fn, schedule, schedule name, data shape) of the model whose steps are learned."""
    if cfg.model == "mixture":
        schedule = sched_lib.make_schedule(cfg.schedule)
        ring = ring_mixture(cfg.ring_components, cfg.ring_radius, cfg.ring_std)
        return gmm_eps_fn(ring, schedule), schedule, cfg.schedule, (2,)
    from jaxlab.core.run import RunNotFoundError
    from jaxlab.diffusion.pretrained import load_model

    try:
        model, params = load_model(cfg.checkpoint)
    except RunNotFoundError as e:
        raise ConfigError(
            "checkpoint", cfg.checkpoint, f"a diffusion run directory ({e})"
        ) from None
    if model.data_shape != cfg.static.data_shape:
        raise ConfigError(
            "checkpoint", cfg.checkpoint, f"a model of data shape {cfg.static.data_shape}"
        )
    return model.eps_fn(params), model.schedule, model.cfg.schedule, model.data_shape


@dataclasses.dataclass(frozen=True)
class LD3Problem:
    """The model whose steps are learned and the teacher's (noise, output) pairs: ``train``,
    ``valid`` and ``test`` are ``(z [n, D], y [n, D])`` each."""

    eps_fn: Any
    schedule: sched_lib.Schedule
    schedule_name: str
    shape: tuple[int, ...]
    train: tuple[jax.Array, jax.Array]
    valid: tuple[jax.Array, jax.Array]
    test: tuple[jax.Array, jax.Array]

    def kwargs(self, cfg: LD3Config) -> dict[str, Any]:
        """The keyword arguments of :func:`jaxlab.diffusion.ld3.ld3_init` and ``ld3_step``."""
        return dict(eps_fn=self.eps_fn, schedule=self.schedule, static=cfg.static, hyper=cfg.hyper)


def make_problem(cfg: LD3Config) -> LD3Problem:
    """The model and ``n_train + n_valid + n_test`` teacher pairs, split in that order."""
    eps_fn, schedule, schedule_name, shape = model_and_schedule(cfg)
    n = cfg.ld3.n_train + cfg.ld3.n_valid + cfg.n_test
    z, y = jax.jit(
        lambda k: ld3_lib.make_teacher_data(
            k,
            eps_fn,
            schedule,
            n=n,
            data_shape=shape,
            teacher=cfg.teacher,
            teacher_nfe=cfg.teacher_nfe,
            teacher_steps=cfg.teacher_steps,
            batch_size=None if n <= 4096 else 1000,
        )
    )(jax.random.PRNGKey(cfg.seed + 1))
    a, b = cfg.ld3.n_train, cfg.ld3.n_train + cfg.ld3.n_valid
    train, valid, test = (z[:a], y[:a]), (z[a:b], y[a:b]), (z[b:], y[b:])
    return LD3Problem(eps_fn, schedule, schedule_name, shape, train, valid, test)


def hparams(cfg: LD3Config) -> dict[str, jax.Array]:
    """The traced starting rates of ``cfg`` (keys :data:`TRACED`) as float32 scalars."""
    return {k: jnp.float32(getattr(cfg.optim, k.split(".")[1]).lr) for k in TRACED}


def make_init(cfg: LD3Config, problem: LD3Problem):
    """``key -> Ld3RunState``: :func:`jaxlab.diffusion.ld3.ld3_init` on the training and
    validation pairs, step 0, the traced starting rates."""

    def init(key) -> Ld3RunState:
        s = ld3_lib.ld3_init(key, problem.train, problem.valid, **problem.kwargs(cfg))
        return Ld3RunState(s, jnp.zeros((), jnp.int32), hparams(cfg))

    return init


def per_sample_sharding(mesh: jax.sharding.Mesh):
    """The state's shardings: the :data:`PER_SAMPLE` fields split over the mesh's data axes."""

    def state_sharding(abstract: Ld3RunState) -> Ld3RunState:
        out = state_shardings(abstract, mesh)
        per_sample = {
            f: leading_axis_sharding(getattr(abstract.ld3, f).shape, mesh) for f in PER_SAMPLE
        }
        return out.replace(ld3=out.ld3.replace(**per_sample))

    return state_sharding


def make_train_step(cfg: LD3Config, problem: LD3Problem):
    """``(state, None) -> (state, metrics)``: one LD3 iteration; at the first step the traced
    starting rates are set into the LD3 state."""
    kw, static = problem.kwargs(cfg), cfg.static

    def train_step(state: Ld3RunState, batch=None):
        del batch
        hyper_t = ld3_lib.with_rates(kw["hyper"], state.hparams)
        first = ld3_lib.set_rates(state.ld3, static, hyper_t)
        s = jax.tree.map(lambda a, b: jnp.where(state.step == 0, a, b), first, state.ld3)
        s, metrics = ld3_lib.ld3_step(s, **{**kw, "hyper": hyper_t})
        return state.replace(ld3=s, step=state.step + 1), metrics

    return train_step


def make_compare(cfg: LD3Config, problem: LD3Problem):
    """The jitted ``LD3State -> {"l2/<steps>", "sw/<steps>"}``: the learned steps (with and
    without the evaluation shift) and the :data:`BASELINES` on the held-out pairs: mean squared L2
    to the teacher's outputs and sliced Wasserstein distance to the teacher's samples."""
    static, hyper, schedule, test = cfg.static, cfg.hyper, problem.schedule, problem.test

    @jax.jit
    def compare(state: ld3_lib.LD3State):
        t1, t2 = ld3_lib.learned_time_steps(state, schedule, static, hyper)
        steps = {k: (sched_lib.get_time_steps(schedule, static.steps, k),) * 2 for k in BASELINES}
        steps["ld3"] = (t1, t2)
        steps["ld3_no_eval_shift"] = (t1, t1)
        x = schedule.prior_std * test[0].reshape((-1,) + problem.shape)
        out = {}
        for name, (ts, ts2) in steps.items():
            res = sample(
                static.sampler, problem.eps_fn, x, ts, schedule=schedule, eval_timesteps=ts2
            )
            res = res.reshape(res.shape[0], -1)
            out[f"l2/{name}"] = jnp.mean(jnp.sum((res - test[1]) ** 2, -1))
            out[f"sw/{name}"] = sliced_wasserstein(jax.random.PRNGKey(7), res, test[1])
        return out

    return compare


def evaluate(compare, state: Ld3RunState) -> dict[str, float]:
    """The comparison of :func:`make_compare`, the best validation loss and the iterations."""
    res = {k: float(v) for k, v in compare(state.ld3).items()}
    res["best_valid_loss"] = float(state.ld3.best_loss)
    res["iterations"] = int(state.ld3.iteration)
    return res


def write_steps(
    cfg: LD3Config, problem: LD3Problem, compare, state: Ld3RunState, run_dir: Path
) -> None:
    """``steps.json`` (the learned integration and evaluation steps, which every sampler accepts:
    :func:`jaxlab.diffusion.ld3.load_time_steps`) and ``comparison.json``."""
    t1, t2 = ld3_lib.learned_time_steps(state.ld3, problem.schedule, cfg.static, cfg.hyper)
    comparison = evaluate(compare, state)
    ld3_lib.save_time_steps(
        run_dir / "steps.json",
        t1,
        t2,
        sampler=cfg.static.sampler,
        nfe=cfg.ld3.nfe,
        schedule_name=problem.schedule_name,
        extra={"model": cfg.model, "checkpoint": cfg.checkpoint, "held_out": comparison},
    )
    json_files.write(run_dir / "comparison.json", comparison, indent=2)
