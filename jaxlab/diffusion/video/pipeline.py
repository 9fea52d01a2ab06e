"""The run of an avatar model shared by the ``loopy`` and ``cyberhost`` recipes, as plain
functions each recipe wires into its parts: config, the train state and step (:mod:`.training`),
evaluation against the synthetic ground truth (:mod:`.evaluation`) and the videos written at the
end of a run.

Evaluation generates, with the configured sampler and guidance scales, ``eval_clips`` clips of
``eval_videos`` held-out videos autoregressively from a ground-truth motion context and reports
(talking head) the audio-mouth correlation with and without the audio (the same model with the
audio dropped through the guidance path), the head-x error against the true drift and the
brightness drift; (talking body) the audio-hand correlation, the hand-region MSE of the first
clip, the body-centre std and the hand sharpness at a low and a high clarity condition.
``finalize`` writes ``samples.gif`` and ``samples.mp4``: generated frames next to the ground
truth with the audio envelope drawn beside them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import optim
from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.optim import OptimConfig
from jaxlab.core.sharding import MeshConfig
from jaxlab.diffusion.samplers import SAMPLER_NAMES, SamplerSpec
from jaxlab.diffusion.schedules import make_schedule
from jaxlab.diffusion.video import evaluation as E
from jaxlab.diffusion.video import training
from jaxlab.diffusion.video.cyberhost import movement_map
from jaxlab.diffusion.video.denoiser import VideoCond, VideoDenoiser, VideoNetConfig
from jaxlab.diffusion.video.rollout import rollout
from jaxlab.diffusion.video.synthetic import AVStatic, talking_body, talking_head
from jaxlab.diffusion.video.tasks import (
    BODY_HALF,
    DEFAULT_STATIC,
    AvatarTask,
    audio_features,
    body_conditions,
)

#: the traced hyper-parameters of an avatar run (dotted config keys)
TRACED: tuple[str, ...] = ("optim.lr", "ema_decay")
#: traced too by a recipe whose denoiser has regions (CyberHost): the region loss weights
REGION_TRACED: tuple[str, ...] = ("local_weight", "mask_weight")


@dataclasses.dataclass(frozen=True)
class AvatarConfig:
    """An avatar video diffusion run (``optim.lr`` and ``ema_decay`` traced).

    Attributes:
        net: the denoiser (:class:`VideoNetConfig`); task: the data (:class:`AvatarTask`).
        p_audio_drop, p_ref_drop: condition dropout (1.0 audio drop: the audio-free baseline).
        local_weight, mask_weight: CyberHost's local enhancement and region-mask losses (>= 0).
        optim: the optimiser (Adam, a linear warm-up, global-norm clipping by default).
        ema_decay: the cap of the EMA decay of the weights used for sampling, in [0, 1).
        sampler, order, nfe: the sampler of evaluation and videos.
        audio_scale, ref_scale: guidance scales.
        eval_videos, eval_clips: held-out videos and clips generated per video.
        clarity_low, clarity_high: clarity conditions compared by evaluation (talking body).
    """

    seed: int = 0
    net: VideoNetConfig = VideoNetConfig()
    task: AvatarTask = AvatarTask()
    schedule: Literal["vp_cosine", "vp_linear"] = "vp_cosine"
    p_audio_drop: float = 0.1
    p_ref_drop: float = 0.05
    local_weight: float = 0.0
    mask_weight: float = 0.0
    batch_size: int = 8
    optim: OptimConfig = OptimConfig(name="adam", lr=2e-3, warmup_steps=20, clip_norm=1.0)
    ema_decay: float = 0.99
    sampler: str = "dpm_solver++"
    order: int = 2
    nfe: int = 8
    audio_scale: float = 2.0
    ref_scale: float = 1.5
    eval_videos: int = 4
    eval_clips: int = 4
    clarity_low: float = -3.0
    clarity_high: float = 1.0
    fps: int = 25
    mesh: MeshConfig = MeshConfig()
    loop: LoopConfig = LoopConfig(
        total_steps=600, steps_per_call=50, log_every=50, eval_every=600, checkpoint_every=600
    )

    def __post_init__(self):
        for name in ("p_audio_drop", "p_ref_drop"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(name, getattr(self, name), "a probability in [0, 1]")
        for name in ("local_weight", "mask_weight"):
            if not getattr(self, name) >= 0.0:
                raise ConfigError(name, getattr(self, name), "a loss weight >= 0")
        for name in ("audio_scale", "ref_scale"):
            if not getattr(self, name) >= 0.0:
                raise ConfigError(name, getattr(self, name), "a guidance scale >= 0")
        for name in ("batch_size", "eval_videos", "eval_clips", "fps"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an integer >= 1")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ConfigError("ema_decay", self.ema_decay, "a decay in [0, 1)")
        if self.sampler not in SAMPLER_NAMES:
            raise ConfigError("sampler", self.sampler, f"one of {SAMPLER_NAMES}")
        try:
            self.spec.steps_for_nfe(self.nfe)
        except ValueError as e:
            raise ConfigError("nfe", self.nfe, str(e)) from None
        if self.task.kind == "head" and (self.net.regions or self.net.movement_map):
            raise ConfigError("net.regions", self.net.regions, "0 for the talking head (body only)")

    @property
    def spec(self) -> SamplerSpec:
        try:
            return SamplerSpec(self.sampler, self.order)
        except ValueError as e:
            raise ConfigError("order", self.order, str(e)) from None


def hparams(cfg: AvatarConfig, keys: tuple[str, ...]) -> dict[str, jax.Array]:
    """The values of the traced ``keys`` of ``cfg`` as float32 scalars (``state.hparams``)."""
    values = {"optim.lr": cfg.optim.lr, "ema_decay": cfg.ema_decay}
    values.update(local_weight=cfg.local_weight, mask_weight=cfg.mask_weight)
    return {k: jnp.float32(values[k]) for k in keys}


def eval_data(cfg: AvatarConfig, static: AVStatic = DEFAULT_STATIC):
    """Held-out videos (``motion_len + eval_clips * T`` frames) and their audio windows."""
    n = cfg.net.motion_len + cfg.eval_clips * cfg.net.clip_len

    def gen(k):
        if cfg.task.kind == "head":
            return talking_head(k, n, static, cfg.task.drift)
        return talking_body(k, n, static)

    keys = jax.random.split(jax.random.PRNGKey(10_000 + cfg.seed), cfg.eval_videos)
    clips = jax.vmap(gen)(keys)
    feats = jax.vmap(lambda c: audio_features(c, cfg.net, cfg.task, static))(clips)
    return clips, feats


def make_init(cfg: AvatarConfig, keys: tuple[str, ...] = TRACED):
    """``key -> DiffusionState`` of an avatar run, with the traced ``keys`` in ``hparams``."""
    opt = optim.make(cfg.optim, cfg.loop.total_steps)
    return training.make_init(VideoDenoiser(cfg.net), cfg.task, opt, hparams(cfg, keys))


def make_train_step(cfg: AvatarConfig, mesh: jax.sharding.Mesh | None = None):
    """``(state, None) -> (state, metrics)``: the in-step batch split over ``mesh``'s data axes,
    the optimiser and EMA (and, where traced, the loss weights) read from ``state.hparams``."""
    weights = training.LossWeights(
        cfg.p_audio_drop, cfg.p_ref_drop, cfg.local_weight, cfg.mask_weight
    )
    return training.make_train_step(
        VideoDenoiser(cfg.net),
        cfg.task,
        make_schedule(cfg.schedule),
        weights,
        lambda hp: optim.from_hparams(cfg.optim, cfg.loop.total_steps, hp),
        cfg.batch_size,
        mesh,
    )


def _conditions(cfg: AvatarConfig, static: AVStatic, clips, feats) -> VideoCond:
    """The conditions of the held-out clips at inference (talking body: the movement map of the
    reference's rest position, clarity ``clarity_high``, predicted region masks)."""
    lm = cfg.net.motion_len
    cond = VideoCond(
        reference=clips.reference,
        audio=feats[:, lm : lm + cfg.net.clip_len],
        motion=clips.frames[:, :lm] if lm else None,
    )
    if cfg.task.kind == "body":
        sl = slice(lm, lm + cfg.net.clip_len)
        extra = jax.vmap(lambda c: body_conditions(c, static, sl))(clips)
        c0 = jnp.broadcast_to(clips.position[:, :1], clips.position[:, :2].shape)
        mv = jax.vmap(lambda p: movement_map(p, BODY_HALF, cfg.net.size))(c0)
        cond = cond.replace(
            movement=mv if cfg.net.movement_map else None,
            clarity=jnp.full_like(extra["clarity"], cfg.clarity_high) if cfg.net.clarity else None,
            pose=extra["pose"] if cfg.net.pose_channels else None,
            ref_region_masks=extra["ref_region_masks"] if cfg.net.regions else None,
        )
    return cond


def make_generate(cfg: AvatarConfig):
    """``(params, audio_scale, clarity) -> (videos, held-out clips)``: jitted autoregressive
    rollouts of the held-out videos with the configured sampler and guidance."""
    net = VideoDenoiser(cfg.net)
    schedule = make_schedule(cfg.schedule)
    static = AVStatic(fps=cfg.fps, sample_rate=64 * cfg.fps)
    lm = cfg.net.motion_len

    @jax.jit
    def generate(params, audio_scale, clarity=cfg.clarity_high):
        clips, feats = eval_data(cfg, static)
        cond = _conditions(cfg, static, clips, feats)
        if cfg.net.clarity:
            cond = cond.replace(clarity=jnp.full_like(cond.clarity, clarity))
        vid = rollout(
            jax.random.PRNGKey(cfg.seed + 1),
            lambda x, t, c: net.apply(params, x, t, c),
            cond,
            feats[:, lm:],
            cfg.eval_clips,
            net=cfg.net,
            schedule=schedule,
            spec=cfg.spec,
            nfe=cfg.nfe,
            audio_scale=audio_scale,
            ref_scale=cfg.ref_scale,
        )
        return vid, clips

    return generate


def evaluate(cfg: AvatarConfig, generate, params) -> dict[str, float]:
    """The module docstring's measures of the EMA ``params`` against the synthetic truth."""
    lm = cfg.net.motion_len
    vid, clips = generate(params, cfg.audio_scale, cfg.clarity_high)
    env = clips.envelope[:, lm:]
    out = {"audio_sync": float(E.audio_sync(vid, env, cfg.task.kind).mean())}
    silent, _ = generate(params, 0.0, cfg.clarity_high)
    out["audio_sync_audio_dropped"] = float(E.audio_sync(silent, env, cfg.task.kind).mean())
    if cfg.task.kind == "head":
        d = E.drift(vid, clips.frames[:, lm:])
        out.update({k: float(v.mean()) for k, v in d.items()})
        return out
    t = cfg.net.clip_len
    out["hand_mse"] = float(
        E.region_error(
            vid[:, :t], clips.frames[:, lm : lm + t], clips.masks[:, lm : lm + t, ..., 1]
        ).mean()
    )
    out["centre_std"] = float(E.centre_std(vid).mean())
    out["hand_sharpness_high"] = float(E.hand_sharpness(vid).mean())
    if cfg.net.clarity:
        low, _ = generate(params, cfg.audio_scale, cfg.clarity_low)
        out["hand_sharpness_low"] = float(E.hand_sharpness(low).mean())
    return out


def write_videos(cfg: AvatarConfig, generate, params, run_dir: Path) -> None:
    """``samples.gif`` (and ``samples.mp4`` where the media extra is installed): generated
    frames beside the truth and the audio envelope."""
    from jaxlab import media

    lm = cfg.net.motion_len
    vid, clips = generate(params, cfg.audio_scale, cfg.clarity_high)
    frames = side_by_side(
        np.asarray(vid), np.asarray(clips.frames[:, lm:]), np.asarray(clips.envelope[:, lm:])
    )
    media.save_gif(run_dir / "samples.gif", frames, fps=cfg.fps / 2)
    try:
        media.save_mp4(run_dir / "samples.mp4", frames, fps=cfg.fps / 2)
    except media.MissingExtraError:
        pass


def side_by_side(
    videos: np.ndarray, truth: np.ndarray, envelope: np.ndarray, *, upscale: int = 4
) -> list[np.ndarray]:
    """``uint8`` frames: per video a row [generated | truth | envelope plot with a cursor]."""
    from jaxlab import media

    b, t, s = videos.shape[:3]
    h = s * upscale
    out = []
    for i in range(t):
        rows = []
        for j in range(b):
            g = np.kron(
                media.to_uint8(videos[j, i, ..., 0], (-1, 1)), np.ones((upscale, upscale), np.uint8)
            )
            r = np.kron(
                media.to_uint8(truth[j, i, ..., 0], (-1, 1)), np.ones((upscale, upscale), np.uint8)
            )
            plot = media.curve_strip(envelope[j], i, height=h, width=2 * h)
            rows.append(
                np.concatenate(
                    [g, np.full((h, 2), 128, np.uint8), r, np.full((h, 2), 128, np.uint8), plot], 1
                )
            )
        out.append(np.concatenate(rows, 0))
    return out
