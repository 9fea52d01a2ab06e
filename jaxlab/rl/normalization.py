"""Running observation normalisation (optional in PPO).

For every floating-point leaf of an observation pytree a running mean and variance are kept per
*feature* (the last axis), pooled over all other axes: a flat observation ``[B, D]`` gets ``D``
statistics, an entity observation ``[B, N, F]`` gets ``F`` statistics shared by all entity slots,
so normalisation keeps the entity transformer permutation invariant. Integer and boolean leaves
(indexes, masks) pass through unchanged.

Update (Chan et al.'s parallel algorithm) with batch moments ``(mu_b, var_b, n_b)``:

    delta = mu_b - mu,  n' = n + n_b,  mu' = mu + delta n_b / n',
    var' = (var n + var_b n_b + delta^2 n n_b / n') / n'

and ``normalise(x) = clip((x - mu) / sqrt(var + eps), -clip, clip)``. Under ``shard_map`` the batch
moments are averaged over ``axis_name`` so every device keeps identical statistics.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Float


@struct.dataclass
class RunningStats:
    """Per-feature running moments; ``mean``/``var`` mirror the observation's leaves (a
    ``[features]`` array for float leaves, ``None`` for the others) and ``count`` is the number
    of pooled samples seen."""

    mean: Any
    var: Any
    count: Float[Array, ""]


def _none(x) -> bool:
    return x is None


def _is_float(x) -> bool:
    return jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)


def init_stats(obs_example: Any) -> RunningStats:
    """Zero-mean, unit-variance statistics for one (unbatched) observation pytree."""

    def one(x, fill):
        return jnp.full(x.shape[-1:], fill, jnp.float32) if _is_float(x) and x.ndim else None

    mean = jax.tree.map(lambda x: one(x, 0.0), obs_example)
    var = jax.tree.map(lambda x: one(x, 1.0), obs_example)
    return RunningStats(mean, var, jnp.asarray(1e-4, jnp.float32))


def update_stats(stats: RunningStats, batch: Any, axis_name: str | None = None) -> RunningStats:
    """Folds a batch of observations (any leading axes) into ``stats`` (module docstring)."""
    leaves_b = jax.tree.leaves(batch)
    mean_leaves, treedef = jax.tree.flatten(stats.mean, is_leaf=_none)
    var_leaves = jax.tree.leaves(stats.var, is_leaf=_none)
    new_mean, new_var, n_b = [], [], None
    for x, m, v in zip(leaves_b, mean_leaves, var_leaves, strict=True):
        if m is None:
            new_mean.append(None)
            new_var.append(None)
            continue
        flat = x.reshape(-1, x.shape[-1]).astype(jnp.float32)
        mu_b = jnp.mean(flat, axis=0)
        sq_b = jnp.mean(flat * flat, axis=0)
        if axis_name is not None:
            mu_b, sq_b = jax.lax.pmean((mu_b, sq_b), axis_name)
        var_b = jnp.maximum(sq_b - mu_b * mu_b, 0.0)
        count_b = jnp.asarray(flat.shape[0], jnp.float32)
        if axis_name is not None:
            count_b = jax.lax.psum(count_b, axis_name)
        n_b = count_b
        total = stats.count + count_b
        delta = mu_b - m
        new_mean.append(m + delta * count_b / total)
        m2 = v * stats.count + var_b * count_b + delta * delta * stats.count * count_b / total
        new_var.append(m2 / total)
    count = stats.count + (n_b if n_b is not None else 0.0)
    return RunningStats(
        jax.tree.unflatten(treedef, new_mean), jax.tree.unflatten(treedef, new_var), count
    )


def normalise(stats: RunningStats, obs: Any, *, clip: float = 10.0, eps: float = 1e-8) -> Any:
    """``clip((x - mean) / sqrt(var + eps))`` on float leaves; other leaves unchanged."""
    leaves, treedef = jax.tree.flatten(obs)
    means = jax.tree.leaves(stats.mean, is_leaf=_none)
    vars_ = jax.tree.leaves(stats.var, is_leaf=_none)
    out = []
    for x, m, v in zip(leaves, means, vars_, strict=True):
        if m is None:
            out.append(x)
        else:
            shape = (1,) * (x.ndim - 1) + m.shape
            m, v = m.reshape(shape), v.reshape(shape)
            out.append(jnp.clip((x - m) / jnp.sqrt(v + eps), -clip, clip).astype(x.dtype))
    return jax.tree.unflatten(treedef, out)
