"""TPU slice configs (``tpu_configs/*.yaml``): validation and resolution into a recipe config.

A file names a recipe and preset, the slice (accelerator type, topology, chips, hosts), the mesh,
the per-device batch and config overrides; see ``tpu_configs/README.md``.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from jaxlab.core import config as config_lib
from jaxlab.core.config import ConfigError

_KEYS = {
    "recipe",
    "preset",
    "tpu",
    "mesh",
    "per_device_batch",
    "batch_key",
    "overrides",
    "launch",
    "smoke_overrides",
}
_TPU_KEYS = {"accelerator_type", "topology", "chips", "hosts"}


@dataclasses.dataclass(frozen=True)
class TpuSlice:
    accelerator_type: str
    topology: str
    chips: int
    hosts: int


@dataclasses.dataclass(frozen=True)
class TpuRun:
    """A resolved TPU config: the recipe name, its config, the slice and the launch template."""

    recipe: str
    config: Any
    slice: TpuSlice
    launch: str
    path: Path
    smoke_overrides: tuple[str, ...] = ()


def load(path: str | Path, extra_overrides: tuple[str, ...] = (), *, smoke: bool = False) -> TpuRun:
    """Reads and validates ``path``; the recipe config gets the file's overrides, its mesh and the
    global batch ``per_device_batch * chips`` (written to the config key ``batch_key``, default
    ``data.batch_size``; e.g. ``ppo.num_envs`` for RL), then ``extra_overrides``.

    ``smoke=True`` also applies the file's ``smoke_overrides`` (``{chips}`` is replaced by the
    slice's chip count) after its overrides: the same mesh and sharding at a depth and width that
    lower quickly on simulated CPU devices (the TPU-config test)."""
    from jaxlab.core import recipe as recipe_lib

    path = Path(path)
    raw = config_lib.load_yaml(path)
    unknown = set(raw) - _KEYS
    if unknown:
        k = sorted(unknown)[0]
        raise ConfigError(
            f"{path.name}:{k}",
            raw[k],
            "one of " + ", ".join(sorted(_KEYS)),
            config_lib.suggest(k, _KEYS),
        )
    for k in ("recipe", "tpu", "mesh", "per_device_batch"):
        if k not in raw:
            raise ConfigError(f"{path.name}:{k}", None, "a required key")
    tpu = raw["tpu"]
    if not isinstance(tpu, dict) or set(tpu) != _TPU_KEYS:
        raise ConfigError(f"{path.name}:tpu", tpu, "a mapping with " + ", ".join(sorted(_TPU_KEYS)))
    sl = TpuSlice(**tpu)
    if sl.chips % sl.hosts:
        raise ConfigError(f"{path.name}:tpu.hosts", sl.hosts, f"a divisor of chips={sl.chips}")
    mesh = raw["mesh"]
    if not isinstance(mesh, dict):
        raise ConfigError(f"{path.name}:mesh", mesh, "a mapping of mesh axis sizes")
    if math.prod(int(v) for v in mesh.values()) != sl.chips:
        raise ConfigError(
            f"{path.name}:mesh", mesh, f"axis sizes whose product is chips={sl.chips}"
        )
    recipe = recipe_lib.get(raw["recipe"])
    overrides = list(raw.get("overrides") or [])
    overrides += [f"mesh.{k}={int(v)}" for k, v in mesh.items()]
    batch_key = str(raw.get("batch_key", "data.batch_size"))
    overrides.append(f"{batch_key}={int(raw['per_device_batch']) * sl.chips}")
    smoke_list = tuple(str(o).format(chips=sl.chips) for o in raw.get("smoke_overrides") or ())
    if smoke:
        overrides += list(smoke_list)
    overrides += list(extra_overrides)
    cfg = recipe.config(raw.get("preset"), overrides)
    return TpuRun(recipe.name, cfg, sl, str(raw.get("launch", "")), path, smoke_list)
