"""A tiny regression recipe with a grain data iterator, used to test the shared loop."""

from __future__ import annotations

import dataclasses

import flax.struct
import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.core.loop import LoopConfig
from jaxlab.core.recipe import Parts, Recipe
from jaxlab.core.run import batch_spec

#: how many times the train step was traced (a compile-count probe for the sweep tests)
TRACES = {"train_step": 0}


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    seed: int = 0
    lr: float = 0.05
    dim: int = 4
    batch: int = 8
    nan_at_step: int = -1  # inject a NaN loss at this step (for tests)
    nan_state_at_step: int = -1  # make the parameters NaN after this step, loss finite (tests)
    nan_state_min_lr: float = 0.0  # ... but only when lr >= this (a divergence a lower lr avoids)
    blowup_at_step: int = -1  # scale the parameters by 1e4 after this step (finite, not healthy)
    loop: LoopConfig = LoopConfig(total_steps=20, log_every=5, progress=False)


@flax.struct.dataclass
class ToyState:
    w: jax.Array
    opt_state: optax.OptState
    step: jax.Array
    key: jax.Array
    hparams: dict


def _source(dim: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, dim)).astype(np.float32)
    w_true = np.arange(1, dim + 1, dtype=np.float32)
    y = x @ w_true + 0.01 * rng.normal(size=256).astype(np.float32)
    return np.concatenate([x, y[:, None]], axis=1)


def build(cfg: ToyConfig, mesh: jax.sharding.Mesh) -> Parts:
    table = _source(cfg.dim)

    def init(key):
        w = jax.random.normal(key, (cfg.dim,)) * 0.1
        opt = optax.adam(cfg.lr)
        hp = {"lr": jnp.float32(cfg.lr)}
        return ToyState(w, opt.init(w), jnp.zeros((), jnp.int32), key, hp)

    def train_step(state, batch):
        TRACES["train_step"] += 1
        opt = optax.adam(state.hparams["lr"])
        x, y = batch[:, :-1], batch[:, -1]
        noise_key, key = jax.random.split(state.key)

        def loss_fn(w):
            pred = x @ w + 1e-3 * jax.random.normal(noise_key, y.shape)
            return jnp.mean((pred - y) ** 2)

        loss, g = jax.value_and_grad(loss_fn)(state.w)
        loss = jnp.where(state.step + 1 == cfg.nan_at_step, jnp.nan, loss)
        upd, opt_state = opt.update(g, state.opt_state)
        w = optax.apply_updates(state.w, upd)
        if cfg.lr >= cfg.nan_state_min_lr:
            w = jnp.where(state.step + 1 == cfg.nan_state_at_step, jnp.nan, w)
            w = jnp.where(state.step + 1 == cfg.blowup_at_step, w * 1e4, w)
        return state.replace(w=w, opt_state=opt_state, step=state.step + 1, key=key), {"loss": loss}

    def data():
        ds = (
            grain.MapDataset.source(table)
            .shuffle(seed=cfg.seed)
            .repeat()
            .batch(cfg.batch, drop_remainder=True)
        )
        return iter(ds.to_iter_dataset())

    def evaluate(state):
        return {"w_err": float(jnp.linalg.norm(state.w - jnp.arange(1, cfg.dim + 1)))}

    example = jax.ShapeDtypeStruct((cfg.batch, cfg.dim + 1), jnp.float32)
    return Parts(
        init=init,
        train_step=train_step,
        abstract_batch=batch_spec(example, mesh),
        data=data,
        evaluate=evaluate,
        units_per_step=(cfg.batch, "ex"),
    )


TOY = Recipe(
    name="toy", config_cls=ToyConfig, build=build, description="test regression", traced=("lr",)
)
