"""Write samples as PNG files with Pillow: an image grid and a 2-D scatter plot."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from PIL import Image


def image_grid(
    images: np.ndarray, *, ncols: int | None = None, upscale: int = 4, pad: int = 1
) -> Image.Image:
    """A grid of (n, H, W, C) images with values in [-1, 1] (C = 1 or 3), nearest-upscaled."""
    images = np.asarray(images, np.float32)
    if images.ndim != 4 or images.shape[-1] not in (1, 3):
        raise ValueError(f"images: got shape {images.shape}, expected (n, H, W, 1 or 3)")
    n, h, w, c = images.shape
    ncols = ncols or math.ceil(math.sqrt(n))
    nrows = math.ceil(n / ncols)
    grid = np.ones((nrows * (h + pad) + pad, ncols * (w + pad) + pad, c), np.float32)
    for i, img in enumerate(images):
        r, q = divmod(i, ncols)
        y, x = pad + r * (h + pad), pad + q * (w + pad)
        grid[y : y + h, x : x + w] = (np.clip(img, -1, 1) + 1) / 2
    pix = (grid * 255).round().astype(np.uint8)
    pix = pix.repeat(upscale, 0).repeat(upscale, 1)
    return Image.fromarray(pix[..., 0] if c == 1 else pix, "L" if c == 1 else "RGB")


def save_image_grid(path: str | Path, images: np.ndarray, **kw) -> None:
    """Write :func:`image_grid` to ``path``."""
    image_grid(images, **kw).save(path)


def save_scatter(
    path: str | Path,
    points: np.ndarray,
    *,
    extent: float = 2.0,
    size: int = 400,
    reference: np.ndarray | None = None,
) -> None:
    """A scatter plot of (n, 2) points in [-extent, extent]^2 (black), optionally over reference
    points (light red)."""
    img = np.full((size, size, 3), 255, np.uint8)

    def draw(p, color):
        p = np.asarray(p, np.float32)
        ij = ((p + extent) / (2 * extent) * (size - 1)).round().astype(int)
        keep = np.all((ij >= 0) & (ij < size), axis=1)
        ij = ij[keep]
        for dy in (0, 1):
            for dx in (0, 1):
                yy = np.clip(size - 1 - ij[:, 1] + dy, 0, size - 1)
                xx = np.clip(ij[:, 0] + dx, 0, size - 1)
                img[yy, xx] = color

    if reference is not None:
        draw(reference, (250, 170, 170))
    draw(points, (0, 0, 0))
    Image.fromarray(img, "RGB").save(path)
