"""A top view of a driving scene as an RGB image (NumPy, on the host)."""

from __future__ import annotations

import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.envs.driving.geometry import to_frame
from jaxlab.envs.driving.scenes import LANE_WIDTH
from jaxlab.envs.driving.state import DrivingState, neighbour_poses
from jaxlab.envs.driving.vehicles import AGENT_SIZES, CAR_LENGTH, CAR_WIDTH


def render_top_view(
    state: DrivingState,
    plan: np.ndarray | None = None,
    predictions: np.ndarray | None = None,
    *,
    size: int = 160,
    extent: float = 40.0,
) -> np.ndarray:
    """An RGB uint8 top view (ego-centred, ``extent`` m half-width; +x of the ego points right):
    lanes grey, ego blue, neighbours orange, parked cars dark red, the ego plan green and
    neighbour predictions yellow (both (.., T, >=2) in the ego frame)."""
    # numpy copies of the fields (not a DrivingState: its annotations are for jax arrays)
    st = types.SimpleNamespace(
        **{f.name: np.asarray(getattr(state, f.name)) for f in dataclasses.fields(state)}
    )
    img = np.full((size, size, 3), 30, np.uint8)
    ego = np.asarray(st.ego)
    scale = size / (2 * extent)

    def pix(xy_ego):
        u = (xy_ego[..., 0] + extent) * scale
        w = (extent - xy_ego[..., 1]) * scale
        return u, w

    def world_to_ego(xy):
        return np.asarray(to_frame(jnp.asarray(xy), jnp.asarray(ego[:2]), jnp.asarray(ego[2])))

    yy, xx = np.mgrid[0:size, 0:size]
    gx = xx / scale - extent + 0.5 / scale
    gy = extent - yy / scale - 0.5 / scale
    grid = np.stack([gx, gy], -1)
    for li in range(st.lanes.shape[0]):
        if not st.lane_valid[li]:
            continue
        pts = world_to_ego(st.lanes[li])
        d = np.min(np.linalg.norm(grid[:, :, None] - pts[None, None], axis=-1), -1)
        img[d < 0.5 * LANE_WIDTH] = (70, 70, 70)

    def box(xy, h, length, width, color):
        c, s = np.cos(h), np.sin(h)
        d = grid - xy
        lon = d[..., 0] * c + d[..., 1] * s
        lat = -d[..., 0] * s + d[..., 1] * c
        img[(np.abs(lon) < length / 2) & (np.abs(lat) < width / 2)] = color

    nb_xy, nb_h = jax.device_get(neighbour_poses(state))
    for i in range(len(nb_xy)):
        if st.nb_valid[i]:
            nb_len, nb_wid = AGENT_SIZES[int(st.nb_type[i])]
            box(world_to_ego(nb_xy[i]), nb_h[i] - ego[2], nb_len, nb_wid, (230, 140, 30))
    for i in range(st.static.shape[0]):
        if st.static_valid[i]:
            s = st.static[i]
            box(world_to_ego(s[:2]), s[2] - ego[2], s[3], s[4], (140, 20, 20))
    box(np.zeros(2), 0.0, CAR_LENGTH, CAR_WIDTH, (40, 110, 240))

    def dots(traj, color):
        u, w = pix(np.asarray(traj)[..., :2])
        ok = (u >= 0) & (u < size) & (w >= 0) & (w < size)
        img[w[ok].astype(int), u[ok].astype(int)] = color

    if predictions is not None:
        dots(predictions, (240, 220, 40))
    if plan is not None:
        dots(plan, (60, 220, 90))
    return img
