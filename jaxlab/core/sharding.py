"""The one sharding layer: meshes from config, logical-axis rules, batch/state placement,
``shard_map``, and multi-host start.

Models name *logical* axes (``batch``, ``seq``, ``embed``, ``heads``, ``kv``, ``mlp``, ``expert``,
``vocab``, ``client``); :data:`DEFAULT_RULES` maps them to the mesh axes ``data``, ``fsdp``, ``tensor``,
``expert``. The same model code therefore runs on 1 CPU, 8 simulated CPU devices and a TPU slice:
only the :class:`MeshConfig` changes.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxlab.core.config import ConfigError

MESH_AXES: tuple[str, ...] = ("data", "fsdp", "tensor", "expert")

#: logical axis -> mesh axis (or tuple of mesh axes, or None = replicated).
DEFAULT_RULES: tuple[tuple[str, Any], ...] = (
    ("batch", ("data", "fsdp", "expert")),
    ("seq", None),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv", None),
    ("mlp", "tensor"),
    ("vocab", "tensor"),
    ("expert", "expert"),
    # the stacked client axis of federated / DEPT pytrees: one client (or group) per data shard,
    # the inner dimensions of a stacked parameter are not sharded
    ("client", "data"),
)


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Sizes of the mesh axes; exactly one may be -1 (fill the remaining devices)."""

    data: int = -1
    fsdp: int = 1
    tensor: int = 1
    expert: int = 1

    def __post_init__(self):
        sizes = self.sizes()
        if sum(s == -1 for s in sizes) > 1:
            raise ConfigError("mesh", sizes, "at most one axis equal to -1")
        for name, s in zip(MESH_AXES, sizes, strict=True):
            if s == 0 or s < -1:
                raise ConfigError(f"mesh.{name}", s, "a positive integer or -1 (fill)")

    def sizes(self) -> tuple[int, ...]:
        return (self.data, self.fsdp, self.tensor, self.expert)

    def resolve(self, num_devices: int) -> tuple[int, ...]:
        """Concrete axis sizes for ``num_devices`` devices."""
        sizes = list(self.sizes())
        known = math.prod(s for s in sizes if s != -1)
        if -1 in sizes:
            if num_devices % known:
                raise ConfigError(
                    "mesh", self.sizes(), f"fixed axis sizes dividing the {num_devices} devices"
                )
            sizes[sizes.index(-1)] = num_devices // known
        if math.prod(sizes) != num_devices:
            raise ConfigError(
                "mesh", tuple(sizes), f"axis sizes whose product is the {num_devices} devices"
            )
        return tuple(sizes)


def make_mesh(cfg: MeshConfig = MeshConfig(), devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A ``Mesh`` with axes ``(data, fsdp, tensor, expert)`` over ``devices`` (default: all)."""
    devices = list(devices if devices is not None else jax.devices())
    shape = cfg.resolve(len(devices))
    try:
        from jax.experimental import mesh_utils

        arr = mesh_utils.create_device_mesh(shape, devices=devices)
    except (AssertionError, NotImplementedError, ValueError):
        arr = np.asarray(devices).reshape(shape)
    return Mesh(arr, MESH_AXES)


def logical_to_spec(
    logical: Sequence[str | None], rules: Sequence[tuple[str, Any]] = DEFAULT_RULES
) -> PartitionSpec:
    """``("batch", "embed") -> PartitionSpec(("data","fsdp","expert"), "fsdp")`` under ``rules``.

    A mesh axis is used at most once per spec (later logical axes that would reuse it replicate).
    """
    table = dict(rules)
    used: set[str] = set()
    out: list[Any] = []
    for name in logical:
        target = table.get(name) if name is not None else None
        axes = (target,) if isinstance(target, str) else tuple(target or ())
        axes = tuple(a for a in axes if a not in used)
        used.update(axes)
        out.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    return PartitionSpec(*out)


def _drop_trivial(spec: PartitionSpec, mesh: Mesh, shape: Sequence[int]) -> PartitionSpec:
    """Removes mesh axes of size 1 and axes that do not divide the dimension."""
    out = []
    for dim, entry in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec)), strict=True):
        axes = (entry,) if isinstance(entry, str) else tuple(entry or ())
        kept, prod = [], 1
        for a in axes:
            size = mesh.shape[a]
            if size > 1 and dim % (prod * size) == 0:
                kept.append(a)
                prod *= size
        out.append(None if not kept else kept[0] if len(kept) == 1 else tuple(kept))
    return PartitionSpec(*out)


def state_shardings(
    abstract_state: Any, mesh: Mesh, rules: Sequence[tuple[str, Any]] = DEFAULT_RULES
) -> Any:
    """NamedShardings for a (possibly ``nn.Partitioned``-boxed) abstract state, same tree structure.

    Leaves boxed with logical names (``nn.with_logical_partitioning``; optimiser moments of such
    parameters are boxed too) are placed by ``rules``; other leaves are replicated. Mesh axes that
    do not divide a dimension fall back to replication.
    """

    def place(shape: Sequence[int], names: Sequence[str | None]) -> NamedSharding:
        spec = logical_to_spec(names, rules) if names else PartitionSpec()
        return NamedSharding(mesh, _drop_trivial(spec, mesh, shape))

    def one(x: Any) -> Any:
        if isinstance(x, nn.Partitioned):
            return x.replace_boxed(place(x.value.shape, x.names))
        return place(getattr(x, "shape", ()), ())

    return jax.tree.map(one, abstract_state, is_leaf=lambda x: isinstance(x, nn.Partitioned))


def batch_sharding(mesh: Mesh, ndim: int, leading: int = 0) -> NamedSharding:
    """Sharding of an array whose axis ``leading`` is the batch (split over data, fsdp, expert)."""
    axes = tuple(a for a in ("data", "fsdp", "expert") if mesh.shape[a] > 1)
    entries: list[Any] = [None] * ndim
    if axes:
        entries[leading] = axes if len(axes) > 1 else axes[0]
    return NamedSharding(mesh, PartitionSpec(*entries))


def shard_batch(batch: Any, mesh: Mesh, leading: int = 0) -> Any:
    """Places a host batch pytree on ``mesh`` split along its batch axis.

    Multi-host: each process passes its *local* slice; the global array is assembled with
    ``jax.make_array_from_process_local_data``.
    """

    def put(x):
        x = np.asarray(x)
        sh = batch_sharding(mesh, x.ndim, leading)
        if jax.process_count() > 1:
            return jax.make_array_from_process_local_data(sh, x)
        n = math.prod(mesh.shape[a] for a in ("data", "fsdp", "expert"))
        if x.shape[leading] % n:
            raise ValueError(
                f"batch dimension {x.shape[leading]} is not divisible by the mesh's data-parallel "
                f"size {n} (mesh {dict(mesh.shape)})"
            )
        return jax.device_put(x, sh)

    return jax.tree.map(put, batch)


def shard_map(
    fn: Callable, mesh: Mesh, in_specs: Any, out_specs: Any, *, check_vma: bool = False
) -> Callable:
    """``jax.shard_map`` over ``mesh`` (per-device code with explicit collectives)."""
    return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=check_vma)


def maybe_initialize_distributed() -> bool:
    """Calls ``jax.distributed.initialize()`` when the environment describes a multi-process run.

    Recognised: ``JAX_COORDINATOR_ADDRESS`` + ``JAX_NUM_PROCESSES`` + ``JAX_PROCESS_ID`` (explicit),
    or a TPU pod / SLURM environment that ``jax.distributed.initialize()`` auto-detects
    (``JAXLAB_DISTRIBUTED=1`` opts in). Returns True if it initialised.
    """
    coord = os.environ.get("JAX_COORDINATOR_ADDRESS")
    if coord:
        jax.distributed.initialize(
            coordinator_address=coord,
            num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
            process_id=int(os.environ["JAX_PROCESS_ID"]),
        )
        return True
    if os.environ.get("JAXLAB_DISTRIBUTED") == "1":
        jax.distributed.initialize()
        return True
    return False


def is_main_process() -> bool:
    """Process 0 writes logs and checkpoint metadata."""
    return jax.process_index() == 0


def leading_axis_sharding(
    shape: Sequence[int], mesh: Mesh, axes: tuple[str, ...] = ("data", "fsdp", "expert")
) -> NamedSharding:
    """An array of ``shape`` split along its leading axis over the mesh's data-parallel ``axes``
    (those of size > 1 that divide it, as :func:`state_shardings`; replicated otherwise).

    For per-example pieces of a state (per-seed states, stored pairs or latents) and for batches
    sampled inside a train step (see :func:`constrain_leading`)."""
    if not len(shape):
        return NamedSharding(mesh, PartitionSpec())
    return NamedSharding(mesh, _drop_trivial(PartitionSpec(axes), mesh, shape))


def constrain_leading(tree: Any, mesh: Mesh) -> Any:
    """``jax.lax.with_sharding_constraint`` of every leaf of ``tree`` (inside a jitted step) to
    :func:`leading_axis_sharding`: a batch sampled inside the step is split over the data axes.

    The values do not depend on the mesh (``jax.random`` is sharding-invariant), so the same step
    gives the same batch on one device and on a slice."""
    return jax.tree.map(
        lambda x: jax.lax.with_sharding_constraint(x, leading_axis_sharding(x.shape, mesh)), tree
    )
