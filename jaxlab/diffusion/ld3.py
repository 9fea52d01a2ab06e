"""LD3: Learning to Discretize Denoising Diffusion ODEs (Tong et al., ICLR 2025), as in ``vinhsuhi/LD3``.

A teacher solver with many NFE maps noise to outputs; its (noise, output) pairs are stored. A student,
the *same* solver with N NFE, runs on learned time steps xi and is trained to reproduce the teacher's
outputs. Everything below follows the reference code (``trainer.py``, ``utils.py``):

- **Time parametrisation** (``discretize_model_wrapper``, ``time_mode="lambda"``): raw parameters
  p in R^{N+1} (initialised to ones), lambda_i = lambda_min + (c_i - c_0) / (c_N - c_0)
  (lambda_max - lambda_min) with c = cumsum(softmax(p)), t_i = lambda^{-1}(lambda_i). The steps are
  monotone, their endpoints fixed, and the initialisation is logSNR-uniform. ``time_mode="time"``
  does the same in t.
- **Decoupled evaluation times** ("v2"): a second vector p' (initialised to zeros) moves the time at
  which the network is evaluated, lambda'_i = lambda_i + clip(p'_i, +-w min_j |lambda_{j+1} - lambda_j|),
  endpoints masked, w = ``win_rate`` = 0.5; p' is trained only after ``rounds_v1`` rounds.
- **Hard loss** d(Psi*(x_T), Psi_xi(x_T)) with d the per-sample mean squared (``l2``) or absolute
  (``l1``) error; LPIPS (the code's default for images) needs a pretrained VGG and is not offered.
- **Soft loss** min_{x' in B(x_T, r)} d(Psi*(x_T), Psi_xi(x')): each stored sample carries a shifted
  latent x' (in unit-Gaussian latent space; the solver starts from ``prior_std`` x'). Each
  iteration takes one SGD step on x' (lr ``shift_lr`` = 12/N), projects it onto the l2 ball of
  radius r = ``prior_bound_scale`` D / N^2 (D the data dimension; the code's 0.001 C H W / N^2)
  around x_T, re-solves with the updated steps and keeps the new x' only where the per-sample loss
  fell below the loss before the step (accept-if-better). The time parameters are trained on the
  soft loss.
- **Optimisation**: p with RMSprop (lr 5e-3, momentum 0.9, torch's alpha = 0.99 and eps outside the
  square root), p' with SGD (lr 0.1 / N), each gradient clipped to norm 1 (optax).
- **Validation and patience**: after every iteration the validation loss (on the validation
  samples' shifted latents) is computed; the best steps are kept; after ``patience`` iterations
  without improvement the best steps are restored and the learning rates decay by 0.8 (floors 5e-5
  and 1e-6; the first time only the restore happens, as the code's ``eval_on_one`` switch does);
  training stops after the p' floor has been hit ``lr2_patience`` times or after
  ``rounds_v1 + rounds_v2`` rounds (epochs). After each epoch the validation latents get the same
  shift step; if none was accepted, ``shift_lr`` halves. Each round starts from the best steps.

Differences from the code, on purpose:

- The soft loss of a sample is the smaller of its losses at x' and at the ball's centre x_T
  (:func:`soft_hard_losses`), and the shift step starts from that better latent. The code keeps x'
  once accepted; since acceptance compares against the loss under the *previous* steps, after the
  steps move a stored x' can be worse than x_T. With the minimum, soft <= hard holds at every evaluation, as the paper's definition
  (x_T lies in the ball) implies.
- The p' clip uses the smallest gap of the lambda steps (the code, in lambda mode, takes it from the
  raw parameters p, which is zero at initialisation, so p' could never move).
- When the best steps are restored the shifted latents are not rolled back (the code reloads them
  but then overwrites the training latents at the end of the epoch).

The whole training run is one pure function of the state (``ld3_step``), jit-able and usable by the
shared training loop; :func:`ld3_fit` runs it to completion inside a ``lax.while_loop``.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.core import json_files
from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig
from jaxlab.diffusion.model_wrapper import EpsFn
from jaxlab.diffusion.samplers import SamplerSpec, sample
from jaxlab.diffusion.schedules import Schedule, get_time_steps

#: The teacher of the reference ``gen_data.py``: UniPC, order 3 (we use B(h) = e^h - 1).
DEFAULT_TEACHER = SamplerSpec("uni_pc", 3, "bh2", lower_order_final=False)


@dataclasses.dataclass(frozen=True)
class LD3Static:
    """Shape- and control-flow-fixing settings of LD3 (hashable; a static argument).

    Attributes:
        sampler: the student solver (also the sampler the learned steps are for).
        nfe: the student's number of network evaluations.
        data_shape: the shape of one sample, e.g. (2,) or (8, 8, 1).
        n_train: number of training (noise, teacher output) pairs (reference: 50).
        n_valid: number of validation pairs (reference: 50).
        batch_size: training batch size (reference: 2); must divide n_train and n_valid.
        time_mode: "lambda" (reference default) or "time": the space the softmax-cumsum lives in.
        decoupled: train the evaluation-time offsets p' after ``rounds_v1`` rounds.
        rounds_v1: rounds (epochs) that train p only (reference: 2).
        rounds_v2: further rounds that train p and p' (reference: 5).
        patience: validation checks without improvement before restoring the best (reference: 5).
        lr2_patience: stop after the p' learning rate hits its floor this many times (reference: 5).
        loss_type: "l2" or "l1".
        remat: rematerialise solver steps in the backward pass (the code's ``--low_gpu``).
    """

    sampler: SamplerSpec = SamplerSpec("dpm_solver++", 2)
    nfe: int = 4
    data_shape: tuple[int, ...] = (2,)
    n_train: int = 50
    n_valid: int = 50
    batch_size: int = 2
    time_mode: str = "lambda"
    decoupled: bool = True
    rounds_v1: int = 2
    rounds_v2: int = 5
    patience: int = 5
    lr2_patience: int = 5
    loss_type: str = "l2"
    remat: bool = False

    def __post_init__(self):
        try:
            self.sampler.steps_for_nfe(self.nfe)
        except ValueError as e:
            raise ConfigError("nfe", self.nfe, str(e).split("expected ")[-1]) from None
        checks = [
            ("n_train", self.n_train, self.n_train >= 1, "a positive int"),
            ("n_valid", self.n_valid, self.n_valid >= 1, "a positive int"),
            ("batch_size", self.batch_size, self.batch_size >= 1, "a positive int"),
            ("time_mode", self.time_mode, self.time_mode in ("lambda", "time"), "lambda or time"),
            ("loss_type", self.loss_type, self.loss_type in ("l2", "l1"), "l2 or l1"),
            ("rounds_v1", self.rounds_v1, self.rounds_v1 >= 0, ">= 0"),
            ("rounds_v2", self.rounds_v2, self.rounds_v2 >= 0, ">= 0"),
            ("patience", self.patience, self.patience >= 1, ">= 1"),
            ("lr2_patience", self.lr2_patience, self.lr2_patience >= 1, ">= 1"),
            ("data_shape", self.data_shape, all(d >= 1 for d in self.data_shape), "sizes >= 1"),
        ]
        for name, value, ok, expected in checks:
            if not ok:
                raise ConfigError(name, value, expected)
        if self.rounds_v1 + self.rounds_v2 < 1:
            raise ConfigError("rounds_v2", self.rounds_v2, "at least one round with rounds_v1")
        for name, n in (("n_train", self.n_train), ("n_valid", self.n_valid)):
            if n % self.batch_size:
                raise ConfigError(name, n, "a multiple of batch_size")

    @property
    def steps(self) -> int:
        return self.sampler.steps_for_nfe(self.nfe)

    @property
    def dim(self) -> int:
        return int(np.prod(self.data_shape))


@struct.dataclass
class LD3Hyper:
    """Numerical hyper-parameters of LD3 (traced; defaults are ``configs/cifar10.yml``).

    ``shift_lr`` and ``lr_time_2`` are the code's values before its division by N (``adjust_hyper``:
    shift_lr = 12 / N, lr_time_2 = 0.1 / N); the ball radius is ``prior_bound_scale`` D / N^2;
    ``clip_norm`` and ``clip_norm_2`` clip the gradients of p and p'. A recipe sets them from an
    :class:`LD3Optim` (:meth:`LD3Optim.hyper`).
    """

    lr_time_1: float = 5e-3
    lr_time_2: float = 0.1
    momentum_time_1: float = 0.9
    min_lr_time_1: float = 5e-5
    min_lr_time_2: float = 1e-6
    lr_time_decay: float = 0.8
    shift_lr: float = 12.0
    shift_lr_decay: float = 0.5
    prior_bound_scale: float = 1e-3
    win_rate: float = 0.5
    clip_norm: float = 1.0
    clip_norm_2: float = 1.0


#: LD3's traced starting rates: the dotted config key (under ``optim``) -> the ``LD3Hyper`` field
RATE_KEYS: dict[str, str] = {
    "optim.time.lr": "lr_time_1",
    "optim.eval_time.lr": "lr_time_2",
    "optim.shift.lr": "shift_lr",
}


@dataclasses.dataclass(frozen=True)
class LD3Optim:
    """LD3's three update rules, by role; each keeps the reference code's own rule and takes its
    rate (and clipping) from an :class:`OptimConfig`, decayed on a plateau by LD3 itself (so no
    schedule, warm-up or weight decay):

    Attributes:
      time: p, the time-step parameters: RMSprop with torch's semantics (alpha 0.99, eps 1e-8
        outside the square root) with ``momentum``, ``lr`` and gradient clipping ``clip_norm``.
      eval_time: p', the decoupled evaluation-time offsets: SGD at ``lr / N``, ``clip_norm``.
      shift: the soft loss's latent shift step: SGD at ``lr / N`` (no clipping).
      decay: on lost patience both time rates are multiplied by this, in (0, 1].
      time_min_lr: the floor of the ``time`` rate (> 0).
      eval_time_min_lr: the floor of the ``eval_time`` rate (> 0).
      shift_decay: the shift rate is multiplied by this after an epoch without an accepted shift,
        in (0, 1].
    """

    time: OptimConfig = OptimConfig(name="sgd", lr=5e-3, momentum=0.9, clip_norm=1.0)
    eval_time: OptimConfig = OptimConfig(name="sgd", lr=0.1, clip_norm=1.0)
    shift: OptimConfig = OptimConfig(name="sgd", lr=12.0)
    decay: float = 0.8
    time_min_lr: float = 5e-5
    eval_time_min_lr: float = 1e-6
    shift_decay: float = 0.5

    def __post_init__(self):
        for role in ("time", "eval_time", "shift"):
            o = getattr(self, role)
            for key, value, default in (
                ("schedule", o.schedule, "constant"),
                ("warmup_steps", o.warmup_steps, 0),
                ("weight_decay", o.weight_decay, 0.0),
            ):
                if value != default:
                    raise ConfigError(
                        f"{role}.{key}", value, f"{default!r} (LD3 decays its rates itself)"
                    )
        for key, value in (
            ("eval_time.momentum", self.eval_time.momentum),
            ("shift.momentum", self.shift.momentum),
            ("shift.clip_norm", self.shift.clip_norm),
        ):
            if value != 0:
                raise ConfigError(key, value, "0 (LD3's plain SGD step)")
        for key in ("decay", "shift_decay"):
            if not 0 < getattr(self, key) <= 1:
                raise ConfigError(key, getattr(self, key), "a factor in (0, 1]")
        for key in ("time_min_lr", "eval_time_min_lr"):
            if not getattr(self, key) > 0:
                raise ConfigError(key, getattr(self, key), "a learning rate > 0")

    def hyper(self, *, prior_bound_scale: float, win_rate: float) -> LD3Hyper:
        """The :class:`LD3Hyper` of these rates, with the soft loss's ball and clip window."""
        return LD3Hyper(
            lr_time_1=self.time.lr,
            lr_time_2=self.eval_time.lr,
            momentum_time_1=self.time.momentum,
            min_lr_time_1=self.time_min_lr,
            min_lr_time_2=self.eval_time_min_lr,
            lr_time_decay=self.decay,
            shift_lr=self.shift.lr,
            shift_lr_decay=self.shift_decay,
            prior_bound_scale=prior_bound_scale,
            win_rate=win_rate,
            clip_norm=self.time.clip_norm,
            clip_norm_2=self.eval_time.clip_norm,
        )


def with_rates(hyper: LD3Hyper, values: dict[str, jax.Array]) -> LD3Hyper:
    """``hyper`` with the starting rates of ``values`` (keys :data:`RATE_KEYS`, traced allowed)."""
    return hyper.replace(**{RATE_KEYS[k]: v for k, v in values.items() if k in RATE_KEYS})


@struct.dataclass
class LD3State:
    """Everything LD3 carries between iterations (a pytree of arrays)."""

    params1: Float[Array, " n1"]
    params2: Float[Array, " n1"]
    opt1: optax.OptState
    opt2: optax.OptState
    best_params1: Float[Array, " n1"]
    best_params2: Float[Array, " n1"]
    best_loss: Float[Array, ""]
    ori_train: Float[Array, "n_train dim"]
    train_latent: Float[Array, "n_train dim"]
    train_target: Float[Array, "n_train dim"]
    ori_valid: Float[Array, "n_valid dim"]
    valid_latent: Float[Array, "n_valid dim"]
    valid_target: Float[Array, "n_valid dim"]
    shift_lr: Float[Array, ""]
    key: PRNGKeyArray
    perm: Array
    round: Array
    it_in_round: Array
    iteration: Array
    count_worse: Array
    eval_on_one: Array
    count_min_lr2_hit: Array
    valid_changed: Array
    done: Array


def _optimizers(static: LD3Static, hyper: LD3Hyper):
    """RMSprop (torch semantics) for p and SGD for p', each with gradient clipping; lr injectable."""
    opt1 = optax.chain(
        optax.clip_by_global_norm(hyper.clip_norm),
        optax.inject_hyperparams(optax.rmsprop)(
            learning_rate=hyper.lr_time_1,
            decay=0.99,
            eps=1e-8,
            eps_in_sqrt=False,
            momentum=hyper.momentum_time_1,
        ),
    )
    opt2 = optax.chain(
        optax.clip_by_global_norm(hyper.clip_norm_2),
        optax.inject_hyperparams(optax.sgd)(learning_rate=hyper.lr_time_2 / static.steps),
    )
    return opt1, opt2


def _get_lr(opt_state):
    return opt_state[1].hyperparams["learning_rate"]


def _set_lr(opt_state, lr):
    inner = opt_state[1]
    hp = dict(inner.hyperparams)
    hp["learning_rate"] = jnp.asarray(lr, hp["learning_rate"].dtype)
    return (opt_state[0], inner._replace(hyperparams=hp)) + tuple(opt_state[2:])


def set_rates(state: LD3State, static: LD3Static, hyper: LD3Hyper) -> LD3State:
    """``state`` with its starting rates from ``hyper`` (traced values allowed): the learning
    rates of p (``lr_time_1``) and p' (``lr_time_2 / N``) and the latent shift rate
    (``shift_lr / N``), as :func:`ld3_init` sets them. LD3 then decays them itself."""
    return state.replace(
        opt1=_set_lr(state.opt1, hyper.lr_time_1),
        opt2=_set_lr(state.opt2, hyper.lr_time_2 / static.steps),
        shift_lr=jnp.asarray(hyper.shift_lr / static.steps, jnp.float32),
    )


# ----------------------------------------------------------------------------------------------
# time steps from parameters
# ----------------------------------------------------------------------------------------------


def time_steps_from_params(
    params1: Float[Array, " n1"],
    params2: Float[Array, " n1"],
    schedule: Schedule,
    *,
    time_mode: str = "lambda",
    win_rate: float | Float[Array, ""] = 0.5,
) -> tuple[Float[Array, " n1"], Float[Array, " n1"]]:
    """LD3's softmax-cumsum parametrisation (module docstring): (integration steps, eval steps).

    Args:
        params1: p, shape (N + 1,); ones give logSNR-uniform (``lambda``) or time-uniform steps.
        params2: p', shape (N + 1,); zeros give eval steps equal to the integration steps.
        schedule: the noise schedule, which fixes the endpoints t_max and t_min.
        time_mode: "lambda" or "time".
        win_rate: the eval-time window as a fraction of the smallest gap.

    Returns:
        Two decreasing (N + 1,) arrays of times from t_max to t_min.
    """
    c = jnp.cumsum(jax.nn.softmax(params1))
    normed = (c - c[0]) / (c[-1] - c[0])
    mask = jnp.ones_like(normed).at[0].set(0.0).at[-1].set(0.0)
    if time_mode == "lambda":
        lam1 = schedule.lambda_min + normed * (schedule.lambda_max - schedule.lambda_min)
        max_move = jax.lax.stop_gradient(jnp.min(jnp.abs(jnp.diff(lam1)))) * win_rate
        lam2 = lam1 + jnp.clip(params2, -max_move, max_move) * mask
        t1, t2 = schedule.inverse_lambda(lam1), schedule.inverse_lambda(lam2)
    elif time_mode == "time":
        t1 = schedule.t_max + normed * (schedule.t_min - schedule.t_max)
        max_move = jax.lax.stop_gradient(jnp.min(jnp.abs(jnp.diff(t1)))) * win_rate
        t2 = t1 + jnp.clip(params2, -max_move, max_move) * mask
    else:
        raise ValueError(f"time_mode: got {time_mode!r}, expected 'lambda' or 'time'")
    fix = lambda t: t.at[0].set(schedule.t_max).at[-1].set(schedule.t_min)
    return fix(t1), fix(t2)


def student_solve(
    eps_fn: EpsFn,
    latent: Float[Array, "batch dim"],
    params1: Float[Array, " n1"],
    params2: Float[Array, " n1"],
    *,
    schedule: Schedule,
    static: LD3Static,
    win_rate: float | Float[Array, ""] = 0.5,
) -> Float[Array, "batch dim"]:
    """Psi_xi: run the student solver from unit-Gaussian latents on the learned steps (flattened)."""
    t1, t2 = time_steps_from_params(
        params1, params2, schedule, time_mode=static.time_mode, win_rate=win_rate
    )
    x = (schedule.prior_std * latent).reshape((latent.shape[0],) + static.data_shape)
    out = sample(
        static.sampler, eps_fn, x, t1, schedule=schedule, eval_timesteps=t2, remat=static.remat
    )
    return out.reshape(latent.shape[0], -1)


def per_sample_loss(
    pred: Float[Array, "batch dim"], target: Float[Array, "batch dim"], loss_type: str = "l2"
) -> Float[Array, " batch"]:
    """d(target, pred) per sample: mean squared (``l2``) or mean absolute (``l1``) error."""
    diff = pred - target
    if loss_type == "l2":
        return jnp.mean(diff**2, axis=-1)
    if loss_type == "l1":
        return jnp.mean(jnp.abs(diff), axis=-1)
    raise ValueError(f"loss_type: got {loss_type!r}, expected 'l2' or 'l1'")


def project_to_ball(
    x: Float[Array, "batch dim"],
    center: Float[Array, "batch dim"],
    radius: float | Float[Array, ""],
) -> Float[Array, "batch dim"]:
    """Project each row of x onto the l2 ball of the given radius around the row of center
    (``radius`` a number, or traced with the :class:`LD3Hyper` it is computed from)."""
    diff = x - center
    norm = jnp.linalg.norm(diff, axis=-1, keepdims=True)
    scale = jnp.where(norm > radius, radius / jnp.maximum(norm, 1e-30), 1.0)
    return center + diff * scale


# ----------------------------------------------------------------------------------------------
# teacher data
# ----------------------------------------------------------------------------------------------


def make_teacher_data(
    key: PRNGKeyArray,
    eps_fn: EpsFn,
    schedule: Schedule,
    *,
    n: int,
    data_shape: tuple[int, ...],
    teacher: SamplerSpec = DEFAULT_TEACHER,
    teacher_nfe: int = 20,
    teacher_steps: str = "logsnr",
    batch_size: int | None = None,
) -> tuple[Float[Array, "n dim"], Float[Array, "n dim"]]:
    """(x_T, Psi*(x_T)) pairs: unit-Gaussian latents and the teacher solver's outputs (flattened).

    The reference ``gen_data.py`` uses UniPC (order 3) with 20 NFE on EDM steps; any sampler and
    baseline step kind can be chosen. ``batch_size`` splits the teacher run with ``lax.map``.
    """
    dim = int(np.prod(data_shape))
    z = jax.random.normal(key, (n, dim))
    ts = get_time_steps(schedule, teacher.steps_for_nfe(teacher_nfe), teacher_steps)

    def run(zb):
        x = (schedule.prior_std * zb).reshape((zb.shape[0],) + data_shape)
        return sample(teacher, eps_fn, x, ts, schedule=schedule).reshape(zb.shape[0], dim)

    if batch_size is None or batch_size >= n:
        return z, run(z)
    if n % batch_size:
        raise ValueError(f"batch_size: got {batch_size}, expected a divisor of n = {n}")
    out = jax.lax.map(run, z.reshape(n // batch_size, batch_size, dim))
    return z, out.reshape(n, dim)


# ----------------------------------------------------------------------------------------------
# training
# ----------------------------------------------------------------------------------------------


def ld3_init(
    key: PRNGKeyArray,
    train: tuple[Float[Array, "n_train dim"], Float[Array, "n_train dim"]],
    valid: tuple[Float[Array, "n_valid dim"], Float[Array, "n_valid dim"]],
    *,
    eps_fn: EpsFn,
    schedule: Schedule,
    static: LD3Static,
    hyper: LD3Hyper,
    init_params1: Float[Array, " n1"] | None = None,
) -> LD3State:
    """Initial LD3 state from (latent, target) training and validation pairs; evaluates once."""
    n1 = static.steps + 1
    for name, (z, y), n in (("train", train, static.n_train), ("valid", valid, static.n_valid)):
        if z.shape != (n, static.dim) or y.shape != (n, static.dim):
            raise ValueError(
                f"{name}: got shapes {z.shape} and {y.shape}, expected ({n}, {static.dim}) each"
            )
    p1 = jnp.ones((n1,), jnp.float32) if init_params1 is None else jnp.asarray(init_params1)
    if p1.shape != (n1,):
        raise ValueError(f"init_params1: got shape {p1.shape}, expected ({n1},)")
    p2 = jnp.zeros((n1,), jnp.float32)
    opt1, opt2 = _optimizers(static, hyper)
    key, kp = jax.random.split(key)
    state = LD3State(
        params1=p1,
        params2=p2,
        opt1=opt1.init(p1),
        opt2=opt2.init(p2),
        best_params1=p1,
        best_params2=p2,
        best_loss=jnp.asarray(jnp.inf, jnp.float32),
        ori_train=train[0],
        train_latent=train[0],
        train_target=train[1],
        ori_valid=valid[0],
        valid_latent=valid[0],
        valid_target=valid[1],
        shift_lr=jnp.asarray(hyper.shift_lr / static.steps, jnp.float32),
        key=key,
        perm=jax.random.permutation(kp, static.n_train),
        round=jnp.asarray(0),
        it_in_round=jnp.asarray(0),
        iteration=jnp.asarray(0),
        count_worse=jnp.asarray(0),
        eval_on_one=jnp.asarray(True),
        count_min_lr2_hit=jnp.asarray(0),
        valid_changed=jnp.asarray(False),
        done=jnp.asarray(False),
    )
    return _examine(state, eps_fn=eps_fn, schedule=schedule, static=static, hyper=hyper)


def _loss_vec(eps_fn, schedule, static, hyper, p1, p2, latent, target):
    out = student_solve(
        eps_fn, latent, p1, p2, schedule=schedule, static=static, win_rate=hyper.win_rate
    )
    return per_sample_loss(out, target, static.loss_type)


def soft_hard_losses(
    eps_fn: EpsFn,
    schedule: Schedule,
    static: LD3Static,
    hyper: LD3Hyper,
    params1: Float[Array, " n1"],
    params2: Float[Array, " n1"],
    latent: Float[Array, "batch dim"],
    ori: Float[Array, "batch dim"],
    target: Float[Array, "batch dim"],
) -> tuple[Float[Array, " batch"], Float[Array, " batch"], Array]:
    """Per-sample soft and hard losses at the same steps, and which latent the soft loss uses.

    hard = d(target, Psi_xi(x_T)); soft = min(d(target, Psi_xi(x')), hard): the inner minimum over
    the ball B(x_T, r) is estimated by the better of the stored shifted latent x' and the ball's
    centre x_T, so soft <= hard holds at every evaluation. Gradients flow into the selected latent.
    """
    b = latent.shape[0]
    lv = _loss_vec(
        eps_fn,
        schedule,
        static,
        hyper,
        params1,
        params2,
        jnp.concatenate([latent, ori]),
        jnp.concatenate([target, target]),
    )
    shifted, hard = lv[:b], lv[b:]
    use_shifted = jax.lax.stop_gradient(shifted <= hard)
    return jnp.where(use_shifted, shifted, hard), hard, use_shifted


def validation_loss(
    state: LD3State, *, eps_fn: EpsFn, schedule: Schedule, static: LD3Static, hyper: LD3Hyper
) -> Float[Array, ""]:
    """Mean soft loss on the validation pairs (the code validates on the shifted latents)."""
    soft, _, _ = soft_hard_losses(
        eps_fn,
        schedule,
        static,
        hyper,
        state.params1,
        state.params2,
        state.valid_latent,
        state.ori_valid,
        state.valid_target,
    )
    return jnp.mean(soft)


def _examine(state: LD3State, *, eps_fn, schedule, static, hyper) -> LD3State:
    """``_examine_checkpoint``: validate, keep the best, and on lost patience restore and decay."""
    loss = validation_loss(state, eps_fn=eps_fn, schedule=schedule, static=static, hyper=hyper)
    better = loss < state.best_loss
    state = state.replace(
        best_loss=jnp.where(better, loss, state.best_loss),
        best_params1=jnp.where(better, state.params1, state.best_params1),
        best_params2=jnp.where(better, state.params2, state.best_params2),
        count_worse=jnp.where(better, 0, state.count_worse + 1),
    )
    in_v1 = state.round < static.rounds_v1

    def restore(s: LD3State) -> LD3State:
        s = s.replace(params1=s.best_params1, params2=s.best_params2, count_worse=jnp.asarray(0))
        lr1 = _get_lr(s.opt1)
        lr2 = _get_lr(s.opt2)
        decay = jnp.logical_not(s.eval_on_one)
        new_lr1 = jnp.where(decay, jnp.maximum(hyper.lr_time_decay * lr1, hyper.min_lr_time_1), lr1)
        decay2 = jnp.logical_and(decay, jnp.logical_not(in_v1))
        new_lr2 = jnp.where(
            decay2, jnp.maximum(hyper.lr_time_decay * lr2, hyper.min_lr_time_2), lr2
        )
        hit2 = jnp.logical_and(decay2, new_lr2 <= hyper.min_lr_time_2)
        return s.replace(
            opt1=_set_lr(s.opt1, new_lr1),
            opt2=_set_lr(s.opt2, new_lr2),
            eval_on_one=jnp.asarray(False),
            count_min_lr2_hit=s.count_min_lr2_hit + hit2.astype(s.count_min_lr2_hit.dtype),
        )

    state = jax.lax.cond(state.count_worse >= static.patience, restore, lambda s: s, state)
    return state.replace(
        done=jnp.logical_or(state.done, state.count_min_lr2_hit >= static.lr2_patience)
    )


def _shift_latents(eps_fn, schedule, static, hyper, p1, p2, latent, ori, target, shift_lr, radius):
    """One accept-if-better projected SGD step on shifted latents (batches of ``batch_size``).

    Returns (new latents, accepted mask, loss before the step at the given steps)."""
    b = static.batch_size
    n = latent.shape[0]

    def batch_loss(lat, o, tgt):
        soft, _, sel = soft_hard_losses(eps_fn, schedule, static, hyper, p1, p2, lat, o, tgt)
        return jnp.mean(soft), (soft, sel)

    def one(lat, o, tgt):
        (_, (ref, sel)), (g_lat, g_o) = jax.value_and_grad(
            batch_loss, argnums=(0, 1), has_aux=True
        )(lat, o, tgt)
        base = jnp.where(sel[:, None], lat, o)
        grad = jnp.where(sel[:, None], g_lat, g_o)
        cand = project_to_ball(base - shift_lr * grad, o, radius)
        new = _loss_vec(eps_fn, schedule, static, hyper, p1, p2, cand, tgt)
        acc = new < ref
        return jnp.where(acc[:, None], cand, base), acc, ref

    shp = (n // b, b, -1)
    lat, acc, ref = jax.lax.map(
        lambda a: one(*a), (latent.reshape(shp), ori.reshape(shp), target.reshape(shp))
    )
    return lat.reshape(n, -1), acc.reshape(n), ref.reshape(n)


def _end_round(
    s: LD3State,
    *,
    radius: float,
    eps_fn: EpsFn,
    schedule: Schedule,
    static: LD3Static,
    hyper: LD3Hyper,
) -> LD3State:
    """The end of an LD3 round: shift the validation latents, shrink the shift rate when none was
    accepted, reshuffle, restart from the best steps and validate them."""
    kw = dict(eps_fn=eps_fn, schedule=schedule, static=static, hyper=hyper)
    vlat, acc, _ = _shift_latents(
        eps_fn,
        schedule,
        static,
        hyper,
        s.params1,
        s.params2,
        s.valid_latent,
        s.ori_valid,
        s.valid_target,
        s.shift_lr,
        radius,
    )
    changed = jnp.any(acc)
    shrink = jnp.logical_and(jnp.logical_not(changed), hyper.prior_bound_scale > 0)
    key, kp = jax.random.split(s.key)
    s = s.replace(
        valid_latent=vlat,
        valid_changed=changed,
        shift_lr=jnp.where(shrink, s.shift_lr * hyper.shift_lr_decay, s.shift_lr),
        round=s.round + 1,
        it_in_round=jnp.asarray(0),
        key=key,
        perm=jax.random.permutation(kp, static.n_train),
    )
    finished = s.round >= static.rounds_v1 + static.rounds_v2
    # each new round starts from the best steps, then validates
    s = s.replace(params1=s.best_params1, params2=s.best_params2, count_worse=jnp.asarray(0))
    s = _examine(s, **kw)
    return s.replace(done=jnp.logical_or(s.done, finished))


def ld3_step(
    state: LD3State,
    *,
    eps_fn: EpsFn,
    schedule: Schedule,
    static: LD3Static,
    hyper: LD3Hyper,
) -> tuple[LD3State, dict[str, Float[Array, ""]]]:
    """One LD3 iteration on one training batch (a no-op once ``state.done``); pure and jit-able.

    Returns the new state and scalar metrics: ``loss`` (soft loss of the batch before the step),
    ``hard_loss`` (the batch's loss at its unshifted noise, same steps), ``valid_loss``,
    ``best_loss``, ``accept`` (fraction of shifted latents accepted), ``active`` (1 if the step did
    work, 0 once done; then the losses repeat the best validation loss), ``lr1``, ``lr2``,
    ``shift_lr``.
    """
    b = static.batch_size
    radius = hyper.prior_bound_scale * static.dim / static.steps**2
    opt1, opt2 = _optimizers(static, hyper)
    kw = dict(eps_fn=eps_fn, schedule=schedule, static=static, hyper=hyper)
    end_round = functools.partial(_end_round, radius=radius, **kw)

    def active(state: LD3State):
        idx = jax.lax.dynamic_slice(state.perm, (state.it_in_round * b,), (b,))
        lat, ori, tgt = state.train_latent[idx], state.ori_train[idx], state.train_target[idx]

        def loss_fn(p1, p2, lat, o):
            soft, hard, sel = soft_hard_losses(eps_fn, schedule, static, hyper, p1, p2, lat, o, tgt)
            return jnp.mean(soft), (soft, hard, sel)

        (loss, (ref, hard, sel)), (g1, g2, g_lat, g_o) = jax.value_and_grad(
            loss_fn, argnums=(0, 1, 2, 3), has_aux=True
        )(state.params1, state.params2, lat, ori)
        lat = jnp.where(sel[:, None], lat, ori)
        gx = jnp.where(sel[:, None], g_lat, g_o)
        in_v1 = state.round < static.rounds_v1
        u1, o1 = opt1.update(g1, state.opt1, state.params1)
        p1 = optax.apply_updates(state.params1, u1)
        train2 = jnp.logical_and(static.decoupled, jnp.logical_not(in_v1))
        u2, o2_new = opt2.update(g2, state.opt2, state.params2)
        p2 = jnp.where(train2, optax.apply_updates(state.params2, u2), state.params2)
        o2 = jax.tree.map(lambda a, c: jnp.where(train2, a, c), o2_new, state.opt2)
        cand = lat - state.shift_lr * gx
        s = state.replace(params1=p1, params2=p2, opt1=o1, opt2=o2, iteration=state.iteration + 1)
        s = _examine(s, **kw)
        # _update_latents: project, re-solve with the current steps, accept if better.
        cand = project_to_ball(cand, ori, radius)
        new = _loss_vec(eps_fn, schedule, static, hyper, s.params1, s.params2, cand, tgt)
        acc = new < ref
        lat = jnp.where(acc[:, None], cand, lat)
        s = s.replace(train_latent=s.train_latent.at[idx].set(lat), it_in_round=s.it_in_round + 1)
        metrics = dict(
            loss=loss,
            hard_loss=jnp.mean(hard),
            accept=jnp.mean(acc.astype(jnp.float32)),
            valid_loss=validation_loss(s, **kw),
            active=jnp.ones_like(loss),
        )
        s = jax.lax.cond(s.it_in_round * b >= static.n_train, end_round, lambda s: s, s)
        return s, metrics

    def idle(state: LD3State):
        b = state.best_loss
        return state, dict(
            loss=b, hard_loss=b, accept=jnp.zeros_like(b), valid_loss=b, active=jnp.zeros_like(b)
        )

    state, metrics = jax.lax.cond(state.done, idle, active, state)
    metrics.update(
        best_loss=state.best_loss,
        lr1=_get_lr(state.opt1),
        lr2=_get_lr(state.opt2),
        shift_lr=state.shift_lr,
    )
    return state, metrics


def max_iterations(static: LD3Static) -> int:
    """Upper bound on the number of ``ld3_step`` calls that do work."""
    return (static.rounds_v1 + static.rounds_v2) * (static.n_train // static.batch_size)


def ld3_fit(
    state: LD3State, *, eps_fn: EpsFn, schedule: Schedule, static: LD3Static, hyper: LD3Hyper
) -> LD3State:
    """Run ``ld3_step`` until done, inside one ``lax.while_loop`` (jit-able)."""
    limit = max_iterations(static)

    def cond(s):
        return jnp.logical_and(jnp.logical_not(s.done), s.iteration < limit)

    def body(s):
        return ld3_step(s, eps_fn=eps_fn, schedule=schedule, static=static, hyper=hyper)[0]

    return jax.lax.while_loop(cond, body, state)


def learned_time_steps(
    state: LD3State, schedule: Schedule, static: LD3Static, hyper: LD3Hyper
) -> tuple[Float[Array, " n1"], Float[Array, " n1"]]:
    """The best (integration, evaluation) steps found so far."""
    return time_steps_from_params(
        state.best_params1,
        state.best_params2,
        schedule,
        time_mode=static.time_mode,
        win_rate=hyper.win_rate,
    )


# ----------------------------------------------------------------------------------------------
# the steps file
# ----------------------------------------------------------------------------------------------


def save_time_steps(
    path: str | Path,
    timesteps: Float[Array, " n1"],
    eval_timesteps: Float[Array, " n1"],
    *,
    sampler: SamplerSpec,
    nfe: int,
    schedule_name: str,
    extra: dict | None = None,
) -> None:
    """Write learned steps as JSON: the arrays the samplers take plus what they were learned for."""
    doc = {
        "timesteps": [float(v) for v in np.asarray(timesteps)],
        "eval_timesteps": [float(v) for v in np.asarray(eval_timesteps)],
        "sampler": dataclasses.asdict(sampler),
        "nfe": int(nfe),
        "schedule": schedule_name,
    }
    if extra:
        doc.update(extra)
    json_files.write(path, doc, indent=2)


def load_time_steps(path: str | Path) -> tuple[Float[Array, " n1"], Float[Array, " n1"], dict]:
    """Read a steps file written by :func:`save_time_steps`: (timesteps, eval_timesteps, metadata)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: got {str(path)!r}, expected an existing LD3 steps file")
    doc = json_files.read_json(
        path, keys=("timesteps", "eval_timesteps"), hint="rewrite it with save_time_steps"
    )
    ts = jnp.asarray(doc["timesteps"], jnp.float32)
    ts2 = jnp.asarray(doc["eval_timesteps"], jnp.float32)
    if ts.ndim != 1 or ts.shape != ts2.shape or ts.shape[0] < 2:
        raise ValueError(f"timesteps: got shape {ts.shape}, expected (n + 1,) like eval_timesteps")
    if not bool(jnp.all(jnp.diff(ts) < 0)):
        raise ValueError("timesteps: expected a strictly decreasing sequence")
    meta = {k: v for k, v in doc.items() if k not in ("timesteps", "eval_timesteps")}
    return ts, ts2, meta
