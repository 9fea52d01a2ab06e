"""Load the reference fixtures recorded from the original Jax2D / Kinetix (pure NumPy).

The files ``tests/physics/fixtures/<size>_<level>.npz`` are written by
``benchmarks/peers/make_reference_trajectories.py`` in the peer venv (kinetix-env 3.0.2,
jax2d 1.0.1, float32 CPU JAX). ``s`` and ``m`` come from the original Kinetix levels; ``l``
from the levels shipped in the kinetix-env wheel. Reading them needs only NumPy.

Shapes use P polygons, C circles, J joints, T thrusters (the level's static capacities,
padding slots included; polygons 0..3 are the static floor, walls and ceiling). Shapes have a
global index: polygons ``0..P-1`` then circles ``P..P+C-1``.

Initial scene (exactly the ``EnvState`` returned by ``kinetix.util.saving.load_from_json_file``):

* ``init_{polygon,circle}_{f}`` for every ``RigidBody`` field ``f``: ``position`` [N,2],
  ``rotation`` [N], ``velocity`` [N,2], ``angular_velocity`` [N], ``inverse_mass`` [N],
  ``inverse_inertia`` [N], ``friction`` [N], ``restitution`` [N], ``collision_mode`` [N] int32,
  ``active`` [N] bool, ``n_vertices`` [N] int32, ``vertices`` [N,4,2], ``radius`` [N].
* ``init_joint_{f}`` for every ``Joint`` field: ``a_index``/``b_index`` [J] int32 (global),
  ``a_relative_pos``/``b_relative_pos``/``global_position``/``acc_impulse`` [J,2],
  ``acc_r_impulse``, ``motor_speed``, ``motor_power``, ``min_rotation``, ``max_rotation``,
  ``rotation`` [J], ``active``/``motor_on``/``motor_has_joint_limits``/``is_fixed_joint`` [J] bool.
* ``init_thruster_{f}``: ``object_index`` [T] int32, ``relative_position``/``global_position``
  [T,2], ``rotation``/``power`` [T], ``active`` [T] bool.
* ``init_collision_matrix`` [P+C,P+C] bool (recomputed from the joints by the loader),
  ``init_gravity`` [2], ``init_{polygon,circle}_role`` int32 (0 default, 1 green, 2 blue,
  3 red), ``init_{polygon,circle}_density``, ``init_motor_binding`` [J], ``init_thruster_binding``
  [T], ``init_motor_auto`` [J] bool. Warm-start manifolds start empty (all zero, inactive),
  ``timestep`` 0 and ``last_distance`` -1.
* ``param_<name>``: every ``EnvParams`` field as used (``SimParams`` plus ``max_timesteps``,
  ``pixels_per_unit``, ``dense_reward_scale``, ``num_shape_roles``); ``static_<name>``: every
  ``StaticEnvParams`` field (``screen_dim`` is [2]).

Trajectories. "Engine step" is one ``jax2d.engine.PhysicsEngine.step(state, params, action)``
with the static and dynamic params above. **Row k holds the state after k+1 engine steps**
(``steps[k] == k + 1``); the initial state is the ``init_*`` arrays and is not repeated.

* zero actions, 240 steps (4 s at dt 1/60): ``{polygon,circle}_position`` [240,N,2],
  ``..._rotation`` [240,N], ``..._velocity`` [240,N,2], ``..._angular_velocity`` [240,N],
  ``steps`` [240]. The engine action is ``zeros(J+T)``, so motors and thrusters are off.
* ``act_*`` (when ``has_actuators``): the same four arrays per shape kind for 120 engine
  steps with the engine action ``act_engine_action`` [J+T] (motors first, then thrusters),
  which ``ContinuousActions.process_action`` makes from ``act_unified_action = ones(6)``.
* env rollout: 128 ``KinetixEnv.step`` calls, zero continuous actions, ``auto_reset=False``
  (the scene keeps running after termination). Row k is env step k+1 (``env_steps``), i.e.
  engine step ``frame_skip * (k+1)``; with zero actions the env's physics equals the engine
  rows ``frame_skip*(k+1) - 1`` bit for bit. ``env_reward`` [128] (sparse of the first
  terminal sub-step plus dense ``-scale * (d_k - d_{k-1})``, no dense term on the first step
  or right after a done), ``env_done`` [128] bool, ``env_goal`` [128] bool (sparse +1),
  ``env_distance`` [128] (summed green-blue centre distance of the reported sub-step) and
  ``env_first_done`` (index of the first done row, -1 when none).

All float arrays are float32. Inactive shapes are integrated too: an inactive shape whose
stored ``inverse_mass`` is non-zero falls under gravity until the position clip (±15), as in
the original engine; compare active shapes only unless you reproduce that.

``meta`` is a JSON string with the level, source, versions and generation details.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

# recorded fixtures live with the tests of a checkout; JAXLAB_PHYSICS_FIXTURES names another folder
FIXTURE_DIR = Path(
    os.environ.get(
        "JAXLAB_PHYSICS_FIXTURES",
        Path(__file__).resolve().parents[2] / "tests" / "physics" / "fixtures",
    )
)
SIZES = ("s", "m", "l")


def fixture_paths(size: str | None = None) -> list[Path]:
    """Sorted paths of the npz fixtures, optionally only one size class (``s``, ``m``, ``l``)."""
    if size is not None and size not in SIZES:
        raise ValueError(f"size={size!r} is not a size class, expected one of {SIZES}")
    pattern = f"{size}_*.npz" if size else "*.npz"
    return sorted(FIXTURE_DIR.glob(pattern))


def load_fixture(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read one fixture into a plain dict of NumPy arrays.

    Args:
        path: a ``.npz`` written by ``make_reference_trajectories.py``, or a bare
            ``<size>_<level>`` name looked up in ``FIXTURE_DIR``.

    Returns:
        ``{name: array}`` with the arrays described in the module docstring, plus
        ``"meta"`` decoded from its JSON string into a dict.

    Raises:
        ValueError: when the file does not exist or lacks the ``meta``/``steps`` arrays.
    """
    p = Path(path)
    if not p.suffix:
        p = FIXTURE_DIR / f"{p.name}.npz"
    if not p.is_file():
        raise ValueError(f"path={str(p)!r} does not exist, expected a fixture .npz file")
    with np.load(p, allow_pickle=False) as z:
        data = {k: z[k] for k in z.files}
    for key in ("meta", "steps"):
        if key not in data:
            raise ValueError(f"fixture {p.name!r} has no {key!r} array, expected a fixture file")
    data["meta"] = json.loads(str(data["meta"]))
    return data
