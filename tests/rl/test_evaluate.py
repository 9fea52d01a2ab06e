"""evaluate_levels against closed-form outcomes on the point mass, level-set resolution and the
per-level table."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.envs.point_mass import PointMass, PointMassState
from jaxlab.rl import evaluate as ev

ENV = PointMass()
PARAMS = ENV.default_params


def levels(xs):
    xs = jnp.asarray(xs, jnp.float32)
    z = jnp.zeros_like(xs)
    return PointMassState(x=xs, v=z, t=z.astype(jnp.int32))


def test_noop_policy_closed_form():
    """With zero force the mass stays at x0 for all 20 steps: return -20 x0^2, solved iff
    |x0| < 0.1, length 20, identical for every attempt."""
    xs = [0.05, -0.3, 0.0, 0.2]
    noop = lambda key, obs: jnp.ones(obs.shape[0], jnp.int32)
    res, shown = jax.jit(
        lambda k: ev.evaluate_levels(
            k, noop, ENV, PARAMS, levels(xs), num_attempts=3, max_steps=25, record=2
        )
    )(jax.random.PRNGKey(0))
    np.testing.assert_allclose(np.asarray(res.solve_rate), [1, 0, 1, 0])
    np.testing.assert_allclose(np.asarray(res.mean_return), -20 * np.square(xs), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(res.mean_length), 20)
    # recorded states: first attempt of the first 2 levels, frozen after the episode ended
    assert shown.x.shape == (25, 2)
    np.testing.assert_array_equal(np.asarray(shown.t[-1]), [20, 20])


def test_only_first_episode_counts():
    """Always pushing right from x0 = 0.96 falls off at step 1 (return -1, length 1, unsolved)."""
    right = lambda key, obs: jnp.full(obs.shape[0], 2, jnp.int32)
    res, _ = ev.evaluate_levels(
        jax.random.PRNGKey(0), right, ENV, PARAMS, levels([0.96]), num_attempts=2, max_steps=30
    )
    np.testing.assert_allclose(np.asarray(res.mean_return), [-1.0])
    np.testing.assert_allclose(np.asarray(res.mean_length), [1.0])
    assert float(res.solve_rate[0]) == 0.0


def test_attempts_use_different_keys():
    """Two identical levels, a random policy: the attempts of one level act differently (their
    returns are not all equal), so each attempt draws its own key."""
    rand = lambda key, obs: jax.random.randint(key, (obs.shape[0],), 0, 3)  # noqa: E731
    res, _ = ev.evaluate_levels(
        jax.random.PRNGKey(0), rand, ENV, PARAMS, levels([0.0] * 2), num_attempts=16, max_steps=20
    )
    returns = np.asarray(res.attempt_returns)
    assert returns.shape == (2, 16)
    np.testing.assert_allclose(returns.mean(1), np.asarray(res.mean_return), rtol=1e-6)
    for level in range(2):
        assert len(np.unique(np.round(returns[level], 5))) > 1, returns[level]


def test_resolve_level_files(tmp_path):
    lib = ev.resolve_level_files("library")
    assert any(p.name == "h2_one_wheel_car.json" for p in lib)
    one = ev.resolve_level_files("s/h2_one_wheel_car")
    assert len(one) == 1 and one[0] in ev.resolve_level_files("library/s")
    (tmp_path / "a").mkdir()
    for name in ("a/x.json", "a/y.json", "z.json"):
        (tmp_path / name).write_text("{}")
    files = ev.resolve_level_files(
        f"{tmp_path / 'a'},{tmp_path / 'z.json'},{tmp_path / 'a/x.json'}"
    )
    assert [p.name for p in files] == ["x.json", "y.json", "z.json"]
    assert ev.level_name(files[0]) == "a/x"
    with pytest.raises(ValueError, match="nope"):
        ev.resolve_level_files("nope/level")
    with pytest.raises(ValueError, match="levels="):
        ev.resolve_level_files(" ")


def test_table_and_summary():
    res = ev.LevelResults(
        solve_rate=np.array([1.0, 0.25]),
        mean_return=np.array([0.9, -0.1]),
        mean_length=np.array([50.0, 256.0]),
        num_attempts=4,
    )
    s = ev.summary(res)
    assert s["solve_rate"] == pytest.approx(0.625) and s["levels_solved"] == 0.5
    text = ev.format_table(["s/a", "s/b"], res, extra={"random": np.array([0.0, 0.5])})
    lines = text.splitlines()
    assert lines[0].split() == ["level", "solve", "return", "length", "random"]
    assert lines[2].split()[:2] == ["s/a", "1.00"] and lines[3].split()[-1] == "0.50"
    assert "2 levels x 4 attempts; 1 solved" in lines[-1]
