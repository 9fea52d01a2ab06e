"""kinetix-ppo end to end on the tiny preset: trains, writes the GIF and the per-level table,
resumes bit-identically from a mid-run checkpoint, fine-tunes from a checkpoint, evaluates from the
command line, and refuses bad configs.

The Kinetix env is costly to compile on a CPU: the tiny run and its resumption share one build
(``parts``), so the resumed run reuses the compiled step outright. (This module no longer turns on
JAX's persistent compilation cache: writing an executable to it aborted an xdist worker twice,
inside ``compilation_cache.put_executable_and_time``.)
"""

import json
import shutil

import jax
import numpy as np
import pytest

from jaxlab import cli
from jaxlab.core import config as C
from jaxlab.core import loop
from jaxlab.core import recipe as recipe_lib
from jaxlab.core import run as run_lib
from jaxlab.core.config import ConfigError
from jaxlab.recipes import kinetix_ppo as kp
from jaxlab.rl import kinetix_eval as ke
from jaxlab.rl import ppo as ppo_mod
from jaxlab.rl.ppo import run as ppo_run

RECIPE = recipe_lib.get("kinetix-ppo")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    cfg = RECIPE.config("tiny")
    run_dir = tmp_path_factory.mktemp("tiny")
    parts = run_lib.build(RECIPE, cfg)
    return cfg, run_dir, loop.run(RECIPE, cfg, run_dir, parts=parts), parts


def test_tiny_preset_end_to_end(tiny_run):
    cfg, run_dir, result, _ = tiny_run
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
    """Stopping after 2 of 4 updates and resuming gives exactly the uninterrupted run's state (a
    copy of the full run cut back to its step-2 checkpoint, resumed to the end)."""
    cfg, run_dir, full, parts = tiny_run
    resume_dir = tmp_path / "resumed"
    shutil.copytree(run_dir, resume_dir)
    for ckpt in (resume_dir / "checkpoints").iterdir():
        if int(ckpt.name) > 2:
            shutil.rmtree(ckpt)
    resumed = loop.run(RECIPE, cfg, resume_dir, parts=parts)
    assert resumed.step == 4
    a, b = jax.device_get(full.state), jax.device_get(resumed.state)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_finetune_starts_from_pretrained_params(tiny_run):
    """``Recipe.finetune`` (what the loop calls on a fresh start) loads the pretrained run's
    parameters through ``open_run``; without ``init_from`` the state is the fresh one."""
    cfg, run_dir, full, _ = tiny_run
    ft = C.replace(cfg, **{"init_from": str(run_dir), "seed": 5})
    fresh = run_lib.init_state(run_lib.build(RECIPE, ft), jax.random.PRNGKey(5))
    state = RECIPE.finetune(ft, fresh)
    for x, y in zip(jax.tree.leaves(state.params), jax.tree.leaves(full.state.params), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert RECIPE.finetune(C.replace(ft, init_from=""), fresh) is fresh
    assert not np.array_equal(
        np.asarray(jax.tree.leaves(fresh.params)[0]), np.asarray(jax.tree.leaves(state.params)[0])
    )
    with pytest.raises(ConfigError, match="network"):
        RECIPE.finetune(C.replace(ft, **{"network.width": 32}), fresh)


def test_eval_command_prints_the_table(tiny_run, capsys):
    _, run_dir, _, _ = tiny_run
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


def test_flat_policy_on_random_levels_evaluates_only_levels_that_fit(tmp_path):
    """An MLP on flat observations trained at size S with the library as evaluation levels
    evaluates the levels that fit S (naming those left out), and a level set with none
    that fits is refused with a ConfigError before anything is trained or written.

    The run trains on the pretraining presets' levels, ``env.train_levels=random`` (the
    procedural generator, drawn by the env's reset; without the no-op filter, which halves the
    test's time and is traced in ``test_kinetix_generator.py``), for one update:
    the 8 envs play 8 different generated levels, none of them the tiny preset's fixed level
    (compared on the shapes' vertices, roles and densities, which the physics does not change)."""
    cfg = RECIPE.config(
        "tiny",
        [
            "network.kind=mlp",
            "env.observation_type=symbolic_flat",
            "network.width=16",
            "env.train_levels=random",
            "env.noop_filter=false",
            "eval.levels=library",
            "eval.gif_levels=0",
            "loop.total_steps=1",
            "loop.steps_per_call=1",
            "loop.log_every=1",
            "loop.checkpoint_every=0",
        ],
    )
    result = loop.run(RECIPE, cfg, tmp_path / "ok")
    assert result.step == 1 and np.isfinite(result.eval_metrics["solve_rate"])
    rows_ = (tmp_path / "ok" / "metrics.jsonl").read_text().splitlines()
    losses = [json.loads(r).get("loss") for r in rows_]
    assert len([x for x in losses if x is not None and np.isfinite(x)]) == 1
    data = json.loads((tmp_path / "ok" / "eval_levels.json").read_text())
    names = {r["level"] for r in data["levels"]}
    assert "s/h2_one_wheel_car" in names and "l/car_hill" not in names
    assert "l/car_hill" in data["left_out"]

    def rows(env_state):  # one row per env: what identifies its level
        s = env_state
        while not hasattr(s, "polygon_shape_roles"):  # unwrap the episode statistics
            s = s.env_state
        parts_ = (s.sim.polygon.vertices, s.polygon_shape_roles, s.polygon_densities)
        return np.concatenate([np.asarray(p).reshape(p.shape[0], -1) for p in parts_], axis=1)

    played = rows(jax.device_get(result.state.env_state))
    assert len(np.unique(played, axis=0)) == cfg.ppo.num_envs
    tiny_level = kp.agent(RECIPE.config("tiny")).levels.sample(jax.random.PRNGKey(0))
    fixed = rows(jax.tree.map(lambda x: x[None], tiny_level))
    assert not (played == fixed).all(axis=1).any()

    bad = C.replace(cfg, **{"eval.levels": "library/l"})
    with pytest.raises(ConfigError, match="eval.levels"):
        loop.run(RECIPE, bad, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_traced_hyperparameters():
    """PPO's swept hyper-parameters are the recipe's traced keys and live in the state."""
    assert set(RECIPE.traced) == {"optim.lr", "ppo.clip_eps", "ppo.ent_coef", "ppo.vf_coef"}
    cfg = RECIPE.config("tiny", ["optim.lr=1e-3", "ppo.ent_coef=0.05"])
    state = jax.eval_shape(run_lib.build(RECIPE, cfg).init, jax.random.PRNGKey(0))
    assert set(state.hparams) == set(RECIPE.traced)
    hp = recipe_lib.hparams_of(RECIPE, cfg)
    assert float(hp["optim.lr"]) == np.float32(1e-3)
    assert float(hp["ppo.ent_coef"]) == np.float32(0.05)


def test_config_errors():
    with pytest.raises(ConfigError, match="network.kind"):
        RECIPE.config("tiny", ["network.kind=mlp"])
    with pytest.raises(ConfigError, match="curriculum.kind"):
        RECIPE.config("tiny", ["mesh.data=2", "curriculum.kind=plr"])
    with pytest.raises(ConfigError, match="train_levels"):
        run_lib.build(RECIPE, RECIPE.config("tiny", ["env.train_levels=no/such_level"]))
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
    parts = run_lib.build(RECIPE, cfg)
    state = jax.jit(parts.init)(jax.random.PRNGKey(cfg.seed))
    gae = ppo_mod.compute_gae

    def train(sign, s):
        def signed(*args):
            adv, ret = gae(*args)
            return sign * adv, ret

        with pytest.MonkeyPatch.context() as mp:  # patched while tracing only
            mp.setattr(ppo_run, "compute_gae", signed)
            return jax.lax.scan(lambda s, _: parts.train_step(s, None), s, None, length=10)

    signs = jax.numpy.asarray([1.0, -1.0])
    final, m = jax.jit(jax.vmap(train, in_axes=(0, None)))(signs, state)
    assert np.isfinite(np.asarray(m["loss"])).all()
    evaluator = ke.Evaluator(kp.agent(cfg), "s/h2_one_wheel_car", num_attempts=20, max_steps=256)
    rate = lambda s: float(evaluator(s, jax.random.PRNGKey(1))[1].solve_rate[0])
    before = rate(state)
    learned, flipped = (rate(jax.tree.map(lambda x, i=i: x[i], final)) for i in (0, 1))
    assert before <= 0.1, before
    assert learned >= 0.9, (learned, np.asarray(m["solve_rate"][0]))
    assert flipped < 0.9, (flipped, np.asarray(m["solve_rate"][1]))
