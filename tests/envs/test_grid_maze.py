"""grid-maze: the BFS oracle equals a NumPy BFS, generated layouts are solvable, oracle
demonstrations follow shortest paths, observations, bad layouts name the field; Procgen-style
perfect mazes are spanning trees of a drawn size in the map, a world larger than the map is
refused naming the key."""

from collections import deque

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.envs import demonstrations, grid_maze, make


def numpy_bfs(walls: np.ndarray, goal) -> np.ndarray:
    h, w = walls.shape
    d = np.full((h, w), grid_maze.UNREACHABLE, np.int64)
    d[goal[0], goal[1]] = 0
    q = deque([tuple(goal)])
    while q:
        r, c = q.popleft()
        for dr, dc in grid_maze.MOVES:
            rr, cc = r + dr, c + dc
            if 0 <= rr < h and 0 <= cc < w and not walls[rr, cc] and d[rr, cc] > d[r, c] + 1:
                d[rr, cc] = d[r, c] + 1
                q.append((rr, cc))
    return d


@jax.jit
def _mazes_and_distances(keys):
    mazes = jax.vmap(lambda k: grid_maze.generate(k, 7, 9, 0.35))(keys)
    return mazes, jax.vmap(grid_maze.distances)(mazes.walls, mazes.goal)


def test_generated_mazes_are_solvable_and_bfs_matches_numpy():
    mazes, dist = jax.device_get(_mazes_and_distances(jax.random.split(jax.random.key(0), 6)))
    for i in range(6):
        walls, start, goal = mazes.walls[i], mazes.start[i], mazes.goal[i]
        assert walls[0].all() and walls[-1].all() and walls[:, 0].all() and walls[:, -1].all()
        assert not walls[start[0], start[1]] and not walls[goal[0], goal[1]]
        assert tuple(start) != tuple(goal)
        np.testing.assert_array_equal(dist[i], numpy_bfs(walls, goal))
        assert 1 <= dist[i][start[0], start[1]] < grid_maze.UNREACHABLE


def test_oracle_demonstrations_follow_shortest_paths():
    env, params = make("grid-maze", height=6, width=6)
    demo = jax.jit(
        lambda k: demonstrations.oracle_demonstrations(
            k, env, params, demonstrations.maze_oracle_policy, num_episodes=4, length=16
        )
    )(jax.random.key(1))
    start = jax.tree.map(lambda x: x[:, 0], demo.state)
    dist = jax.vmap(grid_maze.distances)(start.walls, start.goal)
    d0 = np.asarray(dist[jnp.arange(4), start.pos[:, 0], start.pos[:, 1]])
    np.testing.assert_array_equal(np.asarray(demo.mask.sum(1)), d0)
    np.testing.assert_array_equal(np.asarray(demo.reward.sum(1)), np.ones(4))
    np.testing.assert_array_equal(np.asarray(demo.terminated.sum(1)), np.ones(4))


def test_observations_symbolic_and_pixels():
    env_s, p = make("grid-maze", height=5, width=6)
    env_p, _ = make("grid-maze", height=5, width=6, observation_type="pixels", cell_pixels=3)
    maze = grid_maze.validate_maze(
        np.pad(np.zeros((3, 4), bool), 1, constant_values=True), [1, 1], [3, 4]
    )
    s = env_s.state_from_maze(maze)
    obs = np.asarray(env_s.get_obs(s, p))
    assert obs.shape == (5, 6, 3) and obs[1, 1, 1] == 1 and obs[3, 4, 2] == 1 and obs[0, 0, 0] == 1
    img = np.asarray(env_p.get_obs(s, p))
    assert img.shape == (15, 18, 3) and img.dtype == np.uint8
    np.testing.assert_array_equal(img[3, 3], grid_maze.COLOURS[2])  # agent cell
    np.testing.assert_array_equal(img[9, 12], grid_maze.COLOURS[3])  # goal cell

    # walk right 3, down 2: reward 1 exactly on arrival
    def body(s, a):
        _, s, r, term, _, _ = env_s.step_env(jax.random.key(0), s, a, p)
        return s, (r, term)

    _, (r, term) = jax.jit(lambda s: jax.lax.scan(body, s, jnp.array([3, 3, 3, 1, 1])))(s)
    assert np.asarray(r).tolist() == [0, 0, 0, 0, 1] and bool(term[-1]) and not term[:-1].any()


def test_bad_layouts_name_the_field():
    walls = np.pad(np.zeros((3, 3), bool), 1, constant_values=True)
    walls[1:4, 2] = True  # a wall column cuts the grid in two
    with pytest.raises(ConfigError) as e:
        grid_maze.validate_maze(walls, [1, 1], [1, 3])
    assert e.value.key == "goal" and "no path" in str(e.value)
    with pytest.raises(ConfigError) as e:
        grid_maze.validate_maze(walls, [0, 0], [1, 3])
    assert e.value.key == "start"
    with pytest.raises(ConfigError) as e:
        make("grid-maze", height=2)
    assert e.value.key == "height"
    with pytest.raises(ConfigError) as e:
        make("grid-maze", wall_prob=1.0)
    assert e.value.key == "wall_prob"


@jax.jit
def _perfect_mazes(keys):
    return jax.vmap(
        lambda k: grid_maze.generate_perfect(k, 11, 11, min_size=5, map_height=13, map_width=13)
    )(keys)


def test_procgen_mazes_are_spanning_trees_of_a_drawn_size_in_the_map():
    """Perfect mazes: every free cell reachable, free cells = 2 x lattice cells - 1 (a tree),
    all inside the drawn layout in the top-left corner of the map, sizes vary."""
    mazes = jax.device_get(_perfect_mazes(jax.random.split(jax.random.key(0), 8)))
    sizes = set()
    for i in range(8):
        walls, start, goal = mazes.walls[i], mazes.start[i], mazes.goal[i]
        assert walls.shape == (13, 13) and walls[11:].all() and walls[:, 11:].all()
        rows = int((~walls).any(1).nonzero()[0].max()) + 2  # the layout's side, border included
        cols = int((~walls).any(0).nonzero()[0].max()) + 2
        sizes.add((rows, cols))
        cells = ((rows - 1) // 2) * ((cols - 1) // 2)
        assert (~walls).sum() == 2 * cells - 1
        assert not walls[1:rows:2, 1:cols:2].any()
        d = numpy_bfs(walls, goal)
        assert (d[~walls] < grid_maze.UNREACHABLE).all() and tuple(start) != tuple(goal)
    assert len(sizes) > 2, sizes


@pytest.mark.parametrize(
    "field,kwargs",
    [
        ("height", {"height": 12, "map_height": 8}),
        ("width", {"width": 9, "map_width": 8}),
        ("map_height", {"map_height": -1}),
        ("min_size", {"layout": "perfect", "min_size": 3}),
        ("layout", {"layout": "rooms"}),
    ],
)
def test_a_world_too_large_for_the_map_names_the_key(field, kwargs):
    with pytest.raises(ConfigError) as e:
        grid_maze.make_grid_maze(**kwargs)
    assert e.value.key == field, str(e.value)
