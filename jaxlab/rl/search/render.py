"""Drawing D-TSN on a grid maze: the cells its search tree expanded, as a GIF of an episode.

A learned model's tree holds latents, not cells; :func:`node_cells` maps each node to the cell its
action path from the root reaches in the *true* maze (parents have smaller indices than children,
so one ``lax.scan`` in index order suffices). :func:`episode_gif` plays one greedy episode and
draws, per step, the maze with the expanded cells tinted orange (darker = expanded earlier).
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


def episode_frames(params, maze: grid_maze.Maze, *, model, config, max_steps: int):
    """``(positions [S+1, 2], expanded cells [S, K, 2] with -1 for none, solved)`` of one greedy
    episode (host loop: this is for drawing, not training)."""
    walls, goal = maze.walls, maze.goal
    h, w = walls.shape
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
        exp = jnp.where((idx >= 0)[:, None], cells[jnp.maximum(idx, 0)], -1)
        return jnp.argmax(out.q), exp

    pos = maze.start
    positions, expanded, solved = [np.asarray(pos)], [], False
    for _ in range(max_steps):
        a, exp = think(pos)
        expanded.append(np.asarray(exp))
        pos = grid_maze.move(walls, pos, a)
        positions.append(np.asarray(pos))
        if bool(jnp.all(pos == goal)):
            solved = True
            break
    return np.stack(positions), np.stack(expanded), solved


def draw(walls, pos, goal, expanded=None, cell: int = 24) -> np.ndarray:
    """RGB uint8 image: the maze, expanded cells tinted (earlier = stronger), agent and goal."""
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
    img = np.repeat(np.repeat(img, cell, 0), cell, 1)
    return img.clip(0, 255).astype(np.uint8)


def episode_gif(path: str | Path, params, maze: grid_maze.Maze, *, model, config, max_steps: int):
    """Writes the GIF of one greedy episode (PIL); returns ``(steps, solved)``."""
    from PIL import Image

    positions, expanded, solved = episode_frames(
        params, maze, model=model, config=config, max_steps=max_steps
    )
    walls, goal = np.asarray(maze.walls), np.asarray(maze.goal)
    frames = [draw(walls, positions[i], goal, expanded[i]) for i in range(len(expanded))]
    frames.append(draw(walls, positions[-1], goal))
    images = [Image.fromarray(f) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=400, loop=0)
    return len(expanded), solved
