"""Classifier-free guidance over audio and reference with separate scales (Loopy/Hallo style).

``eps = e(∅a, ∅r) + s_ref [e(∅a, r) - e(∅a, ∅r)] + s_audio [e(a, r) - e(∅a, r)]``

(the multi-condition CFG of InstructPix2Pix applied to reference then audio); the three
predictions are one network call on a tripled batch. ``s_ref = s_audio = 1`` gives the fully
conditional ``e(a, r)``.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.diffusion.video.denoiser import VideoCond

ApplyFn = Callable[[Float[Array, "b ..."], Float[Array, " b"], VideoCond], Float[Array, "b ..."]]


def guided_eps(
    apply_fn: ApplyFn,
    x: Float[Array, "b t s s c"],
    t: Float[Array, " b"],
    cond: VideoCond,
    *,
    audio_scale: float | Float[Array, ""],
    ref_scale: float | Float[Array, ""],
) -> Float[Array, "b t s s c"]:
    """The guided noise prediction (see the module docstring); scales may be traced."""
    b = x.shape[0]
    tile = lambda v: jnp.concatenate([v, v, v], 0)
    big = jax.tree.map(tile, cond)
    no, yes = jnp.zeros((b,), bool), jnp.ones((b,), bool)
    big = big.replace(
        audio_keep=jnp.concatenate([no, no, yes]), ref_keep=jnp.concatenate([no, yes, yes])
    )
    if big.use_motion_feat is not None:
        big = big.replace(use_motion_feat=jnp.zeros((3 * b,), bool))
    e = apply_fn(tile(x), tile(jnp.broadcast_to(t, (b,))), big)
    e00, e0r, ear = e[:b], e[b : 2 * b], e[2 * b :]
    return e00 + ref_scale * (e0r - e00) + audio_scale * (ear - e0r)
