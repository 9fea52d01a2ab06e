"""Procedurally generated grid mazes with a jit-able BFS shortest-path oracle (D-TSN navigation).

A maze is an ``H x W`` boolean wall grid (the border is always wall), a start and a goal cell.
Actions ``0..3`` move up, down, left, right; moving into a wall leaves the agent in place. Reaching
the goal terminates the episode with reward ``1``; every other step gives ``0``; episodes are
truncated after ``max_steps`` steps. So the optimal return from a cell at BFS distance ``d >= 1``
is ``gamma^(d - 1)`` and the optimal policy is any shortest path.

Generation (``generate``, jit-able): interior cells are walls with probability ``wall_prob``;
start and goal are distinct free cells drawn uniformly; layouts whose goal is unreachable from
the start are redrawn (``lax.while_loop``). A pool of fixed layouts (``MazeParams.pool``) can
replace generation, e.g. for held-out evaluation sets.

Procgen-style layouts (``layout="perfect"``, ``generate_perfect``, registered as
``"procgen-maze"``): as in Procgen's Maze, a perfect maze (one path between any two cells: a
random spanning tree of the cell lattice by Kruskal's algorithm, cells at odd coordinates) whose
size is drawn per layout (``min_size`` up to ``height x width``), shown in the top-left corner of
the fixed map, the rest wall.

Static map size: a world of ``height x width`` can be embedded (``embed``) in a larger
``map_height x map_width`` map whose extra cells are walls, so one network (whose input shape is
the map's) plays worlds of several sizes, e.g. held-out mazes larger than the training ones.

BFS oracle (``distances``): the distance-to-goal field computed as a synchronous wavefront,
``d <- min(d, 1 + min_{neighbours} d)`` on free cells until it stops changing (one iteration per
BFS layer, at most ``H * W``); unreachable cells keep ``UNREACHABLE``. ``oracle_action`` moves to
a neighbour with a smaller distance (ties: lowest action index).

Observations (``H x W`` is the map): ``"symbolic"`` float32[H, W, 3] channels (wall, agent, goal) or ``"pixels"``
uint8[H * c, W * c, 3] RGB with ``c = cell_pixels`` (walls dark grey, agent blue, goal green).
Registered as ``"grid-maze"``.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, UInt8

from jaxlab.core.config import ConfigError
from jaxlab.envs.base import Environment
from jaxlab.envs.spaces import Box, Discrete

MOVES = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]], np.int32)  # up, down, left, right
NUM_ACTIONS = 4
UNREACHABLE = 1 << 20
COLOURS = np.array([[245, 245, 245], [60, 60, 60], [40, 90, 220], [40, 180, 70]], np.uint8)


@struct.dataclass
class Maze:
    """One layout: ``walls`` bool[H, W], ``start`` and ``goal`` int32[2] (row, column)."""

    walls: Bool[Array, "H W"]
    start: Int[Array, " 2"]
    goal: Int[Array, " 2"]


@struct.dataclass
class MazeState:
    """Attributes: the layout, the agent ``pos`` int32[2], ``t`` steps taken."""

    walls: Bool[Array, "H W"]
    goal: Int[Array, " 2"]
    pos: Int[Array, " 2"]
    t: Int[Array, ""]


@struct.dataclass
class MazeParams:
    """Traced parameters.

    Attributes:
        wall_prob: probability that an interior cell is a wall (generation).
        max_steps: episode length limit.
        pool: optional fixed layouts (a ``Maze`` with a leading pool axis); resets draw one
            uniformly instead of generating.
    """

    wall_prob: float = 0.3
    max_steps: int = 64
    pool: Maze | None = None


def distances(walls: Bool[Array, "H W"], goal: Int[Array, " 2"]) -> Int[Array, "H W"]:
    """BFS distance from every cell to ``goal`` (``UNREACHABLE`` where no path; walls too)."""
    h, w = walls.shape
    d0 = jnp.full((h, w), UNREACHABLE, jnp.int32).at[goal[0], goal[1]].set(0)

    def relax(d):
        pad = jnp.pad(d, 1, constant_values=UNREACHABLE)
        nb = jnp.minimum(
            jnp.minimum(pad[:-2, 1:-1], pad[2:, 1:-1]), jnp.minimum(pad[1:-1, :-2], pad[1:-1, 2:])
        )
        new = jnp.minimum(d, jnp.minimum(nb, UNREACHABLE - 1) + 1)
        return jnp.where(walls, UNREACHABLE, jnp.where(new >= UNREACHABLE, UNREACHABLE, new))

    def cond(c):
        return c[1]

    def body(c):
        d, _ = c
        new = relax(d)
        return new, jnp.any(new != d)

    return jax.lax.while_loop(cond, body, (d0, jnp.asarray(True)))[0]


def move(walls: Bool[Array, "H W"], pos: Int[Array, " 2"], action) -> Int[Array, " 2"]:
    """The cell reached by ``action`` from ``pos`` (unchanged when it hits a wall)."""
    nxt = pos + jnp.asarray(MOVES)[action]
    nxt = jnp.clip(nxt, 0, jnp.array(walls.shape) - 1)
    return jnp.where(walls[nxt[0], nxt[1]], pos, nxt)


def oracle_action(dist: Int[Array, "H W"], walls: Bool[Array, "H W"], pos: Int[Array, " 2"]):
    """A shortest-path action from ``pos`` given the distance field (lowest index among ties)."""
    nxt = jax.vmap(lambda a: move(walls, pos, a))(jnp.arange(NUM_ACTIONS))
    return jnp.argmin(dist[nxt[:, 0], nxt[:, 1]]).astype(jnp.int32)


def oracle_value(dist: Int[Array, "H W"], pos: Int[Array, " 2"], gamma) -> Float[Array, ""]:
    """``V*(pos) = gamma^(d - 1)`` for BFS distance ``d >= 1``; 0 at the goal and if unreachable."""
    d = dist[pos[0], pos[1]]
    v = jnp.asarray(gamma, jnp.float32) ** (d - 1).astype(jnp.float32)
    return jnp.where((d >= 1) & (d < UNREACHABLE), v, 0.0)


def generate(
    key: PRNGKeyArray, height: int, width: int, wall_prob, map_height: int = 0, map_width: int = 0
) -> Maze:
    """A random solvable layout (module docstring); ``height``/``width`` static. With a map size
    (0: the layout's) the layout is embedded in it (``embed``)."""

    def draw(k):
        k_w, k_s, k_g = jax.random.split(k, 3)
        walls = jax.random.bernoulli(k_w, wall_prob, (height, width))
        border = np.ones((height, width), bool)
        border[1:-1, 1:-1] = False
        walls = walls | jnp.asarray(border)
        free = ~walls.reshape(-1)
        s = jax.random.categorical(k_s, jnp.where(free, 0.0, -jnp.inf))
        free_g = free.at[s].set(False)
        g = jax.random.categorical(k_g, jnp.where(free_g, 0.0, -jnp.inf))
        start = jnp.stack([s // width, s % width]).astype(jnp.int32)
        goal = jnp.stack([g // width, g % width]).astype(jnp.int32)
        ok = jnp.any(free_g) & (distances(walls, goal)[start[0], start[1]] < UNREACHABLE)
        return Maze(walls=walls, start=start, goal=goal), ok

    def body(c):
        k, _, _ = c
        k, sub = jax.random.split(k)
        maze, ok = draw(sub)
        return k, maze, ok

    k0, sub = jax.random.split(key)
    maze0, ok0 = draw(sub)
    maze = jax.lax.while_loop(lambda c: ~c[2], body, (k0, maze0, ok0))[1]
    return embed(maze, map_height or height, map_width or width)


def embed(maze: Maze, map_height: int, map_width: int) -> Maze:
    """The layout in the top-left corner of a ``map_height x map_width`` map, the rest wall
    (static sizes at least the layout's)."""
    h, w = maze.walls.shape
    if (h, w) == (map_height, map_width):
        return maze
    pad = ((0, map_height - h), (0, map_width - w))
    return maze.replace(walls=jnp.pad(maze.walls, pad, constant_values=True))


def _lattice_edges(rows: int, cols: int):
    """Edges of a ``rows x cols`` cell lattice: ``(cell u, cell v, wall row, wall column)``."""
    out = []
    for i in range(rows):
        for j in range(cols):
            if j + 1 < cols:
                out.append((i * cols + j, i * cols + j + 1, 2 * i + 1, 2 * j + 2))
            if i + 1 < rows:
                out.append((i * cols + j, (i + 1) * cols + j, 2 * i + 2, 2 * j + 1))
    return np.asarray(out, np.int32).reshape(-1, 4)


def generate_perfect(
    key: PRNGKeyArray,
    height: int,
    width: int,
    *,
    min_size: int = 0,
    map_height: int = 0,
    map_width: int = 0,
) -> Maze:
    """A Procgen-style perfect maze (module docstring); all sizes static.

    The lattice has ``(height - 1) // 2 x (width - 1) // 2`` cells at most; the layout's side
    lengths (in grid cells, odd) are drawn uniformly from ``[min_size, height]`` and ``[min_size,
    width]`` (``min_size`` 0: always the largest). Kruskal's algorithm over the edges in a random
    order (``lax.fori_loop``; union by relabelling) opens the wall of every edge joining two
    components inside the layout; start and goal are distinct free cells drawn uniformly.
    """
    rows, cols = (height - 1) // 2, (width - 1) // 2
    edges = jnp.asarray(_lattice_edges(rows, cols))
    k_size, k_order, k_s, k_g = jax.random.split(key, 4)
    lo = max((min_size - 1) // 2, 1) if min_size else rows
    lo_c = max((min_size - 1) // 2, 1) if min_size else cols
    k_r, k_c = jax.random.split(k_size)
    n_r = jax.random.randint(k_r, (), lo, rows + 1)
    n_c = jax.random.randint(k_c, (), lo_c, cols + 1)
    cell_r, cell_c = np.divmod(np.arange(rows * cols), cols)
    inside = (jnp.asarray(cell_r) < n_r) & (jnp.asarray(cell_c) < n_c)
    order = jax.random.permutation(k_order, edges.shape[0])

    def body(i, carry):
        labels, opened = carry
        e = order[i]
        u, v = edges[e, 0], edges[e, 1]
        join = inside[u] & inside[v] & (labels[u] != labels[v])
        labels = jnp.where(join & (labels == labels[v]), labels[u], labels)
        return labels, opened.at[e].set(join)

    labels0 = jnp.arange(rows * cols)
    _, opened = jax.lax.fori_loop(
        0, edges.shape[0], body, (labels0, jnp.zeros((edges.shape[0],), bool))
    )
    walls = jnp.ones((height, width), bool)
    walls = walls.at[2 * cell_r + 1, 2 * cell_c + 1].set(~inside)
    walls = walls.at[edges[:, 2], edges[:, 3]].set(~opened)
    free = ~walls.reshape(-1)
    s = jax.random.categorical(k_s, jnp.where(free, 0.0, -jnp.inf))
    g = jax.random.categorical(k_g, jnp.where(free.at[s].set(False), 0.0, -jnp.inf))
    start = jnp.stack([s // width, s % width]).astype(jnp.int32)
    goal = jnp.stack([g // width, g % width]).astype(jnp.int32)
    return embed(
        Maze(walls=walls, start=start, goal=goal), map_height or height, map_width or width
    )


def validate_maze(walls, start, goal) -> Maze:
    """A host-side check of a hand-made layout; raises ConfigError naming the bad field."""
    walls = np.asarray(walls, bool)
    if walls.ndim != 2 or min(walls.shape) < 3:
        raise ConfigError("walls", walls.shape, "a 2-D boolean grid of at least 3 x 3")
    for name, cell in (("start", start), ("goal", goal)):
        c = np.asarray(cell)
        if c.shape != (2,) or not (0 <= c[0] < walls.shape[0] and 0 <= c[1] < walls.shape[1]):
            raise ConfigError(name, cell, f"a (row, column) cell inside {walls.shape}")
        if walls[c[0], c[1]]:
            raise ConfigError(name, cell, "a free (non-wall) cell")
    start, goal = np.asarray(start, np.int32), np.asarray(goal, np.int32)
    d = np.asarray(distances(jnp.asarray(walls), jnp.asarray(goal)))
    if d[start[0], start[1]] >= UNREACHABLE:
        raise ConfigError(
            "goal", goal.tolist(), f"a cell reachable from start={start.tolist()} (no path exists)"
        )
    return Maze(walls=jnp.asarray(walls), start=jnp.asarray(start), goal=jnp.asarray(goal))


def render_rgb(walls, pos, goal, cell_pixels: int) -> UInt8[Array, "Hc Wc 3"]:
    """RGB image of a maze state, ``cell_pixels`` pixels per cell."""
    h, w = walls.shape
    kind = walls.astype(jnp.int32)
    kind = kind.at[goal[0], goal[1]].set(3).at[pos[0], pos[1]].set(2)
    img = jnp.asarray(COLOURS)[kind]
    return jnp.repeat(jnp.repeat(img, cell_pixels, axis=0), cell_pixels, axis=1)


@dataclasses.dataclass(frozen=True)
class StaticMazeParams:
    """Shape-fixing parameters.

    Attributes:
        height, width: the world's grid size (with its border wall); for ``layout="perfect"`` the
            largest one.
        observation_type: ``"symbolic"`` or ``"pixels"``; cell_pixels: pixels per cell.
        layout: ``"random"`` (independent walls, ``generate``) or ``"perfect"``
            (Procgen-style, ``generate_perfect``).
        min_size: ``layout="perfect"``: the smallest side drawn (0: always ``height x width``).
        map_height, map_width: the static map the world is embedded in (0: the world's size);
            observations have the map's shape.
    """

    height: int = 8
    width: int = 8
    observation_type: Literal["symbolic", "pixels"] = "symbolic"
    cell_pixels: int = 4
    layout: Literal["random", "perfect"] = "random"
    min_size: int = 0
    map_height: int = 0
    map_width: int = 0

    def __post_init__(self):
        for name in ("height", "width"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 4:
                raise ConfigError(name, v, "an int >= 4")
        if self.observation_type not in ("symbolic", "pixels"):
            raise ConfigError("observation_type", self.observation_type, "'symbolic' or 'pixels'")
        if isinstance(self.cell_pixels, bool) or not isinstance(self.cell_pixels, int):
            raise ConfigError("cell_pixels", self.cell_pixels, "an int >= 1")
        if self.cell_pixels < 1:
            raise ConfigError("cell_pixels", self.cell_pixels, "an int >= 1")
        if self.layout not in ("random", "perfect"):
            raise ConfigError("layout", self.layout, "'random' or 'perfect'")
        if self.layout == "perfect" and min(self.height, self.width) < 5:
            name = "height" if self.height < 5 else "width"
            raise ConfigError(name, getattr(self, name), "an int >= 5 (two lattice cells)")
        check_map_size(self.height, self.width, self.map_height, self.map_width)
        m = self.min_size
        if (
            isinstance(m, bool)
            or not isinstance(m, int)
            or not (m == 0 or 5 <= m <= min(self.height, self.width))
        ):
            raise ConfigError(
                "min_size", m, f"0 or an int in [5, {min(self.height, self.width)}] (height, width)"
            )

    @property
    def map_shape(self) -> tuple[int, int]:
        """``(rows, columns)`` of the map (and of symbolic observations)."""
        return (self.map_height or self.height, self.map_width or self.width)


def check_map_size(height: int, width: int, map_height: int, map_width: int, prefix: str = ""):
    """A world of ``height x width`` must fit the static map (0: the world's size): raises
    ConfigError naming ``prefix + "height"``/``"width"`` (or the map key when it is not an int)."""
    for name, v in (("map_height", map_height), ("map_width", map_width)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(name, v, "0 (the world's size) or an int >= 4")
    for name, size, cap, cap_name in (
        ("height", height, map_height, "map_height"),
        ("width", width, map_width, "map_width"),
    ):
        if cap and size > cap:
            raise ConfigError(
                prefix + name, size, f"a world that fits the static map: at most {cap_name}={cap}"
            )


class GridMaze(Environment):
    """Grid maze navigation (module docstring)."""

    obs_is_function_of_state = True

    def __init__(self, static: StaticMazeParams = StaticMazeParams(), auto_reset: bool = True):
        self.static = static
        self.auto_reset = bool(auto_reset)

    def __eq__(self, other) -> bool:
        return (
            type(other) is GridMaze
            and other.static == self.static
            and other.auto_reset == self.auto_reset
        )

    def __hash__(self) -> int:
        return hash(("GridMaze", self.static, self.auto_reset))

    @property
    def default_params(self) -> MazeParams:
        return MazeParams()

    def symbolic(self, state: MazeState) -> Float[Array, "H W 3"]:
        """The (wall, agent, goal) channels of ``state``."""
        h, w = self.static.map_shape
        agent = jnp.zeros((h, w)).at[state.pos[0], state.pos[1]].set(1.0)
        goal = jnp.zeros((h, w)).at[state.goal[0], state.goal[1]].set(1.0)
        return jnp.stack([state.walls.astype(jnp.float32), agent, goal], axis=-1)

    def get_obs(self, state: MazeState, params: MazeParams):
        if self.static.observation_type == "pixels":
            return render_rgb(state.walls, state.pos, state.goal, self.static.cell_pixels)
        return self.symbolic(state)

    def state_from_maze(self, maze: Maze) -> MazeState:
        """The start state of a layout."""
        return MazeState(walls=maze.walls, goal=maze.goal, pos=maze.start, t=jnp.int32(0))

    def sample_maze(self, key: PRNGKeyArray, params: MazeParams) -> Maze:
        """A layout: drawn from ``params.pool`` when given, else generated."""
        if params.pool is not None:
            idx = jax.random.randint(key, (), 0, params.pool.walls.shape[0])
            return jax.tree.map(lambda x: x[idx], params.pool)
        st = self.static
        if st.layout == "perfect":
            return generate_perfect(
                key,
                st.height,
                st.width,
                min_size=st.min_size,
                map_height=st.map_height,
                map_width=st.map_width,
            )
        return generate(key, st.height, st.width, params.wall_prob, st.map_height, st.map_width)

    def reset_env(self, key: PRNGKeyArray, params: MazeParams):
        state = self.state_from_maze(self.sample_maze(key, params))
        return self.get_obs(state, params), state

    def step_env(self, key, state: MazeState, action, params: MazeParams):
        del key
        pos = move(state.walls, state.pos, jnp.asarray(action, jnp.int32))
        new = state.replace(pos=pos, t=state.t + 1)
        terminated = jnp.all(pos == state.goal)
        truncated = (new.t >= params.max_steps) & ~terminated
        reward = jnp.where(terminated, 1.0, 0.0).astype(jnp.float32)
        info = {"solved": terminated}
        return self.get_obs(new, params), new, reward, terminated, truncated, info

    def action_space(self, params=None) -> Discrete:
        return Discrete(NUM_ACTIONS)

    def observation_space(self, params=None) -> Box:
        (h, w), c = self.static.map_shape, self.static.cell_pixels
        if self.static.observation_type == "pixels":
            return Box(0, 255, (h * c, w * c, 3), jnp.uint8)
        return Box(0.0, 1.0, (h, w, 3), jnp.float32)


def make_grid_maze(
    height: int = 8,
    width: int = 8,
    observation_type: str = "symbolic",
    cell_pixels: int = 4,
    wall_prob: float = 0.3,
    max_steps: int = 64,
    auto_reset: bool = True,
    layout: str = "random",
    min_size: int = 0,
    map_height: int = 0,
    map_width: int = 0,
):
    """Registry factory: ``(GridMaze, MazeParams)``."""
    static = StaticMazeParams(
        height=height,
        width=width,
        observation_type=observation_type,
        cell_pixels=cell_pixels,
        layout=layout,
        min_size=min_size,
        map_height=map_height,
        map_width=map_width,
    )
    if not 0.0 <= float(wall_prob) < 1.0:
        raise ConfigError("wall_prob", wall_prob, "a float in [0, 1)")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ConfigError("max_steps", max_steps, "an int >= 1")
    env = GridMaze(static, auto_reset=auto_reset)
    return env, MazeParams(wall_prob=float(wall_prob), max_steps=max_steps)


def make_procgen_maze(
    height: int = 13,
    width: int = 13,
    min_size: int = 5,
    observation_type: str = "pixels",
    cell_pixels: int = 4,
    max_steps: int = 64,
    auto_reset: bool = True,
):
    """Registry factory of ``"procgen-maze"``: Procgen-style perfect mazes of per-layout size in
    ``[min_size, height] x [min_size, width]`` in a ``height x width`` map, pixel observations."""
    return make_grid_maze(
        height=height,
        width=width,
        observation_type=observation_type,
        cell_pixels=cell_pixels,
        max_steps=max_steps,
        auto_reset=auto_reset,
        layout="perfect",
        min_size=min_size,
    )
