"""jaxlab.media: PNG/GIF/MP4 round trips, image grids against a hand-made layout, plots written,
bad frames refused by name, a missing extra named."""

import numpy as np
import pytest

from jaxlab import media


def _frames(t=6, h=10, w=14):
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    return [np.roll(base, i, axis=1) for i in range(t)]


def test_png_and_gif_round_trip(tmp_path):
    frames = _frames()
    media.save_png(tmp_path / "a.png", frames[0])
    from PIL import Image

    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "a.png")), frames[0])
    media.save_gif(tmp_path / "a.gif", frames, fps=10)
    back = media.read_video(tmp_path / "a.gif")
    assert back.shape == (6, 10, 14, 3)
    # GIF palettes quantise: a random image keeps its coarse content
    assert np.mean(np.abs(back.astype(int) - np.stack(frames).astype(int))) < 40


def test_mp4_round_trip(tmp_path):
    # smooth frames (H.264 is lossy), odd sizes are padded to even
    y, x = np.mgrid[0:15, 0:21]
    frames = [
        np.stack([(x * 12 + 5 * i) % 256, y * 16, np.full_like(x, 128)], -1).astype(np.uint8)
        for i in range(8)
    ]
    path = media.save_video(tmp_path / "a.mp4", frames, fps=8)
    back = media.read_video(path)
    assert back.shape[0] == 8 and back.shape[1:3] == (16, 22)
    assert np.mean(np.abs(back[:, :15, :21].astype(int) - np.stack(frames).astype(int))) < 12


def test_image_grid_layout():
    imgs = np.stack([np.full((2, 3), v, np.float32) for v in (0.0, 0.5, 1.0)])
    grid = media.image_grid(imgs, ncols=2, pad=1)
    assert grid.shape == (2 * 3 + 1, 2 * 4 + 1)
    assert grid[1, 1] == 0 and grid[1, 5] == 128 and grid[4, 1] == 255
    assert grid[0, 0] == 255 and grid[4, 5] == 255  # padding and the empty cell are background
    up = media.image_grid(imgs[:, :, :, None], ncols=3, pad=0, upscale=2, value_range=(0, 2))
    assert up.shape == (4, 18) and up[0, 0] == 0 and up[0, 17] == 128


def test_plots_write_pngs(tmp_path):
    paths = [
        media.plot_curves(
            tmp_path / "c.png",
            {"a": ([1, 2, 3], [3, 2, 1]), "b": ([1, 2, 3], [1, 2, 2])},
            bands={"a": ([2, 1, 0], [4, 3, 2])},
            logx=True,
        ),
        media.plot_heatmap(tmp_path / "h.png", np.eye(3), xticks="abc", annotate=True),
        media.plot_scatter(
            tmp_path / "s.png", np.zeros((5, 2)), reference=np.ones((3, 2)), extent=2
        ),
        media.plot_bars(tmp_path / "b.png", [0.2, 0.4], labels=["x", "y"], ylim=(0, 1)),
        media.plot_curves(
            tmp_path / "f.png", {}, points={"fit": ([1.0, 2.0], [1.1, 1.9])}, diagonal=True
        ),
        media.plot_graph(
            tmp_path / "g.png",
            ["a", "b", "c"],
            [(0, 1, "none", "arrow", "C0"), (1, 2, "circle", "arrow", "0.4")],
            title="PAG",
        ),
    ]
    for p in paths:
        assert p.read_bytes()[:4] == b"\x89PNG" and p.stat().st_size > 1000


def test_curve_points_take_the_curve_colour(tmp_path, monkeypatch):
    """A ``points`` overlay named like a curve is drawn in that curve's colour (measurements over
    a fitted law); one with a new name gets its own colour and legend entry."""
    import matplotlib.figure

    seen = {}
    monkeypatch.setattr(
        matplotlib.figure.Figure,
        "savefig",
        lambda fig, *a, **k: seen.update(ax=fig.axes[0]),
    )
    media.plot_curves(
        tmp_path / "c.png",
        {"a": ([1, 2], [1, 2]), "b": ([1, 2], [2, 1])},
        points={"b": ([1.5], [1.5]), "c": ([1.0], [1.0])},
    )
    ax = seen["ax"]
    lines, scatters = ax.get_lines(), ax.collections
    assert np.allclose(
        scatters[0].get_facecolor()[0][:3], matplotlib.colors.to_rgb(lines[1].get_color())
    )
    assert ax.get_legend_handles_labels()[1] == ["a", "b", "c"]
    with pytest.raises(ValueError, match=r"points\['b'\]"):
        media.plot_curves(tmp_path / "x.png", {}, points={"b": ([1, 2], [1])})
    with pytest.raises(ValueError, match="mark 'dot'"):
        media.plot_graph(tmp_path / "x.png", ["a", "b"], [(0, 1, "dot", "arrow", "k")])


def test_bad_input_is_refused(tmp_path):
    with pytest.raises(ValueError, match="frames is empty"):
        media.save_gif(tmp_path / "x.gif", [])
    with pytest.raises(ValueError, match=r"frames\[1\].*uint8"):
        media.save_gif(
            tmp_path / "x.gif", [np.zeros((4, 4, 3), np.uint8), np.zeros((4, 4, 3), np.float32)]
        )
    with pytest.raises(ValueError, match="different shapes"):
        media.save_gif(
            tmp_path / "x.gif", [np.zeros((4, 4, 3), np.uint8), np.zeros((5, 4, 3), np.uint8)]
        )
    with pytest.raises(ValueError, match=".gif or .mp4"):
        media.save_video(tmp_path / "x.avi", _frames())
    with pytest.raises(ValueError, match=r"\[n, H, W\]"):
        media.image_grid(np.zeros((2, 3)))
    assert not list(tmp_path.iterdir())


def test_missing_extra_is_named(monkeypatch, tmp_path):
    import builtins

    real = builtins.__import__

    def fake(name, *a, **k):
        if name.startswith("imageio"):
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(media.MissingExtraError, match=r"jaxlab\[viz\]"):
        media.save_mp4(tmp_path / "x.mp4", _frames())
