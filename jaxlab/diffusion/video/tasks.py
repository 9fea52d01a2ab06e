"""Training and evaluation examples for the avatar models, drawn from :mod:`.synthetic` in JAX.

An example is a clip of ``T`` frames to denoise, preceded by ``L`` motion frames, with the clip's
audio windows, the reference image and (talking body) the region masks, body-movement map,
hand-clarity score and reference pose map, plus the ground truth used by the metrics.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import flax.struct
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.core.config import ConfigError
from jaxlab.diffusion.video import measure
from jaxlab.diffusion.video.audio import audio_windows, log_mel
from jaxlab.diffusion.video.cyberhost import movement_map, pose_map
from jaxlab.diffusion.video.denoiser import VideoCond, VideoNetConfig
from jaxlab.diffusion.video.synthetic import (
    HEAD_DRIFTS,
    AVClip,
    AVStatic,
    hand_centre,
    talking_body,
    talking_head,
)

#: the default frame size and audio rate
DEFAULT_STATIC = AVStatic()

#: half size (x, y) of the body box of the movement map
BODY_HALF = (2.5, 4.5)


@dataclasses.dataclass(frozen=True)
class AvatarTask:
    """What the model is trained on.

    Attributes:
        kind: ``head`` (Loopy's talking head) or ``body`` (CyberHost's talking body).
        n_fft: STFT window of the log-mel front-end.
        p_first_clip: probability that the motion frames are the reference repeated (as for the
            first clip of a rollout).
        p_motion_feat: probability that audio-to-latents reads the motion features (Loopy).
        motion_noise: the motion frames get Gaussian noise of a std drawn per example from
            ``U[0, motion_noise]`` (0: off), so that training sees context as imperfect as a
            rollout's own generated frames.
        drift: the talking head's slow drift, ``sine`` or ``dwell`` (see :mod:`.synthetic`).
    """

    kind: Literal["head", "body"] = "head"
    n_fft: int = 128
    p_first_clip: float = 0.1
    p_motion_feat: float = 0.1
    motion_noise: float = 0.0
    drift: str = "sine"

    def __post_init__(self):
        for name in ("p_first_clip", "p_motion_feat"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(name, getattr(self, name), "a probability in [0, 1]")
        if self.n_fft < 1:
            raise ConfigError("n_fft", self.n_fft, "an integer >= 1")
        if not self.motion_noise >= 0.0:
            raise ConfigError("motion_noise", self.motion_noise, "a std >= 0")
        if self.drift not in HEAD_DRIFTS:
            raise ConfigError("drift", self.drift, f"one of {HEAD_DRIFTS}")


@flax.struct.dataclass
class Example:
    """``x0 [T, S, S, C]`` target clip, ``cond`` (unbatched :class:`VideoCond`), the source
    ``clip`` (``L + T`` frames of ground truth)."""

    x0: Float[Array, "*batch t s s c"]
    cond: VideoCond
    clip: AVClip


def audio_features(clip: AVClip, net: VideoNetConfig, task: AvatarTask, static: AVStatic):
    """``[N, W, n_mels]`` log-mel windows of every frame of ``clip``."""
    mel = log_mel(
        clip.waveform,
        hop=static.hop,
        n_fft=task.n_fft,
        n_mels=net.n_mels,
        sample_rate=static.sample_rate,
        n_frames=clip.envelope.shape[0],
    )
    return audio_windows(mel, net.audio_radius)


def clarity_score(frames: Float[Array, "t s s 1"]) -> Float[Array, ""]:
    """``log(1e-2 + mean hand sharpness)``: the hand-clarity condition of a clip."""
    return jnp.log(1e-2 + jnp.mean(jax.vmap(measure.hand_sharpness)(frames)))


def body_conditions(clip: AVClip, static: AVStatic, sl: slice) -> dict:
    """Movement map (ground-truth root range of the clip), clarity, reference pose map."""
    c = static.size / 2
    body = jnp.array([c - 1.5, c + 0.5])
    keypoints = jnp.stack([body, body + jnp.array([0.0, -4.5]), hand_centre(body, 0.5)])
    return dict(
        movement=movement_map(clip.position[sl], BODY_HALF, static.size),
        clarity=clarity_score(clip.frames[sl]),
        pose=pose_map(keypoints, static.size),
        region_masks=clip.masks[sl],
        ref_region_masks=clip.ref_masks,
    )


def make_example(
    key: PRNGKeyArray, net: VideoNetConfig, task: AvatarTask, static: AVStatic = DEFAULT_STATIC
) -> Example:
    """One training example (jit/vmap-able)."""
    kc, kf, km = jax.random.split(key, 3)
    lm, t = net.motion_len, net.clip_len
    if task.kind == "head":
        clip = talking_head(kc, lm + t, static, task.drift)
    else:
        clip = talking_body(kc, lm + t, static)
    feats = audio_features(clip, net, task, static)
    sl = slice(lm, lm + t)
    motion = None
    if lm:
        first = jax.random.bernoulli(kf, task.p_first_clip)
        motion = jnp.where(first, clip.reference[None], clip.frames[:lm])
        if task.motion_noise:
            ks, kn = jax.random.split(jax.random.fold_in(kf, 1))
            std = jax.random.uniform(ks, (), maxval=task.motion_noise)
            motion = motion + std * jax.random.normal(kn, motion.shape)
    # Loopy's training-time motion features: head-movement and expression variation
    speed = jnp.linalg.norm(jnp.diff(clip.position[lm - 1 if lm else 0 : lm + t], axis=0), axis=-1)
    mfeat = jnp.stack([jnp.std(speed) * 10.0 + 0 * clip.envelope[sl], clip.envelope[sl]], -1)
    extra = body_conditions(clip, static, sl) if task.kind == "body" else {}
    cond = VideoCond(
        reference=clip.reference,
        audio=feats[sl],
        motion=motion,
        motion_feat=mfeat if net.audio_latents else None,
        use_motion_feat=jax.random.bernoulli(km, task.p_motion_feat) if net.audio_latents else None,
        **{k: v for k, v in extra.items() if _wanted(net, k)},
    )
    return Example(x0=clip.frames[sl], cond=cond, clip=clip)


def _wanted(net: VideoNetConfig, name: str) -> bool:
    return {
        "movement": net.movement_map,
        "clarity": net.clarity,
        "pose": bool(net.pose_channels),
        "region_masks": bool(net.regions),
        "ref_region_masks": bool(net.regions),
    }[name]


def make_batch(
    key: PRNGKeyArray,
    n: int,
    net: VideoNetConfig,
    task: AvatarTask,
    static: AVStatic = DEFAULT_STATIC,
) -> Example:
    """``n`` examples stacked on a leading batch axis."""
    return jax.vmap(lambda k: make_example(k, net, task, static))(jax.random.split(key, n))
