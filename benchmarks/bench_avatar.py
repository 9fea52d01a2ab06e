"""Benchmarks of the avatar video models (Loopy, CyberHost): one JSON line per measurement.

For each recipe at a preset size (``--preset cpu`` by default, ``tiny`` with ``--quick``):

- ``train_step``: compile seconds, steady-state training steps/s and frames/s (batch x clip
  frames), peak bytes of the compiled step (temp + arguments + outputs, from XLA's memory
  analysis; CPU has no runtime memory stats);
- ``generate``: one guided clip (DPM-Solver++(2M), the preset's NFE; every NFE is one network
  call on a tripled batch for the audio/reference guidance) for the preset's evaluation batch:
  compile seconds, generated frames/s, peak bytes.

Run: ``python -m benchmarks.bench_avatar [--quick] [--only loopy,cyberhost]``.
Timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import harness
from jaxlab.core import run as run_lib
from jaxlab.diffusion.schedules import make_schedule
from jaxlab.diffusion.video.denoiser import VideoDenoiser
from jaxlab.diffusion.video.rollout import generate_clip
from jaxlab.diffusion.video.tasks import make_batch
from jaxlab.recipes import cyberhost, loopy


def emit(what, size, compile_s=None, time_s=None, rate=None, unit=None, **extra):
    """:func:`benchmarks.harness.emit` of the house row (fields left out are ``null``)."""
    row = dict(what=what, size=size, compile_s=compile_s, time_s=time_s, rate=rate, unit=unit)
    return harness.emit(row, **extra)


def compiled_and_timed(fn, *args, repeats=3):
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    peak = None
    mem = compiled.memory_analysis()
    if mem is not None:
        peak = int(mem.temp_size_in_bytes + mem.argument_size_in_bytes + mem.output_size_in_bytes)
    out = jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
    return compile_s, float(np.median(times)), peak, out


def bench(recipe, preset: str):
    cfg = recipe.config(preset, ["mesh.data=1"])
    parts = run_lib.build(recipe, cfg, jax.devices()[:1])
    state = run_lib.init_state(parts, jax.random.PRNGKey(0))
    size = f"{recipe.name}:{preset} S={cfg.net.size} T={cfg.net.clip_len} L={cfg.net.motion_len} width={cfg.net.width} depth={cfg.net.depth}"
    c, t, peak, _ = compiled_and_timed(parts.train_step, state, None)
    frames = cfg.batch_size * cfg.net.clip_len
    emit(
        "train_step",
        size,
        c,
        t,
        1.0 / t,
        "steps/s",
        frames_per_s=frames / t,
        batch=cfg.batch_size,
        peak_bytes=peak,
    )
    net = VideoDenoiser(cfg.net)
    sch = make_schedule(cfg.schedule)
    ex = make_batch(jax.random.PRNGKey(1), cfg.eval_videos, cfg.net, cfg.task)
    cond = ex.cond.replace(region_masks=None, motion_feat=None, use_motion_feat=None)

    def gen(params, key):
        apply = lambda x, tt, cc: net.apply(params, x, tt, cc)
        return generate_clip(
            key,
            apply,
            cond,
            net=cfg.net,
            schedule=sch,
            spec=cfg.spec,
            nfe=cfg.nfe,
            audio_scale=cfg.audio_scale,
            ref_scale=cfg.ref_scale,
        )

    c, t, peak, out = compiled_and_timed(gen, state.ema_params, jax.random.PRNGKey(2))
    assert bool(jnp.isfinite(out).all())
    n = cfg.eval_videos * cfg.net.clip_len
    emit(
        "generate",
        size,
        c,
        t,
        n / t,
        "frames/s",
        sampler=f"{cfg.sampler}(order {cfg.order})",
        nfe=cfg.nfe,
        guided_batch=3 * cfg.eval_videos,
        peak_bytes=peak,
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="tiny presets")
    ap.add_argument("--only", default="loopy,cyberhost")
    a = ap.parse_args()
    recipes = {"loopy": loopy.RECIPE, "cyberhost": cyberhost.RECIPE}
    for name in a.only.split(","):
        bench(recipes[name], "tiny" if a.quick else "cpu")
