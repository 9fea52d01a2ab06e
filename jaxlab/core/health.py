"""Which checkpoints of a run are healthy: finite is not enough to resume from.

A checkpoint at step ``s`` is **healthy** when both hold:

1. *Its scale*: every floating leaf of the saved state has ``max |x| <= SCALE_RATIO *
   max(max |x| of that leaf in the initial state, 1)``, with :data:`SCALE_RATIO` = 1e4. A
   learning rate of 1e6 grows the weights of a normalised transformer to 5e5 in two steps while
   its loss stays at 5.6 (the norms hide the scale); the next update overflows from there at any
   learning rate, so such a checkpoint is finite but useless to resume from.
2. *Its loss*: the loss of step ``s + 1``, computed from exactly the saved state before its
   update, is finite and ``|loss| <= LOSS_RATIO * max(|loss(1)|, 1)`` with :data:`LOSS_RATIO` =
   10, where ``loss(1)`` is the run's first loss (from the initial state). A recipe whose steps
   report no ``loss`` is judged by its scale alone.

The initial state's scales and first loss are the run's reference, kept across resumes (a run
whose records predate them counts its finite checkpoints as healthy). The records live in
``run_dir/checkpoint_health.json`` (``{"reference_loss", "reference_scale", "steps": {"s":
{"loss", "scale_ratio", "healthy", "reason"}}}``), written only by a run whose resume has been
committed (:func:`jaxlab.core.loop.run`); the loop keeps the newest healthy checkpoint out of
the rotation (``loop.keep_checkpoints``) so that the step the non-finite error points at exists.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from jaxlab.core import json_files

HEALTH_FILE = "checkpoint_health.json"

#: A checkpoint is unhealthy when its loss is more than ``LOSS_RATIO`` times the first loss ...
LOSS_RATIO = 10.0
#: ... or a leaf of its state is more than ``SCALE_RATIO`` times larger than at initialisation.
SCALE_RATIO = 1e4


@jax.jit
def _max_abs(leaves: list[Any]) -> list[Any]:
    return [jnp.max(jnp.abs(x)).astype(jnp.float32) for x in leaves]


def leaf_scales(state: Any) -> dict[str, float]:
    """``{leaf path: max |x|}`` over the floating leaves of ``state`` (one compiled reduction)."""
    pairs = [
        (jax.tree_util.keystr(path), x)
        for path, x in jax.tree_util.tree_flatten_with_path(state)[0]
        if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.inexact) and x.size > 0
    ]
    values = jax.device_get(_max_abs([x for _, x in pairs])) if pairs else []
    return {k: float(v) for (k, _), v in zip(pairs, values, strict=True)}


def judge_loss(loss: float, reference: float | None) -> tuple[bool, str]:
    """``(healthy, reason)`` for a checkpoint whose state gives ``loss`` (module docstring)."""
    if not math.isfinite(loss):
        return False, f"its loss is {loss}"
    if reference is None:
        return True, f"its loss {loss:.4g} is finite"
    bound = LOSS_RATIO * max(abs(reference), 1.0)
    if abs(loss) > bound:
        return (
            False,
            f"its loss {loss:.4g} is over {LOSS_RATIO:g}x the first step's {reference:.4g}",
        )
    return True, f"its loss {loss:.4g} is within {LOSS_RATIO:g}x the first step's {reference:.4g}"


def judge_scale(
    scales: dict[str, float], reference: dict[str, float] | None
) -> tuple[bool, float, str]:
    """``(healthy, largest ratio, reason)`` for a saved state's leaf scales (module docstring)."""
    if not reference:
        return True, math.nan, ""
    ratios = {k: v / max(reference.get(k, 0.0), 1.0) for k, v in scales.items()}
    key = max(ratios, key=ratios.get) if ratios else None
    if key is None:
        return True, math.nan, ""
    r = ratios[key]
    if not r <= SCALE_RATIO:
        return (
            False,
            r,
            (
                f"max |{key}| = {scales[key]:.4g} is {r:.3g}x its initial scale "
                f"(over {SCALE_RATIO:g}x)"
            ),
        )
    return True, r, ""


class Health:
    """The health records of one run (see the module docstring).

    Args:
      run_dir: the run directory (its records are read here and written by :meth:`save`).
    """

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / HEALTH_FILE
        self.reference_loss: float | None = None
        self.reference_scale: dict[str, float] | None = None
        self.steps: dict[int, dict[str, Any]] = {}
        self.legacy = False  # a run without reference: finite checkpoints count as healthy
        if self.path.exists():
            data = json_files.read_json(self.path, keys=("reference_loss", "steps"))
            self.reference_loss = data["reference_loss"]
            self.reference_scale = data.get("reference_scale")
            try:
                self.steps = {int(k): dict(v) for k, v in data["steps"].items()}
            except (AttributeError, TypeError, ValueError):
                raise json_files.RunFileError(
                    self.path, "key 'steps' must map step numbers to records"
                ) from None

    def start(self, state: Any) -> None:
        """A fresh run: forgets the records and takes ``state``'s scales as the reference."""
        self.reference_loss, self.steps = None, {}
        self.reference_scale = leaf_scales(state)

    def resumed_without_records(self) -> None:
        """A resumed run with no records (made before they existed): nothing to judge by."""
        if not self.path.exists():
            self.legacy = True

    def saved(self, step: int, state: Any) -> None:
        """Judges the scale of the checkpoint ``state`` saved at ``step`` (its loss follows)."""
        ok, ratio, why = judge_scale(leaf_scales(state), self.reference_scale)
        self.steps[step] = {
            "scale_ratio": ratio if math.isfinite(ratio) else None,
            "scale_healthy": ok,
            "scale_reason": why,
            "loss": None,
            "loss_healthy": None,
            "loss_reason": "",
        }
        self._conclude(step)

    def observe(self, step: int, start_loss: Any, first_step_of_run: bool) -> None:
        """Judges the loss of the checkpoint at ``step`` by ``start_loss``, the loss of step
        ``step + 1``; on the run's first step that loss becomes the run's reference."""
        loss = float(start_loss)
        if first_step_of_run:
            if self.reference_loss is None and math.isfinite(loss):
                self.reference_loss = loss
            return
        rec = self.steps.setdefault(
            step, {"scale_ratio": None, "scale_healthy": True, "scale_reason": ""}
        )
        ok, why = judge_loss(loss, self.reference_loss)
        rec.update(loss=loss if math.isfinite(loss) else None, loss_healthy=ok, loss_reason=why)
        self._conclude(step)

    def _conclude(self, step: int) -> None:
        rec = self.steps[step]
        rec["healthy"] = bool(rec["scale_healthy"] and rec.get("loss_healthy") is not False)
        if not rec["scale_healthy"]:
            rec["reason"] = rec["scale_reason"]
        elif rec.get("loss_healthy") is None:
            rec["reason"] = "its scale is within bounds; its loss is not known yet"
        else:
            rec["reason"] = rec["loss_reason"]

    def last_healthy(self, existing: Iterable[int]) -> int | None:
        """The newest of the ``existing`` checkpoint steps that is healthy (None if none is);
        a step without a record counts as healthy only in a run made before records existed."""
        good = [
            s for s in existing if (self.steps[s]["healthy"] if s in self.steps else self.legacy)
        ]
        return max(good) if good else None

    def describe(self, step: int) -> str:
        """Why the checkpoint at ``step`` is (un)healthy, or that it was never judged."""
        rec = self.steps.get(step)
        if rec is None:
            return "finite; made before health was recorded" if self.legacy else "not judged"
        return rec["reason"]

    def save(self) -> None:
        """Writes the records (atomically)."""
        json_files.write(
            self.path,
            {
                "reference_loss": self.reference_loss,
                "reference_scale": self.reference_scale,
                "steps": {str(k): v for k, v in sorted(self.steps.items())},
            },
        )
