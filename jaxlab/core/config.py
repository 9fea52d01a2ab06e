"""Typed, frozen, nested configs with YAML presets and dotted ``key=value`` overrides.

A config is a frozen :func:`dataclasses.dataclass` (hashable, so it can be a static argument of
``jax.jit``) whose fields are ``int``, ``float``, ``bool``, ``str``, ``Literal[...]``, ``tuple[...]``,
``X | None`` or nested config dataclasses, each with a default.

Resolution order: dataclass defaults, then a preset (a YAML file holding a partial nested mapping),
then command-line overrides ``a.b.c=value``. Values are parsed with PyYAML; construction and type
checking are done by dacite in strict mode. This module adds what those libraries do not give: the
error messages (the dotted key, the value, what was expected and the closest valid key) and
validation through each dataclass's ``__post_init__`` raising :class:`ConfigError`.

Why not draccus or tyro: both parse ``--a.b=value`` argparse flags and exit the process on error;
jaxlab's command line and its tests need bare ``a.b=value`` overrides and errors that are
exceptions carrying the key, the value and a suggestion. PyYAML + dacite do the parsing and typing.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import dacite
import yaml

C = TypeVar("C")


class ConfigError(ValueError):
    """An invalid configuration: names the dotted key, the offending value and what was expected."""

    def __init__(
        self, key: str, value: Any, expected: str, hint: str | None = None, message: str = ""
    ):
        self.key, self.value, self.expected, self.hint = key, value, expected, hint
        msg = message or f"config key '{key}': got {value!r}, expected {expected}"
        if hint:
            msg += f" ({hint})"
        super().__init__(msg)


def is_config(obj: Any) -> bool:
    """True for a config dataclass class or instance."""
    return dataclasses.is_dataclass(obj)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _nested_config_type(tp: Any) -> type | None:
    """The config dataclass inside ``tp`` (``Cfg`` or ``Cfg | None``), else None."""
    if dataclasses.is_dataclass(tp):
        return tp
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if dataclasses.is_dataclass(arg):
                return arg
    return None


def _plain(v: Any) -> Any:
    """A config value as YAML/JSON writes it: configs become dicts, tuples lists."""
    if dataclasses.is_dataclass(v):
        return {f.name: _plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, tuple | list):
        return [_plain(x) for x in v]
    return v


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain nested dict of a config (tuples become lists), suitable for YAML or JSON."""
    return _plain(cfg)


def to_yaml(cfg: Any) -> str:
    """The resolved config as YAML text."""
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}} -> {"a.b": 1}``."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def diff(a: Any, b: Any) -> list[str]:
    """Dotted keys whose values differ between two configs (or config dicts)."""
    fa = flatten(a if isinstance(a, Mapping) else to_dict(a))
    fb = flatten(b if isinstance(b, Mapping) else to_dict(b))
    return sorted(
        k for k in fa.keys() | fb.keys() if fa.get(k, "<missing>") != fb.get(k, "<missing>")
    )


_NO_DEFAULT = object()


def field_default(cfg: Any, key: str) -> Any:
    """The declared default of the dotted field ``key`` of config ``cfg`` as :func:`to_dict`
    writes its values, or a sentinel that equals no value when the key does not exist or has no default
    (e.g. a field added to a config class after an older run was saved)."""
    *parents, name = key.split(".")
    obj = cfg
    for part in parents:
        obj = getattr(obj, part, None)
    if not dataclasses.is_dataclass(obj):
        return _NO_DEFAULT
    for f in dataclasses.fields(obj):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return _plain(f.default)
            if f.default_factory is not dataclasses.MISSING:
                return _plain(f.default_factory())
    return _NO_DEFAULT


def suggest(key: str, choices: Iterable[str]) -> str | None:
    close = difflib.get_close_matches(key, list(choices), n=1, cutoff=0.5)
    return f"did you mean '{close[0]}'?" if close else None


def _check_keys(cls: type, data: Mapping[str, Any], prefix: str) -> None:
    """Unknown keys anywhere in ``data`` are errors naming the key and suggesting the closest one."""
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for k, v in data.items():
        path = f"{prefix}{k}"
        if k not in names:
            hint = suggest(k, names)
            valid = ", ".join(names)
            raise ConfigError(path, v, f"one of the keys of {cls.__name__}: {valid}", hint)
        sub = _nested_config_type(hints[k])
        if sub is not None and isinstance(v, Mapping):
            _check_keys(sub, v, path + ".")
        elif sub is not None and v is not None and not isinstance(v, Mapping):
            raise ConfigError(path, v, f"a mapping of {sub.__name__} fields")


def _expected(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce_float(v: Any) -> float:
    if isinstance(v, bool):
        raise TypeError(v)
    return float(v)


def _field_type(cls: type, dotted: str) -> Any:
    tp: Any = cls
    for part in dotted.split("."):
        sub = _nested_config_type(tp)
        if sub is None:
            return None
        tp = _hints(sub).get(part)
    return tp


def allow_nonfinite(default: float, **kwargs: Any) -> Any:
    """A float field that may be ``inf``/``-inf``/``nan`` (every other float field rejects them):
    ``bound: float = allow_nonfinite(math.inf)``."""
    return dataclasses.field(default=default, metadata={"allow_nonfinite": True, **kwargs})


def _is_float_type(tp: Any) -> bool:
    """``float`` or ``float | None``."""
    if tp is float:
        return True
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args == [float]
    return False


def _check_float(path: str, v: Any, allow_nonfinite_: bool) -> Any:
    """A float field's value: a real number (or a string YAML left unparsed, such as ``1e-3``),
    finite unless the field allows otherwise; bools and other strings name the key."""
    if v is None or (isinstance(v, float) and math.isfinite(v)):
        return v
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise ConfigError(path, v, "a float")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ConfigError(path, v, "a float") from None
    if not math.isfinite(f) and not allow_nonfinite_:
        raise ConfigError(path, v, "a finite float")
    return f


def _under(prefix: str, key: str) -> str:
    """The dotted key of a nested config's error ``key`` under ``prefix``. A config that names
    its own usual place (``LoopConfig`` raising ``loop.total_steps``, ``MeshConfig`` raising
    ``mesh``) is not named twice: ``reference.loop.`` + ``loop.total_steps`` is
    ``reference.loop.total_steps``."""
    parent = prefix.rstrip(".").rsplit(".", 1)[-1]
    if key.split(".")[0] == parent:
        return prefix[: -len(parent) - 1] + key
    return prefix + key


def _build(cls: type, data: Mapping[str, Any], prefix: str) -> Any:
    """Builds ``cls`` bottom-up so every error carries the full dotted key: float fields are
    checked here (type and finiteness), nested configs are built first, and an error a nested
    dataclass raises about its own field (``top_k``) is re-raised under its path
    (``model.moe.top_k``)."""
    hints = _hints(cls)
    data = dict(data)
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        tp, path = hints[f.name], prefix + f.name
        v = data[f.name]
        sub = _nested_config_type(tp)
        if sub is not None and isinstance(v, Mapping):
            data[f.name] = _build(sub, v, path + ".")
        elif _is_float_type(tp):
            data[f.name] = _check_float(path, v, bool(f.metadata.get("allow_nonfinite")))
    try:
        return dacite.from_dict(
            cls,
            data,
            config=dacite.Config(strict=True, cast=[tuple], type_hooks={float: _coerce_float}),
        )
    except dacite.WrongTypeError as e:
        path = prefix + (e.field_path or "?")
        raise ConfigError(path, e.value, _expected(e.field_type)) from None
    except ConfigError as e:
        if prefix and not e.key.startswith(prefix) and e.key not in ("?", ""):
            raise ConfigError(_under(prefix, e.key), e.value, e.expected, e.hint) from None
        raise
    except (TypeError, ValueError) as e:
        # A dataclass's own validation (e.g. "DecoderConfig.head_dim=3: expected ..."): name the
        # field when the message starts with it, else the nested config.
        named = re.match(rf"{cls.__name__}\.(\w+)=", str(e))
        where = prefix + named.group(1) if named else prefix.rstrip(".") or cls.__name__
        raise ConfigError(
            where, None, "", message=f"config key '{where}': invalid {cls.__name__}: {e}"
        ) from None


def from_dict(cls: type[C], data: Mapping[str, Any]) -> C:
    """Builds config ``cls`` from a (partial) nested mapping, strictly.

    Raises:
      ConfigError: unknown key (with the closest valid key), wrong type, a non-finite value for a
        float field (unless declared with :func:`allow_nonfinite`), or a value rejected by a
        dataclass's ``__post_init__``; always naming the full dotted key.
    """
    _check_keys(cls, data, "")
    merged = _deep_merge(to_dict(cls()), data)
    return _build(cls, merged, "")


def _deep_merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in update.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def parse_overrides(cls: type, overrides: Sequence[str]) -> dict[str, Any]:
    """``["optim.lr=3e-4", "model.layers=4"] -> {"optim": {"lr": 3e-4}, "model": {"layers": 4}}``.

    Each value is parsed as YAML (so ``true``, ``1e-3``, ``[1, 2]`` and ``null`` work); strings need
    no quotes. A value for a ``str`` field is kept verbatim.
    """
    out: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(item, None, "an override of the form key=value", "e.g. optim.lr=3e-4")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ConfigError(item, raw, "a non-empty key before '='")
        tp = _field_type(cls, key)
        if tp is str:
            value: Any = raw
        else:
            try:
                value = yaml.safe_load(raw) if raw != "" else ""
            except yaml.YAMLError as e:
                raise ConfigError(key, raw, "a YAML scalar, list or mapping", str(e)) from None
        sub = _nested_config_type(tp) if tp is not None else None
        if sub is not None and isinstance(value, str) and "name" in _hints(sub):
            value = {"name": value}  # `graph=csbm` chooses a variant: graph.name=csbm
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(key, raw, "a nested key, but a parent key was also set directly")
        node[parts[-1]] = value
    return out


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Reads a preset: a YAML mapping (empty file = no overrides)."""
    path = Path(path)

    def bad(expected: str, detail: str = "") -> ConfigError:
        msg = f"config file {path}: expected {expected}" + (f" ({detail})" if detail else "")
        return ConfigError(str(path), str(path), expected, message=msg)

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise bad("an existing YAML file") from None
    except IsADirectoryError:
        raise bad("a YAML file, not a directory") from None
    except UnicodeDecodeError as e:
        raise bad("UTF-8 text", str(e)) from None
    except yaml.YAMLError as e:
        raise bad("valid YAML", " ".join(str(e).split())) from None
    if not isinstance(data, Mapping):
        raise bad("a YAML mapping at the top level", f"got {type(data).__name__}")
    return dict(data)


def resolve(
    cls: type[C],
    *,
    preset: Mapping[str, Any] | None = None,
    overrides: Sequence[str] = (),
) -> C:
    """Defaults, then a preset mapping, then dotted overrides, validated into ``cls``."""
    data = _deep_merge(dict(preset or {}), parse_overrides(cls, overrides))
    return from_dict(cls, data)


def replace(cfg: C, **changes: Any) -> C:
    """``dataclasses.replace`` that accepts dotted keys: ``replace(cfg, **{"loop.total_steps": 5})``."""
    nested: dict[str, Any] = {}
    for key, v in changes.items():
        node = nested
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = v
    return from_dict(type(cfg), _deep_merge(to_dict(cfg), nested))


def load_yaml_text(text: str) -> dict[str, Any]:
    """Parses YAML text into a mapping (empty text = no overrides)."""
    data = yaml.safe_load(text) or {}
    if not isinstance(data, Mapping):
        raise ConfigError("yaml", text[:40], "a YAML mapping at the top level")
    return dict(data)
