"""Metrics of generated avatar videos against the synthetic ground truth.

* ``audio_sync``: Pearson correlation, per video, between the driving envelope and the measured
  mouth opening (talking head) or hand height ``-hand_y`` (talking body).
* ``drift``: mean |head x(generated) - head x(true frame)| over a rollout (the slow drift's phase
  kept or lost) and the same for the brightness readout (identity drift).
* ``region_error``: mean squared error inside the ground-truth region mask.
* ``centre_std``: standard deviation over time of the measured body centre.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.diffusion.video import measure

_per_frame = lambda f: jax.vmap(jax.vmap(f))  # over [B, T]


def audio_sync(
    videos: Float[Array, "b t s s 1"], envelopes: Float[Array, "b t"], kind: str
) -> Float[Array, " b"]:
    """Per-video correlation of the envelope with the mouth opening / hand height."""
    if kind == "head":
        readout = _per_frame(measure.mouth_opening)(videos)
    else:
        readout = -_per_frame(measure.hand_position)(videos)[..., 1]
    return jax.vmap(measure.correlation)(readout, envelopes)


def drift(
    videos: Float[Array, "b t s s 1"], truth: Float[Array, "b t s s 1"]
) -> dict[str, Float[Array, " b"]]:
    """Head-x error and brightness (identity) drift per video: mean |readout(generated) -
    readout(true frame)|, the same measurement on both so that the readout's own bias (the 90th
    percentile is not the face level ``b``; the eyes and mouth pull the centroid) cancels."""
    if videos.shape != truth.shape:
        raise ValueError(f"truth: got shape {tuple(truth.shape)}, expected {tuple(videos.shape)}")
    pos, pos_t = (_per_frame(measure.head_position)(v) for v in (videos, truth))
    br, br_t = (_per_frame(measure.brightness)(v) for v in (videos, truth))
    return {
        "head_x_err": jnp.mean(jnp.abs(pos[..., 0] - pos_t[..., 0]), -1),
        "brightness_err": jnp.mean(jnp.abs(br - br_t), -1),
    }


def region_error(
    videos: Float[Array, "b t s s 1"],
    truth: Float[Array, "b t s s 1"],
    mask: Float[Array, "b t s s"],
) -> Float[Array, " b"]:
    """Masked MSE per video."""
    e = jnp.sum(mask[..., None] * (videos - truth) ** 2, (1, 2, 3, 4))
    return e / (jnp.sum(mask, (1, 2, 3)) + 1e-6)


def centre_std(videos: Float[Array, "b t s s 1"]) -> Float[Array, " b"]:
    """Std over time of the body centre (x and y pooled)."""
    c = _per_frame(measure.body_centre)(videos)
    return jnp.sqrt(jnp.mean(jnp.var(c, axis=1), -1))


def hand_sharpness(videos: Float[Array, "b t s s 1"]) -> Float[Array, " b"]:
    """Mean hand sharpness per video."""
    return jnp.mean(_per_frame(measure.hand_sharpness)(videos), -1)
