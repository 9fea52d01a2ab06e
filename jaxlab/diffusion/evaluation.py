"""Evaluating a trained diffusion model of the ``diffusion`` recipe: samples of its EMA model with
the configured sampler, their sliced Wasserstein distance to held-out data (and on the 2-D ring
their log-likelihood under the true mixture), and ``samples.png``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.diffusion.config import DiffusionConfig
from jaxlab.diffusion.images import save_image_grid, save_scatter
from jaxlab.diffusion.model import DiffusionModel, ring_of
from jaxlab.diffusion.sliced_wasserstein import sliced_wasserstein


def make_generate(cfg: DiffusionConfig, model: DiffusionModel) -> Callable:
    """The jitted ``params -> samples [num_samples, ...]`` of ``cfg.sampling`` (a fixed key)."""
    s = cfg.sampling

    @jax.jit
    def generate(params):
        return model.generate(
            jax.random.PRNGKey(cfg.seed + 1), params, s.num_samples, s.spec, s.nfe, s.steps
        )

    return generate


def evaluate(cfg: DiffusionConfig, generate: Callable, holdout: np.ndarray, params) -> dict:
    """``sw_to_data`` (sliced Wasserstein distance of the samples to ``holdout``),
    ``sample_std`` and, on the ring, ``sample_log_lik`` under the true mixture."""
    xs = generate(params)
    flat = xs.reshape(xs.shape[0], -1)
    ref = jnp.asarray(holdout).reshape(holdout.shape[0], -1)
    sw = sliced_wasserstein(jax.random.PRNGKey(1), flat, ref, num_projections=256)
    out = {"sw_to_data": float(sw), "sample_std": float(jnp.std(flat))}
    if cfg.data.name == "ring":
        out["sample_log_lik"] = float(jnp.mean(ring_of(cfg.data).log_prob(flat)))
    return out


def write_samples(
    cfg: DiffusionConfig, generate: Callable, holdout: np.ndarray, params, run_dir: Path
) -> None:
    """``samples.png``: a scatter plot over the held-out data (ring) or an image grid (digits,
    with ``data.png`` of held-out images beside it)."""
    xs = np.asarray(generate(params))
    if cfg.data.name == "ring":
        save_scatter(run_dir / "samples.png", xs[:2000], reference=holdout[:2000])
    else:
        save_image_grid(run_dir / "samples.png", xs[:100], ncols=10, upscale=4)
        save_image_grid(run_dir / "data.png", holdout[:100], ncols=10, upscale=4)
