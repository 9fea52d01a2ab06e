"""The language-model train state and step shared by the LM recipes (``lm-tiny``, ``olmoe``, ...).

The optimiser is the recipe's ``optim`` (:class:`jaxlab.core.optim.OptimConfig`; :data:`OPTIM`:
AdamW with linear warm-up, cosine decay and global-norm clipping). The learning rate and weight
decay are *traced* hyper-parameters: they live in ``LmState.hparams`` and the optimiser is built
from them inside the compiled step, so ``jaxlab sweep lm-tiny optim.lr=1e-3,3e-3`` trains
both values in one vmapped program. Parameters are annotated with logical axes and placed on the
mesh by ``jaxlab.core.sharding``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, Int

from jaxlab.core import optim
from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig
from jaxlab.core.run import batch_spec
from jaxlab.lm.data import ByteLMDataConfig, load_corpus, unigram_entropy
from jaxlab.lm.hub import init_from
from jaxlab.lm.model import Decoder, next_token_loss
from jaxlab.lm.tokenizer import VOCAB_SIZE

#: the LM optimiser: AdamW (β2 = 0.95), a linear warm-up over 50 steps then cosine decay to
#: ``0.1 · lr`` at the run's last step, global-norm clipping at 1
OPTIM = OptimConfig(
    name="adamw",
    lr=3e-3,
    schedule="cosine",
    warmup_steps=50,
    min_lr_ratio=0.1,
    weight_decay=0.1,
    b2=0.95,
    clip_norm=1.0,
)

#: the LM recipes' traced hyper-parameters (dotted config keys)
TRACED: tuple[str, ...] = optim.traced_keys()


def check_lm_config(cfg: Any) -> None:
    """The checks every LM recipe config shares (``model``, ``data``, ``val_batches`` and, where
    the recipe has one, ``init_from``): ``init_from=hf:DIR`` sets the model's architecture
    (:func:`jaxlab.lm.hub.init_from.check`); the byte tokenizer's ids fit the model's vocabulary
    (trained on the shipped corpus; a ``data.source`` token file's ids are checked when the data
    is opened, before the first step, :func:`jaxlab.lm.data.split_windows`), a window fits the
    model's context, and evaluation reads at least one batch."""
    if hasattr(cfg, "init_from"):
        init_from.check(cfg)
    if cfg.data.source is None and cfg.model.vocab_size < VOCAB_SIZE:
        raise ConfigError(
            "model.vocab_size",
            cfg.model.vocab_size,
            f"at least {VOCAB_SIZE}: the byte tokenizer's ids (256 bytes, BOS, EOS, PAD) index the "
            "embedding, and an id past it makes the loss non-finite",
        )
    if cfg.data.seq_len > cfg.model.max_len:
        raise ConfigError(
            "data.seq_len", cfg.data.seq_len, f"at most model.max_len={cfg.model.max_len}"
        )
    if cfg.val_batches < 1:
        raise ConfigError("val_batches", cfg.val_batches, "an integer >= 1")


def finetune(cfg: Any, state: Any) -> Any:
    """The LM recipes' fine-tune hook: with ``cfg.init_from=hf:DIR`` the fresh ``state`` takes the
    directory's parameters and a fresh optimiser (:func:`jaxlab.lm.hub.init_from.finetune`)."""
    opt = optim.make(cfg.optim, cfg.loop.total_steps)
    return init_from.finetune(cfg, state, opt.init)


@flax.struct.dataclass
class LmState:
    """Parameters (boxed with logical axis names), optimiser state, step counter and the traced
    hyper-parameters (``{"optim.lr": ..., "optim.weight_decay": ...}``)."""

    params: Any
    opt_state: Any
    step: jax.Array
    hparams: dict[str, jax.Array] = flax.struct.field(default_factory=dict)


def loss_fn(model: Decoder, params: Any, tokens: Int[Array, "batch seq1"]) -> Float[Array, ""]:
    """Mean next-token cross-entropy (nats/token) of packed windows ``tokens [B, T+1]``."""
    logits = model.apply(params, tokens[:, :-1])
    return next_token_loss(logits, tokens[:, 1:])


Objective = Callable[
    [Decoder, Any, jax.Array, Mapping[str, jax.Array]], tuple[jax.Array, dict[str, jax.Array]]
]


def plain_objective(model: Decoder, params: Any, tokens: jax.Array, hparams: Mapping) -> Any:
    """The next-token loss, no metrics (``hparams``: the state's traced values, unused)."""
    return loss_fn(model, params, tokens), {}


def make_init(
    model: Decoder,
    optim_cfg: OptimConfig,
    total_steps: int,
    seq_len: int,
    hparams: Mapping[str, Any] | None = None,
) -> Callable[[jax.Array], LmState]:
    """``key -> LmState`` (parameters of ``model`` on a ``[1, seq_len]`` dummy batch); the state's
    traced values are ``hparams`` (default: the optimiser's, :func:`jaxlab.core.optim.hparams`)."""
    opt = optim.make(optim_cfg, total_steps)
    values = optim.hparams(optim_cfg) if hparams is None else hparams

    def init(key: jax.Array) -> LmState:
        tokens = jnp.zeros((1, seq_len), jnp.int32)
        params = {"params": model.init(key, tokens)["params"]}
        traced = {k: jnp.float32(v) for k, v in values.items()}
        return LmState(params, opt.init(params), jnp.zeros((), jnp.int32), traced)

    return init


def make_train_step(
    model: Decoder, optim_cfg: OptimConfig, total_steps: int, objective: Objective = plain_objective
) -> Callable[[LmState, dict[str, jax.Array]], tuple[LmState, dict[str, jax.Array]]]:
    """One optimiser step on ``objective(model, params, batch["tokens"], state.hparams) -> (loss,
    metrics)``, the optimiser built from the state's traced hyper-parameters."""

    def train_step(state: LmState, batch: dict[str, jax.Array]):
        opt = optim.from_hparams(optim_cfg, total_steps, state.hparams)
        (loss, extra), grads = jax.value_and_grad(
            functools.partial(objective, model), has_aux=True
        )(state.params, batch["tokens"], state.hparams)
        updates, opt_state = opt.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = {"loss": loss, "grad_norm": optax.global_norm(grads), **extra}
        return state.replace(params=params, opt_state=opt_state, step=state.step + 1), metrics

    return train_step


def abstract_batch(data: ByteLMDataConfig, mesh: jax.sharding.Mesh) -> dict[str, Any]:
    """One step's global batch ``{"tokens": [B, T+1] int32}`` split over the data axes."""
    tokens = jax.ShapeDtypeStruct((data.batch_size, data.seq_len + 1), jnp.int32)
    return batch_spec({"tokens": tokens}, mesh)


def validation_windows(
    data: ByteLMDataConfig, abstract: dict[str, Any], num_batches: int
) -> list[jax.Array]:
    """The first ``num_batches`` validation windows of this host's shard, placed on the mesh
    with the train batch's shardings (``abstract`` from :func:`abstract_batch`)."""
    from jaxlab.core.run import place_batches
    from jaxlab.lm.data import validation_iterator

    it = validation_iterator(data, shard_index=jax.process_index(), shard_count=jax.process_count())
    return [
        place_batches(b, abstract, leading=0)["tokens"]
        for _, b in zip(range(num_batches), it, strict=False)
    ]


def corpus_metrics(data: ByteLMDataConfig, val_loss: float) -> dict[str, float]:
    """Metrics beside the validation loss (nats/token): on the shipped byte corpus its unigram
    entropy and ``val_bits_per_byte``; on a token file (``data.source``) ``val_bits_per_token``."""
    if data.source is not None:
        return {"val_bits_per_token": val_loss / float(np.log(2))}
    entropy = unigram_entropy(load_corpus())
    return {"unigram_entropy": entropy, "val_bits_per_byte": val_loss / float(np.log(2))}


def mean_validation_loss(
    model: Decoder, params: Any, windows: list[jax.Array], loss: Callable | None = None
) -> float:
    """Mean next-token loss of ``params`` over ``windows`` (``loss``: a jitted
    ``(params, tokens) -> loss`` to reuse across calls; default :func:`loss_fn` of ``model``)."""
    loss = loss or jax.jit(lambda p, t: loss_fn(model, p, t))
    return float(np.mean([float(loss(params, t)) for t in windows]))
