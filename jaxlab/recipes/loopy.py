"""``loopy``: Loopy (audio-only portrait video diffusion with long-term motion dependency) on
synthetic talking heads.

The denoiser (:mod:`jaxlab.diffusion.video.denoiser`) has the reference network, Loopy's
inter-/intra-clip temporal layers over motion frames pooled by the temporal segment module
(68 motion frames -> 8 segment frames + 4 recent frames by default) and the audio-to-latents
module; it is trained on talking heads whose mouth follows a waveform's envelope and whose head
drifts with a period longer than a clip (:mod:`jaxlab.diffusion.video.pipeline`). Evaluation
rolls out clips autoregressively and prints audio-mouth sync (with and without audio), the
head-drift error and the brightness drift; ``finalize`` writes ``samples.gif``/``samples.mp4``.
"""

from __future__ import annotations

import dataclasses

import jax

from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.diffusion.video import pipeline
from jaxlab.diffusion.video.denoiser import VideoNetConfig
from jaxlab.diffusion.video.pipeline import AvatarConfig
from jaxlab.diffusion.video.tasks import AvatarTask


@dataclasses.dataclass(frozen=True)
class LoopyConfig(AvatarConfig):
    """:class:`AvatarConfig` with Loopy's defaults (talking head, TSM, audio-to-latents)."""

    net: VideoNetConfig = VideoNetConfig(
        motion_len=68, tsm_stride=8, tsm_expand=2, tsm_recent=4, audio_latents=2
    )
    task: AvatarTask = AvatarTask(kind="head")


def build(cfg: LoopyConfig, mesh: jax.sharding.Mesh) -> Parts:
    generate = pipeline.make_generate(cfg)
    return Parts(
        init=pipeline.make_init(cfg, RECIPE.traced),
        train_step=pipeline.make_train_step(cfg, mesh),
        evaluate=lambda state: pipeline.evaluate(cfg, generate, state.ema_params),
        finalize=lambda state, run_dir: pipeline.write_videos(
            cfg, generate, state.ema_params, run_dir
        ),
        units_per_step=(cfg.batch_size * cfg.net.clip_len, "frames"),
    )


RECIPE = register(
    Recipe(
        name="loopy",
        config_cls=LoopyConfig,
        build=build,
        description="Loopy: audio-driven talking-head video diffusion with a temporal segment module",
        traced=pipeline.TRACED,
    )
)
