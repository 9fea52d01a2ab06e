"""Learning from demonstrations (``jaxlab.rl.search.training``): on held-out Game of 24
instances D-TSN (known model, learned value, K = 10) beats behaviour cloning trained on the same
demonstrations with the same parameter count; BC's width is matched to D-TSN's count.

The full multi-seed maze and Game of 24 comparisons are ``experiments/dtsn_vs_bc/dtsn_vs_bc.py``.
Mazes: from 50 BFS demonstrations on 6x6 layouts (800 steps) D-TSN (K = 10) beats BC on 200
unseen layouts in each of 3 seeds (0.463 +- 0.037 vs 0.423 +- 0.041 held-out success; paired
differences +0.065, +0.04, +0.01); from 100 demonstrations on 8x8 layouts (2000 steps) 0.277 +-
0.024 vs 0.198 +- 0.013 (paired +0.075, +0.055, +0.105); from 500 demonstrations on 8x8 layouts
it does not (0.57 vs 0.61, 2 seeds). The maze test below is the 6x6 low-data claim for seed 0 of
the study.

Mazes in a static map: held-out layouts of a larger size fill more of the same map, one network
of each method evaluates at both sizes (traced), Procgen-style perfect mazes with pixel
observations train both methods (lowered); a world too large for the map, or a budget of 0
demonstrations, is refused naming the key. The multi-seed comparison at the training size and
1.8x is ``experiments/dtsn_larger_mazes``."""

import dataclasses

import jax
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.rl.search import models, training


def _run(method: str):
    cfg = training.LearnerConfig(
        env="game24",
        method=method,
        num_demos=300,
        num_expansions=10,
        hidden=32,
        batch_size=32,
    )
    optim = dataclasses.replace(training.OPTIM, lr=3e-3)
    state, _ = jax.jit(training.make_train(cfg, 150, optim=optim))(jax.random.key(0))
    res = jax.jit(lambda p: training.evaluate(jax.random.key(1), p, cfg))(state.params)
    return float(res["success_rate"]), models.param_count(state.params)


@pytest.mark.slow
def test_dtsn_beats_bc_on_heldout_game24_instances():
    dtsn_success, n_dtsn = _run("dtsn")
    bc_success, n_bc = _run("bc")
    assert abs(n_bc - n_dtsn) / n_dtsn < 0.05, (n_bc, n_dtsn)
    assert dtsn_success > bc_success + 0.1, (dtsn_success, bc_success)


@pytest.mark.slow
def test_dtsn_beats_bc_on_unseen_small_mazes_from_few_demonstrations():
    key = jax.random.split(jax.random.key(0), 3)[
        0
    ]  # seed 0 of experiments/dtsn_vs_bc/dtsn_vs_bc.py
    out = {}
    for method in ("dtsn", "bc"):
        cfg = training.LearnerConfig(
            method=method,
            height=6,
            width=6,
            num_demos=50,
            demo_length=18,
            batch_size=32,
            num_expansions=10,
            eval_episodes=200,
            eval_max_steps=36,
        )
        state, _ = jax.jit(training.make_train(cfg, 800))(key)
        res = jax.jit(lambda p, c=cfg: training.evaluate(jax.random.key(1234), p, c))(state.params)
        out[method] = float(res["success_rate"])
    assert out["dtsn"] > out["bc"] + 0.03, out


def test_spatial_maze_model_bc_width_matches():
    counts = [
        models.param_count(jax.eval_shape(net.init, jax.random.key(0), obs))
        for net, obs in (
            training.networks(training.LearnerConfig(method=m, maze_model="spatial", channels=8))
            for m in ("dtsn", "bc")
        )
    ]
    assert abs(counts[0] - counts[1]) / counts[0] < 0.05, counts


@pytest.mark.parametrize(
    "field,kwargs",
    [
        ("num_expansions", {"num_expansions": 0}),
        ("temperature", {"temperature": 0.0}),
        ("env", {"env": "chess"}),
        ("num_demos", {"num_demos": 0}),
        ("maze_model", {"maze_model": "graph"}),
        ("wall_prob", {"wall_prob": 1.0}),
        ("height", {"height": 2}),
        ("latent_weight", {"latent_weight": -1.0}),
        ("holdout_fraction", {"holdout_fraction": 0.0}),
        ("eval_height", {"eval_height": 12}),  # larger than the map (the training size)
        ("eval_width", {"map_width": 12, "eval_width": 16}),
        ("height", {"height": 12, "map_height": 8}),
        ("observation", {"observation": "depth"}),
        ("min_size", {"layout": "perfect", "min_size": 9}),
    ],
)
def test_bad_learner_config_names_the_field(field, kwargs):
    with pytest.raises(ConfigError) as e:
        training.LearnerConfig(**kwargs)
    assert e.value.key == field


LARGER = training.LearnerConfig(
    height=6,
    width=6,
    map_height=12,
    map_width=12,
    eval_height=11,
    eval_width=11,
    num_demos=4,
    demo_length=4,
    num_expansions=2,
    latent_dim=8,
    hidden=8,
    channels=4,
    batch_size=4,
    eval_episodes=3,
    eval_max_steps=4,
)


def test_heldout_mazes_of_the_larger_size_fill_more_of_the_map():
    both = jax.jit(lambda k: [training.heldout_mazes(k, LARGER, 8, e) for e in (False, True)])
    small, large = jax.device_get(both(jax.random.key(1)))
    for m in (small, large):
        assert m.walls.shape == (8, 12, 12)
    assert small.walls[:, 5:].all() and small.walls[:, :, 5:].all()
    assert large.walls[:, 10:].all() and not large.walls[:, 5:10, 5:10].all()


def test_evaluation_at_both_sizes_traces():
    """One network (the map's input shape) plays the training and the larger held-out size (BC
    here; D-TSN's evaluation at both sizes is ``experiments/dtsn_larger_mazes``)."""
    cfg = dataclasses.replace(LARGER, method="bc")
    params = jax.eval_shape(lambda k: training.init(k, cfg).params, jax.random.key(0))
    out = jax.eval_shape(lambda p: training.evaluate(jax.random.key(1), p, cfg), params)
    assert set(out) == {
        "success_rate",
        "path_length_ratio",
        "eval_size_success_rate",
        "eval_size_path_length_ratio",
    }


def test_procgen_mazes_with_pixels_train_dtsn():
    """Procgen-style perfect mazes with pixel observations (9x9 map, 2 pixels per cell): a D-TSN
    run traces, its demonstrations are the map's pixels (BC shares the data and the encoder)."""
    cfg = dataclasses.replace(
        LARGER,
        layout="perfect",
        min_size=5,
        height=9,
        width=9,
        map_height=9,
        map_width=9,
        eval_height=9,
        eval_width=9,
        observation="pixels",
        cell_pixels=2,
    )
    state, metrics = jax.eval_shape(training.make_train(cfg, 1), jax.random.key(0))
    assert state.data.obs.shape == (4 * 4, 18, 18, 3) and state.data.obs.dtype == "uint8"
    assert metrics["loss_q"].shape == (1,)
