"""Expert parallelism: the MoE experts split over the mesh axis ``expert`` under ``shard_map``.

Experts are split over the mesh axis ``expert``, tokens ``[B, S, d]`` over the mesh axes
``("data", "fsdp", "expert")`` that exist in the mesh. Inside ``jax.shard_map`` each device routes
its sorted rows to the devices owning their experts with an ``all_to_all`` over ``expert``,
computes its local experts and sends the results back with a second ``all_to_all``. The dropless
exchange buffers are sized for the worst case (every assignment going to one device), so the result
is exact; XLA:CPU has no ``ragged_all_to_all``, which would shrink the bytes moved on GPU/TPU. The
capacity dispatch treats each device's tokens as one capacity group (GShard).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec
from jaxtyping import Array, Float, Int

from jaxlab.lm.moe.config import MoEConfig
from jaxlab.lm.moe.experts import (
    ExpertWeights,
    _capacity_combine,
    _capacity_dispatch,
    _combine,
    _swiglu_batched,
    _swiglu_grouped,
    expert_capacity,
)
from jaxlab.lm.moe.kernels import resolve_grouped_matmul
from jaxlab.lm.moe.sorting import _inverse_permutation, sort_by_expert

#: mesh axes over which tokens are split in the expert-parallel layer (those present in the mesh).
TOKEN_MESH_AXES: tuple[str, ...] = ("data", "fsdp", "expert")
EXPERT_MESH_AXIS = "expert"


def _ep_dropless_local(x, experts, weights, w1, w3, w2, *, n_ep, impl, tile_size):
    """Per-device dropless EP: all_to_all rows to expert owners, grouped matmul, all_to_all back."""
    x, experts, weights = (a.reshape(-1, a.shape[-1]) for a in (x, experts, weights))
    num_tokens, top_k = experts.shape
    d = x.shape[-1]
    n = num_tokens * top_k
    e_loc = w1.shape[0]
    flat = experts.reshape(-1)
    order = sort_by_expert(flat, e_loc * n_ep)
    xs = x[order // top_k]
    dest_counts = jnp.bincount(flat, length=e_loc * n_ep).reshape(n_ep, e_loc)
    send_sizes = jnp.sum(dest_counts, axis=1)
    send_off = jnp.cumsum(send_sizes) - send_sizes
    r = jnp.arange(n, dtype=jnp.int32)
    src = jnp.clip(send_off[:, None] + r[None, :], 0, n - 1)
    send = jnp.where((r[None, :] < send_sizes[:, None])[..., None], xs[src], 0)
    recv = jax.lax.all_to_all(send, EXPERT_MESH_AXIS, 0, 0)
    recv_counts = jax.lax.all_to_all(dest_counts, EXPERT_MESH_AXIS, 0, 0)
    cum = jnp.cumsum(recv_counts, axis=1)
    local_e = jax.vmap(lambda c: jnp.searchsorted(c, r, side="right"))(cum).reshape(-1)
    order2 = sort_by_expert(local_e, e_loc + 1)  # padding rows have local_e = e_loc
    rows = recv.reshape(n_ep * n, d)[order2]
    out = _swiglu_grouped(
        rows,
        ExpertWeights(w1=w1, w3=w3, w2=w2),
        jnp.sum(recv_counts, axis=0),
        impl=impl,
        tile_size=tile_size,
    )
    back = out[_inverse_permutation(order2)].reshape(n_ep, n, d)
    ret = jax.lax.all_to_all(back, EXPERT_MESH_AXIS, 0, 0)
    dest = flat[order] // e_loc
    ys = ret[dest, r - send_off[dest]]
    y_assign = ys[_inverse_permutation(order)].reshape(num_tokens, top_k, d)
    return _combine(y_assign, weights), jnp.zeros((), jnp.int32)


def _ep_capacity_local(x, experts, weights, w1, w3, w2, *, n_ep, capacity_factor, token_axes):
    """Per-device capacity EP (GShard): the device's tokens form one capacity group."""
    x, experts, weights = (a.reshape(-1, a.shape[-1]) for a in (x, experts, weights))
    num_tokens, top_k = experts.shape
    e_loc = w1.shape[0]
    num_experts = e_loc * n_ep
    capacity = expert_capacity(
        num_tokens, num_experts=num_experts, top_k=top_k, capacity_factor=capacity_factor
    )
    xbuf, plan = _capacity_dispatch(x, experts, num_experts, capacity)
    xbuf = xbuf.reshape(n_ep, e_loc, capacity, x.shape[-1])
    recv = jax.lax.all_to_all(xbuf, EXPERT_MESH_AXIS, 0, 0)
    out = _swiglu_batched(recv, ExpertWeights(w1=w1, w3=w3, w2=w2))
    ybuf = jax.lax.all_to_all(out, EXPERT_MESH_AXIS, 0, 0).reshape(num_experts, capacity, -1)
    y, dropped = _capacity_combine(ybuf, plan, weights, num_tokens)
    return y, jax.lax.psum(dropped, token_axes)


def _context_mesh(mesh):
    if mesh is None:
        mesh = jax.sharding.get_abstract_mesh()
    if mesh is None or mesh.empty or EXPERT_MESH_AXIS not in mesh.axis_names:
        raise ValueError(
            f"expert_parallel: got True, but the mesh in context ({mesh}) has no "
            f"'{EXPERT_MESH_AXIS}' axis; expected a mesh set with jax.set_mesh(...) whose axes "
            f"include '{EXPERT_MESH_AXIS}'"
        )
    explicit = [
        name
        for name, kind in zip(mesh.axis_names, getattr(mesh, "axis_types", ()), strict=False)
        if kind == jax.sharding.AxisType.Explicit
    ]
    if explicit:
        raise ValueError(
            f"expert_parallel: mesh axes {explicit} are AxisType.Explicit; expected AxisType.Auto "
            "axes (as built by jaxlab.core.sharding.make_mesh)"
        )
    return mesh


def validate_expert_parallel(config: MoEConfig, batch: int, mesh) -> tuple[str, ...]:
    """Checks an expert-parallel layout before tracing; returns the token mesh axes.

    Raises:
        ValueError: naming ``num_experts`` if the ``expert`` axis size does not divide it, or
            ``batch`` if the token mesh axes do not divide the batch.
    """
    mesh = _context_mesh(mesh)
    n_ep = mesh.shape[EXPERT_MESH_AXIS]
    if config.num_experts % n_ep:
        raise ValueError(
            f"num_experts: got {config.num_experts}, expected a multiple of the mesh axis "
            f"'{EXPERT_MESH_AXIS}' size {n_ep}"
        )
    token_axes = tuple(a for a in TOKEN_MESH_AXES if a in mesh.axis_names)
    n_tok = math.prod(mesh.shape[a] for a in token_axes)
    if batch % n_tok:
        raise ValueError(
            f"batch: got {batch}, expected a multiple of {n_tok}, the product of the mesh axes "
            f"{token_axes} over which the expert-parallel layer splits tokens"
        )
    return token_axes


def expert_parallel_experts(
    x: Float[Array, "batch seq embed"],
    experts: Int[Array, "batch seq k"],
    weights: Float[Array, "batch seq k"],
    expert_weights: ExpertWeights,
    *,
    config: MoEConfig,
    mesh: Any = None,
) -> tuple[Float[Array, "batch seq embed"], Int[Array, ""]]:
    """Expert-parallel MoE inside ``jax.shard_map`` (experts over ``expert``, tokens over
    ``("data", "fsdp", "expert")``).

    Dropless: exact (equals :func:`jaxlab.lm.moe.experts.dropless_experts`). Capacity: each
    device's tokens form one capacity group (GShard), so drops can differ from the single-group
    layer; without drops the results agree.

    Returns:
        ``y [B, S, d]`` and the number of dropped assignments over the whole batch.
    """
    mesh = _context_mesh(mesh)
    token_axes = validate_expert_parallel(config, x.shape[0], mesh)
    n_ep = mesh.shape[EXPERT_MESH_AXIS]
    tok = PartitionSpec(token_axes)
    exp = PartitionSpec(EXPERT_MESH_AXIS)
    if config.dispatch == "dropless":
        local = functools.partial(
            _ep_dropless_local,
            n_ep=n_ep,
            impl=resolve_grouped_matmul(config.grouped_matmul),
            tile_size=config.tile_size,
        )
    else:
        local = functools.partial(
            _ep_capacity_local,
            n_ep=n_ep,
            capacity_factor=config.capacity_factor,
            token_axes=token_axes,
        )

    def shaped(x, experts, weights, w1, w3, w2):
        y, dropped = local(x, experts, weights, w1, w3, w2)
        return y.reshape(x.shape), dropped

    args = (x, experts, weights, expert_weights.w1, expert_weights.w3, expert_weights.w2)
    specs = (tok, tok, tok, exp, exp, exp)
    return jax.shard_map(shaped, mesh=mesh, in_specs=specs, out_specs=(tok, PartitionSpec()))(*args)
