"""Level files are validated like scenes built in Python: winding, convexity, float32 finiteness,
signs, encoding, size and nesting; and every mutant of a valid file either simulates with a finite
state or is refused with a LevelFormatError naming a field (hypothesis property)."""

import copy
import json
import math
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxlab import physics
from jaxlab.core.finite import all_finite
from jaxlab.envs.kinetix import levels as levels_lib
from jaxlab.envs.kinetix.levels import LevelFormatError, load_level
from jaxlab.envs.kinetix.levels import read as level_read

BASE = Path(levels_lib.__file__).parent / "s" / "h2_one_wheel_car.json"  # shipped beside the code
FIELD = re.compile(r"(<top level>|env_state|env_params|static_env_params)")


@pytest.fixture(scope="module")
def base_json():
    return json.loads(BASE.read_text())


def _first_active_polygon(data):
    return next(i for i, p in enumerate(data["env_state"]["polygon"]) if p["active"] and i >= 4)


def _load(tmp_path, data, name="level.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return load_level(path)


def _refused(tmp_path, data, pattern):
    with pytest.raises(LevelFormatError, match=pattern) as e:
        _load(tmp_path, data)
    assert "level.json" in str(e.value)


def test_counter_clockwise_and_non_convex_polygons_are_refused(tmp_path, base_json):
    i = _first_active_polygon(base_json)
    verts = base_json["env_state"]["polygon"][i]["vertices"]
    ccw = copy.deepcopy(base_json)
    ccw["env_state"]["polygon"][i]["vertices"] = {str(k): verts[str(3 - k)] for k in range(4)}
    _refused(tmp_path, ccw, rf"polygon\[{i}\]\.vertices.*counter-clockwise")
    bowtie = copy.deepcopy(base_json)  # swap two vertices: a self-crossing outline
    order = (0, 2, 1, 3)
    bowtie["env_state"]["polygon"][i]["vertices"] = {str(k): verts[str(order[k])] for k in range(4)}
    _refused(tmp_path, bowtie, rf"polygon\[{i}\]\.vertices")
    dent = copy.deepcopy(base_json)  # pull one vertex inside: non-convex
    v = dent["env_state"]["polygon"][i]["vertices"]
    v["1"] = {"0": 0.0, "1": 0.0}
    _refused(tmp_path, dent, rf"polygon\[{i}\]\.vertices.*convex")
    rotated = copy.deepcopy(base_json)  # a cyclic shift keeps the clockwise outline: accepted
    rotated["env_state"]["polygon"][i]["vertices"] = {
        str(k): verts[str((k + 1) % 4)] for k in range(4)
    }
    _load(tmp_path, rotated)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("position", {"0": 1e39, "1": 1.0}, "finite as float32"),
        ("friction", -0.5, ": value -0.5; expected >= 0"),
        ("inverse_mass", -1.0, ": value -1.0; expected >= 0"),
        ("rotation", 1e30, r"expected \|value\| <= 1e\+06"),
    ],
)
def test_non_finite_negative_and_huge_values_are_refused(
    tmp_path, base_json, field, value, message
):
    data = copy.deepcopy(base_json)
    i = _first_active_polygon(data)
    data["env_state"]["polygon"][i][field] = value
    _refused(tmp_path, data, rf"polygon\[{i}\]\.{field}.*{message}")


def test_not_utf8_too_deep_or_too_large_is_refused_before_parsing(tmp_path, monkeypatch):
    path = tmp_path / "latin1.json"
    path.write_bytes('{"name": "caf\xe9"}'.encode("latin-1"))
    with pytest.raises(LevelFormatError, match=r"latin1\.json: not UTF-8"):
        load_level(path)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(LevelFormatError, match=r"deep\.json: JSON nested 100000 levels deep"):
        load_level(deep)
    monkeypatch.setattr(level_read, "MAX_LEVEL_BYTES", 1000)
    with pytest.raises(LevelFormatError, match=r"bytes; expected a level file of at most 1000"):
        load_level(BASE)


# ---------------------------------------------------------------------------------------------
# Property: mutants load into a finite simulation or are refused naming a field.

STEPS = 64


def make_rollout():
    """One jitted 64-step rollout for the base level's static sizes (every mutant loads into them):
    ``(sim_state, sim_params) -> all states finite``."""
    sp = load_level(BASE).static_params.sim

    @jax.jit
    def run(state, params):
        actions = jnp.zeros(sp.num_joints + sp.num_thrusters)

        def body(s, _):
            s, _ = physics.step(s, params, sp, actions)
            return s, all_finite(s)

        final, finite = jax.lax.scan(body, state, None, length=STEPS)
        return jnp.all(finite)

    return run


@pytest.fixture(scope="module")
def rollout():
    return make_rollout()


def _leaf_paths(x, prefix=()):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _leaf_paths(v, prefix + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _leaf_paths(v, prefix + (i,))
    else:
        yield prefix


# Extreme numbers: beyond float32 or the level bounds (refused), and large but in-bound ones
# (accepted where the field's sign allows, so they must simulate finitely).
_EXTREME = [
    1e39,
    -1e39,
    1e30,
    -1e9,
    1e7,
    2**31,
    2**63,
    math.nan,
    math.inf,
    -math.inf,
    1e6,
    -1e6,
    1e5,
    -1e4,
    1e3,
    -100.0,
    0.5,
    -0.5,
    0,
    1e-30,
    -1e-30,
    1,
    3,
]
_TYPES = ["x", None, [], {}, True, False, {"0": 1}]


@st.composite
def mutations(draw, data):
    paths = list(_leaf_paths(data))
    ops = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["delete", "type", "number", "number", "number", "reorder"]))
        if kind == "reorder":
            ops.append(("reorder", draw(st.integers(0, 200)), draw(st.permutations(range(4)))))
        else:
            path = paths[draw(st.integers(0, len(paths) - 1))]
            value = {
                "delete": None,
                "type": draw(st.sampled_from(_TYPES)),
                "number": draw(st.sampled_from(_EXTREME)),
            }[kind]
            ops.append((kind, path, value))
    return ops


def _apply(data, ops):
    data = copy.deepcopy(data)
    for kind, where, value in ops:
        if kind == "reorder":
            polys = [p for p in data["env_state"]["polygon"] if isinstance(p, dict)]
            p = polys[where % len(polys)]
            v = p.get("vertices")
            if isinstance(v, dict) and set(v) == {"0", "1", "2", "3"}:
                p["vertices"] = {str(k): v[str(value[k])] for k in range(4)}
            continue
        node = data
        for k in where[:-1]:
            if not isinstance(node, dict | list):
                break
            try:
                node = node[k]
            except (KeyError, IndexError, TypeError):
                break
        else:
            last = where[-1]
            if isinstance(node, dict) and last in node:
                if kind == "delete":
                    del node[last]
                else:
                    node[last] = value
            elif isinstance(node, list) and isinstance(last, int) and last < len(node):
                if kind == "delete":
                    del node[last]
                else:
                    node[last] = value
    return data


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.data())
def test_mutated_level_files_simulate_finitely_or_are_refused(
    tmp_path_factory, base_json, rollout, data
):
    ops = data.draw(mutations(base_json))
    mutant = _apply(base_json, ops)
    path = tmp_path_factory.mktemp("mutant") / "level.json"
    path.write_text(json.dumps(mutant))
    base_static = load_level(BASE).static_params
    try:
        level = load_level(path, static_params=base_static)
    except LevelFormatError as e:
        assert FIELD.search(str(e)), str(e)
        return
    params = jax.tree.map(jnp.float32, level.params.sim)
    assert bool(rollout(level.state.sim, params)), f"non-finite rollout after {ops}"
    assert np.all(np.isfinite(np.asarray(level.state.sim.polygon.position)))
