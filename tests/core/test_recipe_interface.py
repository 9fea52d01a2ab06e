"""A recipe defined here, outside ``jaxlab/recipes/``, lives its whole life through the public
interface alone: train, resume, evaluate (``open_run``), sweep (one compilation for 2 learning
rates x 3 seeds, equal to the 6 separate runs) and lower for a mesh; bad sweep and open_run input
is refused by name with nothing written."""

from __future__ import annotations

import dataclasses

import flax.struct
import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.core import config as C
from jaxlab.core import loop, run
from jaxlab.core.config import ConfigError
from jaxlab.core.lowering import lower
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.core.sharding import MeshConfig, state_shardings
from jaxlab.core.sweep import parse_axes, sweep

TRACES = {"n": 0}


@dataclasses.dataclass(frozen=True)
class LinConfig:
    seed: int = 0
    lr: float = 0.05
    dim: int = 3
    batch: int = 8
    mesh: MeshConfig = MeshConfig(data=1)
    loop: loop.LoopConfig = loop.LoopConfig(
        total_steps=12, steps_per_call=4, log_every=4, progress=False, async_checkpoint=False
    )


@flax.struct.dataclass
class LinState:
    w: jax.Array
    opt_state: optax.OptState
    hparams: dict


def _table(dim: int) -> np.ndarray:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(128, dim)).astype(np.float32)
    y = x @ np.arange(1, dim + 1, dtype=np.float32)
    return np.concatenate([x, y[:, None]], axis=1)


def build(cfg: LinConfig, mesh: jax.sharding.Mesh) -> Parts:
    def init(key):
        w = 0.1 * jax.random.normal(key, (cfg.dim,))
        return LinState(w, optax.adam(cfg.lr).init(w), {"lr": jnp.float32(cfg.lr)})

    def train_step(state, batch):
        TRACES["n"] += 1
        x, y = batch[:, :-1], batch[:, -1]
        loss, g = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(state.w)
        upd, opt_state = optax.adam(state.hparams["lr"]).update(g, state.opt_state)
        return state.replace(w=state.w + upd, opt_state=opt_state), {"loss": loss}

    def data():
        ds = grain.MapDataset.source(_table(cfg.dim)).shuffle(seed=cfg.seed).repeat()
        return iter(ds.batch(cfg.batch, drop_remainder=True).to_iter_dataset())

    return Parts(
        init=init,
        train_step=train_step,
        abstract_batch=run.batch_spec(
            jax.ShapeDtypeStruct((cfg.batch, cfg.dim + 1), jnp.float32), mesh
        ),
        state_sharding=lambda abstract: state_shardings(abstract, mesh),
        data=data,
        evaluate=lambda s: {"w_err": float(jnp.linalg.norm(s.w - jnp.arange(1, cfg.dim + 1)))},
    )


LIN = register(Recipe("test-linear", LinConfig, build, traced=("lr",)))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("lin")
    return d, loop.run(LIN, LinConfig(), d)


def test_train_resume_and_open_run(trained, tmp_path):
    d, full = trained
    half = loop.run(LIN, C.replace(LinConfig(), **{"loop.total_steps": 8}), tmp_path)
    assert half.step == 8
    resumed = loop.run(LIN, LinConfig(), tmp_path)
    assert np.asarray(resumed.state.w).tobytes() == np.asarray(full.state.w).tobytes()
    opened = run.open_run(d)
    assert opened.recipe is LIN and opened.step == 12
    assert np.asarray(opened.state.w).tobytes() == np.asarray(full.state.w).tobytes()
    assert opened.parts.evaluate(opened.state)["w_err"] == full.eval_metrics["w_err"]


def test_sweep_compiles_once_and_equals_separate_runs(tmp_path):
    base = LinConfig()
    axes = parse_axes(LIN, base, ["lr=0.02,0.1"])
    TRACES["n"] = 0
    res = sweep(LIN, base, axes, seeds=3, out_dir=tmp_path / "sw")
    assert res.compiles == 1 and TRACES["n"] == 1  # 12 steps in chunks of 4: one program
    assert len(res.rows) == 6 and len(res.summary) == 2
    assert {r["seeds"] for r in res.summary} == {3}
    for row, state in zip(res.rows, res.states, strict=True):
        cfg = C.replace(base, lr=row["lr"], seed=row["seed"])
        alone = loop.run(LIN, cfg, tmp_path / f"alone-{row['lr']}-{row['seed']}")
        np.testing.assert_allclose(np.asarray(state.w), np.asarray(alone.state.w), rtol=1e-6)
        # each point is a run directory that open_run (and so `jaxlab eval`) opens
        opened = run.open_run(row["run_dir"])
        assert opened.cfg == cfg
        np.testing.assert_array_equal(np.asarray(opened.state.w), np.asarray(state.w))
    assert (tmp_path / "sw" / "table.txt").read_text().count("\n") == 3


def test_static_key_is_a_sequence_of_runs(tmp_path):
    res = sweep(LIN, LinConfig(), {"batch": [4, 8]}, out_dir=tmp_path / "sw")
    assert res.compiles == 2 and [r["batch"] for r in res.rows] == [4, 8]


def test_lower_for_a_mesh():
    cfg = C.replace(LinConfig(), **{"mesh.data": 8, "batch": 16})
    compiled = lower(LIN, cfg, run.mesh_for(cfg))
    assert "all-reduce" in compiled.as_text()  # the gradient is averaged over the data axis


def test_bad_input_is_refused_by_name(trained, tmp_path):
    d, _ = trained
    with pytest.raises(ConfigError, match="'lrr'.*did you mean 'lr'"):
        parse_axes(LIN, LinConfig(), ["lrr=0.1,0.2"])
    with pytest.raises(ConfigError, match="'lr'"):
        parse_axes(LIN, LinConfig(), ["lr=abc,0.1"])
    with pytest.raises(ConfigError, match="'batch'"):
        parse_axes(LIN, LinConfig(), ["batch=4,x"])
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "keep.txt").write_text("x")
    with pytest.raises(ConfigError, match="nothing is overwritten"):
        sweep(LIN, LinConfig(), {"lr": [0.1]}, out_dir=tmp_path / "used")
    assert (tmp_path / "used" / "keep.txt").read_text() == "x"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(run.RunNotFoundError, match="no run in"):
        run.open_run(empty)
    with pytest.raises(ConfigError, match="lm-tiny.*test-linear"):
        run.open_run(d, recipe="lm-tiny")
    (empty / "config.yaml").write_text((d / "config.yaml").read_text())
    (empty / "recipe.txt").write_text("test-linear\n")
    with pytest.raises(run.RunNotFoundError, match="no checkpoint"):
        run.open_run(empty)
    assert sorted(p.name for p in empty.iterdir()) == ["config.yaml", "recipe.txt"]
