"""The GIFs of a Dreamer (or LS-Imagine) state: real frames beside the world model's open-loop
imagination, and the affordance predictor's maps over the observations.

``make_write_gifs(parts, context)`` gives ``write(state, key, run_dir)``, which samples 4 replayed
sequences and writes ``imagination.gif`` (real | imagined after ``context`` observed frames) and,
for LS-Imagine, ``affordance.gif`` (real | the predicted map over the frame, in yellow). Frames
are upscaled 4x; nothing is written before the buffer can be sampled.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxlab import media
from jaxlab.rl.world_models.affordance import AffordancePredictor
from jaxlab.rl.world_models.dreamer import DreamerParts, preprocess


def upscale(frames: np.ndarray, k: int = 4) -> np.ndarray:
    """``[..., S, S, C] -> [..., kS, kS, C]`` (nearest neighbour)."""
    return np.repeat(np.repeat(frames, k, axis=-3), k, axis=-2)


def make_write_gifs(parts: DreamerParts, context: int) -> Callable[[Any, Any, Path], None]:
    """``write(state, key, run_dir)``: the GIFs of the module docstring."""

    @jax.jit
    def sample(state, key):
        k1, k2 = jax.random.split(key)
        batch = parts.replay.sample(state.buffer, k1).experience
        out = {"real": batch["obs"], "imagined": parts.open_loop(state, batch, context, k2)}
        if state.aff is not None:
            out["affordance"] = AffordancePredictor().apply(
                state.aff["predictor"], preprocess(batch["obs"])
            )
        return out

    def write(state, key, run_dir: Path) -> None:
        if not bool(parts.replay.can_sample(state.buffer)):
            return
        out = jax.device_get(sample(state, key))
        real = np.asarray(out["real"][:4])  # [4, L, S, S, 3] uint8
        imag = media.to_uint8(np.clip(np.asarray(out["imagined"][:4]) + 0.5, 0, 1))
        gap = np.full(real.shape[:3] + (2, 3), 255, np.uint8)
        pair = np.concatenate([real, gap, imag], axis=3)  # real | imagined
        frames = np.concatenate(list(pair), axis=1)  # the 4 sequences stacked vertically
        media.save_gif(Path(run_dir) / "imagination.gif", list(upscale(frames)), fps=4)
        if "affordance" in out:
            m = np.asarray(out["affordance"][:4])[..., None]
            overlay = (0.5 * real + 0.5 * m * np.array([255, 255, 0])).astype(np.uint8)
            aff_frames = np.concatenate(list(np.concatenate([real, gap, overlay], 3)), 1)
            media.save_gif(Path(run_dir) / "affordance.gif", list(upscale(aff_frames)), fps=4)

    return write
