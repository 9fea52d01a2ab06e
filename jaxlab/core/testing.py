"""Checks every recipe's tests make through the public interface: one train step on a mesh equals
the same step on one device (loss, metrics, updated parameters and optimizer state).

Used by the recipe tests (8 simulated CPU devices, see ``tests/conftest.py``) and available to
anyone writing a recipe::

    from jaxlab.core.testing import sharded_step_matches
    sharded_step_matches(RECIPE, cfg, {"mesh.data": 2, "mesh.fsdp": 4})
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import chex
import jax
import numpy as np

from jaxlab.core import config as config_lib
from jaxlab.core import finite
from jaxlab.core import loop as loop_lib
from jaxlab.core import run as run_lib
from jaxlab.core.recipe import Parts, Recipe

_ONE = {"mesh.data": 1, "mesh.fsdp": 1, "mesh.tensor": 1, "mesh.expert": 1}


def one_step(
    recipe: Recipe,
    cfg: Any,
    devices: Any,
    steps: int = 1,
    state: Any = None,
    *,
    parts: Parts | None = None,
    chunk: int = 0,
) -> tuple[Any, list[dict], Any]:
    """``steps`` train steps of ``recipe`` on ``cfg``'s mesh over ``devices`` with the first
    batches of the recipe's data iterator (if any), from ``state`` placed in the parts' state
    shardings (default: the seed's initial state, ``init`` compiled for this mesh). Returns the
    final state (on the host), the metrics of each step and the initial state (on the devices).

    ``parts``: built already (for ``cfg`` over ``devices``; default: built here). ``chunk > 0``:
    the steps run as the training loop runs them, ``chunk`` per call of the loop's compiled
    multi-step function, which the loop shares by ``parts``: a test that trained those parts
    with ``loop.steps_per_call = chunk`` has compiled it already."""
    if chunk and steps % chunk:
        raise ValueError(f"steps={steps} is not a multiple of chunk={chunk}")
    parts = run_lib.build(recipe, cfg, devices) if parts is None else parts
    if state is None:
        key = jax.random.PRNGKey(cfg.seed)
        init = run_lib.init_state(parts, key)
        # the loop's step donates its input: the returned initial state is a second copy (the
        # compiled ``init`` run again)
        state = run_lib.init_state(parts, key) if chunk else init
    elif parts.state_sharding is not None:
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state)
        state = init = jax.device_put(state, parts.state_sharding(abstract))
    else:
        init = state
    it = parts.data() if parts.data is not None else None
    if chunk:
        final, metrics = _loop_steps(parts, state, it, steps, chunk)
        return jax.device_get(final), metrics, init
    # the output state keeps the input's shardings (as in the loop), so step 2 reuses step 1's
    # compilation
    shardings = jax.tree.map(lambda x: x.sharding, state)
    step = jax.jit(parts.train_step, out_shardings=(shardings, None))
    metrics = []
    for _ in range(steps):
        batch = None
        if it is not None:
            batch = run_lib.place_batches(next(it), parts.abstract_batch, leading=0)
        state, m = step(state, batch)
        metrics.append(jax.device_get(m))
    return jax.device_get(state), metrics, init


def _loop_steps(parts: Parts, state: Any, it: Any, steps: int, chunk: int) -> tuple[Any, list]:
    """``steps`` steps through the loop's compiled ``chunk``-step function of ``parts``."""
    metrics = []
    for _ in range(steps // chunk):
        state, fn = loop_lib.step_for(parts, state, chunk, it is not None)
        state, m = fn(state, loop_lib.next_batches(parts, it, chunk))
        m = jax.device_get(m)
        m.pop(finite.FLAG, None)
        metrics += [jax.tree.map(lambda x, i=i: x[i], m) for i in range(chunk)]
    return state, metrics


def cut_back_copy(run_dir: Path, dest: Path, step: int) -> Path:
    """A copy of the finished run ``run_dir`` at ``dest`` without its checkpoints after
    ``step`` (asserting one at ``step`` is kept): resuming it replays the run's second part."""
    shutil.copytree(run_dir, dest)
    kept = []
    for ckpt in (dest / "checkpoints").iterdir():
        if int(ckpt.name) > step:
            shutil.rmtree(ckpt)
        else:
            kept.append(int(ckpt.name))
    assert step in kept, (step, sorted(kept))
    return dest


def assert_bit_identical(a: Any, b: Any) -> None:
    """Every leaf of the trees ``a`` and ``b`` has the same bytes (typed PRNG keys by their key
    data): what a resumed run must reproduce of the uninterrupted one."""
    a, b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(a) == len(b), (len(a), len(b))
    for x, y in zip(a, b, strict=True):
        x, y = jax.device_get(x), jax.device_get(y)
        if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


def _leaves(tree: Any, floating: bool) -> Any:
    """``tree`` with the leaves whose dtype is (``floating``) or is not floating; others None."""
    keep = lambda x: np.issubdtype(np.asarray(x).dtype, np.floating) == floating
    return jax.tree.map(lambda x: x if keep(x) else None, tree)


def sharded_step_matches(
    recipe: Recipe,
    cfg: Any,
    mesh: Mapping[str, int],
    *,
    steps: int = 1,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    parts: Parts | None = None,
    chunk: int = 0,
) -> tuple[Any, Any]:
    """Asserts that ``steps`` train steps on the mesh ``mesh`` (e.g. ``{"mesh.data": 8}``) over
    as many devices as it has equal the same steps on one device, from the same initial state
    (the seed's, made on one device): every metric and every leaf of the new state (parameters,
    optimizer moments, keys). Returns both states.

    ``parts``: the one-device run's, built already (for ``cfg`` on one device); ``chunk``: run
    the steps ``chunk`` per call of the training loop's compiled multi-step function (see
    :func:`one_step`). A test module that has trained ``parts`` through the loop with
    ``loop.steps_per_call = chunk`` then compiles only the mesh's step here."""
    single_cfg = config_lib.replace(cfg, **_ONE)
    multi_cfg = config_lib.replace(cfg, **{**_ONE, **mesh})
    n = int(np.prod([v for v in mesh.values()]))
    s1, m1, init = one_step(recipe, single_cfg, jax.devices()[:1], steps, parts=parts, chunk=chunk)
    # both runs start from the one-device initial state, placed in the mesh's shardings (one
    # compilation of ``init`` instead of two: what is compared is the step)
    sn, mn, _ = one_step(recipe, multi_cfg, jax.devices()[:n], steps, state=init, chunk=chunk)
    # chex names the differing leaf by its tree path; float leaves within tolerance, the others
    # (keys, step counters) exactly: a relative tolerance would let a uint32 key differ by 10^4
    for multi, single in ((mn, m1), (sn, s1)):
        chex.assert_trees_all_close(
            _leaves(multi, True), _leaves(single, True), rtol=rtol, atol=atol
        )
        chex.assert_trees_all_equal(_leaves(multi, False), _leaves(single, False))
    return s1, sn
