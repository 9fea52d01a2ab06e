"""Kinetix level files: lossless JSON round trip, padding, stacking and bad-input errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxlab.envs.kinetix import (
    LevelFormatError,
    StaticEnvParams,
    demo_level,
    expand_level,
    level_from_json,
    level_to_json,
    load_level,
    load_levels,
    make_reset_fn,
    save_level,
    stack_levels,
)
from jaxlab.envs.kinetix.levels import collision_matrix_np
from jaxlab.physics import calculate_collision_matrix
from tests.envs.conftest import SHARED_LEVELS

LEVELS = sorted(SHARED_LEVELS.glob("*/*.json"))
IDS = [f"{p.parent.name}/{p.stem}" for p in LEVELS]
# The L levels ship inside the kinetix-env wheel; the peer venv (benchmarks/peers) has them.
PEER_L = sorted(
    (Path(__file__).resolve().parents[3] / "benchmarks" / "peers" / ".venv-kinetix").glob(
        "lib/python*/site-packages/kinetix/levels/l/*.json"
    )
)


def _keys(x, prefix=""):
    """Every key path of a JSON object (list entries collapsed)."""
    out = set()
    if isinstance(x, dict):
        for k, v in x.items():
            kk = "#" if k.isdigit() else k
            out.add(prefix + "." + kk)
            out |= _keys(v, prefix + "." + kk)
    elif isinstance(x, list):
        for v in x:
            out |= _keys(v, prefix + "[]")
    return out


def _leaves(level):
    return [np.asarray(x) for x in jax.tree.leaves(level.state)]


def test_the_shared_levels_are_there(shared_levels):
    assert len(LEVELS) == 34  # 10 S + 24 M


@pytest.mark.parametrize("path", LEVELS, ids=IDS)
def test_round_trip_is_lossless(path, tmp_path):
    original_text = path.read_text()
    first = load_level(path)
    out = save_level(tmp_path / "copy.json", *first)
    second = load_level(out)
    for a, b in zip(_leaves(first), _leaves(second), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    assert first.static_params == second.static_params
    assert first.params == second.params
    written = json.loads(out.read_text())
    assert _keys(written) == _keys(json.loads(original_text))
    # The same bytes as the original exporter wrote.
    assert out.read_text() == original_text


@pytest.mark.skipif(not PEER_L, reason="peer venv with the kinetix-env L levels not installed")
def test_round_trip_of_the_original_l_levels(tmp_path):
    for path in PEER_L:
        level = load_level(path)
        assert level.static_params.num_polygons == 12
        out = save_level(tmp_path / path.name, *level)
        assert out.read_text() == path.read_text(), path.name


def test_loaded_values_match_the_json(shared_levels):
    path = shared_levels / "s" / "h2_one_wheel_car.json"
    data = json.loads(path.read_text())
    state, sp, params = load_level(path)
    assert (sp.num_polygons, sp.num_circles, sp.num_joints, sp.num_thrusters) == (5, 2, 1, 1)
    c0 = data["env_state"]["circle"][0]
    np.testing.assert_array_equal(
        np.asarray(state.sim.circle.position[0]),
        np.float32([c0["position"]["0"], c0["position"]["1"]]),
    )
    assert int(state.circle_shape_roles[0]) == c0["role"]
    j0 = data["env_state"]["joint"][0]
    assert int(state.sim.joint.b_index[0]) == j0["b_index"]
    assert int(state.motor_bindings[0]) == j0["motor_binding"]
    assert params.dt == data["env_params"]["dt"] and params.max_timesteps == 256
    assert int(state.timestep) == 0 and float(state.last_distance) == -1.0


@pytest.mark.parametrize("path", LEVELS[::6], ids=IDS[::6])
def test_numpy_collision_matrix_matches_the_engine(path):
    state, sp, _ = load_level(path)
    j = state.sim.joint
    want = np.asarray(calculate_collision_matrix(sp.sim, j))
    got = collision_matrix_np(sp.num_shapes, j.a_index, j.b_index, j.active)
    np.testing.assert_array_equal(got, want)


def test_expand_keeps_slots_and_shifts_circle_indices(shared_levels):
    path = shared_levels / "s" / "h2_one_wheel_car.json"
    small, sp_s, _ = load_level(path)
    sp_l = StaticEnvParams.from_size("l")
    big = load_level(path, sp_l).state
    P_s, P_l = sp_s.num_polygons, sp_l.num_polygons
    np.testing.assert_array_equal(
        np.asarray(big.sim.polygon.position[:P_s]), np.asarray(small.sim.polygon.position)
    )
    assert not np.any(np.asarray(big.sim.polygon.active[P_s:]))
    np.testing.assert_array_equal(
        np.asarray(big.sim.circle.position[: sp_s.num_circles]),
        np.asarray(small.sim.circle.position),
    )
    # Joint 0 joins polygon 4 and circle 0 (global 5 in S, 12 in L).
    assert int(small.sim.joint.b_index[0]) == P_s
    assert int(big.sim.joint.b_index[0]) == P_l
    assert int(big.sim.joint.a_index[0]) == int(small.sim.joint.a_index[0])
    cm = np.asarray(big.sim.collision_matrix)
    assert cm.shape == (16, 16) and not cm[4, P_l] and cm[4, P_l + 1]
    assert big.sim.acc_rr_manifolds.active.shape == (60, 2)


def test_load_levels_pads_to_the_largest_and_reset_fn_samples_them(shared_levels):
    paths = [
        shared_levels / "s" / "h0_weak_thrust.json",
        shared_levels / "m" / "h5_angry_birds.json",
    ]
    batch, sp, _ = load_levels(paths)
    assert (sp.num_polygons, sp.num_circles, sp.num_joints, sp.num_thrusters) == (6, 3, 2, 2)
    assert batch.sim.polygon.position.shape == (2, 6, 2)
    reset = make_reset_fn(batch)
    firsts = {float(reset(jax.random.key(i)).sim.circle.position[0, 0]) for i in range(16)}
    assert firsts == {
        float(batch.sim.circle.position[0, 0, 0]),
        float(batch.sim.circle.position[1, 0, 0]),
    }
    with pytest.raises(ValueError, match="different sizes"):
        stack_levels([load_level(paths[0]).state, load_level(paths[1]).state])


def test_save_refuses_to_overwrite(tmp_path):
    sp = StaticEnvParams.from_size("s")
    state = demo_level(sp)
    path = save_level(tmp_path / "demo.json", state, sp)
    before = path.read_text()
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_level(path, state.replace(circle_shape_roles=state.circle_shape_roles * 0), sp)
    assert path.read_text() == before
    save_level(
        path, state.replace(circle_shape_roles=state.circle_shape_roles * 0), sp, overwrite=True
    )
    assert path.read_text() != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.json"]  # no temp files left


def test_demo_level_fits_every_size_and_round_trips(tmp_path):
    for size in ("s", "m", "l"):
        sp = StaticEnvParams.from_size(size)
        state = demo_level(sp)
        roles = np.concatenate(
            [np.asarray(state.polygon_shape_roles), np.asarray(state.circle_shape_roles)]
        )
        assert (roles == 1).sum() == 1 and (roles == 2).sum() == 1
        again = load_level(save_level(tmp_path / f"{size}.json", state, sp)).state
        for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(again), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="demo_level needs"):
        demo_level(StaticEnvParams(num_polygons=4, num_circles=2, num_joints=1, num_thrusters=1))


# --------------------------------------------------------------------------------------------
# Bad input


@pytest.fixture(scope="module")
def good_json(shared_levels):
    return json.loads((shared_levels / "s" / "h2_one_wheel_car.json").read_text())


def _mutations():
    def set_(path, value):
        def f(d):
            obj = d
            for k in path[:-1]:
                obj = obj[k]
            obj[path[-1]] = value

        return f

    def delete(path):
        def f(d):
            obj = d
            for k in path[:-1]:
                obj = obj[k]
            del obj[path[-1]]

        return f

    def append_polygon(d):
        d["env_state"]["polygon"].append(copy.deepcopy(d["env_state"]["polygon"][-1]))

    return [
        ("unknown-top", set_(["extra"], 1), r"<top level>: unknown key\(s\) \['extra'\]"),
        (
            "unknown-body-key",
            set_(["env_state", "circle", 0, "colour"], 1),
            r"env_state\.circle\[0\]: unknown key",
        ),
        (
            "missing-key",
            delete(["env_state", "joint", 0, "motor_binding"]),
            r"env_state\.joint\[0\]: missing key\(s\) \['motor_binding'\]",
        ),
        (
            "too-many-polygons",
            append_polygon,
            r"env_state\.polygon: has 6 entries; expected 5.*more entities than the static sizes allow",
        ),
        (
            "short-vector",
            set_(["env_state", "circle", 1, "position"], {"0": 1.0}),
            r"env_state\.circle\[1\]\.position: has keys \['0'\]; expected exactly \['0', '1'\]",
        ),
        (
            "bad-role",
            set_(["env_state", "circle", 0, "role"], 7),
            r"env_state\.circle\[0\]\.role: value 7; expected one of 0 \(default\)",
        ),
        (
            "bad-motor-binding",
            set_(["env_state", "joint", 0, "motor_binding"], 4),
            r"env_state\.joint\[0\]\.motor_binding: value 4; expected 0\.\.3",
        ),
        (
            "bad-joint-index",
            set_(["env_state", "joint", 0, "b_index"], 9),
            r"env_state\.joint\[0\]\.b_index: value 9; expected a shape index 0\.\.6",
        ),
        (
            "string-number",
            set_(["env_state", "polygon", 4, "rotation"], "0.5"),
            r"env_state\.polygon\[4\]\.rotation: value '0\.5'; expected a number",
        ),
        (
            "nan",
            set_(["env_state", "polygon", 4, "friction"], float("nan")),
            r"env_state\.polygon\[4\]\.friction: value nan; expected a finite number",
        ),
        (
            "bad-static",
            set_(["static_env_params", "frame_skip"], 0),
            r"static_env_params: StaticEnvParams\.frame_skip=0; expected >= 1",
        ),
        (
            "bad-matrix",
            set_(["env_state", "collision_matrix", "0"], {"0": True}),
            r"env_state\.collision_matrix\[0\]: has keys",
        ),
        (
            "bad-roles-count",
            set_(["env_params", "num_shape_roles"], 5),
            r"env_params\.num_shape_roles: value 5; expected 4",
        ),
        (
            "list-not-dict",
            set_(["env_state", "gravity"], [0.0, -9.8]),
            r"env_state\.gravity: got \[0\.0, -9\.8\]",
        ),
    ]


@pytest.mark.parametrize("name,mutate,message", _mutations(), ids=[m[0] for m in _mutations()])
def test_bad_level_data_names_file_field_and_problem(good_json, tmp_path, name, mutate, message):
    data = copy.deepcopy(good_json)
    mutate(data)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    with pytest.raises(LevelFormatError, match=message) as info:
        load_level(path)
    assert str(path) in str(info.value)
    with pytest.raises(LevelFormatError, match=message):
        level_from_json(data, "x.json")


def test_truncated_and_missing_files(shared_levels, tmp_path):
    text = (shared_levels / "s" / "h2_one_wheel_car.json").read_text()
    bad = tmp_path / "cut.json"
    bad.write_text(text[: len(text) // 2])
    with pytest.raises(LevelFormatError, match=r"cut\.json: not valid JSON .*truncated"):
        load_level(bad)
    with pytest.raises(FileNotFoundError, match="nothere.json"):
        load_level(tmp_path / "nothere.json")


def test_level_too_big_for_the_target_size(shared_levels):
    path = shared_levels / "m" / "h5_angry_birds.json"
    with pytest.raises(
        LevelFormatError, match="num_polygons: the level has 6 slots but the target size allows 5"
    ):
        load_level(path, StaticEnvParams.from_size("s"))
    state, sp, params = load_level(path)
    with pytest.raises(ValueError, match="expected"):
        level_to_json(jax.tree.map(lambda x: x[None], state), sp, params)
    with pytest.raises(LevelFormatError, match="more entities"):
        expand_level(state, sp, StaticEnvParams.from_size("s"))
