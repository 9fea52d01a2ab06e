"""Off-policy replay buffers that live on the device, inside the compiled program.

A thin, checked front of ``flashbax``'s item buffer (``flashbax.make_item_buffer``): a ring of
``capacity`` transitions (any pytree of arrays, one leading axis per item), filled by
``add(state, batch)`` with a ``[n, ...]`` batch of items and sampled uniformly with replacement
over the items added so far (``sample(state, key).experience`` is a ``[batch_size, ...]`` batch).
Its state (``flashbax``'s ``TrajectoryBufferState``: arrays ``[1, capacity, ...]``, the write
index and a full flag) is a pytree of arrays, so it jits, vmaps over seeds, and the shared
checkpoint layer saves and restores it like any other train state.

``make_sequence_replay`` is the same front for world models: ``flashbax``'s trajectory buffer,
one ring per parallel env stream, sampling runs of ``sequence_length`` consecutive items.
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


@dataclasses.dataclass(frozen=True)
class SequenceReplayConfig:
    """Static sizes of a sequence replay buffer (world models).

    Attributes:
        num_envs: parallel streams written side by side (one item per stream per ``add``).
        capacity: items kept per stream (a ring; the oldest are overwritten).
        batch_size: sequences per sample.
        sequence_length: consecutive items per sampled sequence.
    """

    num_envs: int = 1
    capacity: int = 10_000
    batch_size: int = 16
    sequence_length: int = 64


def make_sequence_replay(cfg: SequenceReplayConfig, prefix: str = "") -> Replay:
    """``flashbax``'s trajectory buffer for ``cfg`` as a ``Replay``: ``add(state, batch)`` takes
    ``[num_envs, t, ...]`` (``t`` consecutive items of each stream), ``sample(state, key)
    .experience`` is ``[batch_size, sequence_length, ...]`` of consecutive items of one stream,
    and ``can_sample`` waits for ``sequence_length`` items per stream.

    Raises:
        ConfigError: a non-positive size, or a ``sequence_length`` longer than the buffer's
            per-stream ``capacity`` (named with ``prefix``).
    """
    for name in ("num_envs", "capacity", "batch_size", "sequence_length"):
        _check_int(prefix + name, getattr(cfg, name), 1)
    if cfg.sequence_length > cfg.capacity:
        raise ConfigError(
            prefix + "sequence_length",
            cfg.sequence_length,
            f"<= the buffer's capacity per stream ({cfg.capacity})",
            hint="a sampled sequence must fit in the buffer",
        )
    buf = fbx.make_trajectory_buffer(
        add_batch_size=cfg.num_envs,
        sample_batch_size=cfg.batch_size,
        sample_sequence_length=cfg.sequence_length,
        period=1,
        min_length_time_axis=cfg.sequence_length,
        max_length_time_axis=cfg.capacity,
    )
    return Replay(
        *(_allow_rank_promotion(f) for f in (buf.init, buf.add, buf.sample, buf.can_sample))
    )
