"""The shared loop: resume is bit-identical, NaN stops keep the last good checkpoint, SIGTERM saves."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from jaxlab.core import config as C
from jaxlab.core import loop
from jaxlab.core import run as run_lib
from jaxlab.core.checkpoint import Checkpointer
from jaxlab.core.tracking import read_metrics
from tests.core.toy_recipe import TOY, ToyConfig

# the child processes import ``tests.core.toy_recipe`` from the repository root (their cwd)
REPO_ROOT = Path(__file__).resolve().parents[2]

K = 5


def cfg(**kw):
    base = {"loop.steps_per_call": K, "loop.total_steps": 4 * K, "loop.checkpoint_every": 2 * K}
    base.update(kw)
    return C.replace(ToyConfig(), **base)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return loop.run(TOY, cfg(), tmp_path_factory.mktemp("full"))


def test_learns_and_logs(uninterrupted):
    rows = read_metrics(uninterrupted.run_dir)
    steps = [r["step"] for r in rows if "loss" in r]
    assert steps == [5, 10, 15, 20]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert losses[-1] < losses[0]
    assert any("eval/w_err" in r for r in rows)
    assert (uninterrupted.run_dir / "config.yaml").exists()


def test_resume_is_bit_identical(uninterrupted, tmp_path):
    half = loop.run(TOY, cfg(**{"loop.total_steps": 2 * K}), tmp_path)
    assert half.step == 2 * K
    resumed = loop.run(TOY, cfg(), tmp_path)
    assert resumed.step == 4 * K
    for a, b in zip(np.asarray(uninterrupted.state.w), np.asarray(resumed.state.w), strict=True):
        assert a.tobytes() == b.tobytes()
    assert np.array_equal(uninterrupted.state.key, resumed.state.key)


def test_steps_per_call_equals_single_steps(uninterrupted, tmp_path):
    single = loop.run(TOY, cfg(**{"loop.steps_per_call": 1}), tmp_path)
    np.testing.assert_allclose(single.state.w, uninterrupted.state.w, rtol=1e-6)


def test_events_fall_on_exact_steps(tmp_path):
    seen = []
    hook = loop.Hook(lambda s, st, m: seen.append(s), every=3)
    loop.run(
        TOY, cfg(**{"loop.total_steps": 10, "loop.checkpoint_every": 4}), tmp_path, hooks=[hook]
    )
    assert seen == [3, 6, 9]
    assert Checkpointer(tmp_path / "checkpoints", cfg()).all_steps()[-3:] == [4, 8, 10]


def test_nan_stops_and_keeps_last_good_checkpoint(tmp_path):
    c = cfg(nan_at_step=13)
    with pytest.raises(loop.NonFiniteLossError, match="step 13.*step 10"):
        loop.run(TOY, c, tmp_path)
    ck = Checkpointer(tmp_path / "checkpoints", c)
    assert ck.latest_step() == 10
    ck.close()


def test_sigterm_saves_and_exits_cleanly(tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        import jax
        from jaxlab.core import config as C, loop
        from tests.core.toy_recipe import TOY, ToyConfig
        c = C.replace(ToyConfig(), **{{"loop.total_steps": 100000, "loop.log_every": 1}})
        def announce(step, state, m):
            if step == 3:
                print("READY", flush=True)
            time.sleep(0.01)
        r = loop.run(TOY, c, {str(tmp_path)!r}, hooks=[loop.Hook(announce, 1)])
        print("DONE", r.step, r.interrupted, flush=True)
    """)
    env = dict(os.environ)
    p = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT
    )
    line = p.stdout.readline()
    assert line.strip() == "READY"
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 0
    done = out.strip().splitlines()[-1].split()
    assert done[0] == "DONE" and done[2] == "True"
    step = int(done[1])
    ck = Checkpointer(tmp_path / "checkpoints", C.replace(ToyConfig(), **{"loop.total_steps": 5}))
    assert ck.latest_step() == step
    ck.close()


def test_loop_config_validation():
    with pytest.raises(C.ConfigError, match="loop.steps_per_call"):
        C.resolve(ToyConfig, overrides=["loop.steps_per_call=0"])


def test_step_compiles_once_on_a_mesh():
    """The chunked step of a recipe with a mesh (lm-tiny) is compiled once: the output state
    keeps the input state's shardings, so the next call hits the cache."""
    import chex
    import jax

    from jaxlab.core import recipe as recipe_lib
    from jaxlab.core.loop import _multi_step
    from jaxlab.lm.data import train_iterator

    recipe = recipe_lib.get("lm-tiny")
    cfg = recipe.config("tiny")
    task = run_lib.build(recipe, cfg)
    state = run_lib.init_state(task, jax.random.PRNGKey(0))
    it = train_iterator(cfg.data)
    # chex raises at the second trace of the recipe's step, i.e. at any recompilation
    train_step = chex.assert_max_traces(task.train_step, n=1)
    step = _multi_step(train_step, 2, True, jax.tree.map(lambda x: x.sharding, state))
    for _ in range(3):
        batch = jax.tree.map(lambda *x: np.stack(x), next(it), next(it))
        batch = run_lib.place_batches(batch, task.abstract_batch)
        state, _ = step(state, batch)
