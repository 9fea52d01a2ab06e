"""Synthetic audio-visual data with known ground truth, generated in JAX (jit/vmap-able).

* :func:`speech_envelope`: a syllable-rate loudness envelope ``a(t) in [0, 1]`` at the video rate
  (a sigmoid of three random sinusoids at 1.5-4 Hz).
* :func:`speech_waveform`: a voiced waveform ``w(n) = a(n) sum_k h_k sin(2 pi k f0 n / sr + phi_k)
  + noise``, ``a`` linearly interpolated to the sample rate; the model only sees its log-mel
  frames (:mod:`.audio`), so the audio path is real.
* :func:`talking_head`: a face disc of identity brightness ``b`` with two eyes and a mouth whose
  opening (ellipse half-height ``0.25 + 1.5 a(t)``) follows the envelope, and a slow head drift
  ``x(t) = c + A sin(2 pi t / P + phi)`` with a period ``P`` (48-96 frames) longer than a clip
  (``drift="sine"``), or a dwell-and-turn rhythm (``drift="dwell"``, :func:`dwell_wave`): the head
  holds on one side for :data:`DWELL_HOLD` frames, turns to the other side in
  :data:`DWELL_MOVE` frames, holds, turns back. A sine's phase and speed are readable from a few
  frames; during a hold, when the next turn starts is readable only from a context that reaches
  back to the last turn, so the dwell rhythm is the case that needs long-term motion context.
* :func:`talking_body`: a smooth body blob whose root position wanders slowly, a head disc and a
  3x3-cell checker "hand" whose height and contrast follow ``a(t)``, blurred by a random Gaussian
  (the hand-clarity ground truth), with the region masks of head and hand.

Frames are ``[T, S, S, 1]`` in ``[-1, 1]`` (background -1). Everything is rendered with soft
(sigmoid) edges so ground truth varies continuously with the latent variables.
"""

from __future__ import annotations

import dataclasses

import flax.struct
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray


@dataclasses.dataclass(frozen=True)
class AVStatic:
    """Static sizes of the synthetic audio-visual data.

    Attributes:
        size: frame side in pixels.
        fps: video frames per second.
        sample_rate: audio samples per second (``sample_rate / fps`` samples per frame).
    """

    size: int = 16
    fps: int = 25
    sample_rate: int = 1600

    def __post_init__(self):
        if self.size < 12:
            raise ValueError(f"size={self.size}: expected >= 12 pixels")
        if self.sample_rate % self.fps:
            raise ValueError(
                f"sample_rate={self.sample_rate}: expected a multiple of fps={self.fps}"
            )

    @property
    def hop(self) -> int:
        return self.sample_rate // self.fps


@flax.struct.dataclass
class AVClip:
    """A synthetic video with its audio and ground truth.

    Attributes:
        frames: ``[T, S, S, 1]`` video.
        reference: ``[S, S, 1]`` the identity at rest (mouth closed / hand flat, centred).
        waveform: ``[T * hop]`` audio.
        envelope: ``[T]`` ground-truth loudness ``a(t)``.
        position: ``[T, 2]`` ground-truth head (talking head) or body (talking body) centre (x, y).
        brightness: ``[]`` identity brightness.
        masks: ``[T, S, S, R]`` region masks (talking body: head, hand; talking head: face, mouth).
        ref_masks: ``[S, S, R]`` region masks of the reference.
        blur: ``[]`` the hand blur sigma (0 for the talking head).
    """

    frames: Float[Array, "*batch t s s 1"]
    reference: Float[Array, "*batch s s 1"]
    waveform: Float[Array, "*batch samples"]
    envelope: Float[Array, "*batch t"]
    position: Float[Array, "*batch t 2"]
    brightness: Float[Array, "*batch"]
    masks: Float[Array, "*batch t s s r"]
    ref_masks: Float[Array, "*batch s s r"]
    blur: Float[Array, "*batch"]


def speech_envelope(key: PRNGKeyArray, n_frames: int, fps: int = 25) -> Float[Array, " t"]:
    """``a(t) = sigmoid(2.5 z(t))``, ``z`` the normalised sum of three sinusoids at 1.5-4 Hz."""
    kf, kp = jax.random.split(key)
    f = jax.random.uniform(kf, (3,), minval=1.5, maxval=4.0)
    ph = jax.random.uniform(kp, (3,), maxval=2 * jnp.pi)
    t = jnp.arange(n_frames, dtype=jnp.float32)[:, None] / fps
    z = jnp.sum(jnp.sin(2 * jnp.pi * f[None] * t + ph[None]), -1) / jnp.sqrt(1.5)
    return jax.nn.sigmoid(2.5 * z)


def speech_waveform(
    key: PRNGKeyArray, envelope: Float[Array, " t"], static: AVStatic
) -> Float[Array, " samples"]:
    """A voiced waveform whose amplitude follows ``envelope`` (see the module docstring)."""
    kf, kp, kn = jax.random.split(key, 3)
    n = envelope.shape[0] * static.hop
    s = jnp.arange(n, dtype=jnp.float32)
    env = jnp.interp(s / static.hop - 0.5, jnp.arange(envelope.shape[0]), envelope)
    f0 = jax.random.uniform(kf, (), minval=110.0, maxval=220.0)
    ph = jax.random.uniform(kp, (3,), maxval=2 * jnp.pi)
    k = jnp.arange(1, 4, dtype=jnp.float32)
    carrier = jnp.sum(
        (0.5 ** (k[None] - 1))
        * jnp.sin(2 * jnp.pi * f0 * k[None] * s[:, None] / static.sample_rate + ph[None]),
        -1,
    )
    return env * carrier + 0.01 * jax.random.normal(kn, (n,))


def _grid(size: int):
    c = jnp.arange(size, dtype=jnp.float32) + 0.5
    return jnp.meshgrid(c, c, indexing="xy")  # x[row, col] = col, y[row, col] = row


def _disc(x, y, cx, cy, r, soft=0.4):
    return jax.nn.sigmoid((r - jnp.sqrt((x - cx) ** 2 + (y - cy) ** 2 + 1e-6)) / soft)


def render_head(
    static: AVStatic, cx: Float[Array, ""], cy: Float[Array, ""], opening, brightness
) -> tuple[Float[Array, "s s 1"], Float[Array, "s s 2"]]:
    """One talking-head frame and its (face, mouth) masks; ``opening`` in [0, 1]."""
    x, y = _grid(static.size)
    face = _disc(x, y, cx, cy, 0.3 * static.size)
    img = -1.0 + (brightness + 1.0) * face
    eyes = _disc(x, y, cx - 2.0, cy - 1.5, 0.8) + _disc(x, y, cx + 2.0, cy - 1.5, 0.8)
    h = 0.25 + 1.5 * opening
    e = ((x - cx) / 2.0) ** 2 + ((y - cy - 2.0) / h) ** 2
    mouth = jax.nn.sigmoid((1.0 - e) / 0.15) * face
    img = img * (1 - eyes * face) + (-0.5) * eyes * face
    img = img * (1 - mouth) + (-0.8) * mouth
    return img[..., None], jnp.stack([face, mouth], -1)


#: frames a dwell-drift head holds on one side, and frames a turn takes (period 2 (hold + move))
DWELL_HOLD, DWELL_MOVE = 24, 8

HEAD_DRIFTS = ("sine", "dwell")


def dwell_wave(t: Float[Array, " t"], offset: Float[Array, ""]) -> Float[Array, " t"]:
    """``s(t) in [-1, 1]``: hold at -1 for :data:`DWELL_HOLD` frames, turn to +1 along a half
    cosine in :data:`DWELL_MOVE` frames, hold, turn back; ``offset`` frames into the cycle at
    ``t = 0``."""
    half = DWELL_HOLD + DWELL_MOVE
    u = jnp.mod(t + offset, 2 * half)
    v = jnp.where(u < half, u, u - half)
    up = -jnp.cos(jnp.pi * jnp.clip((v - DWELL_HOLD) / DWELL_MOVE, 0.0, 1.0))
    return jnp.where(u < half, up, -up)


def talking_head(
    key: PRNGKeyArray,
    n_frames: int,
    static: AVStatic = AVStatic(),
    drift: str = "sine",
) -> AVClip:
    """A talking-head video of ``n_frames`` frames (see the module docstring)."""
    if drift not in HEAD_DRIFTS:
        raise ValueError(f"drift={drift!r}: expected one of {HEAD_DRIFTS}")
    ke, kw, kb, ka, kp, kph = jax.random.split(key, 6)
    env = speech_envelope(ke, n_frames, static.fps)
    b = jax.random.uniform(kb, (), minval=0.2, maxval=0.9)
    amp = jax.random.uniform(ka, (), minval=1.5, maxval=3.0)
    t = jnp.arange(n_frames, dtype=jnp.float32)
    c = static.size / 2
    if drift == "sine":
        period = jax.random.uniform(kp, (), minval=48.0, maxval=96.0)
        phase = jax.random.uniform(kph, (), maxval=2 * jnp.pi)
        cx = c + amp * jnp.sin(2 * jnp.pi * t / period + phase)
        cy = c - 0.5 + 0.3 * amp * jnp.cos(2 * jnp.pi * t / period + phase)
    else:
        offset = jax.random.uniform(kph, (), maxval=2.0 * (DWELL_HOLD + DWELL_MOVE))
        cx = c + amp * dwell_wave(t, offset)
        cy = jnp.full_like(t, c - 0.5)
    frames, masks = jax.vmap(lambda x, y, a: render_head(static, x, y, a, b))(cx, cy, env)
    ref, ref_masks = render_head(static, jnp.float32(c), jnp.float32(c - 0.5), 0.0, b)
    return AVClip(
        frames=frames,
        reference=ref,
        waveform=speech_waveform(kw, env, static),
        envelope=env,
        position=jnp.stack([cx, cy], -1),
        brightness=b,
        masks=masks,
        ref_masks=ref_masks,
        blur=jnp.float32(0.0),
    )


def _gauss_blur(img: Float[Array, "s s"], sigma: Float[Array, ""]) -> Float[Array, "s s"]:
    """Separable 7-tap Gaussian blur (``sigma -> 0`` is the identity)."""
    k = jnp.arange(-3, 4, dtype=jnp.float32)
    w = jnp.exp(-0.5 * k**2 / jnp.maximum(sigma, 1e-3) ** 2)
    w = w / w.sum()
    p = jnp.pad(img, 3, mode="edge")
    rows = sum(w[i] * p[i : i + img.shape[0], 3:-3] for i in range(7))
    pr = jnp.pad(rows, ((0, 0), (3, 3)), mode="edge")
    return sum(w[i] * pr[:, i : i + img.shape[1]] for i in range(7))


def hand_centre(body: Float[Array, "... 2"], opening) -> Float[Array, "... 2"]:
    """Where the hand of a body at ``body`` sits for envelope ``opening``."""
    return body + jnp.stack([4.0 + 0 * opening, 2.0 - 4.0 * opening], -1)


def render_body(
    static: AVStatic, bx, by, opening, brightness, blur
) -> tuple[Float[Array, "s s 1"], Float[Array, "s s 2"]]:
    """One talking-body frame and its (head, hand) masks."""
    x, y = _grid(static.size)
    body = jnp.exp(-0.5 * (((x - bx) / 2.2) ** 2 + ((y - by - 1.5) / 3.2) ** 2))
    head = _disc(x, y, bx, by - 4.5, 1.8, soft=0.6)
    img = -1.0 + (brightness + 1.0) * jnp.clip(body + head, 0.0, 1.0)
    hx, hy = hand_centre(jnp.stack([bx, by]), opening)
    box = jax.nn.sigmoid((1.5 - jnp.abs(x - hx)) / 0.2) * jax.nn.sigmoid(
        (1.5 - jnp.abs(y - hy)) / 0.2
    )
    checker = jnp.cos(jnp.pi * (x - hx + 0.5)) * jnp.cos(jnp.pi * (y - hy + 0.5))
    hand = box * (0.6 + (0.2 + 0.8 * opening) * 0.4 * checker)
    alpha = _gauss_blur(box, blur)
    img = img * (1 - alpha) + _gauss_blur(hand, blur)
    hand_mask = jax.nn.sigmoid((2.5 - jnp.maximum(jnp.abs(x - hx), jnp.abs(y - hy))) / 0.2)
    return img[..., None], jnp.stack([head, hand_mask], -1)


def talking_body(key: PRNGKeyArray, n_frames: int, static: AVStatic = AVStatic()) -> AVClip:
    """A talking-body video (see the module docstring); ``blur`` ~ U[0, 1.2] per video."""
    ke, kw, kb, kd, kbl = jax.random.split(key, 5)
    env = speech_envelope(ke, n_frames, static.fps)
    b = jax.random.uniform(kb, (), minval=0.2, maxval=0.7)
    blur = jax.random.uniform(kbl, (), maxval=1.2)
    t = jnp.arange(n_frames, dtype=jnp.float32)[:, None]
    f = jax.random.uniform(kd, (2, 2), minval=0.01, maxval=0.05)
    ph = jax.random.uniform(jax.random.fold_in(kd, 1), (2, 2), maxval=2 * jnp.pi)
    drift = 0.6 * jnp.sum(
        jnp.sin(2 * jnp.pi * f[None, :, 0] * t + ph[None, :, 0]), -1, keepdims=True
    )
    drift2 = 0.6 * jnp.sum(
        jnp.sin(2 * jnp.pi * f[None, :, 1] * t + ph[None, :, 1]), -1, keepdims=True
    )
    c = static.size / 2
    bx, by = c - 1.5 + drift[:, 0], c + 0.5 + drift2[:, 0]
    frames, masks = jax.vmap(lambda x, y, a: render_body(static, x, y, a, b, blur))(bx, by, env)
    ref, ref_masks = render_body(
        static, jnp.float32(c - 1.5), jnp.float32(c + 0.5), 0.5, b, jnp.float32(0.0)
    )
    return AVClip(
        frames=frames,
        reference=ref,
        waveform=speech_waveform(kw, env, static),
        envelope=env,
        position=jnp.stack([bx, by], -1),
        brightness=b,
        masks=masks,
        ref_masks=ref_masks,
        blur=blur,
    )
