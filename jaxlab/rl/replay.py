"""An off-policy replay buffer that lives on the device, inside the compiled program.

A thin, checked front of ``flashbax``'s item buffer (``flashbax.make_item_buffer``): a ring of
``capacity`` transitions (any pytree of arrays, one leading axis per item), filled by
``add(state, batch)`` with a ``[n, ...]`` batch of items and sampled uniformly with replacement
over the items added so far (``sample(state, key).experience`` is a ``[batch_size, ...]`` batch).
Its state (``flashbax``'s ``TrajectoryBufferState``: arrays ``[1, capacity, ...]``, the write
index and a full flag) is a pytree of arrays, so it jits, vmaps over seeds, and the shared
checkpoint layer saves and restores it like any other train state.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import flashbax as fbx
import jax

from jaxlab.core.config import ConfigError


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    """Static sizes of a replay buffer.

    Attributes:
        buffer_size: capacity in transitions (the oldest are overwritten when full).
        batch_size: transitions per sample.
        min_size: transitions needed before sampling (``can_sample``); at least 1.
    """

    buffer_size: int = 100_000
    batch_size: int = 256
    min_size: int = 1


def _check_int(key: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(key, value, f"an int >= {low}")


@dataclasses.dataclass(frozen=True)
class Replay:
    """The buffer's pure functions: ``init(item) -> state``, ``add(state, batch) -> state``,
    ``sample(state, key)`` (``.experience``: ``[batch_size, ...]``), ``can_sample(state)``."""

    init: Callable[[Any], Any]
    add: Callable[[Any, Any], Any]
    sample: Callable[[Any, Any], Any]
    can_sample: Callable[[Any], Any]


def _allow_rank_promotion(fn: Callable) -> Callable:
    # flashbax broadcasts implicitly (``start[:, None] + arange(n)``), which a caller running
    # with ``jax_numpy_rank_promotion="raise"`` (as jaxlab's tests do) would reject.
    @functools.wraps(fn)
    def wrapped(*args):
        with jax.numpy_rank_promotion("allow"):
            return fn(*args)

    return wrapped


def make_replay(cfg: ReplayConfig, prefix: str = "") -> Replay:
    """The ``flashbax`` item buffer for ``cfg`` as a ``Replay``.

    Raises:
        ConfigError: a non-positive size, or a buffer smaller than the batch or than ``min_size``
            (the error names ``<prefix>buffer_size``).
    """
    _check_int(prefix + "batch_size", cfg.batch_size, 1)
    _check_int(prefix + "min_size", cfg.min_size, 1)
    _check_int(prefix + "buffer_size", cfg.buffer_size, 1)
    if cfg.buffer_size < max(cfg.batch_size, cfg.min_size):
        raise ConfigError(
            prefix + "buffer_size",
            cfg.buffer_size,
            f">= batch_size ({cfg.batch_size}) and >= min_size ({cfg.min_size})",
            hint="a buffer smaller than the batch cannot be sampled without repeats",
        )
    buf = fbx.make_item_buffer(
        max_length=cfg.buffer_size,
        min_length=cfg.min_size,
        sample_batch_size=cfg.batch_size,
        add_sequences=False,
        add_batches=True,
    )
    return Replay(
        *(_allow_rank_promotion(f) for f in (buf.init, buf.add, buf.sample, buf.can_sample))
    )
