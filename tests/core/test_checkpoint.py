"""Checkpoints: state + grain iterator round trip, config compatibility, restore onto another mesh."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core import config as C
from jaxlab.core import run as run_lib
from jaxlab.core import sharding
from jaxlab.core.checkpoint import Checkpointer, IncompatibleCheckpointError
from tests.core.toy_recipe import TOY, ToyConfig


def test_round_trip_state_and_iterator(tmp_path):
    cfg = ToyConfig()
    task = run_lib.build(TOY, cfg)
    state = task.init(jax.random.PRNGKey(1))
    it = task.data()
    for _ in range(3):
        next(it)
    ck = Checkpointer(tmp_path, cfg, async_save=True)
    ck.save(3, state, it)
    ck.wait()
    expected_next = [next(it) for _ in range(2)]
    it2 = task.data()
    restored, step = ck.restore(jax.eval_shape(task.init, jax.random.PRNGKey(0)), it2)
    assert step == 3
    jax.tree.map(np.testing.assert_array_equal, restored, state)
    for e in expected_next:
        np.testing.assert_array_equal(next(it2), e)
    ck.close()


def test_incompatible_config_names_fields(tmp_path):
    cfg = ToyConfig()
    task = run_lib.build(TOY, cfg)
    ck = Checkpointer(tmp_path, cfg)
    ck.save(1, task.init(jax.random.PRNGKey(0)))
    ck.close()
    other = C.replace(cfg, **{"lr": 0.5, "batch": 4, "loop.total_steps": 999})
    ck2 = Checkpointer(tmp_path, other)
    with pytest.raises(IncompatibleCheckpointError) as e:
        ck2.restore(jax.eval_shape(task.init, jax.random.PRNGKey(0)))
    assert e.value.fields == ["batch", "lr"]  # loop.* is run control and may change
    assert "lr: saved 0.05 vs now 0.5" in str(e.value)
    ck2.close()


def test_field_added_after_the_save_restores_at_its_default(tmp_path):
    """A checkpoint saved before a config field existed restores when the field is at its
    declared default (the old run behaved so), and is refused when it is not."""
    import json

    cfg = ToyConfig()
    task = run_lib.build(TOY, cfg)
    ck = Checkpointer(tmp_path, cfg, async_save=False)
    ck.save(1, task.init(jax.random.PRNGKey(0)))
    ck.close()
    (meta,) = [
        p for p in (tmp_path / "1" / "meta").rglob("*") if p.is_file() and "dim" in p.read_text()
    ]
    saved = json.loads(meta.read_text())
    del saved["config"]["dim"]  # as written by a version without the field
    meta.write_text(json.dumps(saved))
    abstract = jax.eval_shape(task.init, jax.random.PRNGKey(0))
    ck = Checkpointer(tmp_path, cfg)
    assert ck.restore(abstract)[1] == 1
    ck.close()
    ck = Checkpointer(tmp_path, C.replace(cfg, dim=8))
    with pytest.raises(IncompatibleCheckpointError) as e:
        ck.restore(
            jax.eval_shape(run_lib.build(TOY, C.replace(cfg, dim=8)).init, jax.random.PRNGKey(0))
        )
    assert e.value.fields == ["dim"]
    ck.close()


def test_keep_last_n_and_latest(tmp_path):
    cfg = ToyConfig()
    ck = Checkpointer(tmp_path, cfg, keep=2, async_save=False)
    for s in (1, 2, 3):
        ck.save(s, {"x": jnp.full((2,), s)})
    assert ck.all_steps() == [2, 3]
    restored, step = ck.restore({"x": jax.ShapeDtypeStruct((2,), jnp.int32)})
    assert step == 3 and int(restored["x"][0]) == 3
    ck.close()


def test_half_written_checkpoint_never_replaces_last_good(tmp_path):
    cfg = ToyConfig()
    ck = Checkpointer(tmp_path, cfg, async_save=False)
    ck.save(5, {"x": jnp.ones((3,))})
    ck.close()
    # A crash mid-write leaves an unfinalised temporary folder behind.
    tmp = tmp_path / "6.orbax-checkpoint-tmp-123"
    (tmp / "state").mkdir(parents=True)
    (tmp / "state" / "junk").write_text("partial")
    ck = Checkpointer(tmp_path, cfg, async_save=False)
    assert ck.latest_step() == 5
    restored, step = ck.restore({"x": jax.ShapeDtypeStruct((3,), jnp.float32)})
    assert step == 5 and float(restored["x"].sum()) == 3.0
    ck.close()


def test_restore_onto_a_different_mesh(tmp_path):
    assert jax.device_count() == 8
    cfg = ToyConfig()
    mesh_a = sharding.make_mesh(sharding.MeshConfig(data=8))
    mesh_b = sharding.make_mesh(sharding.MeshConfig(data=2, fsdp=4))
    x = jnp.arange(64.0).reshape(16, 4)
    sh_a = jax.sharding.NamedSharding(mesh_a, jax.sharding.PartitionSpec("data", None))
    ck = Checkpointer(tmp_path, cfg, async_save=False)
    ck.save(1, {"w": jax.device_put(x, sh_a)})
    sh_b = jax.sharding.NamedSharding(mesh_b, jax.sharding.PartitionSpec(None, "fsdp"))
    restored, _ = ck.restore({"w": jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh_b)})
    assert restored["w"].sharding == sh_b
    np.testing.assert_array_equal(restored["w"], x)
    ck.close()


def test_closed_loop_callbacks_are_dropped_from_the_start_of_a_restore(monkeypatch):
    """TensorStore reads still in flight when a restore fails call back into orbax's closed event
    loop; those "Event loop is closed" messages may come before the restore has even returned."""
    import sys
    import types

    from jaxlab.core import checkpoint as ckpt_lib

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    monkeypatch.setattr(ckpt_lib, "_QUIET", {"restoring": 0, "until": 0.0})

    def callback(message="Event loop is closed"):
        sys.unraisablehook(types.SimpleNamespace(exc_value=RuntimeError(message)))

    with ckpt_lib._closed_loop_callbacks_dropped():
        callback()  # while the restore is still running
        callback("another error")
    assert [str(u.exc_value) for u in seen] == ["another error"]
    callback()  # a restore that succeeded: nothing is dropped after it
    assert len(seen) == 2
    with pytest.raises(OSError):
        with ckpt_lib._closed_loop_callbacks_dropped(grace=60.0):
            raise OSError("truncated")
    callback()  # stragglers of the failed restore
    assert len(seen) == 2
