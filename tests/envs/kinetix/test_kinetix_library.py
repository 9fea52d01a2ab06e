"""The shipped Kinetix level library: files, builders, solutions and the no-op baseline.

One compiled rollout per size (``library.replay_size``: every level of the size with its stored
solution and with the no-op policy, ``vmap`` over episodes, ``lax.scan`` over steps).
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxlab.envs.kinetix import StaticEnvParams, level_to_json, load_library_level
from jaxlab.envs.kinetix import levels as levels_pkg
from jaxlab.envs.kinetix import library as lib

NAMES = lib.names()
SIZES = ("s", "m", "l")


@pytest.fixture(scope="module")
def solutions():
    return lib.load_solutions()


@pytest.fixture(scope="module", params=SIZES)
def replay(request, solutions):
    return request.param, lib.replay_size(request.param, solutions)


def test_library_size_and_coverage():
    counts = {s: len(lib.names(s)) for s in SIZES}
    assert sum(counts.values()) >= 20
    assert counts["s"] >= 6 and counts["m"] >= 5 and counts["l"] >= 4, counts
    text = " ".join(lv.description for lv in lib.LIBRARY.values())
    for theme in ("car", "thruster", "arm", "balancing", "throwing", "morphology"):
        assert theme in text, theme
    for name, lv in lib.LIBRARY.items():
        assert name == f"{lv.size}/{lv.builder.__name__}"
        assert lv.description and "\n" not in lv.description


def test_every_library_level_is_shipped():
    files = sorted(p.relative_to(lib.LEVELS_DIR) for p in lib.LEVELS_DIR.glob("[sml]/*.json"))
    ours = sorted(f"{n}.json" for n in NAMES)
    assert sorted(set(map(str, files)) & set(ours)) == ours
    # the level-file code is the package of this folder; the size folders hold data only
    assert Path(levels_pkg.__file__).parent == lib.LEVELS_DIR
    assert not list(lib.LEVELS_DIR.glob("[sml]/**/*.py"))


@pytest.mark.parametrize("name", NAMES)
def test_json_file_equals_builder(name):
    lv = lib.LIBRARY[name]
    loaded = load_library_level(name)
    built = lib.build_level(name)
    assert loaded.static_params == StaticEnvParams.from_size(lv.size)
    assert loaded.params == built.params
    la, lb = jax.tree.leaves(loaded.state), jax.tree.leaves(built.state)
    assert len(la) == len(lb)
    for a, b in zip(la, lb, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    # and the file holds exactly what the writer produces today
    assert lv.path.read_text() == json.dumps(level_to_json(*built))


@pytest.mark.parametrize("name", NAMES)
def test_level_is_well_formed(name):
    state = lib.build_level(name).state
    sim = jax.device_get(state.sim)
    roles = np.concatenate(
        [
            np.asarray(state.polygon_shape_roles)[sim.polygon.active],
            np.asarray(state.circle_shape_roles)[sim.circle.active],
        ]
    )
    assert (roles == 1).sum() >= 1 and (roles == 2).sum() >= 1
    motors = sim.joint.active & sim.joint.motor_on & ~sim.joint.is_fixed_joint
    assert motors.any() or sim.thruster.active.any(), "no control"
    assert len(lib._alphabet(state)) > 1


def test_every_level_has_a_solution(solutions):
    assert set(solutions) == set(NAMES)
    for name, segs in solutions.items():
        assert sum(n for _, n in segs) <= lib.build_level(name).params.max_timesteps


def test_solutions_solve_and_noop_does_not(replay):
    size, results = replay
    assert set(results) == set(lib.names(size))
    for name, (sol, end, noop) in results.items():
        assert sol == 1, f"{name}: the stored solution ends with outcome {sol} at step {end}"
        assert end < lib.build_level(name).params.max_timesteps
        assert noop != 1, f"{name}: the no-op policy solves it"


def test_builders_and_files_replay_alike(solutions):
    """The builder's state (not the JSON) gives the same outcomes (S, shares the compile)."""
    a = lib.replay_size("s", solutions, from_files=True)
    b = lib.replay_size("s", solutions, from_files=False)
    assert a == b


def test_write_refuses_to_overwrite(tmp_path):
    written = lib.write_all(tmp_path)
    assert len(written) == len(NAMES)
    assert lib.write_all(tmp_path) == []  # identical files are left alone
    victim = tmp_path / f"{NAMES[0]}.json"
    victim.write_text(victim.read_text().replace('"role": 1', '"role": 0', 1))
    changed = victim.read_text()
    with pytest.raises(FileExistsError, match="--force"):
        lib.write_all(tmp_path)
    assert victim.read_text() == changed
    assert lib.write_all(tmp_path, force=True) == [victim]
    assert victim.read_text() == lib.LIBRARY[NAMES[0]].path.read_text()


def test_bad_names_and_segments():
    with pytest.raises(ValueError, match="not in the library"):
        load_library_level("s/no_such_level")
    with pytest.raises(ValueError, match="at most 4"):
        lib.expand_segments([((0, 0, 0, 0, 0, 0), 5)], 4)
    acts = lib.expand_segments([((1, 0, 0, 0, 0, 0), 2), ((0, 0, 0, 0, 1, 0), 1)], 4)
    np.testing.assert_array_equal(acts[:, 0], [1, 1, 0, 0])
    np.testing.assert_array_equal(acts[:, 4], [0, 0, 1, 0])
