"""Self-consistency of the reference fixtures recorded from the original Jax2D / Kinetix.

No peer package is needed: these checks read only the ``.npz`` files through
``fixture_io`` and assert invariants the recorded physics must satisfy (shapes, finiteness,
roles, symplectic-Euler kinematics, static bodies, the free fall of inactive padding shapes,
joint anchors, the env reward decomposition), so a corrupt or mis-wired regeneration fails CI.
"""

from __future__ import annotations

import functools
import hashlib
import json

import numpy as np
import pytest

from experiments.physics_fidelity.physics_fixtures import FIXTURE_DIR, fixture_paths, load_fixture

PATHS = fixture_paths()
IDS = [p.stem for p in PATHS]
N_ZERO, N_ACT, N_ENV = 240, 120, 128
CAPACITIES = {"s": (5, 2, 1, 1), "m": (6, 3, 2, 2), "l": (12, 4, 6, 2)}
# Revolute joints move positions directly (0.7 * anchor gap), so a jointed body's step may
# differ from v*dt; the recorded maximum is 0.059 m. Anchors drift apart by at most 0.055 m
# and fixed joints open by at most 0.118 rad in the recorded runs.
JOINT_POSITION_SHIFT_BOUND = 0.1
ANCHOR_GAP_BOUND = 0.1
FIXED_ANGLE_BOUND = 0.2
GREEN, BLUE = 1, 2


@functools.cache
def _load(stem: str) -> dict:
    return load_fixture(FIXTURE_DIR / f"{stem}.npz")


@pytest.fixture(params=IDS)
def fx(request) -> dict:
    return _load(request.param)


def _variants(d: dict) -> list[tuple[str, int]]:
    return [("", N_ZERO)] + ([("act_", N_ACT)] if bool(d["has_actuators"]) else [])


def _rot(theta: np.ndarray) -> np.ndarray:
    c, s = np.cos(theta), np.sin(theta)
    return np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)


def _with_init(d: dict, pre: str, kind: str, field: str) -> np.ndarray:
    return np.concatenate([d[f"init_{kind}_{field}"][None], d[f"{pre}{kind}_{field}"]], axis=0)


def _jointed(d: dict) -> np.ndarray:
    n = d["init_polygon_active"].shape[0] + d["init_circle_active"].shape[0]
    out = np.zeros(n, dtype=bool)
    active = d["init_joint_active"]
    out[d["init_joint_a_index"][active]] = True
    out[d["init_joint_b_index"][active]] = True
    return out


def test_fixtures_exist_for_every_shared_size():
    sizes = {p.stem.split("_", 1)[0] for p in PATHS}
    assert {"s", "m"} <= sizes, f"fixtures found for sizes {sorted(sizes)}"


def test_manifest_matches_files_and_budget():
    manifest = json.loads((FIXTURE_DIR / "manifest.json").read_text())
    assert sorted(manifest["files"]) == sorted(p.name for p in PATHS)
    total = 0
    for p in PATHS:
        raw = p.read_bytes()
        assert hashlib.sha256(raw).hexdigest() == manifest["files"][p.name]["sha256"], p.name
        assert len(raw) < 200_000, p.name
        total += len(raw)
    assert total < 5_000_000
    assert manifest["versions"]["kinetix-env"] == "3.0.2"
    assert manifest["versions"]["jax2d"] == "1.0.1"


def test_shapes_dtypes_and_steps(fx):
    size = fx["meta"]["size"]
    p, c, j, t = CAPACITIES[size]
    assert (
        int(fx["static_num_polygons"]),
        int(fx["static_num_circles"]),
        int(fx["static_num_joints"]),
        int(fx["static_num_thrusters"]),
    ) == (p, c, j, t)
    np.testing.assert_array_equal(fx["steps"], np.arange(1, N_ZERO + 1))
    assert {1, 30, 60, 120, 240} <= set(fx["steps"].tolist())
    for pre, n in _variants(fx):
        for kind, m in (("polygon", p), ("circle", c)):
            assert fx[f"{pre}{kind}_position"].shape == (n, m, 2)
            assert fx[f"{pre}{kind}_velocity"].shape == (n, m, 2)
            assert fx[f"{pre}{kind}_rotation"].shape == (n, m)
            assert fx[f"{pre}{kind}_angular_velocity"].shape == (n, m)
    assert fx["init_polygon_vertices"].shape == (p, 4, 2)
    assert fx["init_joint_a_relative_pos"].shape == (j, 2)
    assert fx["init_thruster_relative_position"].shape == (t, 2)
    assert fx["init_collision_matrix"].shape == (p + c, p + c)
    for key in ("env_reward", "env_done", "env_distance", "env_goal"):
        assert fx[key].shape == (N_ENV,), key
    if bool(fx["has_actuators"]):
        assert fx["act_engine_action"].shape == (j + t,)
    for key, arr in fx.items():
        if isinstance(arr, np.ndarray) and np.issubdtype(arr.dtype, np.floating):
            assert arr.dtype == np.float32, key


def test_all_floats_finite(fx):
    bad = [
        k
        for k, a in fx.items()
        if isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.floating)
        if not np.isfinite(a).all()
    ]
    assert not bad


def test_exactly_one_green_and_one_blue(fx):
    roles = np.concatenate(
        [
            fx["init_polygon_role"][fx["init_polygon_active"]],
            fx["init_circle_role"][fx["init_circle_active"]],
        ]
    )
    assert set(roles.tolist()) <= {0, 1, 2, 3}
    assert int((roles == GREEN).sum()) == 1
    assert int((roles == BLUE).sum()) == 1


def test_static_bodies_never_move(fx):
    for pre, _ in _variants(fx):
        for kind in ("polygon", "circle"):
            static = fx[f"init_{kind}_inverse_mass"] == 0
            x = _with_init(fx, pre, kind, "position")[:, static]
            th = _with_init(fx, pre, kind, "rotation")[:, static]
            np.testing.assert_array_equal(x, np.broadcast_to(x[:1], x.shape))
            np.testing.assert_array_equal(th, np.broadcast_to(th[:1], th.shape))
            np.testing.assert_array_equal(fx[f"{pre}{kind}_velocity"][:, static], 0.0)


def test_displacement_is_velocity_times_dt(fx):
    """Symplectic Euler: x_{k+1} = x_k + v_{k+1} dt, theta likewise, up to float32 rounding.

    Exact for bodies without joints; bodies with joints also get the solver's direct
    position shift, bounded by JOINT_POSITION_SHIFT_BOUND. Rows where the +-15 position clip
    acted are skipped.
    """
    dt = np.float32(fx["param_dt"])
    clip = float(fx["param_clip_position"])
    jointed = _jointed(fx)
    n_poly = fx["init_polygon_active"].shape[0]
    for pre, _ in _variants(fx):
        for kind, sl in (("polygon", slice(0, n_poly)), ("circle", slice(n_poly, None))):
            x = _with_init(fx, pre, kind, "position")
            v = fx[f"{pre}{kind}_velocity"]
            th = _with_init(fx, pre, kind, "rotation")
            w = fx[f"{pre}{kind}_angular_velocity"]
            unclipped = (np.abs(x[1:]) < clip - 1e-3).all(-1)
            gap = np.abs(np.diff(x, axis=0) - v * dt).max(-1)
            free = unclipped & ~jointed[sl][None]
            tol = 2e-6 + 1e-6 * np.abs(x[1:]).max(-1)
            assert (gap[free] <= tol[free]).all(), f"{pre}{kind}: {gap[free].max()}"
            assert (gap[unclipped] <= JOINT_POSITION_SHIFT_BOUND).all()
            dth = np.abs(np.diff(th, axis=0) - w * dt)
            assert (dth <= 4e-6 + 1e-6 * np.abs(th[1:])).all(), f"{pre}{kind}: {dth.max()}"


def test_inactive_shapes_fall_freely(fx):
    """Quirk kept for parity: gravity acts on any shape with inverse_mass != 0, active or not."""
    g = fx["init_gravity"].astype(np.float64)
    dt = float(fx["param_dt"])
    vclip = float(fx["param_clip_velocity"])
    for pre, n in _variants(fx):
        k = np.arange(1, n + 1, dtype=np.float64)[:, None]
        for kind in ("polygon", "circle"):
            inactive = ~fx[f"init_{kind}_active"]
            mobile = (fx[f"init_{kind}_inverse_mass"] != 0) & inactive
            v = fx[f"{pre}{kind}_velocity"]
            expected = np.clip(k * dt * g[None, :], -vclip, vclip)
            for i in np.where(mobile)[0]:
                np.testing.assert_allclose(v[:, i], expected, rtol=1e-4, atol=1e-5)
            np.testing.assert_array_equal(fx[f"{pre}{kind}_angular_velocity"][:, inactive], 0.0)


def test_joint_anchors_stay_together(fx):
    active = fx["init_joint_active"]
    if not active.any():
        pytest.skip("level has no active joint")
    a, b = fx["init_joint_a_index"][active], fx["init_joint_b_index"][active]
    for pre, _ in _variants(fx):
        pos = np.concatenate(
            [_with_init(fx, pre, "polygon", "position"), _with_init(fx, pre, "circle", "position")],
            axis=1,
        )
        th = np.concatenate(
            [_with_init(fx, pre, "polygon", "rotation"), _with_init(fx, pre, "circle", "rotation")],
            axis=1,
        )
        pa = pos[:, a] + np.einsum(
            "tjab,jb->tja", _rot(th[:, a]), fx["init_joint_a_relative_pos"][active]
        )
        pb = pos[:, b] + np.einsum(
            "tjab,jb->tja", _rot(th[:, b]), fx["init_joint_b_relative_pos"][active]
        )
        np.testing.assert_allclose(pa[0], fx["init_joint_global_position"][active], atol=1e-5)
        assert np.linalg.norm(pa - pb, axis=-1).max() < ANCHOR_GAP_BOUND
        fixed = fx["init_joint_is_fixed_joint"][active]
        if fixed.any():
            rel = th[:, b[fixed]] - th[:, a[fixed]] - fx["init_joint_rotation"][active][fixed]
            assert np.abs(rel).max() < FIXED_ANGLE_BOUND


def test_collision_matrix_excludes_joined_pairs(fx):
    cm = fx["init_collision_matrix"]
    np.testing.assert_array_equal(cm, cm.T)
    assert not cm.diagonal().any()
    active = fx["init_joint_active"]
    assert not cm[fx["init_joint_a_index"][active], fx["init_joint_b_index"][active]].any()


def test_mass_properties_follow_jax2d_formulas(fx):
    """Circle I = pi r^4 rho / 4 (half the disc value) and polygon m = shoelace area * rho."""
    c = fx["init_circle_active"] & (fx["init_circle_inverse_mass"] > 0)
    r = fx["init_circle_radius"][c].astype(np.float64)
    rho = fx["init_circle_density"][c].astype(np.float64)
    np.testing.assert_allclose(
        fx["init_circle_inverse_mass"][c], 1 / (np.pi * r**2 * rho), rtol=1e-5
    )
    np.testing.assert_allclose(
        fx["init_circle_inverse_inertia"][c], 4 / (np.pi * r**4 * rho), rtol=1e-5
    )
    for i in np.where(fx["init_polygon_active"] & (fx["init_polygon_inverse_mass"] > 0))[0]:
        v = fx["init_polygon_vertices"][i, : fx["init_polygon_n_vertices"][i]].astype(np.float64)
        area = 0.5 * abs(np.sum(v[:, 0] * np.roll(v[:, 1], -1) - np.roll(v[:, 0], -1) * v[:, 1]))
        expected = 1 / (area * float(fx["init_polygon_density"][i]))
        np.testing.assert_allclose(fx["init_polygon_inverse_mass"][i], expected, rtol=1e-5)


def test_env_reward_is_sparse_plus_dense(fx):
    """reward_k = sparse_k - scale*(d_k - d_{k-1}), no dense term at k=0 or after a done;
    sparse is in {-1, 0, +1}, nonzero exactly on done rows (128 < max_timesteps), +1 on goal."""
    r, done, d = fx["env_reward"], fx["env_done"], fx["env_distance"]
    assert int(fx["param_max_timesteps"]) > N_ENV
    has_prev = np.concatenate([[False], ~done[:-1]])
    prev_d = np.concatenate([[0.0], d[:-1]])
    dense = np.where(has_prev, -(d - prev_d) * float(fx["param_dense_reward_scale"]), 0.0)
    sparse = r - dense
    rounded = np.round(sparse)
    np.testing.assert_allclose(sparse, rounded, atol=1e-5)
    assert set(rounded.tolist()) <= {-1.0, 0.0, 1.0}
    np.testing.assert_array_equal(rounded != 0, done)
    np.testing.assert_array_equal(rounded > 0, fx["env_goal"])
    first = int(fx["env_first_done"])
    assert first == (int(np.argmax(done)) if done.any() else -1)


def test_act_variant_drives_every_actuator(fx):
    if not bool(fx["has_actuators"]):
        pytest.skip("level has no motor or thruster")
    np.testing.assert_array_equal(fx["act_unified_action"], 1.0)
    np.testing.assert_array_equal(fx["act_engine_action"], 1.0)
    np.testing.assert_array_equal(fx["act_steps"], np.arange(1, N_ACT + 1))
