"""Post-training quantisation of a trained decoder at evaluation ("Scaling Laws for Precision",
Kumar et al., ICLR 2025): the validation loss after round-to-nearest or GPTQ quantisation of the
weights at each ``P_post`` and its increase ``δ_PTQ`` over the unquantised loss, and the paper's
parameter count ``N`` (non-embedding parameters)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jaxlab.core.config import ConfigError
from jaxlab.lm.model import DecoderConfig
from jaxlab.lm.quant import check_group_size, gptq_quantize, rtn_quantize, validate_bits_list

PTQ_METHODS = ("rtn", "gptq")


@dataclasses.dataclass(frozen=True)
class PTQConfig:
    """Post-training quantisation at evaluation.

    Attributes:
        bits: ``P_post`` values (each in [2, 32]); empty: no PTQ.
        methods: subset of ``("rtn", "gptq")``.
        calib_batches: training batches used as GPTQ calibration data.
        block_size: GPTQ lazy block size.
        group_size: ``-1``: one scale per output channel; ``g``: one per output channel and group
            of ``g`` consecutive inputs (RTN and GPTQ; GPTQ's groups follow its processing
            order), a divisor of every quantised kernel's input dimension.
        desc_act: GPTQ's act-order: inputs quantised in decreasing order of ``diag H``.
    """

    bits: tuple[int, ...] = (3, 4, 6)
    methods: tuple[str, ...] = ("rtn", "gptq")
    calib_batches: int = 2
    block_size: int = 64
    group_size: int = -1
    desc_act: bool = False

    def __post_init__(self):
        if self.bits:
            object.__setattr__(self, "bits", validate_bits_list("bits", self.bits))
        bad = [m for m in self.methods if m not in PTQ_METHODS]
        if bad or isinstance(self.methods, str):
            raise ConfigError("methods", self.methods, f"names from {PTQ_METHODS}")
        object.__setattr__(self, "methods", tuple(self.methods))
        for name in ("calib_batches", "block_size"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an integer >= 1")
        check_group_size("group_size", self.group_size)


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


def ptq_losses(
    model: DecoderConfig,
    params: Any,
    calib: np.ndarray,
    ptq: PTQConfig,
    val_loss: Callable[[Any], float],
    base: float,
) -> dict[str, float]:
    """``ptq_<method>_<bits>_loss`` and ``_delta`` (over ``base``, the unquantised loss) for every
    bit width and method of ``ptq``; ``val_loss(params) -> float`` evaluates, ``calib [n, T]`` is
    GPTQ's calibration data."""
    out: dict[str, float] = {}
    for bits in ptq.bits:
        for method in ptq.methods:
            if method == "rtn":
                qp = rtn_quantize(model, params, bits, group_size=ptq.group_size)
            else:
                qp = gptq_quantize(
                    model,
                    params,
                    calib,
                    bits,
                    block_size=ptq.block_size,
                    group_size=ptq.group_size,
                    desc_act=ptq.desc_act,
                )
            loss = val_loss(qp)
            out[f"ptq_{method}_{bits}_loss"] = loss
            out[f"ptq_{method}_{bits}_delta"] = loss - base
    return out
