"""Measurements read from generated frames (the ground truth of :mod:`.synthetic` is known).

All take one ``[S, S, 1]`` frame (vmap for videos) and are jit-able.

* ``head_position``: centroid of ``frame + 1`` (the face on a -1 background).
* ``brightness``: the 90th percentile of the frame (the identity's face/body level).
* ``mouth_opening``: mean darkness ``relu(brightness - pixel)`` in a Gaussian window at the
  mouth's place relative to the measured head (grows with the mouth ellipse's area).
* ``laplacian``/``hand_sharpness``: the energy of the 5-point Laplacian in a window at the hand
  (high for the sharp checker, falls with blur; Laplacian-variance sharpness).
* ``hand_position``: the Laplacian-energy-weighted centroid to the right of the body centre.
* ``body_centre``: centroid of the Gaussian-smoothed ``frame + 1``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.diffusion.video.synthetic import _gauss_blur, _grid


def _check(frame) -> Float[Array, "s s"]:
    if frame.ndim != 3 or frame.shape[-1] != 1 or frame.shape[0] != frame.shape[1]:
        raise ValueError(f"frame: got shape {tuple(frame.shape)}, expected (S, S, 1)")
    return frame[..., 0]


def _centroid(w: Float[Array, "s s"]) -> Float[Array, " 2"]:
    x, y = _grid(w.shape[0])
    s = jnp.sum(w) + 1e-6
    return jnp.stack([jnp.sum(w * x) / s, jnp.sum(w * y) / s])


def head_position(frame: Float[Array, "s s 1"]) -> Float[Array, " 2"]:
    """(x, y) centroid of ``relu(frame + 1)``."""
    return _centroid(jax.nn.relu(_check(frame) + 1.0))


def brightness(frame: Float[Array, "s s 1"]) -> Float[Array, ""]:
    """90th percentile of the pixels."""
    return jnp.quantile(_check(frame), 0.9)


def mouth_opening(frame: Float[Array, "s s 1"]) -> Float[Array, ""]:
    """Mean darkness below the face level in a window at (head_x, head_y + 2.5)."""
    img = _check(frame)
    cx, cy = head_position(frame)
    x, y = _grid(img.shape[0])
    w = jnp.exp(-0.5 * (((x - cx) / 1.5) ** 2 + ((y - cy - 2.5) / 1.0) ** 2))
    return jnp.sum(w * jax.nn.relu(brightness(frame) - img)) / jnp.sum(w)


def laplacian(img: Float[Array, "s s"]) -> Float[Array, "s s"]:
    """5-point Laplacian with edge padding."""
    p = jnp.pad(img, 1, mode="edge")
    return p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4 * img


def body_centre(frame: Float[Array, "s s 1"]) -> Float[Array, " 2"]:
    """(x, y) centroid of the blurred ``relu(frame + 1)``."""
    return _centroid(_gauss_blur(jax.nn.relu(_check(frame) + 1.0), jnp.float32(1.5)))


def hand_position(frame: Float[Array, "s s 1"]) -> Float[Array, " 2"]:
    """Laplacian-energy centroid right of the body centre (the hand is the only fine texture)."""
    img = _check(frame)
    bx, _ = body_centre(frame)
    x, _ = _grid(img.shape[0])
    return _centroid(laplacian(img) ** 2 * jax.nn.sigmoid((x - bx - 2.0) / 0.5))


def hand_sharpness(frame: Float[Array, "s s 1"]) -> Float[Array, ""]:
    """Mean squared Laplacian in a Gaussian window (sd 1.5 px) at :func:`hand_position`."""
    img = _check(frame)
    hx, hy = hand_position(frame)
    x, y = _grid(img.shape[0])
    w = jnp.exp(-0.5 * (((x - hx) / 1.5) ** 2 + ((y - hy) / 1.5) ** 2))
    return jnp.sum(w * laplacian(img) ** 2) / jnp.sum(w)


def correlation(a: Float[Array, " n"], b: Float[Array, " n"]) -> Float[Array, ""]:
    """Pearson correlation of two series."""
    a, b = a - a.mean(), b - b.mean()
    return jnp.sum(a * b) / (jnp.sqrt(jnp.sum(a * a) * jnp.sum(b * b)) + 1e-9)
