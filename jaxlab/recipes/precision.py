"""``precision``: one language-model run at a given size N, data D and training precision
(``P_w, P_a, P_kv``), with post-training quantisation of the result ("Scaling Laws for Precision",
Kumar et al., ICLR 2025).

The decoder trains with forward-only fake quantisation (``model.quant``; :mod:`jaxlab.lm.quant`)
through the shared LM train step (:mod:`jaxlab.lm.training`). ``D = loop.total_steps ×
data.batch_size × data.seq_len`` tokens; ``N`` is the number of non-embedding parameters (the
paper's convention, :func:`jaxlab.lm.ptq.non_embedding_params`). Evaluation reports the
validation loss, ``N``, ``D`` so far, the training precisions, their granularities
(``model.quant.{w,a,kv}_granularity``; by default the paper's: weights per output channel,
activations per tensor, KV cache per head) and number formats (``model.quant.{w,a,kv}_format``:
``int`` by default, or FP8 ``fp8_e4m3``/``fp8_e5m2`` and FP4 ``fp4_e2m1``) and, for every
``ptq.bits`` and ``ptq.methods`` (round-to-nearest and GPTQ on ``ptq.calib_batches`` training
batches), the validation loss after post-training quantisation of the weights and its increase
``δ_PTQ`` (:mod:`jaxlab.lm.ptq`). ``ptq.group_size`` (``-1``: per output channel; else one scale
per group of that many inputs, a divisor of every quantised kernel's input dimension) and
``ptq.desc_act`` (GPTQ's act-order) select GPTQ's grouping and order as the reference
implementation names them. A grid of runs over ``N``, ``D`` and the precisions
(``experiments/precision_grid/precision_grid.py``, through ``jaxlab.core.sweep``) gives the table
that :func:`jaxlab.lm.scaling_laws.fit_law` reads.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import numpy as np

from jaxlab.core.loop import LoopConfig
from jaxlab.core.optim import OptimConfig
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.core.sharding import MeshConfig
from jaxlab.lm import training
from jaxlab.lm.data import ByteLMDataConfig, train_iterator
from jaxlab.lm.model import Decoder, DecoderConfig
from jaxlab.lm.ptq import PTQConfig, non_embedding_params, ptq_losses
from jaxlab.lm.quant import check_group_size_fits
from jaxlab.lm.training import LmState


@dataclasses.dataclass(frozen=True)
class PrecisionConfig:
    seed: int = 0
    model: DecoderConfig = DecoderConfig(
        d_model=64, n_layers=2, n_heads=4, head_dim=16, d_ff=176, max_len=64
    )
    data: ByteLMDataConfig = ByteLMDataConfig(seq_len=64, batch_size=16)
    optim: OptimConfig = dataclasses.replace(training.OPTIM, warmup_steps=20)
    ptq: PTQConfig = PTQConfig()
    mesh: MeshConfig = MeshConfig()
    val_batches: int = 8
    init_from: str = ""
    loop: LoopConfig = LoopConfig(
        total_steps=400, steps_per_call=20, log_every=100, eval_every=200, checkpoint_every=200
    )

    def __post_init__(self):
        training.check_lm_config(self)
        check_group_size_fits(self.model, self.ptq.group_size, "ptq.group_size")

    @property
    def tokens(self) -> int:
        """``D``: training tokens of the whole run."""
        return self.loop.total_steps * self.data.batch_size * self.data.seq_len


def build(cfg: PrecisionConfig, mesh: jax.sharding.Mesh) -> Parts:
    model = Decoder(cfg.model)
    total = cfg.loop.total_steps
    host, hosts = jax.process_index(), jax.process_count()
    batch = training.abstract_batch(cfg.data, mesh)
    eval_loss = jax.jit(lambda params, tokens: training.loss_fn(model, params, tokens))
    tokens_per_step = cfg.data.batch_size * cfg.data.seq_len

    def val_loss(params: Any, windows: list[jax.Array]) -> float:
        return training.mean_validation_loss(model, params, windows, eval_loss)

    def evaluate(state: LmState) -> dict[str, float | str]:
        windows = training.validation_windows(cfg.data, batch, cfg.val_batches)
        params = jax.device_get(state.params)
        base = val_loss(params, windows)
        q = cfg.model.quant
        out = {
            "val_loss": base,
            "N": float(non_embedding_params(params)),
            "D": float(int(state.step) * tokens_per_step),
            "P_w": float(q.w_bits or math.inf),
            "P_a": float(q.a_bits or math.inf),
            "P_kv": float(q.kv_bits or math.inf),
            "w_granularity": q.w_granularity,
            "a_granularity": q.a_granularity,
            "kv_granularity": q.kv_granularity,
            "w_format": q.w_format,
            "a_format": q.a_format,
            "kv_format": q.kv_format,
            "ptq_group_size": float(cfg.ptq.group_size),
            "ptq_desc_act": float(cfg.ptq.desc_act),
        }
        if cfg.ptq.bits:
            calib_it = train_iterator(
                dataclasses.replace(cfg.data, seed=cfg.data.seed + 1), shard_index=0, shard_count=1
            )
            calib = np.concatenate(
                [
                    b["tokens"][:, :-1]
                    for _, b in zip(range(cfg.ptq.calib_batches), calib_it, strict=False)
                ]
            )
            loss = functools.partial(val_loss, windows=windows)
            out |= ptq_losses(cfg.model, params, calib, cfg.ptq, loss, base)
        return out

    return Parts(
        init=training.make_init(model, cfg.optim, total, cfg.data.seq_len),
        train_step=training.make_train_step(model, cfg.optim, total),
        abstract_batch=batch,
        data=lambda: train_iterator(
            cfg.data, shard_index=host, shard_count=hosts, vocab_size=cfg.model.vocab_size
        ),
        evaluate=evaluate,
        units_per_step=(tokens_per_step, "tok"),
    )


RECIPE = register(
    Recipe(
        name="precision",
        config_cls=PrecisionConfig,
        build=build,
        description="LM trained at given weight/activation/KV precision, then PTQ (RTN, GPTQ)",
        traced=training.TRACED,
        finetune=training.finetune,
    )
)

__all__ = ["PrecisionConfig", "RECIPE"]
