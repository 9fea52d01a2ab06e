"""Images, animations and plots for every family: PNG, image grids, GIF, MP4 and the few plot
kinds the recipes draw (curves with scatter overlays, heat maps, scatter, bars, node-link graphs).

PNG and GIF need only Pillow (a core dependency). MP4 needs ``imageio`` with ``imageio-ffmpeg``
and the plots need ``matplotlib``: both come with the ``viz`` extra (``pip install
'jaxlab[viz]'``), and a missing one is an :class:`MissingExtraError` naming the extra.

Frames are ``[H, W, 3]`` (or ``[H, W]``) ``uint8`` arrays, top row first; float images are
converted with :func:`to_uint8` from a stated value range.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from jaxtyping import ArrayLike, Float, Real, UInt8

from jaxlab.core import atomic

PathLike = str | os.PathLike
#: a 1-D series of numbers to plot: a Python sequence, or a NumPy or JAX vector
Series = Sequence[float] | Real[ArrayLike, " n"]


class MissingExtraError(ModuleNotFoundError):
    """An optional dependency of the ``viz`` extra is not installed."""

    def __init__(self, what: str, module: str):
        super().__init__(f"{what} needs {module}: pip install 'jaxlab[viz]'")


def require_plotting() -> None:
    """Raises :class:`MissingExtraError` unless matplotlib is installed: a command that ends in a
    plot checks this before it starts its work."""
    _plt()


def _plt():
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise MissingExtraError("plotting", "matplotlib") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def to_uint8(
    image: Float[np.ndarray, "..."] | np.ndarray, value_range: tuple[float, float] = (0.0, 1.0)
) -> UInt8[np.ndarray, "..."]:
    """Maps ``value_range`` to 0..255 (clipped, rounded); ``uint8`` input is returned as is."""
    arr = np.asarray(image)
    if arr.dtype == np.uint8:
        return arr
    lo, hi = value_range
    if not hi > lo:
        raise ValueError(f"value_range={value_range}: expected low < high")
    scaled = (np.asarray(arr, np.float64) - lo) / (hi - lo)
    return np.clip(np.rint(scaled * 255.0), 0, 255).astype(np.uint8)


def _check_frame(frame: np.ndarray, name: str = "image") -> np.ndarray:
    frame = np.asarray(frame)
    if frame.dtype != np.uint8:
        raise ValueError(f"{name}: dtype {frame.dtype}, expected uint8 (see media.to_uint8)")
    if frame.ndim == 3 and frame.shape[-1] == 1:
        frame = frame[..., 0]
    if frame.ndim not in (2, 3) or (frame.ndim == 3 and frame.shape[-1] not in (3, 4)):
        raise ValueError(f"{name}: shape {frame.shape}, expected [H, W], [H, W, 3] or [H, W, 4]")
    return frame


def save_png(path: PathLike, image: UInt8[np.ndarray, "h w *c"]) -> Path:
    """Writes one ``uint8`` image as PNG."""
    from PIL import Image

    path = Path(path)
    with atomic.replacing(path) as tmp:
        Image.fromarray(_check_frame(image)).save(tmp, format="PNG")
    return path


def _frames(frames: Sequence[np.ndarray], fps: float) -> list[np.ndarray]:
    if len(frames) == 0:
        raise ValueError("frames is empty; expected at least one frame")
    if not fps > 0:
        raise ValueError(f"fps={fps}; expected > 0")
    out = [_check_frame(f, f"frames[{i}]") for i, f in enumerate(frames)]
    if len({f.shape for f in out}) > 1:
        raise ValueError(f"frames have different shapes {sorted({f.shape for f in out})}")
    return out


def save_gif(path: PathLike, frames: Sequence[np.ndarray], *, fps: float = 30.0) -> Path:
    """Writes ``uint8`` frames as a looping GIF (Pillow)."""
    from PIL import Image

    path = Path(path)
    images = [Image.fromarray(f) for f in _frames(frames, fps)]
    with atomic.replacing(path) as tmp:
        images[0].save(
            tmp,
            format="GIF",
            save_all=True,
            append_images=images[1:],
            duration=max(1, int(round(1000.0 / fps))),
            loop=0,
        )
    return path


@contextlib.contextmanager
def _ffmpeg_subprocess():
    """imageio-ffmpeg forks to exec ffmpeg; JAX warns on every fork of a process that has JAX
    threads, which does not apply to a fork followed at once by exec."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning
        )
        yield


def save_mp4(path: PathLike, frames: Sequence[np.ndarray], *, fps: float = 30.0) -> Path:
    """Writes ``uint8`` frames as an H.264 MP4 (imageio + imageio-ffmpeg, the ``viz`` extra).

    Frame sides are padded to even sizes (yuv420p needs them)."""
    try:
        import imageio.v2 as imageio
        import imageio_ffmpeg  # noqa: F401
    except ModuleNotFoundError as e:
        raise MissingExtraError("MP4 output", e.name or "imageio-ffmpeg") from None
    path = Path(path)
    frames = _frames(frames, fps)
    h, w = frames[0].shape[:2]
    ph, pw = h + h % 2, w + w % 2
    with _ffmpeg_subprocess():
        writer = imageio.get_writer(
            path, fps=fps, codec="libx264", pixelformat="yuv420p", macro_block_size=1
        )
        try:
            for f in frames:
                rgb = f if f.ndim == 3 else np.repeat(f[..., None], 3, axis=-1)
                rgb = rgb[..., :3]
                if (ph, pw) != (h, w):
                    rgb = np.pad(rgb, ((0, ph - h), (0, pw - w), (0, 0)), mode="edge")
                writer.append_data(rgb)
        finally:
            writer.close()
    return path


def save_video(path: PathLike, frames: Sequence[np.ndarray], *, fps: float = 30.0) -> Path:
    """GIF or MP4 by the file suffix."""
    suffix = Path(path).suffix.lower()
    if suffix == ".gif":
        return save_gif(path, frames, fps=fps)
    if suffix == ".mp4":
        return save_mp4(path, frames, fps=fps)
    raise ValueError(f"path {path}: expected a .gif or .mp4 suffix")


def read_video(path: PathLike) -> UInt8[np.ndarray, "t h w 3"]:
    """Reads a GIF or MP4 back as ``[T, H, W, 3]`` ``uint8`` frames (for tests and analysis)."""
    path = Path(path)
    if path.suffix.lower() == ".gif":
        from PIL import Image, ImageSequence

        with Image.open(path) as im:
            return np.stack([np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(im)])
    try:
        import imageio.v2 as imageio
    except ModuleNotFoundError:
        raise MissingExtraError("reading MP4", "imageio") from None
    with _ffmpeg_subprocess():
        frames = imageio.mimread(path, memtest=False)
    return np.stack([np.asarray(f)[..., :3] for f in frames])


def image_grid(
    images: np.ndarray,
    *,
    ncols: int | None = None,
    pad: int = 1,
    upscale: int = 1,
    value_range: tuple[float, float] = (0.0, 1.0),
    background: int = 255,
) -> UInt8[np.ndarray, "h w *c"]:
    """Tiles ``[n, H, W(, C)]`` images (C = 1 or 3) into one ``uint8`` image, row-major,
    ``ncols`` per row (default: about square), nearest-neighbour ``upscale``."""
    arr = np.asarray(images)
    if arr.ndim == 3:
        arr = arr[..., None]
    if arr.ndim != 4 or arr.shape[-1] not in (1, 3):
        raise ValueError(f"images: shape {np.shape(images)}, expected [n, H, W] or [n, H, W, 1|3]")
    arr = to_uint8(arr, value_range)
    n, h, w, c = arr.shape
    ncols = ncols or math.ceil(math.sqrt(n))
    nrows = math.ceil(n / ncols)
    grid = np.full((nrows * (h + pad) + pad, ncols * (w + pad) + pad, c), background, np.uint8)
    for i, img in enumerate(arr):
        r, q = divmod(i, ncols)
        y, x = pad + r * (h + pad), pad + q * (w + pad)
        grid[y : y + h, x : x + w] = img
    grid = grid.repeat(upscale, 0).repeat(upscale, 1)
    return grid[..., 0] if c == 1 else grid


def save_image_grid(path: PathLike, images: np.ndarray, **kw: Any) -> Path:
    """Writes :func:`image_grid` as PNG."""
    return save_png(path, image_grid(images, **kw))


def _finish(fig: Any, ax: Any, path: PathLike, title: str | None, xlabel: str, ylabel: str):
    plt = _plt()
    if title:
        ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    path = Path(path)
    try:
        with atomic.replacing(path) as tmp:
            fig.savefig(tmp, dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path


def plot_curves(
    path: PathLike,
    curves: Mapping[str, tuple[Series, Series]],
    *,
    xlabel: str = "step",
    ylabel: str = "",
    title: str | None = None,
    logx: bool = False,
    logy: bool = False,
    bands: Mapping[str, tuple[Series, Series]] | None = None,
    points: Mapping[str, tuple[Series, Series]] | None = None,
    diagonal: bool = False,
) -> Path:
    """Line plot of named ``(x, y)`` curves as PNG, with optional ``(low, high)`` bands per name,
    ``points`` (named ``(x, y)`` scatter overlays, drawn in the colour of the curve of the same
    name, e.g. measurements over a fitted law) and a dashed ``y = x`` ``diagonal`` spanning the
    data (fitted vs measured plots)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    colors: dict[str, str] = {}
    for name, (x, y) in curves.items():
        (line,) = ax.plot(np.asarray(x), np.asarray(y), label=name)
        colors[name] = line.get_color()
        if bands and name in bands:
            lo, hi = bands[name]
            ax.fill_between(np.asarray(x), lo, hi, color=line.get_color(), alpha=0.2)
    values: list[np.ndarray] = []
    for i, (name, (x, y)) in enumerate((points or {}).items()):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if x.shape != y.shape or x.ndim != 1:
            raise ValueError(f"points[{name!r}]: x {x.shape} and y {y.shape}, expected two [n]")
        own = name not in colors
        color = colors.get(name, f"C{(len(curves) + i) % 10}")
        ax.scatter(x, y, s=12, color=color, label=name if own else None, zorder=3)
        values += [x, y]
    if diagonal:
        if not values:
            raise ValueError("diagonal=True needs points to span")
        lo, hi = float(min(v.min() for v in values)), float(max(v.max() for v in values))
        ax.plot([lo, hi], [lo, hi], "k--", lw=1)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if len(ax.get_legend_handles_labels()[1]) > 1:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _finish(fig, ax, path, title, xlabel, ylabel)


def plot_heatmap(
    path: PathLike,
    values: np.ndarray,
    *,
    xticks: Sequence[Any] | None = None,
    yticks: Sequence[Any] | None = None,
    xlabel: str = "",
    ylabel: str = "",
    title: str | None = None,
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    annotate: bool = False,
) -> Path:
    """Heat map of a 2-D array (rows along y) with optional tick labels and cell values."""
    plt = _plt()
    values = np.asarray(values, np.float64)
    if values.ndim != 2:
        raise ValueError(f"values: shape {values.shape}, expected [rows, cols]")
    rows, cols = values.shape
    fig, ax = plt.subplots(figsize=(1.5 + 0.45 * cols, 1.2 + 0.4 * rows))
    im = ax.imshow(values, aspect="auto", cmap=cmap, vmin=vmin, vmax=vmax, origin="lower")
    fig.colorbar(im, ax=ax)
    if xticks is not None:
        ax.set_xticks(range(cols), [str(t) for t in xticks], rotation=45)
    if yticks is not None:
        ax.set_yticks(range(rows), [str(t) for t in yticks])
    if annotate:
        for i in range(rows):
            for j in range(cols):
                ax.text(j, i, f"{values[i, j]:.2g}", ha="center", va="center", fontsize=7)
    return _finish(fig, ax, path, title, xlabel, ylabel)


def plot_scatter(
    path: PathLike,
    points: np.ndarray,
    *,
    colors: np.ndarray | None = None,
    reference: np.ndarray | None = None,
    extent: float | None = None,
    xlabel: str = "",
    ylabel: str = "",
    title: str | None = None,
    size: float = 4.0,
) -> Path:
    """Scatter of ``[n, 2]`` points (optional per-point ``colors``), over ``reference`` points in
    light red; ``extent`` fixes both axes to ``[-extent, extent]``."""
    plt = _plt()
    points = np.asarray(points)
    if points.ndim != 2 or points.shape[1] != 2:
        raise ValueError(f"points: shape {points.shape}, expected [n, 2]")
    fig, ax = plt.subplots(figsize=(4, 4))
    if reference is not None:
        ref = np.asarray(reference)
        ax.scatter(ref[:, 0], ref[:, 1], s=size, c="#f4a9a9", linewidths=0)
    ax.scatter(
        points[:, 0], points[:, 1], s=size, c="k" if colors is None else colors, linewidths=0
    )
    if extent is not None:
        ax.set_xlim(-extent, extent)
        ax.set_ylim(-extent, extent)
    ax.set_aspect("equal")
    return _finish(fig, ax, path, title, xlabel, ylabel)


def plot_bars(
    path: PathLike,
    values: Series,
    *,
    labels: Sequence[Any] | None = None,
    xlabel: str = "",
    ylabel: str = "",
    title: str | None = None,
    ylim: tuple[float, float] | None = None,
) -> Path:
    """Bar chart of ``values`` (optional labels)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(3.0, 0.4 * len(values) + 1), 3))
    x = np.arange(len(values))
    ax.bar(x, np.asarray(values, np.float64))
    if labels is not None:
        ax.set_xticks(x, [str(v) for v in labels])
    if ylim is not None:
        ax.set_ylim(*ylim)
    return _finish(fig, ax, path, title, xlabel, ylabel)


#: the end marks :func:`plot_graph` draws (``"none"`` is a plain end, a tail)
EDGE_MARKS = ("none", "arrow", "circle")


def plot_graph(
    path: PathLike,
    names: Sequence[str],
    edges: Sequence[tuple[int, int, str, str, str]],
    *,
    title: str | None = None,
) -> Path:
    """Node-link diagram of a mixed graph (DAG, PAG, ...) as PNG: nodes on a circle, one line per
    edge ``(i, j, mark_at_i, mark_at_j, color)`` with each end drawn as one of
    :data:`EDGE_MARKS` (an arrowhead, a small open circle, or nothing)."""
    plt = _plt()
    d = len(names)
    ang = np.linspace(0, 2 * np.pi, d, endpoint=False) + np.pi / 2
    pos = np.stack([np.cos(ang), np.sin(ang)], 1)
    fig, ax = plt.subplots(figsize=(6, 6))
    r = 0.09
    for k, (i, j, mark_i, mark_j, color) in enumerate(edges):
        for m in (mark_i, mark_j):
            if m not in EDGE_MARKS:
                raise ValueError(f"edges[{k}]: mark {m!r}, expected one of {EDGE_MARKS}")
        if not (0 <= i < d and 0 <= j < d and i != j):
            raise ValueError(f"edges[{k}]: nodes ({i}, {j}), expected two of 0..{d - 1}")
        a, b = pos[i], pos[j]
        u = (b - a) / np.linalg.norm(b - a)
        pa, pb = a + r * u, b - r * u
        ax.plot(*zip(pa, pb, strict=True), color=color, lw=1.5, zorder=1)
        for end, mark, direction in ((pb, mark_j, u), (pa, mark_i, -u)):
            if mark == "arrow":
                ax.annotate(
                    "",
                    xy=end,
                    xytext=end - 0.08 * direction,
                    arrowprops=dict(arrowstyle="-|>", color=color, lw=1.5),
                )
            elif mark == "circle":
                c = end - 0.025 * direction
                ax.add_patch(plt.Circle(c, 0.022, fill=True, fc="white", ec=color, zorder=3))
    for i, name in enumerate(names):
        ax.add_patch(plt.Circle(pos[i], r, fc="#f4f1de", ec="k", zorder=2))
        ax.text(*pos[i], name, ha="center", va="center", fontsize=9, zorder=4)
    ax.set_xlim(-1.3, 1.3)
    ax.set_ylim(-1.3, 1.3)
    ax.set_aspect("equal")
    ax.axis("off")
    return _finish(fig, ax, path, title, "", "")


def curve_strip(
    values: Series,
    cursor: int,
    *,
    height: int,
    width: int,
    value_range: tuple[float, float] = (0.0, 1.0),
) -> UInt8[np.ndarray, "h w"]:
    """A ``uint8`` ``[height, width]`` panel drawing ``values`` as a polyline (grey) with a
    vertical cursor (white) at index ``cursor``: a signal drawn beside video frames (e.g. the
    audio envelope driving an avatar)."""
    v = np.asarray(values, np.float64)
    if v.ndim != 1 or len(v) < 2:
        raise ValueError(f"values: shape {v.shape}, expected a 1-D series of >= 2 values")
    if not 0 <= cursor < len(v):
        raise ValueError(f"cursor={cursor}: expected 0..{len(v) - 1}")
    lo, hi = value_range
    panel = np.zeros((height, width), np.uint8)
    xs = np.linspace(0, width - 1, len(v)).astype(int)
    ys = (height - 1 - np.clip((v - lo) / (hi - lo), 0, 1) * (height - 1)).astype(int)
    for k in range(len(v) - 1):
        y0, y1 = sorted((ys[k], ys[k + 1]))
        panel[y0 : y1 + 1, xs[k] : xs[k + 1] + 1] = 160
    panel[:, xs[cursor]] = 255
    return panel
