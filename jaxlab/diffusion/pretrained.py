"""The trained model of a ``diffusion`` run, for the recipes that build on one (``ld3``'s teacher,
``preference``'s reference): the run is reopened with :func:`jaxlab.core.run.open_run`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax

from jaxlab.core.run import open_run
from jaxlab.diffusion.model import DiffusionModel, make_model


def load_model(
    run_dir: str | Path, *, devices: Sequence[jax.Device] | None = None
) -> tuple[DiffusionModel, Any]:
    """``(model, EMA parameters)`` of the newest checkpoint of the ``diffusion`` run in
    ``run_dir``, restored on ``devices`` (default one device). A directory without a run, or a
    run of another recipe, is refused by name (``RunNotFoundError`` / ``ConfigError``)."""
    run = open_run(run_dir, recipe="diffusion", devices=devices)
    return make_model(run.cfg), run.state.ema_params
