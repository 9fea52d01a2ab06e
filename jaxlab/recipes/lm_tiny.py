"""``lm-tiny``: a dense byte-level decoder LM trained on the shipped corpus with the shared loop.

The end-to-end test of the core: grain data (shuffle, pack, batch, checkpointed position), AdamW
with warmup + cosine decay and gradient clipping (optax), parameters annotated with logical axes
and placed on the mesh of ``cfg.mesh`` (data parallel and FSDP), validation loss compared with the
corpus' unigram entropy.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.recipe import Recipe, Task, register
from jaxlab.core.sharding import MeshConfig, make_mesh, shard_batch, state_shardings
from jaxlab.lm.data import (
    ByteLMDataConfig,
    load_corpus,
    train_iterator,
    unigram_entropy,
    validation_iterator,
)
from jaxlab.lm.model import Decoder, DecoderConfig, next_token_loss


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """AdamW with linear warmup and cosine decay to ``min_lr_ratio * lr``; global-norm clipping."""

    lr: float = 3e-3
    warmup_steps: int = 50
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    b1: float = 0.9
    b2: float = 0.95
    eps: float = 1e-8
    clip_norm: float = 1.0

    def __post_init__(self):
        if not self.lr > 0:
            raise ConfigError("optim.lr", self.lr, "a positive float")
        if self.warmup_steps < 0:
            raise ConfigError("optim.warmup_steps", self.warmup_steps, "an integer >= 0")


@dataclasses.dataclass(frozen=True)
class LmTinyConfig:
    seed: int = 0
    model: DecoderConfig = DecoderConfig(
        d_model=128, n_layers=2, n_heads=4, head_dim=32, d_ff=384, max_len=128
    )
    data: ByteLMDataConfig = ByteLMDataConfig(seq_len=128, batch_size=32)
    optim: OptimConfig = OptimConfig()
    mesh: MeshConfig = MeshConfig()
    val_batches: int = 16
    loop: LoopConfig = LoopConfig(
        total_steps=600, steps_per_call=10, log_every=50, eval_every=200, checkpoint_every=200
    )

    def __post_init__(self):
        if self.data.seq_len > self.model.max_len:
            raise ConfigError(
                "data.seq_len", self.data.seq_len, f"at most model.max_len={self.model.max_len}"
            )
        if self.val_batches < 1:
            raise ConfigError("val_batches", self.val_batches, "an integer >= 1")


@flax.struct.dataclass
class LmState:
    """Parameters (boxed with logical axis names), optimiser state and step counter."""

    params: Any
    opt_state: Any
    step: jax.Array


def make_optimizer(cfg: OptimConfig, total_steps: int) -> optax.GradientTransformation:
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=cfg.lr,
        warmup_steps=cfg.warmup_steps,
        decay_steps=max(total_steps, cfg.warmup_steps + 1),
        end_value=cfg.lr * cfg.min_lr_ratio,
    )
    return optax.chain(
        optax.clip_by_global_norm(cfg.clip_norm),
        optax.adamw(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay),
    )


def loss_fn(model: Decoder, params: Any, tokens: jax.Array) -> jax.Array:
    """Mean next-token cross-entropy (nats/token) of packed windows ``tokens [B, T+1]``."""
    logits = model.apply(params, tokens[:, :-1])
    return next_token_loss(logits, tokens[:, 1:])


@dataclasses.dataclass(frozen=True)
class LmParts:
    """The pure pieces of the recipe, shared by the loop, tests and TPU lowering."""

    model: Decoder
    optimizer: optax.GradientTransformation
    mesh: jax.sharding.Mesh
    init: Any
    train_step: Any
    eval_loss: Any


def build_parts(
    cfg: LmTinyConfig, devices: Any = None, model: Decoder | None = None, objective: Any = None
) -> LmParts:
    """The recipe's pure pieces. ``objective(model, params, tokens) -> (loss, metrics)`` replaces
    the plain cross-entropy :func:`loss_fn` as training loss (e.g. adding MoE auxiliary losses)."""
    model = model if model is not None else Decoder(cfg.model)
    if objective is None:
        objective = lambda m, p, t: (loss_fn(m, p, t), {})  # noqa: E731
    opt = make_optimizer(cfg.optim, cfg.loop.total_steps)
    mesh = make_mesh(cfg.mesh, devices)

    def init(key: jax.Array) -> LmState:
        tokens = jnp.zeros((1, cfg.data.seq_len), jnp.int32)
        params = model.init(key, tokens)
        return LmState(params=params, opt_state=opt.init(params), step=jnp.zeros((), jnp.int32))

    def train_step(state: LmState, batch: dict[str, jax.Array]) -> tuple[LmState, dict]:
        (loss, extra), grads = jax.value_and_grad(
            functools.partial(objective, model), has_aux=True
        )(state.params, batch["tokens"])
        updates, opt_state = opt.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = {"loss": loss, "grad_norm": optax.global_norm(grads), **extra}
        return LmState(params, opt_state, state.step + 1), metrics

    eval_loss = jax.jit(lambda params, tokens: loss_fn(model, params, tokens))
    return LmParts(model, opt, mesh, init, train_step, eval_loss)


def build(cfg: LmTinyConfig) -> Task:
    parts = build_parts(cfg)
    host, hosts = jax.process_index(), jax.process_count()
    entropy = unigram_entropy(load_corpus())

    def evaluate(state: LmState) -> dict[str, float]:
        losses = []
        it = validation_iterator(cfg.data, shard_index=host, shard_count=hosts)
        for _, batch in zip(range(cfg.val_batches), it, strict=False):
            losses.append(float(parts.eval_loss(state.params, batch["tokens"])))
        val = float(np.mean(losses))
        return {"val_loss": val, "unigram_entropy": entropy, "val_bits_per_byte": val / np.log(2)}

    tokens_per_step = cfg.data.batch_size * cfg.data.seq_len
    return Task(
        init=parts.init,
        train_step=parts.train_step,
        evaluate=evaluate,
        data=lambda: train_iterator(cfg.data, shard_index=host, shard_count=hosts),
        units_per_step=(tokens_per_step, "tok"),
        place_batch=lambda b: shard_batch(b, parts.mesh, leading=1),
        state_sharding=lambda abstract: state_shardings(abstract, parts.mesh),
    )


RECIPE = register(
    Recipe(
        name="lm-tiny",
        config_cls=LmTinyConfig,
        build=build,
        description="dense byte-level decoder LM on the shipped corpus (the core's end-to-end test)",
        presets_dir=Path(__file__).parent / "presets" / "lm-tiny",
    )
)
