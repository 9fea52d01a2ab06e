"""Kinetix rendering: orientation and colours, parity with the original's pixel observations,
and PNG/GIF output."""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

from jaxlab.envs.kinetix import (
    EnvParams,
    StaticEnvParams,
    demo_level,
    load_level,
    make_observation_fn,
    make_render_pixels,
    save_gif,
    save_png,
    to_image,
)
from jaxlab.envs.kinetix.render import FIXATED_COLOUR, ROLE_COLOURS

FIXTURES = Path(__file__).resolve().parent / "fixtures"
WHITE = [255, 255, 255]


@functools.cache
def renderer(size: str, downscale: int | None = None):
    return jax.jit(make_render_pixels(StaticEnvParams.from_size(size), downscale=downscale))


@pytest.fixture(scope="module")
def demo():
    sp = StaticEnvParams.from_size("m")
    return demo_level(sp), sp


def test_orientation_and_role_colours(demo):
    state, sp = demo
    img = np.asarray(renderer("m")(state, EnvParams()))
    assert img.shape == (125, 125, 3)
    s = 25  # pixels per metre at downscale 4
    at = lambda x, y: img[int(x * s), int(y * s)].tolist()  # noqa: E731
    assert at(2.5, 0.2) == FIXATED_COLOUR.tolist()  # the floor (fixated, default role)
    assert at(1.0, 0.5) == ROLE_COLOURS[1].tolist()  # green wheel centre area
    assert at(4.2, 0.7) == (ROLE_COLOURS[2] * 0.5).tolist()  # fixated blue goal
    assert at(2.5, 2.5) == (ROLE_COLOURS[3] * 0.5).tolist()  # fixated red block
    assert at(1.3, 0.75) == ROLE_COLOURS[0].tolist()  # the grey (dynamic) cart
    assert at(2.5, 4.5) == WHITE and at(0.2, 4.9) == WHITE  # sky; walls/ceiling not drawn
    # The ordinary image: floor at the bottom rows, sky at the top.
    pic = to_image(img)
    assert pic.dtype == np.uint8 and pic.shape == (125, 125, 3)
    assert pic[-2, 60].tolist() == FIXATED_COLOUR.tolist() and pic[2, 60].tolist() == WHITE


def test_circle_rotation_line_points_along_the_rotation(demo):
    state, sp = demo
    # Rotate the blue goal by -90 degrees: its black radius line points to +x.
    rot = state.sim.circle.rotation.at[1].set(-np.pi / 2)
    img = np.asarray(
        renderer("m", 1)(
            state.replace(sim=state.sim.replace(circle=state.sim.circle.replace(rotation=rot))),
            EnvParams(),
        )
    )
    cx, cy = 400, 70  # goal centre (4.0, 0.7) m at 100 px/m
    assert img[cx + 20, cy].tolist() == [0, 0, 0]
    assert img[cx - 20, cy].tolist() != [0, 0, 0] and img[cx, cy + 20].tolist() != [0, 0, 0]


@pytest.mark.parametrize("name", ["s/h2_one_wheel_car", "m/h5_angry_birds"])
def test_pixel_observation_matches_the_original(shared_levels, name):
    with np.load(FIXTURES / f"obs_{name.replace('/', '_')}.npz") as z:
        ref, ref_global = z["t0/pixels"].astype(np.float32), z["t0/pixels_global"]
    state, sp, params = load_level(shared_levels / f"{name}.json")
    obs = jax.jit(make_observation_fn("pixels", sp))(state, params)
    ours = np.asarray(obs.image) * 255
    same = np.all(np.abs(ours - ref) < 0.5, axis=-1)
    # Thrusters are drawn as bars instead of the original's texture; everything else agrees.
    assert same.mean() > 0.995, same.mean()
    np.testing.assert_allclose(np.asarray(obs.global_info), ref_global, rtol=1e-6)


def test_png_and_gif_files(tmp_path, demo):
    state, sp = demo
    frame = to_image(renderer("m")(state, EnvParams()))
    save_png(tmp_path / "a.png", frame)
    back = np.asarray(Image.open(tmp_path / "a.png").convert("RGB"))
    np.testing.assert_array_equal(back, frame)
    frames = [frame, frame[::-1].copy(), frame]
    save_gif(tmp_path / "a.gif", frames, fps=10)
    gif = Image.open(tmp_path / "a.gif")
    assert gif.n_frames == 3 and gif.size == (125, 125)
    with pytest.raises(ValueError, match="frames is empty"):
        save_gif(tmp_path / "b.gif", [])
    with pytest.raises(ValueError, match="expected \\[W, H, 3\\]"):
        to_image(np.zeros((4, 4)))


def test_render_is_vmappable_over_states(demo):
    state, sp = demo
    moved = state.replace(
        sim=state.sim.replace(
            circle=state.sim.circle.replace(position=state.sim.circle.position + 0.5)
        )
    )
    batch = jax.tree.map(lambda a, b: jnp.stack([a, b]), state, moved)
    imgs = jax.jit(jax.vmap(make_render_pixels(sp), in_axes=(0, None)))(batch, EnvParams())
    np.testing.assert_array_equal(
        np.asarray(imgs[0]), np.asarray(renderer("m")(state, EnvParams()))
    )
    assert not np.array_equal(np.asarray(imgs[0]), np.asarray(imgs[1]))
