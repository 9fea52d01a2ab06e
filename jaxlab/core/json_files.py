"""JSON files of a run directory, written as valid JSON and read with errors that name the file.

Python's ``json`` writes ``NaN`` and ``Infinity`` tokens, which are not JSON (other readers refuse
the file). :func:`dumps` refuses a non-finite float instead, naming its key: a statistic that comes
out NaN is an error, never a value. Where a result may legitimately be missing, the writer puts
``None`` (``null``) in its place with the reason beside it (:func:`null_if_non_finite`).

:func:`read_json` turns the errors of a damaged file (not JSON, not UTF-8, a missing key, the
wrong type at the top level) into one :class:`RunFileError` that names the file and the key.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from jaxlab.core import atomic


class NonFiniteJSONError(ValueError):
    """A value to be written as JSON is NaN or infinite (``key`` is its dotted path)."""

    def __init__(self, where: str, key: str, value: float):
        self.key, self.value = key, value
        super().__init__(
            f"{where}: {key} is {value}, which JSON cannot hold; a statistic that comes out "
            "non-finite is an error, not a result"
        )
        self.hint = "set JAXLAB_TRACEBACK=1 to see which computation produced it"


class RunFileError(ValueError):
    """A file of a run directory that cannot be read (names the file and the key)."""

    def __init__(self, path: str | Path, problem: str, hint: str = ""):
        self.path = Path(path)
        super().__init__(f"{path}: {problem}")
        self.hint = hint or "the file is damaged; restore it or use a new directory"


def non_finite(obj: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    """The ``(dotted key, value)`` of every NaN or infinite float in nested dicts and lists."""
    if isinstance(obj, float | int) and not isinstance(obj, bool):
        if isinstance(obj, float) and not math.isfinite(obj):
            yield prefix or "(value)", obj
        return
    if hasattr(obj, "dtype") and getattr(obj, "shape", None) == ():
        yield from non_finite(obj.item(), prefix)
        return
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            yield from non_finite(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            yield from non_finite(v, f"{prefix}[{i}]")


def dumps(obj: Any, *, where: str, **kwargs: Any) -> str:
    """``json.dumps(obj)`` that refuses NaN and infinities with :class:`NonFiniteJSONError`
    naming ``where`` (a file or an output) and the key; NumPy scalars are written as numbers."""
    for key, value in non_finite(obj):
        raise NonFiniteJSONError(where, key, value)
    kwargs.setdefault("default", _number)
    return json.dumps(obj, allow_nan=False, **kwargs)


def _number(x: Any) -> Any:
    if hasattr(x, "item") and getattr(x, "shape", None) == ():
        return x.item()
    raise TypeError(f"{type(x).__name__} is not JSON serialisable")


def write(path: str | Path, obj: Any, *, indent: int | None = 1) -> None:
    """Writes ``obj`` to ``path`` atomically (a temporary file, then a rename), refusing
    non-finite values before anything is written."""
    path = Path(path)
    atomic.write_text(path, dumps(obj, where=str(path), indent=indent) + "\n")


def null_if_non_finite(row: Mapping[str, Any], reason: str) -> dict[str, Any]:
    """``row`` with each non-finite float top-level value replaced by ``None`` and the replaced
    keys listed under ``"null_reason"`` as ``{key: reason}`` (for rows where a missing value is
    itself the finding, such as a diverged point of a sweep)."""
    out, why = {}, {}
    for k, v in row.items():
        if any(True for _ in non_finite(v)):
            out[k], why[k] = None, reason
        else:
            out[k] = v
    if why:
        out["null_reason"] = why
    return out


def read_json(path: str | Path, *, keys: Sequence[str] = (), hint: str = "") -> dict[str, Any]:
    """The JSON object in ``path``, with each of ``keys`` present.

    Raises:
      RunFileError: the file is missing, not UTF-8, not JSON (with line and column), not an
        object, or lacks one of ``keys`` (named).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunFileError(path, "no such file", hint) from None
    except UnicodeDecodeError as e:
        raise RunFileError(path, f"not UTF-8 text ({e.reason} at byte {e.start})", hint) from None
    except json.JSONDecodeError as e:
        raise RunFileError(
            path, f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})", hint
        ) from None
    if not isinstance(data, dict):
        raise RunFileError(path, f"expected a JSON object, got {type(data).__name__}", hint)
    missing = [k for k in keys if k not in data]
    if missing:
        raise RunFileError(path, f"missing key {missing[0]!r}", hint)
    return data
