"""LS-Imagine's affordance maps: offline labels from sliding-box zoom videos, an online predictor.

Offline labels (paper §3.2): for each box of a sliding window (side ``box``, stride ``stride``
pixels) the observation is turned into a ``frames``-frame *zoom pseudo-video* that moves the view
from the whole image to the box (frame ``k``: a box of side ``S + (box - S) k/F`` centred on the
way from the image centre to the box centre, ``zoom``), and a video-text similarity model scores
it; the box's score is the mean over the frames. The label ``M(p)`` of pixel ``p`` is the mean
score of the boxes covering it.

MineCLIP stand-in: ``Relevance``, a small CNN trained here (BCE against soft labels) to predict
the open world's ground-truth task relevance ``exp(-d/2)`` of a frame (the target in view at
distance ``d``; ``info["relevance"]``), the knowledge "this looks like approaching a log" that
MineCLIP brings from YouTube videos and the task text. It scores single frames; a video's score
is its frame mean.

Online predictor (the paper's multimodal Swin-U-Net): ``AffordancePredictor``, a small
convolutional encoder-decoder with a skip connection, ``image -> sigmoid map [S, S]``, regressed
on the offline labels (MSE).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxlab.envs.open_world import zoom
from jaxlab.nn.conv import Conv, ConvTranspose


class Relevance(nn.Module):
    """The MineCLIP stand-in: image in ``[-0.5, 0.5]`` -> relevance logit."""

    @nn.compact
    def __call__(self, image: Float[Array, "*b s s 3"]) -> Float[Array, "*b"]:
        lead = image.shape[:-3]
        x = image.reshape((-1,) + image.shape[-3:])
        x = nn.relu(Conv(8, 4, strides=2)(x))
        x = nn.relu(Conv(16, 4, strides=2)(x))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(32)(x))
        return nn.Dense(1)(x)[..., 0].reshape(lead)


class AffordancePredictor(nn.Module):
    """Image in ``[-0.5, 0.5]`` -> affordance map in ``[0, 1]`` of the same side (a two-level
    convolutional U-Net)."""

    width: int = 8

    @nn.compact
    def __call__(self, image: Float[Array, "*b s s 3"]) -> Float[Array, "*b s s"]:
        lead, s = image.shape[:-3], image.shape[-3]
        x = image.reshape((-1,) + image.shape[-3:])
        e1 = nn.relu(Conv(self.width, 3)(x))
        e2 = nn.relu(Conv(2 * self.width, 3, strides=2)(e1))
        e3 = nn.relu(Conv(2 * self.width, 3, strides=2)(e2))
        d2 = nn.relu(ConvTranspose(2 * self.width, 3, strides=2)(e3))
        d1 = nn.relu(ConvTranspose(self.width, 3, strides=2)(d2 + e2))
        out = Conv(1, 3)(jnp.concatenate([d1, e1], -1))[..., 0]
        return jax.nn.sigmoid(out).reshape(lead + (s, s))


def box_centres(size: int, box: int, stride: int) -> np.ndarray:
    """Centres (row, column) float32[n, 2] of the sliding boxes of side ``box``."""
    starts = np.arange(0, size - box + 1, stride)
    c = starts + box / 2.0
    rr, cc = np.meshgrid(c, c, indexing="ij")
    return np.stack([rr.ravel(), cc.ravel()], -1).astype(np.float32)


def zoom_video(
    image: Float[Array, "s s 3"], centre: Float[Array, " 2"], box: float, frames: int
) -> Float[Array, "f s s 3"]:
    """The zoom pseudo-video from the whole image (excluded) to the box (included)."""
    s = image.shape[0]
    k = (jnp.arange(frames, dtype=jnp.float32) + 1.0) / frames
    sides = s + (box - s) * k
    mid = jnp.array([s / 2.0, s / 2.0], jnp.float32)
    centres = mid[None] + k[:, None] * (centre[None] - mid[None])
    return jax.vmap(lambda c, b: zoom(image, c, b))(centres, sides)


def offline_labels(
    score_fn, image: Float[Array, "s s 3"], box: int, stride: int, frames: int
) -> Float[Array, "s s"]:
    """The affordance label map of one image (module docstring); ``score_fn(images [n, s, s, 3])
    -> [n]`` scores frames in ``[0, 1]`` and ``image`` is in the model's input range."""
    s = image.shape[0]
    centres = jnp.asarray(box_centres(s, box, stride))
    videos = jax.vmap(lambda c: zoom_video(image, c, float(box), frames))(centres)
    scores = score_fn(videos.reshape((-1,) + videos.shape[2:])).reshape(videos.shape[:2])
    box_score = scores.mean(1)  # [n]
    pix = jnp.arange(s, dtype=jnp.float32) + 0.5
    half = box / 2.0
    in_r = jnp.abs(pix[None, :] - centres[:, :1]) <= half  # [n, s]
    in_c = jnp.abs(pix[None, :] - centres[:, 1:]) <= half
    cover = (in_r[:, :, None] & in_c[:, None, :]).astype(jnp.float32)  # [n, s, s]
    total = jnp.einsum("n,nij->ij", box_score, cover)
    return total / jnp.maximum(cover.sum(0), 1.0)


def best_box(m: Float[Array, "s s"], box: int, stride: int) -> Float[Array, " 2"]:
    """The centre of the sliding box with the largest mean affordance."""
    s = m.shape[0]
    centres = jnp.asarray(box_centres(s, box, stride))
    pix = jnp.arange(s, dtype=jnp.float32) + 0.5
    half = box / 2.0
    in_r = (jnp.abs(pix[None, :] - centres[:, :1]) <= half).astype(jnp.float32)
    in_c = (jnp.abs(pix[None, :] - centres[:, 1:]) <= half).astype(jnp.float32)
    means = jnp.einsum("ni,ij,nj->n", in_r, m, in_c) / (in_r.sum(1) * in_c.sum(1))
    return centres[jnp.argmax(means)]
