"""kinetix-ppo end to end on the tiny preset: trains, writes the GIF and the per-level table,
resumes bit-identically from a mid-run checkpoint, fine-tunes from a checkpoint, evaluates from the
command line, and refuses bad configs.

The Kinetix env is costly to compile on a CPU, so this module turns on JAX's persistent
compilation cache (in a temporary directory) while it runs: the runs below share their compiled
programs instead of compiling the same step several times.
"""

import json

import jax
import numpy as np
import pytest
from jax._src import compilation_cache

from jaxlab import cli
from jaxlab.core import config as C
from jaxlab.core import loop
from jaxlab.core import recipe as recipe_lib
from jaxlab.core.config import ConfigError
from jaxlab.recipes import kinetix_ppo as kp
from jaxlab.rl import ppo as ppo_mod

RECIPE = recipe_lib.get("kinetix-ppo")


@pytest.fixture(scope="module", autouse=True)
def compile_cache(tmp_path_factory):
    names = (
        "jax_compilation_cache_dir",
        "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes",
    )
    old = {n: getattr(jax.config, n) for n in names}
    jax.config.update(names[0], str(tmp_path_factory.mktemp("xla_cache")))
    jax.config.update(names[1], 0.0)
    jax.config.update(names[2], 0)
    compilation_cache.reset_cache()
    yield
    for n, v in old.items():
        jax.config.update(n, v)
    compilation_cache.reset_cache()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    cfg = RECIPE.config("tiny")
    run_dir = tmp_path_factory.mktemp("tiny")
    return cfg, run_dir, loop.run(RECIPE, cfg, run_dir)


def test_tiny_preset_end_to_end(tiny_run):
    cfg, run_dir, result = tiny_run
    assert result.step == cfg.loop.total_steps and not result.interrupted
    assert np.isfinite(result.metrics["loss"])
    from PIL import Image

    gif = Image.open(run_dir / "agent.gif")
    assert gif.n_frames == cfg.eval.max_steps and gif.size == (125, 125)
    table = (run_dir / "eval_levels.txt").read_text()
    assert "s/h2_one_wheel_car" in table and "1 levels x 2 attempts" in table
    data = json.loads((run_dir / "eval_levels.json").read_text())
    assert data["levels"][0]["level"] == "s/h2_one_wheel_car"
    assert 0.0 <= data["summary"]["solve_rate"] <= 1.0
    rows = [json.loads(r) for r in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [2, 4]


def test_resume_is_bit_identical(tiny_run, tmp_path):
    """Stopping after 2 of 4 updates and resuming gives exactly the uninterrupted run's state."""
    cfg, _, full = tiny_run
    half = loop.run(RECIPE, C.replace(cfg, **{"loop.total_steps": 2}), tmp_path)
    assert half.step == 2
    resumed = loop.run(RECIPE, cfg, tmp_path)
    assert resumed.step == 4
    a, b = jax.device_get(full.state), jax.device_get(resumed.state)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_finetune_starts_from_pretrained_params(tiny_run):
    cfg, run_dir, full = tiny_run
    ft = C.replace(cfg, **{"init_from": str(run_dir), "seed": 5})
    parts = kp.build_parts(ft)
    state = jax.jit(parts.init)(jax.random.PRNGKey(5))
    for x, y in zip(jax.tree.leaves(state.params), jax.tree.leaves(full.state.params), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    fresh = jax.jit(kp.build_parts(C.replace(ft, init_from="")).init)(jax.random.PRNGKey(5))
    assert not np.array_equal(
        np.asarray(jax.tree.leaves(fresh.params)[0]), np.asarray(jax.tree.leaves(state.params)[0])
    )
    with pytest.raises(ConfigError, match="network"):
        kp.build_parts(C.replace(ft, **{"network.width": 32}))


def test_eval_command_prints_the_table(tiny_run, capsys):
    _, run_dir, _ = tiny_run
    status = cli.main(
        [
            "eval",
            "kinetix-ppo",
            "--run-dir",
            str(run_dir),
            "--levels",
            "s/h2_one_wheel_car",
            "--attempts",
            "2",
        ]
    )
    out = capsys.readouterr().out
    assert status == 0
    assert "checkpoint step 4" in out and "s/h2_one_wheel_car" in out
    assert "1 levels x 2 attempts" in out


def test_config_errors():
    with pytest.raises(ConfigError, match="network.kind"):
        RECIPE.config("tiny", ["network.kind=mlp"])
    with pytest.raises(ConfigError, match="curriculum.kind"):
        RECIPE.config("tiny", ["mesh.data=2", "curriculum.kind=plr"])
    with pytest.raises(ConfigError, match="train_levels"):
        kp.build_parts(RECIPE.config("tiny", ["env.train_levels=no/such_level"]))
    cfg = RECIPE.config("s-pretrain")
    assert cfg.curriculum.kind == "sfl" and cfg.env.train_levels == "random"
    for preset in ("cpu-single", "m-pretrain", "l-pretrain", "finetune"):
        assert RECIPE.config(preset).loop.total_steps > 0


@pytest.mark.slow
def test_cpu_single_learns_and_flipped_advantage_does_not():
    """The README main job: the cpu-single preset (MLP on flat observations, 256 envs x 64 steps)
    goes from a <= 0.1 to a >= 0.9 solve rate on s/h2_one_wheel_car (20 evaluation attempts)
    within 10 updates = 164k env steps (the original's MLP needs 147k steps to 0.9). The same
    run with the GAE advantages negated must stay below 0.9, so the criterion can fail. Both
    runs are one program, ``vmap``-ed over the advantage sign (one compilation, and a check that
    the recipe's train step vmaps); ``benchmarks/bench_ppo.py --curve`` records the curve."""
    cfg = RECIPE.config("cpu-single")
    parts = kp.build_parts(cfg)
    state = jax.jit(parts.init)(jax.random.PRNGKey(cfg.seed))
    gae = ppo_mod.compute_gae

    def train(sign, s):
        def signed(*args):
            adv, ret = gae(*args)
            return sign * adv, ret

        with pytest.MonkeyPatch.context() as mp:  # patched while tracing only
            mp.setattr(ppo_mod, "compute_gae", signed)
            return jax.lax.scan(lambda s, _: parts.train_step(s), s, None, length=10)

    signs = jax.numpy.asarray([1.0, -1.0])
    final, m = jax.jit(jax.vmap(train, in_axes=(0, None)))(signs, state)
    assert np.isfinite(np.asarray(m["loss"])).all()
    evaluator = kp.Evaluator(parts, "s/h2_one_wheel_car", num_attempts=20, max_steps=256)
    rate = lambda s: float(evaluator(s, jax.random.PRNGKey(1))[1].solve_rate[0])
    before = rate(state)
    learned, flipped = (rate(jax.tree.map(lambda x, i=i: x[i], final)) for i in (0, 1))
    assert before <= 0.1, before
    assert learned >= 0.9, (learned, np.asarray(m["solve_rate"][0]))
    assert flipped < 0.9, (flipped, np.asarray(m["solve_rate"][1]))
