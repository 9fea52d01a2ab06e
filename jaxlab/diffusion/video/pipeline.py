"""The run of an avatar model shared by the ``loopy`` and ``cyberhost`` recipes: config, the
train state and step (:mod:`.training`), evaluation against the synthetic ground truth
(:mod:`.evaluation`) and the videos written at the end of a run.

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
import optax

from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.recipe import Parts
from jaxlab.core.sharding import MeshConfig
from jaxlab.diffusion.samplers import SAMPLER_NAMES, SamplerSpec
from jaxlab.diffusion.schedules import make_schedule
from jaxlab.diffusion.video import evaluation as E
from jaxlab.diffusion.video import training
from jaxlab.diffusion.video.denoiser import VideoCond, VideoDenoiser, VideoNetConfig
from jaxlab.diffusion.video.rollout import rollout
from jaxlab.diffusion.video.synthetic import AVStatic, talking_body, talking_head
from jaxlab.diffusion.video.tasks import (
    DEFAULT_STATIC,
    AvatarTask,
    audio_features,
    body_conditions,
)


@dataclasses.dataclass(frozen=True)
class AvatarConfig:
    """An avatar video diffusion run (``lr`` traced).

    Attributes:
        net: the denoiser (:class:`VideoNetConfig`); task: the data (:class:`AvatarTask`).
        p_audio_drop, p_ref_drop: condition dropout (1.0 audio drop: the audio-free baseline).
        local_weight, mask_weight: CyberHost's local enhancement and region-mask losses.
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
    lr: float = 2e-3
    warmup_steps: int = 20
    clip_norm: float = 1.0
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
        for name in ("batch_size", "eval_videos", "eval_clips"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an integer >= 1")
        if not self.lr > 0:
            raise ConfigError("lr", self.lr, "a positive float")
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


def make_optimizer(cfg: AvatarConfig, lr) -> optax.GradientTransformation:
    unit = optax.linear_schedule(0.0, 1.0, max(cfg.warmup_steps, 1))
    return optax.chain(
        optax.clip_by_global_norm(cfg.clip_norm), optax.adam(lambda count: lr * unit(count))
    )


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


def build(cfg: AvatarConfig, mesh: jax.sharding.Mesh) -> Parts:
    net = VideoDenoiser(cfg.net)
    schedule = make_schedule(cfg.schedule)
    weights = training.LossWeights(
        cfg.p_audio_drop, cfg.p_ref_drop, cfg.local_weight, cfg.mask_weight
    )
    opt = lambda lr: make_optimizer(cfg, lr)
    lm = cfg.net.motion_len
    static = AVStatic(fps=cfg.fps, sample_rate=64 * cfg.fps)

    def conditions(clips, feats):
        cond = VideoCond(
            reference=clips.reference,
            audio=feats[:, lm : lm + cfg.net.clip_len],
            motion=clips.frames[:, :lm] if lm else None,
        )
        if cfg.task.kind == "body":
            sl = slice(lm, lm + cfg.net.clip_len)
            extra = jax.vmap(lambda c: body_conditions(c, static, sl))(clips)
            # inference: the movement map of the reference's rest position, predicted masks
            c0 = jnp.broadcast_to(clips.position[:, :1], clips.position[:, :2].shape)
            from jaxlab.diffusion.video.cyberhost import movement_map
            from jaxlab.diffusion.video.tasks import BODY_HALF

            mv = jax.vmap(lambda p: movement_map(p, BODY_HALF, cfg.net.size))(c0)
            cond = cond.replace(
                movement=mv if cfg.net.movement_map else None,
                clarity=jnp.full_like(extra["clarity"], cfg.clarity_high)
                if cfg.net.clarity
                else None,
                pose=extra["pose"] if cfg.net.pose_channels else None,
                ref_region_masks=extra["ref_region_masks"] if cfg.net.regions else None,
            )
        return cond

    @jax.jit
    def generate(params, audio_scale, clarity=cfg.clarity_high):
        clips, feats = eval_data(cfg, static)
        cond = conditions(clips, feats)
        if cfg.net.clarity:
            cond = cond.replace(clarity=jnp.full_like(cond.clarity, clarity))
        apply = lambda x, t, c: net.apply(params, x, t, c)
        vid = rollout(
            jax.random.PRNGKey(cfg.seed + 1),
            apply,
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

    def evaluate(state) -> dict[str, float]:
        vid, clips = generate(state.ema_params, cfg.audio_scale, cfg.clarity_high)
        env = clips.envelope[:, lm:]
        out = {"audio_sync": float(E.audio_sync(vid, env, cfg.task.kind).mean())}
        silent, _ = generate(state.ema_params, 0.0, cfg.clarity_high)
        out["audio_sync_audio_dropped"] = float(E.audio_sync(silent, env, cfg.task.kind).mean())
        if cfg.task.kind == "head":
            d = E.drift(vid, clips.frames[:, lm:])
            out.update({k: float(v.mean()) for k, v in d.items()})
        else:
            t = cfg.net.clip_len
            out["hand_mse"] = float(
                E.region_error(
                    vid[:, :t], clips.frames[:, lm : lm + t], clips.masks[:, lm : lm + t, ..., 1]
                ).mean()
            )
            out["centre_std"] = float(E.centre_std(vid).mean())
            out["hand_sharpness_high"] = float(E.hand_sharpness(vid).mean())
            if cfg.net.clarity:
                low, _ = generate(state.ema_params, cfg.audio_scale, cfg.clarity_low)
                out["hand_sharpness_low"] = float(E.hand_sharpness(low).mean())
        return out

    def finalize(state, run_dir: Path) -> None:
        vid, clips = generate(state.ema_params, cfg.audio_scale, cfg.clarity_high)
        frames = side_by_side(
            np.asarray(vid), np.asarray(clips.frames[:, lm:]), np.asarray(clips.envelope[:, lm:])
        )
        from jaxlab import media

        media.save_gif(run_dir / "samples.gif", frames, fps=cfg.fps / 2)
        try:
            media.save_mp4(run_dir / "samples.mp4", frames, fps=cfg.fps / 2)
        except media.MissingExtraError:
            pass

    return Parts(
        init=training.make_init(net, cfg.task, opt(cfg.lr), cfg.lr),
        train_step=training.make_train_step(
            net, cfg.task, schedule, weights, opt, cfg.batch_size, cfg.ema_decay, mesh
        ),
        evaluate=evaluate,
        finalize=finalize,
        units_per_step=(cfg.batch_size * cfg.net.clip_len, "frames"),
    )


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
