"""Drawing D-TSN on a grid maze: the cells its search tree expanded, as a GIF of an episode.

A learned model's tree holds latents, not cells; :func:`node_cells` maps each node to the cell its
action path from the root reaches in the *true* maze (parents have smaller indices than children,
so one ``lax.scan`` in index order suffices). :func:`episode_gif` plays one greedy episode and
draws, per step, the maze with the searched tree: its expanded cells tinted orange (stronger =
expanded earlier) and an edge from each node's parent cell to its cell, and a progress
strip on the top border (so a step where the agent stays put is still a frame of its own).
:func:`longest_layout` picks, among candidate layouts, the one with the longest shortest path,
so the drawn episode has several steps.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int

from jaxlab.envs import grid_maze
from jaxlab.rl.search import dtsn


def node_cells(
    tree: dtsn.Tree, walls: Bool[Array, "H W"], pos: Int[Array, " 2"]
) -> Int[Array, "N 2"]:
    """The maze cell of every node: the root at ``pos``, a child where its action moves."""

    def body(cells, n):
        parent = jnp.maximum(tree.parent[n], 0)
        cell = grid_maze.move(walls, cells[parent], jnp.maximum(tree.action[n], 0))
        cells = cells.at[n].set(jnp.where(n == 0, pos, cell))
        return cells, None

    n_nodes = tree.parent.shape[0]
    cells0 = jnp.zeros((n_nodes, 2), jnp.int32)
    return jax.lax.scan(body, cells0, jnp.arange(n_nodes))[0]


def longest_layout(mazes: grid_maze.Maze) -> grid_maze.Maze:
    """The layout (of a batch, leaves ``[M, ...]``) whose start is farthest from its goal."""
    d = jax.vmap(lambda m: grid_maze.distances(m.walls, m.goal)[m.start[0], m.start[1]])(mazes)
    best = int(jnp.argmax(jnp.where(d < grid_maze.UNREACHABLE, d, -1)))
    return jax.tree.map(lambda x: x[best], mazes)


def episode_frames(params, maze: grid_maze.Maze, *, model, config, max_steps: int, env=None):
    """``(positions [S+1, 2], expanded cells [S, K, 2], tree edges [S, N, 2, 2], solved)`` of one
    greedy episode: the cells of the expanded nodes (-1 where nothing was expanded) and, for every
    node of the tree, the edge from its parent's cell to its cell (-1 for the root and nodes never
    created). The
    observation is ``env``'s (default: symbolic, the layout's size). Host loop: this is for
    drawing, not training."""
    walls, goal = maze.walls, maze.goal
    h, w = walls.shape
    if env is None:
        env = grid_maze.GridMaze(grid_maze.StaticMazeParams(height=h, width=w), auto_reset=False)

    @jax.jit
    def think(pos):
        state = grid_maze.MazeState(walls=walls, goal=goal, pos=pos, t=jnp.int32(0))
        out = dtsn.search(
            jax.random.key(0),
            params,
            env.get_obs(state, env.default_params),
            model=model,
            config=config,
            mode="greedy",
        )
        cells = node_cells(out.tree, walls, pos)
        idx = out.tree.expanded_node
        safe = jnp.maximum(idx, 0)
        exp = jnp.where((idx >= 0)[:, None], cells[safe], -1)
        parent = out.tree.parent
        edge = jnp.stack([cells[jnp.maximum(parent, 0)], cells], axis=1)
        edge = jnp.where((out.tree.exists & (parent >= 0))[:, None, None], edge, -1)
        return jnp.argmax(out.q), exp, edge

    pos = maze.start
    positions, expanded, edges, solved = [np.asarray(pos)], [], [], False
    for _ in range(max_steps):
        a, exp, edge = think(pos)
        expanded.append(np.asarray(exp))
        edges.append(np.asarray(edge))
        pos = grid_maze.move(walls, pos, a)
        positions.append(np.asarray(pos))
        if bool(jnp.all(pos == goal)):
            solved = True
            break
    return np.stack(positions), np.stack(expanded), np.stack(edges), solved


def draw(
    walls, pos, goal, expanded=None, cell: int = 24, edges=None, progress: float | None = None
) -> np.ndarray:
    """RGB uint8 image: the maze, expanded cells tinted (earlier = stronger), agent and goal; the
    tree ``edges`` ``[E, 2, 2]`` (cell to cell, -1 rows skipped) as orange lines; ``progress`` in
    ``[0, 1]`` as a strip along the top border."""
    img = np.asarray(
        grid_maze.render_rgb(jnp.asarray(walls), jnp.asarray(pos), jnp.asarray(goal), 1)
    )
    img = img.astype(np.float32)
    if expanded is not None:
        k = len(expanded)
        for i, (r, c) in enumerate(expanded):
            if r < 0 or (r == pos[0] and c == pos[1]) or (r == goal[0] and c == goal[1]):
                continue
            alpha = 0.75 - 0.5 * i / max(k - 1, 1)
            img[r, c] = (1 - alpha) * img[r, c] + alpha * np.array([255.0, 150.0, 30.0])
    img = np.repeat(np.repeat(img, cell, 0), cell, 1).clip(0, 255).astype(np.uint8)
    if edges is None and progress is None:
        return img
    from PIL import Image, ImageDraw

    pic = Image.fromarray(img)
    pen = ImageDraw.Draw(pic)
    for (r0, c0), (r1, c1) in edges if edges is not None else ():
        if r0 < 0 or (r0, c0) == (r1, c1):  # no node, or a move into a wall
            continue
        ends = [(c0 + 0.5) * cell, (r0 + 0.5) * cell, (c1 + 0.5) * cell, (r1 + 0.5) * cell]
        pen.line(ends, fill=(200, 90, 0), width=max(cell // 8, 1))
    if progress is not None:
        pen.rectangle(
            [0, 0, max(int(progress * img.shape[1]) - 1, 0), max(cell // 6, 1)],
            fill=(250, 200, 60),
        )
    return np.asarray(pic)


def episode_gif(
    path: str | Path, params, maze: grid_maze.Maze, *, model, config, max_steps: int, env=None
):
    """Writes the GIF of one greedy episode (PIL), a frame per step with its search tree and a
    last frame; returns ``(steps, solved)``."""
    from PIL import Image

    positions, expanded, edges, solved = episode_frames(
        params, maze, model=model, config=config, max_steps=max_steps, env=env
    )
    walls, goal = np.asarray(maze.walls), np.asarray(maze.goal)
    n = len(expanded)
    frames = [
        draw(walls, positions[i], goal, expanded[i], edges=edges[i], progress=i / n)
        for i in range(n)
    ]
    frames.append(draw(walls, positions[-1], goal, progress=1.0))
    images = [Image.fromarray(f) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=400, loop=0)
    return len(expanded), solved
