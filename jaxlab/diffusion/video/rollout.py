"""Clip generation and autoregressive long-video generation conditioned on motion frames.

:func:`generate_clip` samples one clip with any sampler of :mod:`jaxlab.diffusion.samplers`
(guided by :func:`.guidance.guided_eps`). :func:`rollout` generates ``n_clips`` clips with one
``lax.scan``: clip ``k`` is conditioned on the audio of frames ``kT .. (k+1)T - 1`` and on the
last ``L`` frames generated so far (the motion frames; initially the given context, by default the
reference image repeated), which then slide forward by ``T`` frames.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.diffusion import samplers
from jaxlab.diffusion.model_wrapper import expand_to
from jaxlab.diffusion.schedules import Schedule, get_time_steps
from jaxlab.diffusion.video.denoiser import VideoCond, VideoNetConfig
from jaxlab.diffusion.video.guidance import ApplyFn, guided_eps


def generate_clip(
    key: PRNGKeyArray,
    apply_fn: ApplyFn,
    cond: VideoCond,
    *,
    net: VideoNetConfig,
    schedule: Schedule,
    spec: samplers.SamplerSpec,
    nfe: int,
    audio_scale: float | Float[Array, ""] = 1.0,
    ref_scale: float | Float[Array, ""] = 1.0,
    clip_x0: float | None = 1.0,
) -> Float[Array, "b t s s c"]:
    """One clip ``[B, T, S, S, C]`` from noise with ``nfe`` network calls (logSNR steps).

    With ``clip_x0`` the guided prediction is corrected so that its data estimate
    ``x0 = (x - sigma_t eps) / alpha_t`` lies in ``[-clip_x0, clip_x0]`` (the data range; the
    "clip denoised" of DDPM samplers): ``eps <- (x - alpha_t clip(x0)) / sigma_t``. It keeps an
    undertrained model's estimate at the noisiest steps (``alpha_t`` near 0) from blowing up and
    an autoregressive rollout from feeding such frames back as motion frames.
    """
    b = cond.reference.shape[0]
    shape = (b, net.clip_len, net.size, net.size, net.channels)
    x = schedule.prior_std * jax.random.normal(key, shape)
    ts = get_time_steps(schedule, spec.steps_for_nfe(nfe), "logsnr")

    def eps_fn(xt, t):
        tt = schedule.model_time(jnp.broadcast_to(t, (b,)))
        eps = guided_eps(apply_fn, xt, tt, cond, audio_scale=audio_scale, ref_scale=ref_scale)
        if clip_x0 is None:
            return eps
        tb = jnp.broadcast_to(t, (b,))
        a, s = expand_to(schedule.alpha(tb), xt), expand_to(schedule.sigma(tb), xt)
        x0 = jnp.clip((xt - s * eps) / a, -clip_x0, clip_x0)
        return (xt - a * x0) / s

    return samplers.sample(spec, eps_fn, x, ts, schedule=schedule)


def rollout(
    key: PRNGKeyArray,
    apply_fn: ApplyFn,
    cond: VideoCond,
    audio: Float[Array, "b n w f"],
    n_clips: int,
    *,
    net: VideoNetConfig,
    schedule: Schedule,
    spec: samplers.SamplerSpec,
    nfe: int,
    audio_scale: float | Float[Array, ""] = 1.0,
    ref_scale: float | Float[Array, ""] = 1.0,
    clip_x0: float | None = 1.0,
) -> Float[Array, "b nt s s c"]:
    """``n_clips`` clips generated one after the other (one ``lax.scan``).

    Args:
        cond: the conditions shared by all clips (reference, masks, movement map, clarity, pose);
            its ``motion`` is the initial motion context ``[B, L, ...]`` (None: the reference
            repeated) and its ``audio`` is ignored.
        audio: ``[B, n_clips * T (or more), W, F]`` audio windows of the whole video.

    Raises:
        ValueError: if the audio covers fewer than ``n_clips * T`` frames.
    """
    b, t = cond.reference.shape[0], net.clip_len
    if audio.ndim != 4 or audio.shape[0] != b or audio.shape[1] < n_clips * t:
        raise ValueError(
            f"audio: got shape {tuple(audio.shape)}, expected ({b}, >= {n_clips * t} frames "
            f"= {n_clips} clips x {t}, W, F)"
        )
    motion = cond.motion
    if net.motion_len and motion is None:
        motion = jnp.broadcast_to(
            cond.reference[:, None], (b, net.motion_len) + cond.reference.shape[1:]
        )
    per_clip = jnp.moveaxis(
        audio[:, : n_clips * t].reshape((b, n_clips, t) + audio.shape[2:]), 1, 0
    )

    def body(buf, xs):
        k, a = xs
        c = cond.replace(audio=a, motion=buf if net.motion_len else None)
        clip = generate_clip(
            k,
            apply_fn,
            c,
            net=net,
            schedule=schedule,
            spec=spec,
            nfe=nfe,
            audio_scale=audio_scale,
            ref_scale=ref_scale,
            clip_x0=clip_x0,
        )
        if net.motion_len:
            buf = jnp.concatenate([buf, clip], 1)[:, -net.motion_len :]
        return buf, clip

    _, clips = jax.lax.scan(body, motion, (jax.random.split(key, n_clips), per_clip))
    return jnp.moveaxis(clips, 0, 1).reshape((b, n_clips * t) + clips.shape[3:])
