"""The skill metrics on hand-made rollouts: cells counted once each, and the compass sectors of
the net displacements of rollouts that moved."""

import jax.numpy as jnp
import numpy as np

from jaxlab.rl.skills.evaluate import count_cells, count_directions


def _rollouts(ends, steps=5):
    """Straight lines from (0.1, 0.1) to each end point: ``[n, steps, 2]``."""
    t = np.linspace(0.0, 1.0, steps)[None, :, None]
    ends = np.asarray(ends, np.float32)[:, None, :]
    return jnp.asarray(0.1 + t * (ends - 0.1), jnp.float32)


def test_count_cells_counts_each_visited_cell_once():
    xy = jnp.asarray([[0.1, 0.1], [0.2, 0.3], [1.5, 0.1], [1.5, 0.2], [-0.5, 0.1]])
    assert int(count_cells(xy, 1.0)) == 3
    assert int(count_cells(xy, 0.25)) == 4


def test_count_directions_counts_compass_sectors_of_rollouts_that_moved():
    four = _rollouts([[3.0, 0.1], [0.1, 3.0], [-3.0, 0.1], [0.1, -3.0]])
    assert int(count_directions(four, 1.0)) == 4
    same = _rollouts([[3.0, 0.2], [4.0, 0.3], [2.5, 0.15]])  # far, but all to the right
    assert int(count_directions(same, 1.0)) == 1
    still = _rollouts([[0.3, 0.2], [-0.2, 0.4]])  # moved less than the threshold
    assert int(count_directions(still, 1.0)) == 0
    eight = _rollouts([[2 * np.cos(a), 2 * np.sin(a)] for a in np.arange(8) * np.pi / 4 + 0.3])
    assert int(count_directions(eight, 1.0)) == 8
