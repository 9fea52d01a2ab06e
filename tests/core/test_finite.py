"""A non-finite train state never reaches a checkpoint; the error names the real last finite step."""

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core import config as C
from jaxlab.core import finite, loop
from jaxlab.core import run as run_lib
from jaxlab.core.checkpoint import Checkpointer
from tests.core.toy_recipe import TOY, ToyConfig


def cfg(**kw):
    return C.replace(ToyConfig(), **{"loop.total_steps": 12, **kw})


def test_all_finite_looks_at_every_floating_leaf_only():
    tree = {"a": jnp.ones(3), "i": jnp.arange(3), "m": {"v": jnp.zeros((2, 2), jnp.bfloat16)}}
    assert bool(finite.all_finite(tree))
    bad = {**tree, "m": {"v": jnp.zeros((2, 2), jnp.bfloat16).at[1, 0].set(jnp.inf)}}
    assert not bool(finite.all_finite(bad))
    assert bool(finite.all_finite({"i": jnp.arange(3)}))


def _latest_state(run_dir, c):
    ck = Checkpointer(Path(run_dir) / "checkpoints", c)
    task = run_lib.build(TOY, c)
    state, step = ck.restore(loop.abstract_state(task, __import__("jax").random.PRNGKey(0)))
    ck.close()
    return state, step


def test_nan_state_with_finite_loss_is_never_saved(tmp_path):
    """The lm-tiny lr=1e6 case: the loss of step 3 is finite (computed before the update) but the
    state after step 3 is NaN. Saving every step, the last checkpoint must be step 2."""
    c = cfg(nan_state_at_step=3, **{"loop.steps_per_call": 1, "loop.checkpoint_every": 1})
    with pytest.raises(loop.NonFiniteLossError) as e:
        loop.run(TOY, c, tmp_path)
    msg = str(e.value)
    assert "after step 3" in msg and "loss was finite" in msg
    assert "last finite checkpoint: step 2" in msg
    assert e.value.last_checkpoint == 2 and e.value.step == 3 and e.value.lr_keys == ("lr",)
    state, step = _latest_state(tmp_path, c)
    assert step == 2 and np.all(np.isfinite(np.asarray(state.w)))


def test_nan_inside_a_chunk_is_named_exactly(tmp_path):
    c = cfg(nan_state_at_step=8, **{"loop.steps_per_call": 4, "loop.checkpoint_every": 4})
    with pytest.raises(loop.NonFiniteLossError, match="after step 8.*checkpoint: step 4"):
        loop.run(TOY, c, tmp_path)


def test_no_checkpoint_written_is_said_plainly(tmp_path):
    c = cfg(nan_state_at_step=3, **{"loop.steps_per_call": 4})
    with pytest.raises(loop.NonFiniteLossError, match="no checkpoint was written") as e:
        loop.run(TOY, c, tmp_path)
    assert "None" not in str(e.value) and e.value.last_checkpoint is None


def test_likely_causes_put_a_raised_learning_rate_first_then_clipping():
    cfg = {"optim.lr": 1e6, "optim.clip_norm": 0.0, "critic.lr": 3e-4, "critic.clip_norm": 1e4}
    default = {"optim.lr": 1e-3, "optim.clip_norm": 1.0, "critic.lr": 3e-4}
    assert finite.likely_causes(cfg, default) == [
        "optim.lr=1e+06 is 1e+09x the default 0.001",
        "gradient clipping is off (optim.clip_norm=0)",
        "gradient clipping is loose (critic.clip_norm=10000)",
        "the learning rate critic.lr=0.0003",
    ]
    assert finite.likely_causes({"optim.lr": 1e-3, "optim.clip_norm": 1.0}, None) == [
        "the learning rate optim.lr=0.001"
    ]
