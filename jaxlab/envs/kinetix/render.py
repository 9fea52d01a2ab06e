"""Rasterising Kinetix scenes in JAX (pixel observations) and writing PNG/GIF files.

``make_render_pixels(static_params)`` returns a jit-able ``render(state, params) -> [W, H, 3]``
float32 image in 0..255 with the original's layout: axis 0 is x, axis 1 is y pointing **up**,
pixel ``(i, j)`` samples the world point ``(i, j) / s`` with ``s = floor(pixels_per_unit /
downscale)`` pixels per metre (the visible arena is ``[0, W/s] x [0, H/s]``, 5 m x 5 m by default).
``to_image`` turns it into an ordinary top-down ``[H, W, 3]`` uint8 picture.

Drawing order and colours follow ``kinetix/render/renderer_pixels.py``:

1. white background;
2. the floor (polygon 0), always drawn, in its role colour treated as fixated;
3. the other polygons except the walls and ceiling (slots ``>= num_static_fixated_polys``);
4. circles, with a black radius line showing their rotation (``theta = 0`` points up);
5. joints as dots: white, or their motor binding's colour when the motor is on;
6. thrusters: a small bar along the thrust axis, grey nozzle behind, binding colour in front.

Shape colours: default grey (160), green (0, 204, 0), blue (0, 102, 204), red (255, 102, 102);
fixated shapes are dark grey (80) for the default role and half-brightness otherwise. Differences
from the original: shapes are drawn whole (the original clips each one to a 2 m x 2 m patch),
triangles use their 3 vertices, and thrusters are a drawn bar rather than a 16 px texture.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxlab.envs.kinetix.state import EnvParams, EnvState, StaticEnvParams
from jaxlab.media import save_gif, save_png  # noqa: F401  (re-exported: PNG/GIF of renders)

ROLE_COLOURS = np.array(
    [[160.0, 160.0, 160.0], [0.0, 204.0, 0.0], [0.0, 102.0, 204.0], [255.0, 102.0, 102.0]],
    np.float32,
)
FIXATED_COLOUR = np.array([80.0, 80.0, 80.0], np.float32)
BACKGROUND_COLOUR = np.array([255.0, 255.0, 255.0], np.float32)
#: Index 0: unpowered joint/thruster body; 1 + b: motor/thruster binding b.
BINDING_COLOURS = np.array(
    [[255, 255, 255], [255, 255, 0], [255, 0, 255], [0, 255, 255], [255, 153, 51]], np.float32
)
JOINT_RADIUS_M = 0.03
THRUSTER_LENGTH_M = 0.16
THRUSTER_WIDTH_M = 0.1


def shape_colour(role, fixated) -> Float[Array, "... 3"]:
    """Role colour; fixated shapes get dark grey (role 0) or half brightness (other roles)."""
    role = jnp.asarray(role)
    base = jnp.asarray(ROLE_COLOURS)[role]
    dark = jnp.broadcast_to(jnp.asarray(FIXATED_COLOUR), base.shape)
    fix = jnp.where((role == 0)[..., None], dark, base * 0.5)
    fixated = jnp.broadcast_to(jnp.asarray(fixated), role.shape)
    return jnp.where(fixated[..., None], fix, base)


def _rotate(angle, v):
    """``R(angle) v`` with ``angle`` of the same rank as ``v[..., 0]``."""
    c, s = jnp.cos(angle), jnp.sin(angle)
    return jnp.stack([c * v[..., 0] - s * v[..., 1], s * v[..., 0] + c * v[..., 1]], -1)


def _inside_convex(px, py, verts, n_vertices) -> Array:
    """Pixels inside clockwise convex polygons.

    ``px`` [1, W, 1] and ``py`` [1, 1, H] pixel coordinates, ``verts`` [K, V, 2] in pixel units,
    ``n_vertices`` [K]; returns [K, W, H].
    """
    px, py = px[None], py[None]
    V = verts.shape[1]
    k = np.arange(V)
    nxt_idx = jnp.where(k[None, :] + 1 < n_vertices[:, None], k[None, :] + 1, 0)
    nxt = jnp.take_along_axis(verts, nxt_idx[:, :, None], axis=1)
    used = k[None, :] < n_vertices[:, None]
    ax, ay = verts[..., 0][:, :, None, None], verts[..., 1][:, :, None, None]
    bx, by = nxt[..., 0][:, :, None, None], nxt[..., 1][:, :, None, None]
    # (a - p) x (b - p) <= 0 on every used edge (Jax2D polygons are clockwise).
    side = (ax - px) * (by - py) - (ay - py) * (bx - px)
    ok = (side <= 0) | jnp.logical_not(used)[:, :, None, None]
    return jnp.all(ok, axis=1)


def _composite(image, cover, colour):
    """Paint layers ``cover`` [K, W, H] in order (later layers on top) with colours ``colour``
    broadcastable to [K, W, H, 3] (one colour per layer, [K, 1, 1, 3], or per pixel).

    A static loop of ``K`` selects (K is a capacity, a handful of shapes), which XLA fuses into
    one pass over the image; no [K, W, H, 3] colour array is materialised.
    """
    for k in range(cover.shape[0]):
        image = jnp.where(cover[k][..., None], colour[k], image)
    return image


def make_render_pixels(static_params: StaticEnvParams, *, downscale: int | None = None):
    """``render(state, params) -> [W, H, 3]`` float32 in 0..255 (see the module docstring).

    Args:
        static_params: sizes; ``screen_dim`` and (unless given) ``downscale`` fix the image size.
        downscale: override of ``static_params.downscale`` (1 gives full-size 500 x 500 frames).
    """
    sp = static_params
    ds = sp.downscale if downscale is None else int(downscale)
    if ds < 1:
        raise ValueError(f"downscale={downscale!r}; expected an int >= 1")
    W, H = sp.screen_dim[0] // ds, sp.screen_dim[1] // ds
    S = sp.num_static_fixated_polys
    px = jnp.arange(W, dtype=jnp.float32)[None, :, None]
    py = jnp.arange(H, dtype=jnp.float32)[None, None, :]

    def render(state: EnvState, params: EnvParams) -> Float[Array, "w h 3"]:
        sim = state.sim
        scale = jnp.floor(jnp.asarray(params.pixels_per_unit, jnp.float32) / ds)
        image = jnp.broadcast_to(jnp.asarray(BACKGROUND_COLOUR), (W, H, 3))

        # Floor and polygons (walls and ceiling are never drawn).
        poly = sim.polygon
        world = poly.position[:, None, :] + _rotate(poly.rotation[:, None], poly.vertices)
        verts = world * scale
        colours = shape_colour(state.polygon_shape_roles, poly.inverse_mass == 0)
        colours = colours.at[0].set(shape_colour(state.polygon_shape_roles[0], True))
        draw = poly.active.at[:S].set(False).at[0].set(True)
        inside = _inside_convex(px, py, verts, poly.n_vertices) & draw[:, None, None]
        image = _composite(image, inside, colours[:, None, None, :])

        # Circles with their rotation line, joints and thrusters: each layer is computed from its
        # own scalars inside the loop, so every [W, H] test fuses into its select (no [K, W, H]
        # or [K, W, H, 3] intermediate is materialised).
        qx, qy = px[0], py[0]  # [W, 1], [1, H]
        circ = sim.circle
        c_col = shape_colour(state.circle_shape_roles, circ.inverse_mass == 0)
        for k in range(circ.radius.shape[0]):
            dx, dy = qx - circ.position[k, 0] * scale, qy - circ.position[k, 1] * scale
            inside = (jnp.sqrt(dx * dx + dy * dy) <= circ.radius[k] * scale) & circ.active[k]
            nx, ny = jnp.sin(circ.rotation[k]), -jnp.cos(circ.rotation[k])
            line = (jnp.abs(dx * ny - dy * nx) < 1.0) & (nx * dx + ny * dy <= 0)
            colour = jnp.where(line[..., None], 0.0, c_col[k])
            image = jnp.where(inside[..., None], colour, image)

        # Joints.
        jt = sim.joint
        jc = jnp.round(jt.global_position * scale)
        jr = jnp.maximum(0.5, JOINT_RADIUS_M * scale)
        powered = jt.motor_on & jnp.logical_not(jt.is_fixed_joint)
        j_col = jnp.asarray(BINDING_COLOURS)[(state.motor_bindings + 1) * powered]
        for k in range(jc.shape[0]):
            ddx, ddy = qx - jc[k, 0], qy - jc[k, 1]
            cover = (ddx * ddx + ddy * ddy < jr * jr) & jt.active[k]
            image = jnp.where(cover[..., None], j_col[k], image)

        # Thrusters: a bar along the thrust direction, nozzle (grey) behind the centre.
        th = sim.thruster
        parent_rot = jnp.concatenate([poly.rotation, circ.rotation])[th.object_index]
        angle = th.rotation + parent_rot
        half_l = jnp.maximum(1.0, THRUSTER_LENGTH_M * scale / 2)
        half_w = jnp.maximum(0.5, THRUSTER_WIDTH_M * scale / 2)
        front = jnp.asarray(BINDING_COLOURS)[state.thruster_bindings + 1]
        for k in range(angle.shape[0]):
            ux, uy = jnp.cos(angle[k]), jnp.sin(angle[k])
            tx = qx - th.global_position[k, 0] * scale
            ty = qy - th.global_position[k, 1] * scale
            along = tx * ux + ty * uy
            across = -tx * uy + ty * ux
            cover = (jnp.abs(along) <= half_l) & (jnp.abs(across) <= half_w) & th.active[k]
            colour = jnp.where((along >= 0)[..., None], front[k], jnp.asarray(FIXATED_COLOUR))
            image = jnp.where(cover[..., None], colour, image)
        return image

    return render


def to_image(pixels) -> np.ndarray:
    """[W, H, 3] (x, y up) float 0..255 -> ordinary top-down [H, W, 3] uint8 image."""
    arr = np.asarray(pixels)
    if arr.ndim != 3 or arr.shape[-1] != 3:
        raise ValueError(f"pixels has shape {arr.shape}; expected [W, H, 3]")
    arr = np.clip(np.rint(arr), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(arr.transpose(1, 0, 2)[::-1])
