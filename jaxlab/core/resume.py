"""What the loop checks before it changes anything in a run directory, and the resume bookkeeping.

Order (``jaxlab.core.loop.run``): :func:`check_run_dir` (a usable, writable directory), then the
run lock (:mod:`jaxlab.core.run_lock`), then :func:`check_resume` (the latest checkpoint's config
against the current one, :meth:`Checkpointer.check_config`), and only then are ``config.yaml`` and
``metrics.jsonl`` written: a refused resume leaves the directory as it was; so does a batch that
the recipe's ``place_batch`` refuses (:func:`check_batch_placement`). On resume
:func:`truncate_metrics` drops the metric rows written after the restored checkpoint (a run killed
between logging and checkpointing), so a resumed run's ``metrics.jsonl`` holds every step once.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from jaxlab.core.checkpoint import Checkpointer


class RunDirError(ValueError):
    """A run directory that cannot be used (a file, not writable, locked by another run)."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


def check_run_dir(run_dir: str | Path) -> Path:
    """Checks that ``run_dir`` is (or can be created as) a directory that files can be written in,
    without creating anything (a probe file is made and removed in the nearest existing folder).

    Raises:
      RunDirError: ``run_dir`` (or a parent) is a file, or the directory is not writable (naming
        the path and the operating system's reason).
    """
    run_dir = Path(run_dir)
    existing = next((p for p in (run_dir, *run_dir.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise RunDirError(
            f"run directory {run_dir}: {existing} is a file, not a directory",
            "pass --run-dir with a directory path (it is created if missing)",
        )
    try:
        fd, probe = tempfile.mkstemp(prefix=".jaxlab-write-probe-", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise RunDirError(
            f"run directory {run_dir} is not writable ({existing}: {e.strerror or e})",
            "pass --run-dir with a directory you can write to",
        ) from None
    return run_dir


def check_resume(ckpt: Checkpointer, resume: bool) -> int | None:
    """The step a run will restore (``None``: it starts fresh), after checking that the latest
    checkpoint's config is compatible with the current one (nothing is written here).

    Raises:
      IncompatibleCheckpointError: the configs differ in fields a resume may not change.
      CorruptCheckpointError: the latest checkpoint's metadata cannot be read.
    """
    step = ckpt.latest_step() if resume else None
    if step is not None:
        ckpt.check_config(step)
    return step


def check_batch_placement(place_batch: Any, data_iterator: Any) -> None:
    """Places one batch the way the first step will (``place_batch`` of a ``[1, ...]`` stack) and
    rewinds the iterator, so a batch the mesh cannot take (a batch size the data-parallel axes do
    not divide) is refused before anything is written. Needs a grain iterator (``get_state`` /
    ``set_state``); does nothing otherwise."""
    if place_batch is None or data_iterator is None:
        return
    if not (hasattr(data_iterator, "get_state") and hasattr(data_iterator, "set_state")):
        return
    import jax
    import numpy as np

    position = data_iterator.get_state()
    try:
        first = next(data_iterator)
        place_batch(jax.tree.map(lambda x: np.asarray(x)[None], first))
    finally:
        data_iterator.set_state(position)


def truncate_metrics(run_dir: str | Path, step: int) -> int:
    """Keeps the rows of ``run_dir/metrics.jsonl`` with ``step <= step`` (and drops an unreadable,
    half-written last line); atomic (temporary file, then rename). Returns the rows dropped."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return 0
    kept, dropped = [], 0
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            row_step = int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            dropped += 1
            continue
        if row_step <= step:
            kept.append(line)
        else:
            dropped += 1
    if dropped:
        fd, tmp = tempfile.mkstemp(prefix=".metrics-", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            f.write("".join(line + "\n" for line in kept))
        os.replace(tmp, path)
    return dropped
