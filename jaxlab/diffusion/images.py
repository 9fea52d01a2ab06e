"""Diffusion samples as pictures: image grids of samples in [-1, 1] and 2-D scatter plots over
the data (both through :mod:`jaxlab.media`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jaxlab import media


def save_image_grid(path: str | Path, images: np.ndarray, **kw) -> Path:
    """A PNG grid of ``(n, H, W, C)`` samples with values in [-1, 1], nearest-upscaled x4."""
    kw.setdefault("upscale", 4)
    return media.save_image_grid(path, images, value_range=(-1.0, 1.0), **kw)


def save_scatter(
    path: str | Path,
    points: np.ndarray,
    *,
    extent: float = 2.0,
    reference: np.ndarray | None = None,
) -> Path:
    """A scatter plot of (n, 2) samples in [-extent, extent]^2 (black) over reference data
    points (light red)."""
    return media.plot_scatter(path, points, reference=reference, extent=extent)
