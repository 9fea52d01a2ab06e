"""``jaxlab levels`` hooks: show, rollout (trajectory arrays) and render (GIF/PNG)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from jaxlab.envs.kinetix.cli import main
from tests.envs.conftest import SHARED_LEVELS

LEVEL = (
    SHARED_LEVELS / "s" / "h0_weak_thrust.json"
)  # terminates (touches red) at step 19 with no-ops
STEPS = 24


def test_show_prints_the_level(shared_levels, capsys):
    assert main(["show", str(LEVEL)]) == 0
    out = capsys.readouterr().out
    assert "polygons 5 (4 static), circles 2, joints 1, thrusters 1" in out
    assert "role green" in out and "thruster 0" in out and "floor" in out


@pytest.fixture(scope="module")
def trajectory(shared_levels, tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "traj.npz"
    assert (
        main(
            [
                "rollout",
                str(LEVEL),
                "--steps",
                str(STEPS),
                "--policy",
                "zero",
                "--save-trajectory",
                str(out),
            ]
        )
        == 0
    )
    with np.load(out) as z:
        return {k: z[k] for k in z.files}, out


def test_rollout_writes_per_step_arrays(trajectory):
    data, _ = trajectory
    assert data["polygon_position"].shape == (STEPS, 5, 2)
    assert data["polygon_rotation"].shape == (STEPS, 5)
    assert data["circle_position"].shape == (STEPS, 2, 2)
    assert data["circle_rotation"].shape == (STEPS, 2)
    assert data["reward"].shape == (STEPS,) and data["terminated"].dtype == bool
    # Terminates (red floor) and keeps simulating: no reset, the shapes stay where they fell.
    first = int(np.flatnonzero(data["terminated"])[0])
    assert data["reward"][first] < -0.9
    level = json.loads(LEVEL.read_text())["env_state"]
    start = [level["circle"][0]["position"][k] for k in "01"]
    assert not np.allclose(data["circle_position"][-1, 0], start, atol=1e-3)
    assert np.all(data["terminated"][first:])


def test_rollout_matches_the_original_trajectory(trajectory):
    """Against the original env's zero-action rollout (tests/physics/fixtures)."""
    data, _ = trajectory
    with np.load(
        Path(__file__).resolve().parents[2] / "physics" / "fixtures" / "s_h0_weak_thrust.npz"
    ) as z:
        ref = z["env_reward"][:STEPS]
        done = z["env_done"][:STEPS]
    np.testing.assert_array_equal(data["terminated"], done)
    k = int(np.flatnonzero(done)[0])
    np.testing.assert_allclose(data["reward"][: k + 1], ref[: k + 1], atol=2e-3)


def test_render_gif_and_png(tmp_path, trajectory, capsys):
    gif = tmp_path / "run.gif"
    assert (
        main(["render", str(LEVEL), "--policy", "zero", "--steps", str(STEPS), "--out", str(gif)])
        == 0
    )
    im = Image.open(gif)
    assert im.n_frames == STEPS + 1 and im.size == (250, 250)
    png = tmp_path / "start.png"
    assert main(["render", str(LEVEL), "--out", str(png)]) == 0
    assert Image.open(png).size == (250, 250)


def test_errors_are_reported_not_raised(tmp_path, trajectory, capsys):
    _, existing = trajectory
    assert main(["rollout", str(LEVEL), "--steps", "2", "--save-trajectory", str(existing)]) == 2
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert main(["show", str(tmp_path / "missing.json")]) == 2
    assert "no such level file" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["show", str(bad)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["render", str(LEVEL), "--out", str(tmp_path / "x.mp4")]) == 2
    assert (
        main(["rollout", str(LEVEL), "--steps", "0", "--save-trajectory", str(tmp_path / "t.npz")])
        == 2
    )
    assert main(["bogus"]) == 2


def test_library_lists_every_level(capsys):
    from jaxlab.envs.kinetix import library as lib

    assert main(["library", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == lib.names()
