"""``precision``: one language-model run at a given size N, data D and training precision
(``P_w, P_a, P_kv``), with post-training quantisation of the result ("Scaling Laws for Precision",
Kumar et al., ICLR 2025).

The decoder trains with forward-only fake quantisation (``model.quant``; :mod:`jaxlab.lm.quant`)
through the shared LM train step (:mod:`jaxlab.lm.training`). ``D = loop.total_steps ×
data.batch_size × data.seq_len`` tokens; ``N`` is the number of non-embedding parameters (the
paper's convention), reported by :func:`non_embedding_params`. Evaluation reports the validation
loss, ``N``, ``D`` so far and, for every ``ptq.bits`` and ``ptq.methods`` (round-to-nearest and
GPTQ on ``ptq.calib_batches`` training batches), the validation loss after post-training
quantisation of the weights and its increase ``δ_PTQ``. A grid of runs over ``N``, ``D`` and the
precisions (``experiments/precision_grid/precision_grid.py``, through ``jaxlab.core.sweep``)
gives the table that :func:`jaxlab.lm.scaling_laws.fit_law` reads.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np

from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.core.sharding import MeshConfig
from jaxlab.lm import training
from jaxlab.lm.data import ByteLMDataConfig, train_iterator
from jaxlab.lm.model import Decoder, DecoderConfig
from jaxlab.lm.quant import gptq_quantize, rtn_quantize, validate_bits_list
from jaxlab.lm.training import LmState, OptimConfig
from jaxlab.nn.quantization import QuantConfig

PTQ_METHODS = ("rtn", "gptq")


@dataclasses.dataclass(frozen=True)
class PTQConfig:
    """Post-training quantisation at evaluation.

    Attributes:
        bits: ``P_post`` values (each in [2, 32]); empty: no PTQ.
        methods: subset of ``("rtn", "gptq")``.
        calib_batches: training batches used as GPTQ calibration data.
        block_size: GPTQ lazy block size.
    """

    bits: tuple[int, ...] = (3, 4, 6)
    methods: tuple[str, ...] = ("rtn", "gptq")
    calib_batches: int = 2
    block_size: int = 64

    def __post_init__(self):
        if self.bits:
            object.__setattr__(self, "bits", validate_bits_list("ptq.bits", self.bits))
        bad = [m for m in self.methods if m not in PTQ_METHODS]
        if bad or isinstance(self.methods, str):
            raise ConfigError("ptq.methods", self.methods, f"names from {PTQ_METHODS}")
        object.__setattr__(self, "methods", tuple(self.methods))
        if self.calib_batches < 1:
            raise ConfigError("ptq.calib_batches", self.calib_batches, "an integer >= 1")


@dataclasses.dataclass(frozen=True)
class PrecisionConfig:
    seed: int = 0
    model: DecoderConfig = DecoderConfig(
        d_model=64, n_layers=2, n_heads=4, head_dim=16, d_ff=176, max_len=64
    )
    data: ByteLMDataConfig = ByteLMDataConfig(seq_len=64, batch_size=16)
    optim: OptimConfig = OptimConfig(lr=3e-3, warmup_steps=20)
    ptq: PTQConfig = PTQConfig()
    mesh: MeshConfig = MeshConfig()
    val_batches: int = 8
    loop: LoopConfig = LoopConfig(
        total_steps=400, steps_per_call=20, log_every=100, eval_every=200, checkpoint_every=200
    )

    def __post_init__(self):
        training.check_lm_config(self)

    @property
    def tokens(self) -> int:
        """``D``: training tokens of the whole run."""
        return self.loop.total_steps * self.data.batch_size * self.data.seq_len


def non_embedding_params(params: Any) -> int:
    """``N``: parameters outside the token embedding and the output head."""
    tree = params["params"] if "params" in params else params
    return int(
        sum(
            math.prod(np.shape(x))
            for k, sub in tree.items()
            if k not in ("embed", "head")
            for x in jax.tree.leaves(sub)
        )
    )


def build(cfg: PrecisionConfig, mesh: jax.sharding.Mesh) -> Parts:
    model = Decoder(cfg.model)
    total = cfg.loop.total_steps
    host, hosts = jax.process_index(), jax.process_count()
    batch = training.abstract_batch(cfg.data, mesh)
    eval_loss = jax.jit(lambda params, tokens: training.loss_fn(model, params, tokens))
    tokens_per_step = cfg.data.batch_size * cfg.data.seq_len

    def val_loss(params: Any, windows: list[jax.Array]) -> float:
        return training.mean_validation_loss(model, params, windows, eval_loss)

    def evaluate(state: LmState) -> dict[str, float]:
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
            for bits in cfg.ptq.bits:
                for method in cfg.ptq.methods:
                    if method == "rtn":
                        qp = rtn_quantize(cfg.model, params, bits)
                    else:
                        qp = gptq_quantize(
                            cfg.model, params, calib, bits, block_size=cfg.ptq.block_size
                        )
                    loss = val_loss(qp, windows)
                    out[f"ptq_{method}_{bits}_loss"] = loss
                    out[f"ptq_{method}_{bits}_delta"] = loss - base
        return out

    return Parts(
        init=training.make_init(model, cfg.optim, total, cfg.data.seq_len),
        train_step=training.make_train_step(model, cfg.optim, total),
        abstract_batch=batch,
        data=lambda: train_iterator(cfg.data, shard_index=host, shard_count=hosts),
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
    )
)

__all__ = ["PTQConfig", "PrecisionConfig", "QuantConfig", "RECIPE", "non_embedding_params"]
