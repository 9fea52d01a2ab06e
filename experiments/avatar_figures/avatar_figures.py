"""The shown results of Loopy and CyberHost at small scale (CPU, minutes), as JSON lines + PNGs.

1. Audio drives the video: corr(envelope, mouth opening) of generated clips, audio-conditioned vs
   the same model trained with the audio always dropped (mean and spread over test videos).
2. Long-term motion dependency: 128-frame rollouts from a ground-truth context, Loopy with the
   temporal segment module (68 motion frames -> 12 tokens) vs the same model with 4 motion
   frames: head-x error against the true drift, and brightness (identity) drift.
3. CyberHost: region attention + local loss vs a network of the same parameter count without
   region attention (width 36 instead of 32, no local loss): hand-region MSE; hand sharpness
   against the clarity condition (inside the training data's range); body-centre std without vs
   with the movement map.

4. (``--part cyberhost-sync``) audio drives the hand: corr(envelope, hand height) of the CyberHost
   network with a windowed audio encoder vs the same network trained with the audio dropped.

Every model is trained once per seed (``--seeds``); each measurement is printed per seed and then
as a ``*_summary`` line with the mean and the spread (std) over seeds of the per-seed means.

    python -m experiments.avatar_figures.avatar_figures [--steps 6000] [--seeds 3]
        [--part loopy|cyberhost|cyberhost-sync|all]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.diffusion.samplers import SamplerSpec
from jaxlab.diffusion.schedules import make_schedule
from jaxlab.diffusion.video import evaluation as E
from jaxlab.diffusion.video import measure
from jaxlab.diffusion.video import training as T
from jaxlab.diffusion.video.cyberhost import movement_map
from jaxlab.diffusion.video.denoiser import VideoCond, VideoDenoiser, VideoNetConfig
from jaxlab.diffusion.video.rollout import generate_clip, rollout
from jaxlab.diffusion.video.synthetic import AVStatic, talking_head
from jaxlab.diffusion.video.tasks import BODY_HALF, AvatarTask, audio_features, make_batch
from jaxlab.recipes.cyberhost import CyberHostConfig

OUT = Path(__file__).parent / "results"
SCHED = make_schedule("vp_cosine")
SPEC = SamplerSpec("dpm_solver++", 2)
NFE = 8


def emit(**kw):
    print(json.dumps(kw), flush=True)


SMALL = dict(patch=4, width=32, depth=1)


def train(cfg: VideoNetConfig, task: AvatarTask, weights: T.LossWeights, steps: int, seed=0):
    net = VideoDenoiser(cfg)
    opt = lambda hp: optax.chain(optax.clip_by_global_norm(1.0), optax.adam(hp["optim.lr"]))
    hparams = {"optim.lr": 2e-3, "ema_decay": 0.99}
    st = jax.jit(T.make_init(net, task, opt(hparams), hparams))(jax.random.PRNGKey(seed))
    step = jax.jit(T.make_train_step(net, task, SCHED, weights, opt, 8))
    t0 = time.time()
    losses = []
    for _ in range(steps):
        st, m = step(st, None)
        losses.append(float(m["mse"]))
    return (
        net,
        st,
        {
            "train_s": round(time.time() - t0, 1),
            "mse_first": float(np.mean(losses[:10])),
            "mse_last": float(np.mean(losses[-20:])),
        },
    )


def clip_fn(net, params, cfg, audio_scale=2.0):
    """A jitted ``(key, cond) -> clip`` of a trained model (guided)."""
    apply = lambda x, t, c: net.apply(params, x, t, c)
    kw = dict(net=cfg, schedule=SCHED, spec=SPEC, nfe=NFE, audio_scale=audio_scale, ref_scale=1.5)
    return jax.jit(lambda key, c: generate_clip(key, apply, c, **kw))


def rollout_fn(net, params, cfg, n_clips):
    """A jitted ``(key, cond, audio) -> video`` of ``n_clips`` autoregressive clips."""
    apply = lambda x, t, c: net.apply(params, x, t, c)
    kw = dict(net=cfg, schedule=SCHED, spec=SPEC, nfe=NFE, audio_scale=2.0, ref_scale=1.5)
    return jax.jit(lambda key, c, a: rollout(key, apply, c, a, n_clips, **kw))


def summarise(rows: list[dict], what: str, key: str, fields: tuple[str, ...]):
    """One ``{what}_summary`` line per ``key`` value: mean and std over seeds of each field."""
    for k in dict.fromkeys(r[key] for r in rows):
        sel = [r for r in rows if r[key] == k]
        out = {f: float(np.mean([r[f] for r in sel])) for f in fields}
        out.update({f + "_seed_std": float(np.std([r[f] for r in sel])) for f in fields})
        emit(what=what + "_summary", **{key: k}, seeds=len(sel), **out)


ROLLOUT = 128
"""Frames generated in each Loopy long-term-motion rollout (16 clips of 8)."""


def loopy(steps: int, seeds: int, drift: str = "sine", sync: bool = True):
    task = AvatarTask("head", drift=drift)
    short = VideoNetConfig(motion_len=4, audio_latents=2, **SMALL)
    tsm = VideoNetConfig(
        motion_len=68, tsm_stride=8, tsm_expand=2, tsm_recent=4, audio_latents=2, **SMALL
    )
    ex = make_batch(jax.random.PRNGKey(123), 16, short, task)
    env = ex.clip.envelope[:, short.motion_len :]
    # ROLLOUT-frame rollouts from a CONTEXT-frame ground-truth context (TSM's motion_len)
    context = tsm.motion_len
    n_clips, total = ROLLOUT // short.clip_len, context + ROLLOUT
    st_ = AVStatic()
    clips = jax.vmap(lambda k: talking_head(k, total, st_, drift))(
        jax.random.split(jax.random.PRNGKey(99), 6)
    )
    feats = jax.vmap(lambda c: audio_features(c, tsm, task, st_))(clips)
    sync_rows, drift_rows, last = [], [], {}
    # reference: the last context frame held for the whole rollout (no motion at all)
    held = jnp.repeat(clips.frames[:, context - 1 : context], ROLLOUT, axis=1)
    d = E.drift(held, clips.frames[:, context:])
    emit(what="loopy_drift_128_hold_last_frame", drift=drift,
         head_x_err=float(d["head_x_err"].mean()),
         brightness_err=float(d["brightness_err"].mean()))  # fmt: skip
    for seed in range(seeds):
        runs = {
            "short": train(short, task, T.LossWeights(), steps, seed),
            "tsm": train(tsm, task, T.LossWeights(), steps, seed),
        }
        if sync:
            runs["no_audio"] = train(short, task, T.LossWeights(p_audio_drop=1.0), steps, seed)
        for k, (_, _, info) in runs.items():
            emit(what="loopy_train", model=k, seed=seed, steps=steps, drift=drift, **info)
        # 1. audio -> mouth correlation on single clips continuing a ground-truth context
        for k in ("short", "no_audio") if sync else ():
            net, st, _ = runs[k]
            vid = clip_fn(net, st.ema_params, short)(jax.random.PRNGKey(7), ex.cond)
            c = np.asarray(E.audio_sync(vid, env, "head"))
            sync_rows.append(dict(model=k, corr_mean=float(c.mean())))
            emit(
                what="loopy_audio_sync",
                model=k,
                seed=seed,
                corr_mean=float(c.mean()),
                corr_std_over_videos=float(c.std()),
                n_videos=len(c),
                truth_corr=float(np.mean(E.audio_sync(ex.x0, env, "head"))),
            )
        # 2. long-term motion dependency
        for k, cfg in (("short", short), ("tsm", tsm)):
            net, st, _ = runs[k]
            cond = VideoCond(
                reference=clips.reference,
                audio=feats[:, context : context + cfg.clip_len],
                motion=clips.frames[:, context - cfg.motion_len : context],
            )
            vid = rollout_fn(net, st.ema_params, cfg, n_clips)(
                jax.random.PRNGKey(3), cond, feats[:, context:]
            )
            d = E.drift(vid, clips.frames[:, context:])
            row = dict(
                model=k,
                head_x_err=float(d["head_x_err"].mean()),
                brightness_err=float(d["brightness_err"].mean()),
            )
            drift_rows.append(row)
            last[k] = np.asarray(vid)
            emit(
                what="loopy_drift_128",
                drift=drift,
                seed=seed,
                head_x_err_std_over_videos=float(d["head_x_err"].std()),
                **row,
            )
    summarise(sync_rows, "loopy_audio_sync", "model", ("corr_mean",))
    summarise(drift_rows, "loopy_drift_128", "model", ("head_x_err", "brightness_err"))
    try:
        from jaxlab import media

        OUT.mkdir(parents=True, exist_ok=True)
        xs = {
            k: np.asarray(jax.vmap(measure.head_position)(jnp.asarray(v[0])))[:, 0]
            for k, v in last.items()
        }
        t = np.arange(ROLLOUT)
        truth_x = np.asarray(jax.vmap(measure.head_position)(clips.frames[0, context:]))[:, 0]
        media.plot_curves(
            OUT / ("loopy_drift.png" if drift == "sine" else f"loopy_drift_{drift}.png"),
            {
                "truth": (t, truth_x),
                "TSM (68 frames)": (t, xs["tsm"]),
                "4 motion frames": (t, xs["short"]),
            },
            title="head x over a 128-frame rollout (last seed)",
            xlabel="frame",
            ylabel="head x (px)",
        )
        if sync:
            means = {
                k: np.mean([r["corr_mean"] for r in sync_rows if r["model"] == k])
                for k in ("short", "no_audio")
            }
            media.plot_bars(
                OUT / "loopy_audio_sync.png",
                [float(v) for v in means.values()],
                labels=["audio", "audio dropped"],
                title=f"corr(envelope, mouth opening), mean of {seeds} seeds",
            )
    except Exception as e:  # plotting is optional (viz extra)
        emit(what="plot_failed", error=repr(e))


def n_params(net, cfg: VideoNetConfig, task: AvatarTask) -> int:
    ex = make_batch(jax.random.PRNGKey(0), 1, cfg, task)
    shapes = jax.eval_shape(lambda: net.init(jax.random.PRNGKey(0), ex.x0, jnp.ones((1,)), ex.cond))
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(shapes)))


def cyberhost(steps: int, seeds: int):
    task = AvatarTask("body")
    full = VideoNetConfig(
        motion_len=4, regions=2, crop=8, movement_map=True, clarity=True, pose_channels=1, **SMALL
    )
    # same parameter count without region attention: width 36 (56.2k vs 55.8k parameters)
    plain = VideoNetConfig(
        motion_len=4, movement_map=True, clarity=True, pose_channels=1, **{**SMALL, "width": 36}
    )
    no_map = VideoNetConfig(
        motion_len=4, regions=2, crop=8, movement_map=False, clarity=True, pose_channels=1, **SMALL
    )
    ex = make_batch(jax.random.PRNGKey(321), 16, full, task)
    env = ex.clip.envelope[:, 4:]
    lo, hi = float(ex.cond.clarity.min()), float(ex.cond.clarity.max())
    levels = [round(lo + (hi - lo) * f, 2) for f in (0.0, 1 / 3, 2 / 3, 1.0)]
    err_rows, clar_rows, std_rows = [], [], []
    for seed in range(seeds):
        runs = {
            "ram_local": (full, train(full, task, T.LossWeights(local=1.0, mask=0.1), steps, seed)),
            "same_params_no_ram": (plain, train(plain, task, T.LossWeights(), steps, seed)),
            "no_map": (
                no_map,
                train(no_map, task, T.LossWeights(local=1.0, mask=0.1), steps, seed),
            ),
        }
        for k, (cfg, (net, _, info)) in runs.items():
            emit(
                what="cyberhost_train",
                model=k,
                seed=seed,
                steps=steps,
                params=n_params(net, cfg, task),
                **info,
            )
        for k in ("ram_local", "same_params_no_ram"):
            cfg, (net, st, _) = runs[k]
            # no region masks at inference: RAM writes back under its predicted masks
            cond = ex.cond.replace(region_masks=None)
            if not cfg.regions:
                cond = cond.replace(ref_region_masks=None)
            vid = clip_fn(net, st.ema_params, cfg)(jax.random.PRNGKey(5), cond)
            err = E.region_error(vid, ex.x0, ex.cond.region_masks[..., 1])
            sync = E.audio_sync(vid, env, "body")
            row = dict(model=k, hand_mse=float(err.mean()), hand_sync=float(sync.mean()))
            err_rows.append(row)
            emit(
                what="cyberhost_hand_error",
                seed=seed,
                hand_mse_std_over_videos=float(err.std()),
                truth_hand_sync=float(E.audio_sync(ex.x0, env, "body").mean()),
                **row,
            )
            if k == "ram_local":
                for c in levels:
                    v = clip_fn(net, st.ema_params, cfg)(
                        jax.random.PRNGKey(5), cond.replace(clarity=jnp.full((16,), c))
                    )
                    r = dict(clarity=c, hand_sharpness=float(E.hand_sharpness(v).mean()))
                    clar_rows.append(r)
                    emit(what="cyberhost_clarity", seed=seed, data_range=[lo, hi], **r)
        for k in ("ram_local", "no_map"):
            cfg, (net, st, _) = runs[k]
            cond = ex.cond.replace(region_masks=None, motion=None)
            if cfg.movement_map:
                centre = jnp.array([[6.5, 8.5], [6.5, 8.5]])
                cond = cond.replace(
                    movement=jnp.broadcast_to(movement_map(centre, BODY_HALF, 16), (16, 16, 16, 1))
                )
            else:
                cond = cond.replace(movement=None)
            aud = jnp.concatenate([ex.cond.audio] * 4, 1)
            vid = rollout_fn(net, st.ema_params, cfg, 4)(jax.random.PRNGKey(9), cond, aud)
            s = E.centre_std(vid)
            row = dict(model=k, centre_std=float(s.mean()))
            std_rows.append(row)
            emit(
                what="cyberhost_body_centre_std_32f",
                seed=seed,
                centre_std_over_videos=float(s.std()),
                truth=float(E.centre_std(ex.clip.frames).mean()),
                **row,
            )
    summarise(err_rows, "cyberhost_hand_error", "model", ("hand_mse", "hand_sync"))
    summarise(clar_rows, "cyberhost_clarity", "clarity", ("hand_sharpness",))
    summarise(std_rows, "cyberhost_body_centre_std_32f", "model", ("centre_std",))


def cyberhost_sync(steps: int, seeds: int):
    """Audio drives the hand: the CyberHost network with a windowed audio encoder (Loopy's
    audio-to-latents module without motion features: an MLP over each frame's log-mel window,
    our stand-in for wav2vec) vs the same network trained with the audio always dropped."""
    shipped = CyberHostConfig()  # the recipe's network and task, at this script's small size
    task = shipped.task
    cfg = dataclasses.replace(shipped.net, crop=8, **SMALL)
    ex = make_batch(jax.random.PRNGKey(321), 16, cfg, task)
    env = ex.clip.envelope[:, 4:]
    rows = []
    for seed in range(seeds):
        for k, p_drop in (("audio", 0.1), ("audio_dropped", 1.0)):
            w = T.LossWeights(local=1.0, mask=0.1, p_audio_drop=p_drop)
            net, st, info = train(cfg, task, w, steps, seed)
            vid = clip_fn(net, st.ema_params, cfg)(
                jax.random.PRNGKey(5), ex.cond.replace(region_masks=None)
            )
            s = np.asarray(E.audio_sync(vid, env, "body"))
            rows.append(dict(model=k, hand_sync=float(s.mean())))
            emit(
                what="cyberhost_hand_sync",
                model=k,
                seed=seed,
                steps=steps,
                hand_sync=float(s.mean()),
                std_over_videos=float(s.std()),
                truth=float(E.audio_sync(ex.x0, env, "body").mean()),
                **info,
            )
    summarise(rows, "cyberhost_hand_sync", "model", ("hand_sync",))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument(
        "--part", default="all", choices=["loopy", "cyberhost", "cyberhost-sync", "all"]
    )
    ap.add_argument(
        "--drift", default="sine", choices=["sine", "dwell"], help="the talking head's drift"
    )
    ap.add_argument("--no-sync", action="store_true", help="loopy: skip the audio-sync models")
    a = ap.parse_args()
    if a.part in ("loopy", "all"):
        loopy(a.steps, a.seeds, a.drift, not a.no_sync)
    if a.part in ("cyberhost", "all"):
        cyberhost(a.steps, a.seeds)
    if a.part in ("cyberhost-sync", "all"):
        cyberhost_sync(a.steps, a.seeds)
