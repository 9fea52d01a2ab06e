"""``lm-tiny``: a dense byte-level decoder LM trained on the shipped corpus with the shared loop.

The end-to-end test of the core: grain data (shuffle, pack, batch, checkpointed position), AdamW
with warmup + cosine decay and gradient clipping (optax), parameters annotated with logical axes
and placed on the mesh of ``cfg.mesh`` (data parallel and FSDP), validation loss compared with the
corpus' unigram entropy. ``init_from=hf:DIR`` fine-tunes a Hugging Face Llama directory on a
token file of its tokenizer (``data.source``).
"""

from __future__ import annotations

import dataclasses

import jax

from jaxlab.core.loop import LoopConfig
from jaxlab.core.optim import OptimConfig
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.core.sharding import MeshConfig
from jaxlab.lm import training
from jaxlab.lm.data import (
    ByteLMDataConfig,
    train_iterator,
)
from jaxlab.lm.model import Decoder, DecoderConfig
from jaxlab.lm.training import LmState


@dataclasses.dataclass(frozen=True)
class LmTinyConfig:
    seed: int = 0
    model: DecoderConfig = DecoderConfig(
        d_model=128, n_layers=2, n_heads=4, head_dim=32, d_ff=384, max_len=128
    )
    data: ByteLMDataConfig = ByteLMDataConfig(seq_len=128, batch_size=32)
    optim: OptimConfig = training.OPTIM
    mesh: MeshConfig = MeshConfig()
    val_batches: int = 16
    init_from: str = ""
    loop: LoopConfig = LoopConfig(
        total_steps=600, steps_per_call=10, log_every=50, eval_every=200, checkpoint_every=200
    )

    def __post_init__(self):
        training.check_lm_config(self)


def build(cfg: LmTinyConfig, mesh: jax.sharding.Mesh) -> Parts:
    model = Decoder(cfg.model)
    total = cfg.loop.total_steps
    host, hosts = jax.process_index(), jax.process_count()
    batch = training.abstract_batch(cfg.data, mesh)
    eval_loss = jax.jit(lambda params, tokens: training.loss_fn(model, params, tokens))

    def evaluate(state: LmState) -> dict[str, float]:
        windows = training.validation_windows(cfg.data, batch, cfg.val_batches)
        val = training.mean_validation_loss(model, state.params, windows, eval_loss)
        return {"val_loss": val, **training.corpus_metrics(cfg.data, val)}

    return Parts(
        init=training.make_init(model, cfg.optim, total, cfg.data.seq_len),
        train_step=training.make_train_step(model, cfg.optim, total),
        abstract_batch=batch,
        data=lambda: train_iterator(
            cfg.data, shard_index=host, shard_count=hosts, vocab_size=cfg.model.vocab_size
        ),
        evaluate=evaluate,
        units_per_step=(cfg.data.batch_size * cfg.data.seq_len, "tok"),
    )


RECIPE = register(
    Recipe(
        name="lm-tiny",
        config_cls=LmTinyConfig,
        build=build,
        description="dense byte-level decoder LM on the shipped corpus (the core's end-to-end test)",
        traced=training.TRACED,
        finetune=training.finetune,
    )
)
