"""Metrics tracking: JSON lines always, TensorBoard optionally; process 0 only.

A run directory holds ``config.yaml``, ``metrics.jsonl`` (one JSON object per logged step),
``checkpoints/`` and whatever a recipe's ``finalize`` writes (plots, GIFs, tables).

``metrics.jsonl`` is strict JSON: a NaN or infinite metric is written as ``null`` with the reason
under ``"null_reason"`` (``{"eval/loss": "non-finite (nan): JSON has no NaN or infinity"}``).
:func:`read_metrics` turns those back into floats, and reads the files of earlier versions too
(bare ``NaN`` tokens, ``"nan"`` strings).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import jax
import numpy as np

from jaxlab.core import json_files

NULL_REASON = "null_reason"
_NON_FINITE = re.compile(r"non-finite \((nan|inf|-inf)\)")


@runtime_checkable
class Backend(Protocol):
    """One sink of scalar metrics."""

    def write(self, step: int, metrics: Mapping[str, float | int | str]) -> None: ...

    def close(self) -> None: ...


def _scalar(v: Any) -> float | int | str | None:
    """``v`` as a Python scalar (a bool as 0/1), or None when ``v`` is not a scalar."""
    arr = np.asarray(v)
    if arr.size != 1:
        return None
    x = arr.reshape(()).item()
    if isinstance(x, bool):
        return int(x)
    return x


def non_finite_reason(value: float) -> str:
    """The ``null_reason`` written beside a metric whose value is ``value`` (NaN or infinite)."""
    return f"non-finite ({value}): JSON has no NaN or infinity"


def json_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` with each non-finite float replaced by ``None`` and its reason under
    ``"null_reason"`` (:func:`non_finite_reason`), so the row is strict JSON."""
    out = json_files.null_if_non_finite(row, "")
    for k in out.get(NULL_REASON, {}):
        out[NULL_REASON][k] = non_finite_reason(row[k])
    return out


def _restore_non_finite(row: dict[str, Any]) -> dict[str, Any]:
    """A row as read back: ``null`` + reason and the ``"nan"``/``"inf"``/``"-inf"`` strings of
    earlier files become floats again (a bare ``NaN`` token is already one)."""
    reasons = row.pop(NULL_REASON, None)
    if isinstance(reasons, dict):
        for k, why in reasons.items():
            m = _NON_FINITE.match(why) if isinstance(why, str) else None
            if m and row.get(k) is None:
                row[k] = float(m.group(1))
    for k, v in row.items():
        if v in ("nan", "inf", "-inf"):
            row[k] = float(v)
    return row


class JsonlBackend:
    """Appends ``{"step": s, "time": t, **metrics}`` lines to ``run_dir/metrics.jsonl``."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / "metrics.jsonl"
        self._f = open(self.path, "a", buffering=1)

    def write(self, step: int, metrics: Mapping[str, float | int | str]) -> None:
        row = {"step": int(step), "time": round(time.time(), 3)}
        row.update(metrics)
        self._f.write(json_files.dumps(json_row(row), where=str(self.path)) + "\n")

    def close(self) -> None:
        self._f.close()


class TensorBoardBackend:
    """Scalars to TensorBoard event files (needs the ``tb`` extra: tensorboardX)."""

    def __init__(self, run_dir: Path):
        try:
            from tensorboardX import SummaryWriter
        except ImportError as e:  # pragma: no cover - depends on the optional extra
            raise ImportError("TensorBoard tracking needs `pip install jaxlab[tb]`") from e
        self._w = SummaryWriter(str(Path(run_dir) / "tb"))

    def write(self, step: int, metrics: Mapping[str, float | int | str]) -> None:
        for k, v in metrics.items():
            if isinstance(v, int | float) and math.isfinite(v):
                self._w.add_scalar(k, v, step)

    def close(self) -> None:
        self._w.close()


class Tracker:
    """Fans scalar metrics out to backends; a no-op on every process but 0."""

    def __init__(self, run_dir: str | Path, *, tensorboard: bool = False):
        self.run_dir = Path(run_dir)
        self.active = jax.process_index() == 0
        self.backends: list[Backend] = []
        if self.active:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.backends.append(JsonlBackend(self.run_dir))
            if tensorboard:
                self.backends.append(TensorBoardBackend(self.run_dir))

    def log(self, step: int, metrics: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
        """Logs the scalar entries of ``metrics`` (non-scalars are skipped); returns what was written."""
        row = {}
        for k, v in metrics.items():
            s = _scalar(v)
            if s is not None:
                row[prefix + k] = s
        if self.active and row:
            for b in self.backends:
                b.write(step, row)
        return row

    def close(self) -> None:
        for b in self.backends:
            b.close()
        self.backends = []


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """All rows of a run's ``metrics.jsonl``, a non-finite metric as a float (NaN or infinite)
    whichever way the file holds it (``null`` with its reason, a ``NaN`` token, a ``"nan"``
    string).

    Raises:
      ValueError: a line that is not JSON, naming the file and the line.
    """
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{i}: not a JSON metrics row ({e.msg})") from None
            rows.append(_restore_non_finite(row) if isinstance(row, dict) else row)
    return rows
