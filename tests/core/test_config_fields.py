"""Every numeric field of every recipe's config is validated where it is declared.

For each installed recipe, its default config is walked (nested configs included); every ``int``
or ``float`` field (not ``bool``) is set to a value outside its range, and resolving the config
must raise :class:`ConfigError` naming the field's full dotted key. Config construction only: no
model is built, nothing is compiled.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from collections.abc import Iterator
from typing import Any

import pytest

from jaxlab.core import config as config_lib
from jaxlab.core import recipe as recipe_lib

#: fields that accept any value of their type (a dotted key, or its last part for every config)
EXEMPT: dict[str, str] = {
    "seed": "a PRNG seed: any int is a seed",
    "eval_seed": "a PRNG seed: any int is a seed",
    "skills.target_entropy_per_dim": "SAC target entropy per action dim: any real (default -1)",
    "sac.target_entropy_per_dim": "SAC target entropy per action dim: any real (default -1)",
    "clarity_low": "a clarity condition value: any real (log-scale, default -3)",
    "clarity_high": "a clarity condition value: any real (log-scale, default 1)",
    "experiment.grid_lo": "a signed bound of the lambda grid (checked only as grid_lo < grid_hi)",
    "experiment.grid_hi": "a signed bound of the lambda grid (checked only as grid_lo < grid_hi)",
}

#: the out-of-range value of fields whose valid range includes -1 (default: -1)
BAD: dict[str, Any] = {
    "mesh.data": 0,  # -1 means "fill the remaining devices"
    "mesh.fsdp": 0,
    "mesh.tensor": 0,
    "mesh.expert": 0,
    "reference.mesh.data": 0,
    "reference.mesh.fsdp": 0,
    "reference.mesh.tensor": 0,
    "reference.mesh.expert": 0,
    "graph.phi": 2.0,  # the cSBM angle lies in [-1, 1]
    "scene_type": 3,  # -1 means all three scene types
    "ptq.group_size": 0,  # -1 means one scale per output channel
}


def _numeric_fields(cfg: Any, prefix: str = "") -> Iterator[str]:
    """Dotted keys of the ``int``/``float`` fields of ``cfg`` (``X | None`` included)."""
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        value, key = getattr(cfg, f.name), prefix + f.name
        if dataclasses.is_dataclass(value):
            yield from _numeric_fields(value, key + ".")
            continue
        tp = hints[f.name]
        union = typing.get_origin(tp) in (typing.Union, types.UnionType)
        types_ = set(typing.get_args(tp)) if union else {tp}
        if bool not in types_ and types_ & {int, float}:
            yield key


def _exempt(key: str) -> bool:
    return key in EXEMPT or key.rsplit(".", 1)[-1] in EXEMPT


@functools.cache
def _default(name: str) -> Any:
    """The recipe's default config (its default preset applied)."""
    return recipe_lib.get(name).config()


def _fields(name: str) -> list[str]:
    """The dotted keys checked for recipe ``name``: its numeric fields less the exempt ones."""
    return [key for key in _numeric_fields(_default(name)) if not _exempt(key)]


#: probabilities, fractions, rates in [0, 1] and EMA decays in [0, 1): 2.0 is above every one
_UNIT_INTERVAL = re.compile(r"(^prob$|_prob$|fraction|^ema_decay$|_rate$|^p_)")


def _unnamed(name: str, key: str, value: Any) -> str | None:
    """Why setting ``key`` to ``value`` is not reported as a ConfigError naming ``key`` (None
    when it is)."""
    try:
        config_lib.replace(_default(name), **{key: value})
    except config_lib.ConfigError as e:
        return None if f"'{key}'" in str(e) else f"{key}={value!r}: {e}"
    return f"{key}={value!r}: accepted"


@pytest.mark.parametrize("name", recipe_lib.names())
def test_out_of_range_value_names_the_full_key(name):
    keys = _fields(name)
    assert keys
    failures = [_unnamed(name, key, BAD.get(key, -1)) for key in keys]
    assert [f for f in failures if f] == []


@pytest.mark.parametrize("name", recipe_lib.names())
def test_value_above_the_unit_interval_names_the_full_key(name):
    keys = [k for k in _fields(name) if _UNIT_INTERVAL.search(k.rsplit(".", 1)[-1])]
    failures = [_unnamed(name, key, 2.0) for key in keys]
    assert [f for f in failures if f] == []


def test_exempt_and_bad_keys_exist():
    """A renamed field does not silently leave the tables."""
    keys = {k for name in recipe_lib.names() for k in _numeric_fields(_default(name))}
    leaves = {k.rsplit(".", 1)[-1] for k in keys}
    for key in [*EXEMPT, *BAD]:
        assert key in keys or key in leaves, key
