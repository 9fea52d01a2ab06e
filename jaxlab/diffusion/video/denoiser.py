"""A small video diffusion denoiser with a reference network, temporal, audio and region layers.

Tokens are ``p x p`` patches of every frame (``[B, T, N, D]``, ``N = (S/p)^2``) plus a fixed
2-D sinusoidal position table. Each block (DiT-style, adaLN-Zero from the time / clarity
embedding) runs

1. spatial self-attention of every frame over ``[frame tokens ‖ reference tokens]`` where the
   reference tokens are the reference network's features at the same depth (ReferenceNet-style
   injection into self-attention; dropped for guidance through the key padding mask);
2. the temporal layers: Loopy's inter-clip layer over ``[motion ‖ clip]`` then the intra-clip
   layer (or only the intra-clip layer without motion frames);
3. audio cross-attention from every frame's tokens to that frame's audio window tokens (a learned
   projection of log-mel windows, replaced by a learned null sequence when audio is dropped) and,
   with ``audio_latents``, Loopy's motion latents;
4. optional CyberHost region attention (bank ‖ identity tokens of reference crops);
5. an MLP.

The reference network encodes the reference image (with an optional pose map channel) and the
motion frames (after the temporal segment module) with the same patch embedding and spatial
blocks, and hands out its features after every block.

Input ``x_t: [B, T, S, S, C]``, ``t: [B]``, :class:`VideoCond`; output the noise prediction.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from jaxlab.core.config import ConfigError
from jaxlab.diffusion.time_embedding import sinusoidal_embedding
from jaxlab.diffusion.video.cyberhost import RegionAttention, region_crop
from jaxlab.diffusion.video.loopy import (
    AudioToLatents,
    InterClipTemporalLayer,
    IntraClipTemporalLayer,
    temporal_segment,
    tsm_output_len,
)
from jaxlab.nn import MLP, MultiHeadAttention


@dataclasses.dataclass(frozen=True)
class VideoNetConfig:
    """Static sizes of :class:`VideoDenoiser` (hashable).

    Attributes:
        size: frame side ``S``; channels: frame channels ``C``.
        patch, width, depth, heads: tokeniser and transformer sizes.
        clip_len: frames ``T`` generated per clip.
        motion_len: motion frames ``L`` given (0: none, no inter-clip layer).
        tsm_stride, tsm_expand, tsm_recent: temporal segment module (stride 0: no TSM, the ``L``
            frames are used as they are).
        n_mels, audio_radius: audio windows ``[T, 2 r + 1, n_mels]``.
        audio_latents: Loopy's audio-to-latents tokens per frame (0: off).
        motion_feat_dim: size of the training-time motion features of audio-to-latents.
        regions, bank_size, crop: CyberHost region attention (0 regions: off), bank tokens,
            reference crop side.
        movement_map: an extra input channel (the body-movement map).
        clarity: a hand-clarity scalar condition.
        pose_channels: channels of the pose map given with the reference.
    """

    size: int = 16
    channels: int = 1
    patch: int = 2
    width: int = 32
    depth: int = 2
    heads: int = 4
    clip_len: int = 8
    motion_len: int = 4
    tsm_stride: int = 0
    tsm_expand: int = 0
    tsm_recent: int = 4
    n_mels: int = 16
    audio_radius: int = 2
    audio_latents: int = 0
    motion_feat_dim: int = 2
    regions: int = 0
    bank_size: int = 4
    crop: int = 6
    movement_map: bool = False
    clarity: bool = False
    pose_channels: int = 0

    def __post_init__(self):
        for name in ("size", "channels", "patch", "width", "depth", "heads", "clip_len", "n_mels"):
            if getattr(self, name) < 1:
                raise ConfigError(f"net.{name}", getattr(self, name), "a positive int")
        for name in ("audio_radius", "motion_feat_dim", "bank_size", "crop"):
            if getattr(self, name) < 1:
                raise ConfigError(f"net.{name}", getattr(self, name), "a positive int")
        for name in ("motion_len", "tsm_stride", "tsm_expand", "tsm_recent", "audio_latents"):
            if getattr(self, name) < 0:
                raise ConfigError(f"net.{name}", getattr(self, name), "an int >= 0 (0: off)")
        for name in ("regions", "pose_channels"):
            if getattr(self, name) < 0:
                raise ConfigError(f"net.{name}", getattr(self, name), "an int >= 0 (0: off)")
        if self.size % self.patch:
            raise ConfigError("net.size", self.size, f"a multiple of patch={self.patch}")
        if self.width % self.heads:
            raise ConfigError("net.width", self.width, f"a multiple of heads={self.heads}")
        if self.regions and (self.crop % self.patch or not self.patch <= self.crop <= self.size):
            raise ConfigError("net.crop", self.crop, f"a multiple of patch={self.patch} <= size")
        if self.tsm_stride:
            if not 0 <= self.tsm_recent < self.motion_len:
                raise ConfigError(
                    "net.tsm_recent", self.tsm_recent, f"in 0..motion_len-1={self.motion_len - 1}"
                )
            if (self.motion_len - self.tsm_recent) % self.tsm_stride:
                raise ConfigError(
                    "net.tsm_stride",
                    self.tsm_stride,
                    f"a divisor of motion_len - tsm_recent = {self.motion_len - self.tsm_recent}",
                )

    @property
    def n_motion(self) -> int:
        """Motion tokens per position after the TSM."""
        if not self.tsm_stride or not self.motion_len:
            return self.motion_len
        return tsm_output_len(self.motion_len, self.tsm_stride, self.tsm_recent)

    @property
    def window(self) -> int:
        return 2 * self.audio_radius + 1


@flax.struct.dataclass
class VideoCond:
    """Conditions of one clip (batch ``B``). Optional fields are ``None`` when unused.

    Attributes:
        reference: ``[B, S, S, C]`` reference image.
        audio: ``[B, T, W, n_mels]`` log-mel windows of the clip's frames.
        motion: ``[B, L, S, S, C]`` the preceding frames (motion frames), oldest first.
        audio_keep, ref_keep: ``[B]`` False drops the audio / reference (guidance, CFG training).
        motion_feat: ``[B, T, Fm]`` motion features for audio-to-latents (training only).
        use_motion_feat: ``[B]`` rows that take the motion features instead of the audio.
        region_masks: ``[B, T, S, S, R]`` region masks (None: predicted).
        ref_region_masks: ``[B, S, S, R]`` region masks of the reference (for identity crops).
        movement: ``[B, S, S, 1]`` body-movement map.
        clarity: ``[B]`` hand-clarity score.
        pose: ``[B, S, S, P]`` pose map of the reference.
    """

    reference: Float[Array, "*batch s s c"]
    audio: Float[Array, "*batch t w f"]
    motion: Float[Array, "*batch l s s c"] | None = None
    audio_keep: Bool[Array, "*batch"] | None = None
    ref_keep: Bool[Array, "*batch"] | None = None
    motion_feat: Float[Array, "*batch t fm"] | None = None
    use_motion_feat: Bool[Array, "*batch"] | None = None
    region_masks: Float[Array, "*batch t s s r"] | None = None
    ref_region_masks: Float[Array, "*batch s s r"] | None = None
    movement: Float[Array, "*batch s s 1"] | None = None
    clarity: Float[Array, "*batch"] | None = None
    pose: Float[Array, "*batch s s p"] | None = None


def check_cond(cfg: VideoNetConfig, x: Float[Array, "b t s s c"], cond: VideoCond) -> None:
    """Raises ValueError naming the input whose shape does not fit ``cfg`` and ``x``."""
    b = x.shape[0]
    frame = (cfg.size, cfg.size, cfg.channels)
    want = {
        "x": (x.shape, (b, cfg.clip_len) + frame),
        "reference": (cond.reference.shape, (b,) + frame),
        "audio": (cond.audio.shape, (b, cfg.clip_len, cfg.window, cfg.n_mels)),
    }
    if cfg.motion_len:
        if cond.motion is None:
            raise ValueError(f"motion: missing, expected shape {(b, cfg.motion_len) + frame}")
        want["motion"] = (cond.motion.shape, (b, cfg.motion_len) + frame)
    if cfg.regions and cond.ref_region_masks is None:
        raise ValueError(
            f"ref_region_masks: missing, expected {(b, cfg.size, cfg.size, cfg.regions)}"
        )
    if cfg.regions:
        want["ref_region_masks"] = (
            cond.ref_region_masks.shape,
            (b, cfg.size, cfg.size, cfg.regions),
        )
    if cfg.regions and cond.region_masks is not None:
        want["region_masks"] = (
            cond.region_masks.shape,
            (b, cfg.clip_len, cfg.size, cfg.size, cfg.regions),
        )
    if cfg.movement_map:
        if cond.movement is None:
            raise ValueError(f"movement: missing, expected {(b, cfg.size, cfg.size, 1)}")
        want["movement"] = (cond.movement.shape, (b, cfg.size, cfg.size, 1))
    if cfg.pose_channels:
        if cond.pose is None:
            raise ValueError(
                f"pose: missing, expected {(b, cfg.size, cfg.size, cfg.pose_channels)}"
            )
        want["pose"] = (cond.pose.shape, (b, cfg.size, cfg.size, cfg.pose_channels))
    if cfg.clarity and cond.clarity is None:
        raise ValueError(f"clarity: missing, expected shape ({b},)")
    for name, (got, exp) in want.items():
        if tuple(got) != tuple(exp):
            raise ValueError(f"{name}: got shape {tuple(got)}, expected {tuple(exp)}")


def _pos_table(g: int, dim: int) -> Float[Array, "n dim"]:
    rows = sinusoidal_embedding(jnp.repeat(jnp.arange(g), g).astype(jnp.float32), dim // 2)
    cols = sinusoidal_embedding(jnp.tile(jnp.arange(g), g).astype(jnp.float32), dim // 2)
    return jnp.concatenate([rows, cols], -1)


def patchify(x: Float[Array, "... s s c"], p: int) -> Float[Array, "... n pc"]:
    """``[..., S, S, C] -> [..., (S/p)^2, p·p·C]`` (row-major patches)."""
    *lead, s, _, c = x.shape
    g = s // p
    x = x.reshape(*lead, g, p, g, p, c)
    x = jnp.moveaxis(x, -4, -3)  # [..., g, g, p, p, c]
    return x.reshape(*lead, g * g, p * p * c)


def unpatchify(tok: Float[Array, "... n pc"], p: int, c: int) -> Float[Array, "... s s c"]:
    """Inverse of :func:`patchify`."""
    *lead, n, _ = tok.shape
    g = int(round(n**0.5))
    x = tok.reshape(*lead, g, g, p, p, c)
    x = jnp.moveaxis(x, -3, -4)
    return x.reshape(*lead, g * p, g * p, c)


def token_masks(masks: Float[Array, "... s s r"], p: int) -> Float[Array, "... n r"]:
    """Pixel region masks -> patch-token masks (the max over each patch)."""
    *lead, s, _, r = masks.shape
    g = s // p
    return masks.reshape(*lead, g, p, g, p, r).max(axis=(-4, -2)).reshape(*lead, g * g, r)


class _SpatialBlock(nn.Module):
    """Pre-norm self-attention + MLP over tokens ``[F, N, D]`` (the reference network's block)."""

    heads: int

    @nn.compact
    def __call__(self, x):
        d = x.shape[-1]
        y, _ = MultiHeadAttention(
            self.heads, d // self.heads, causal=False, use_rope=False, name="attn"
        )(nn.LayerNorm(name="ln1")(x))
        x = x + y
        return x + MLP((2 * d, d), activation=nn.gelu, name="mlp")(nn.LayerNorm(name="ln2")(x))


class ReferenceNet(nn.Module):
    """Encodes frames ``[B, F, S, S, C']`` and returns the tokens after every block
    (a list of ``depth`` arrays ``[B, F, N, D]``)."""

    cfg: VideoNetConfig

    @nn.compact
    def __call__(self, frames):
        cfg = self.cfg
        b, f = frames.shape[:2]
        tok = nn.Dense(cfg.width, name="embed")(patchify(frames, cfg.patch))
        tok = (tok + _pos_table(cfg.size // cfg.patch, cfg.width)[None, None]).reshape(
            b * f, -1, cfg.width
        )
        feats = []
        for i in range(cfg.depth):
            tok = _SpatialBlock(cfg.heads, name=f"block{i}")(tok)
            feats.append(tok.reshape(b, f, -1, cfg.width))
        return feats


def _reference_frames(cfg: VideoNetConfig, cond: VideoCond) -> Float[Array, "b f s s c2"]:
    """The reference network's input: [reference (+ pose) ‖ motion frames after the TSM]."""
    ref = cond.reference[:, None]
    if cfg.pose_channels:
        ref = jnp.concatenate([ref, cond.pose[:, None]], -1)
    frames = [ref]
    if cfg.motion_len:
        motion = cond.motion
        if cfg.tsm_stride:
            motion = temporal_segment(
                motion, stride=cfg.tsm_stride, expand=cfg.tsm_expand, keep_recent=cfg.tsm_recent
            )
        if cfg.pose_channels:
            motion = jnp.concatenate(
                [motion, jnp.zeros(motion.shape[:-1] + (cfg.pose_channels,), motion.dtype)], -1
            )
        frames.append(motion)
    return jnp.concatenate(frames, 1)


def _audio_context(
    module: nn.Module, cond: VideoCond, audio_keep: Bool[Array, " b"], b: int, tl: int
) -> Float[Array, "bt w d"]:
    """Audio context ``[B*T, W (+L), D]``: projected log-mel windows (+ latents), null if dropped."""
    cfg = module.cfg
    d = cfg.width
    a_tok = (
        nn.Dense(d, name="audio_in")(cond.audio)
        + module.param("audio_pos", nn.initializers.normal(0.02), (cfg.window, d))[None, None]
    )
    null = module.param("audio_null", nn.initializers.normal(0.02), (cfg.window, d))
    a_tok = jnp.where(audio_keep[:, None, None, None], a_tok, null[None, None])
    if cfg.audio_latents:
        lat = AudioToLatents(d, cfg.audio_latents, name="audio_to_latents")(
            cond.audio, cond.motion_feat, cond.use_motion_feat
        )
        lat_null = module.param("latent_null", nn.initializers.normal(0.02), (cfg.audio_latents, d))
        keep_lat = audio_keep
        if cond.use_motion_feat is not None:
            keep_lat = keep_lat | cond.use_motion_feat
        a_tok = jnp.concatenate(
            [a_tok, jnp.where(keep_lat[:, None, None, None], lat, lat_null[None, None])], 2
        )
    return a_tok.reshape(b * tl, -1, d)


def _identity_tokens(cfg: VideoNetConfig, cond: VideoCond):
    """Identity tokens ``[B, R, n, D]`` of the region crops; token masks ``[B, T, N, R]`` or None."""
    d, p = cfg.width, cfg.patch
    tmasks = None
    crops = jax.vmap(
        lambda im, m: jax.vmap(lambda mr: region_crop(im, mr, cfg.crop), in_axes=-1)(m)
    )(cond.reference, cond.ref_region_masks)  # [B, R, crop, crop, C]
    id_tok = nn.Dense(d, name="identity_embed")(patchify(crops, p))
    identity = id_tok + _pos_table(cfg.crop // p, d)[None, None]
    if cond.region_masks is not None:
        tmasks = token_masks(cond.region_masks, p)
    return identity, tmasks


class VideoDenoiser(nn.Module):
    """``(x_t [B, T, S, S, C], t [B], cond) -> eps [B, T, S, S, C]`` (see the module docstring).

    Predicted region mask logits are sown into ``intermediates/mask_logits`` (one per block).
    """

    cfg: VideoNetConfig
    time_scale: float = 1000.0

    @nn.compact
    def __call__(
        self, x: Float[Array, "b t s s c"], t: Float[Array, " b"], cond: VideoCond
    ) -> Float[Array, "b t s s c"]:
        cfg = self.cfg
        check_cond(cfg, x, cond)
        b, tl = x.shape[:2]
        d, p, g = cfg.width, cfg.patch, cfg.size // cfg.patch
        ones = jnp.ones((b,), bool)
        audio_keep = ones if cond.audio_keep is None else cond.audio_keep
        ref_keep = ones if cond.ref_keep is None else cond.ref_keep

        inp = x
        if cfg.movement_map:
            inp = jnp.concatenate(
                [x, jnp.broadcast_to(cond.movement[:, None], (b, tl) + cond.movement.shape[1:])], -1
            )
        tok = nn.Dense(d, name="embed")(patchify(inp, p)) + _pos_table(g, d)[None, None]

        emb = sinusoidal_embedding(jnp.broadcast_to(t, (b,)) * self.time_scale, d)
        if cfg.clarity:
            emb = emb + nn.Dense(d, name="clarity")(sinusoidal_embedding(cond.clarity * 10.0, d))
        emb = nn.Dense(d, name="t1")(nn.silu(nn.Dense(d, name="t0")(emb)))

        ref_feats = ReferenceNet(cfg, name="reference_net")(_reference_frames(cfg, cond))

        a_ctx = _audio_context(self, cond, audio_keep, b, tl)

        identity, tmasks = _identity_tokens(cfg, cond) if cfg.regions else (None, None)

        for i in range(cfg.depth):
            mod = nn.Dense(6 * d, kernel_init=nn.initializers.zeros_init(), name=f"ada{i}")(
                nn.silu(emb)
            )
            s1, b1, g1, s2, b2, g2 = (m[:, None, None, :] for m in jnp.split(mod, 6, axis=-1))
            h = nn.LayerNorm(use_scale=False, use_bias=False, name=f"ln{i}a")(tok) * (1 + s1) + b1
            r_i = jnp.broadcast_to(ref_feats[i][:, :1], (b, tl, g * g, d))
            seq = jnp.concatenate([h, r_i], 2).reshape(b * tl, 2 * g * g, d)
            pad = jnp.concatenate(
                [jnp.ones((b, g * g), bool), jnp.broadcast_to(ref_keep[:, None], (b, g * g))], 1
            )
            y, _ = MultiHeadAttention(
                cfg.heads, d // cfg.heads, causal=False, use_rope=False, name=f"spatial{i}"
            )(seq, padding_mask=jnp.repeat(pad, tl, axis=0))
            tok = tok + g1 * y[:, : g * g].reshape(b, tl, g * g, d)
            if cfg.motion_len:
                tok = tok + InterClipTemporalLayer(
                    cfg.heads, cfg.n_motion, cfg.clip_len, name=f"inter_clip{i}"
                )(nn.LayerNorm(name=f"ln{i}b")(tok), ref_feats[i][:, 1:])
            tok = tok + IntraClipTemporalLayer(cfg.heads, cfg.clip_len, name=f"intra_clip{i}")(
                nn.LayerNorm(name=f"ln{i}c")(tok)
            )
            y, _ = MultiHeadAttention(
                cfg.heads, d // cfg.heads, causal=False, use_rope=False, name=f"audio{i}"
            )(nn.LayerNorm(name=f"ln{i}d")(tok).reshape(b * tl, g * g, d), context=a_ctx)
            tok = tok + y.reshape(b, tl, g * g, d)
            if cfg.regions:
                tok, logits = RegionAttention(
                    cfg.regions, cfg.bank_size, cfg.clip_len, cfg.heads, name=f"region{i}"
                )(tok, identity, tmasks)
                self.sow("intermediates", "mask_logits", logits)
            h = nn.LayerNorm(use_scale=False, use_bias=False, name=f"ln{i}e")(tok) * (1 + s2) + b2
            tok = tok + g2 * MLP((2 * d, d), activation=nn.gelu, name=f"mlp{i}")(h)

        shift, scale = jnp.split(
            nn.Dense(2 * d, kernel_init=nn.initializers.zeros_init(), name="ada_out")(nn.silu(emb)),
            2,
            axis=-1,
        )
        tok = nn.LayerNorm(use_scale=False, use_bias=False, name="ln_out")(tok)
        tok = tok * (1 + scale[:, None, None]) + shift[:, None, None]
        out = nn.Dense(p * p * cfg.channels, kernel_init=nn.initializers.zeros_init(), name="out")(
            tok
        )
        return unpatchify(out, p, cfg.channels)
