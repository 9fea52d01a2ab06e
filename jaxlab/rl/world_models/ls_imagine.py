"""LS-Imagine (Li, Wang et al., ICLR 2025): long short-term imagination on a Dreamer world model.

Pieces (paper §3 and the code of github.com/qiwang067/LS-Imagine), used by ``dreamer`` when its
config has ``ls``:

* **Intrinsic reward** (``concentration_reward.py``): the concentration score ``s_G = mean(M ⊙
  G) / mean(G)`` with ``M`` the affordance map and ``G`` the centred Gaussian ``exp(-(i -
  H/2)^2/(2σ_H^2) - (j - W/2)^2/(2σ_W^2))``, ``σ = sigma_frac (H, W)`` (0.5); it is largest when
  the affordance mass is in the middle of the view. As in the original's env wrappers
  (``concentration_wrapper.py``, ``clip_wrapper.py``), the reward paid on a real step is
  ``intrinsic_scale s_G [s_G > best_G] + relevance_scale s_C [s_C > best_C]``, ``s_C`` the
  MineCLIP (stand-in) score of the frame and ``best`` each score's best so far in the episode
  (``episode_best``; 0 at the episode's first observation): a score is paid only when it beats the
  episode's best, so progress towards the target pays and staring at it does not. The world
  model's intrinsic head learns that paid reward and the imagined reward is ``r + intrinsic``.
* **Jump flag**: zoom when ``sigmoid(kurtosis(M)) (max M - mean M)`` exceeds an adaptive
  threshold (a running mean of that statistic), and flag a jump when the zoomed view's intrinsic
  score exceeds the current one by more than ``zscore`` running standard deviations (2σ).
* **Jumpy transitions** in the RSSM: an extra one-hot "jump" action; the post-jump state is the
  posterior of the zoomed image; heads predict the jump flag (on ``feat_t``), the skipped steps
  Δ and the accumulated reward Ĝ (two-hot, on ``[feat_t, feat_{t+1}]``). Labels from the real
  sequence: Δ is the number of steps until the real intrinsic score first reaches the zoomed
  one (jumps whose target is not reached inside the sampled sequence are not trained on), Ĝ the
  discounted reward collected on the skipped steps, and the post-jump reward the reward on
  arrival.
* **Behaviour in imagination**: jump when ``sigmoid(jump)·(1 - end) > 0.5``, gated by a coin of
  probability ``jump_prob`` (0.7, ``probability_to_bool``); the long-short mixed lambda return
  ``R_t = γ^(Δ-1) r_t + Ĝ_t + γ^Δ [(1-λ) V + λ R_{t+1}]`` (``returns.mixed_lambda_return``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from jaxlab.core.config import ConfigError


@dataclasses.dataclass(frozen=True)
class LSConfig:
    """LS-Imagine's settings (paper defaults where it has them); the optimiser of the relevance
    model and the affordance predictor is ``dreamer.DreamerOptim.affordance``.

    Attributes:
        jump_prob: gate probability of an imagined jump (0.7).
        intrinsic_scale: weight of the concentration score (the original's ``dense_reward``, 0.01).
        relevance_scale: weight of the MineCLIP (stand-in) score (the original's 0.01).
        episode_best: pay a score only when it beats the episode's best so far (the original's
            wrappers); ``False`` pays every step's score.
        sigma_frac: Gaussian width as a fraction of the map side (0.5).
        zscore: jump when the zoomed score beats the current by this many std (2).
        box, stride, frames: sliding boxes of the offline labels and their zoom videos.
        stats_decay: EMA decay of the adaptive threshold and the score statistics.
        label_images: images per training step that get fresh offline labels.
        jump_loss_scale: weight of the jumpy-transition loss in the world-model loss (zoomed-view
            reconstruction, arrival reward, Δ and Ĝ heads, KL; 1 as in the original). 0 trains no
            jumpy transition: an ablation, for use with ``jump_prob=0``.
    """

    jump_prob: float = 0.7
    intrinsic_scale: float = 0.01
    relevance_scale: float = 0.01
    episode_best: bool = True
    sigma_frac: float = 0.5
    zscore: float = 2.0
    box: int = 16
    stride: int = 8
    frames: int = 4
    stats_decay: float = 0.99
    label_images: int = 4
    jump_loss_scale: float = 1.0

    def __post_init__(self):
        if not 0.0 <= float(self.jump_prob) <= 1.0:
            raise ConfigError("jump_prob", self.jump_prob, "a probability in [0, 1]")
        for name in ("intrinsic_scale", "relevance_scale", "jump_loss_scale", "zscore"):
            if not float(getattr(self, name)) >= 0.0:
                raise ConfigError(name, getattr(self, name), "a float >= 0")
        if float(self.jump_loss_scale) == 0.0 and float(self.jump_prob) > 0.0:
            raise ConfigError(
                "jump_loss_scale",
                self.jump_loss_scale,
                f"> 0 while jump_prob={self.jump_prob} > 0 (imagined jumps would go through an "
                "untrained jumpy transition); set jump_prob=0 for this ablation",
            )
        if not 0.0 < float(self.sigma_frac):
            raise ConfigError("sigma_frac", self.sigma_frac, "a float > 0")
        for name in ("box", "stride", "frames", "label_images"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(name, v, "an int >= 1")
        if not 0.0 <= float(self.stats_decay) < 1.0:
            raise ConfigError("stats_decay", self.stats_decay, "a float in [0, 1)")


def gaussian(h: int, w: int, sigma_frac: float) -> Float[Array, "h w"]:
    """The centred Gaussian ``G`` with ``σ = sigma_frac (h, w)`` (pixel centres)."""
    i = jnp.arange(h, dtype=jnp.float32) + 0.5 - h / 2
    j = jnp.arange(w, dtype=jnp.float32) + 0.5 - w / 2
    si, sj = sigma_frac * h, sigma_frac * w
    return jnp.exp(-(i[:, None] ** 2) / (2 * si**2) - j[None, :] ** 2 / (2 * sj**2))


def intrinsic_reward(m: Float[Array, "*b h w"], sigma_frac: float = 0.5) -> Float[Array, "*b"]:
    """``mean(M ⊙ G) / mean(G)`` over the last two axes."""
    g = gaussian(m.shape[-2], m.shape[-1], sigma_frac)
    g = g.reshape((1,) * (m.ndim - 2) + g.shape)
    return jnp.mean(m * g, (-2, -1)) / jnp.mean(g)


def episode_best_reward(
    score: Float[Array, "*b"], best: Float[Array, "*b"], is_first: Bool[Array, "*b"]
) -> tuple[Float[Array, "*b"], Float[Array, "*b"]]:
    """``(paid, best')``: ``score`` if it beats the episode's best so far, else 0, and the new
    best. The best restarts from 0 at an episode's first observation (``is_first``)."""
    best = jnp.where(is_first, 0.0, best)
    return jnp.where(score > best, score, 0.0), jnp.maximum(best, score)


def zoom_statistic(m: Float[Array, "*b h w"]) -> Float[Array, "*b"]:
    """``sigmoid(kurtosis(M)) (max M - mean M)``, kurtosis the excess kurtosis of the values."""
    flat = m.reshape(m.shape[:-2] + (-1,))
    mu = flat.mean(-1, keepdims=True)
    var = jnp.mean((flat - mu) ** 2, -1)
    kurt = jnp.mean((flat - mu) ** 4, -1) / jnp.maximum(var**2, 1e-12) - 3.0
    return jax.nn.sigmoid(kurt) * (flat.max(-1) - mu[..., 0])


def jump_flag(
    stat: Float[Array, "*b"],
    score: Float[Array, "*b"],
    zoomed_score: Float[Array, "*b"],
    threshold: Float[Array, ""],
    score_std: Float[Array, ""],
    zscore: float,
) -> Bool[Array, "*b"]:
    """Zoom (``stat > threshold``) and the zoomed score beats the current by ``zscore`` std."""
    return (stat > threshold) & (zoomed_score - score > zscore * score_std)


def imagined_jump(
    jump_logit: Float[Array, "*b"],
    cont_prob: Float[Array, "*b"],
    gate: Float[Array, "*b"],
    jump_prob: float,
) -> Bool[Array, "*b"]:
    """The behaviour's jump decision: ``sigmoid(jump)·(1 - end) > 0.5`` and ``gate < jump_prob``
    (``gate`` uniform on [0, 1])."""
    return (jax.nn.sigmoid(jump_logit) * cont_prob > 0.5) & (gate < jump_prob)


def jump_labels(
    jump: Bool[Array, "b l"],
    score: Float[Array, "b l"],
    zoomed_score: Float[Array, "b l"],
    reward: Float[Array, "b l"],
    is_first: Bool[Array, "b l"],
    gamma: float,
) -> tuple[Float[Array, "b l"], Float[Array, "b l"], Float[Array, "b l"], Bool[Array, "b l"]]:
    """Δ, Ĝ, arrival reward and validity of the jump at each step of real sequences.

    For a flagged step ``t``, Δ is the least ``k >= 1`` with ``score[t + k] >= zoomed_score[t]``
    inside the sequence and the same episode; Ĝ ``= Σ_{j=1}^{Δ-1} γ^(j-1) reward[t + j]``, the
    arrival reward ``reward[t + Δ]``; valid when flagged and reached.
    """
    length = jump.shape[1]
    k = jnp.arange(length)
    offs = k[None, :] - k[:, None]  # [t, t'] = t' - t
    ahead = offs >= 1
    # an episode boundary at t'' in (t, t'] cuts the path
    first_idx = jnp.where(is_first, k[None, :], length)  # [b, l]
    # next episode start after t: min over t'' > t of first_idx
    nxt_first = jnp.min(jnp.where(ahead[None], first_idx[:, None, :], length), -1)  # [b, t]
    same_ep = k[None, None, :] < nxt_first[:, :, None]  # [b, t, t']
    reached = ahead[None] & same_ep & (score[:, None, :] >= zoomed_score[:, :, None])
    any_reached = reached.any(-1)
    delta = jnp.where(any_reached, jnp.argmax(reached, -1) - k[None, :], 1).astype(jnp.float32)
    within = ahead[None] & (offs[None] < delta[:, :, None])  # skipped steps t+1 .. t+Δ-1
    disc = jnp.power(gamma, jnp.maximum(offs - 1, 0).astype(jnp.float32))
    acc = jnp.sum(jnp.where(within, disc[None] * reward[:, None, :], 0.0), -1)
    arrive_idx = jnp.clip(k[None, :] + delta.astype(jnp.int32), 0, length - 1)
    arrival = jnp.take_along_axis(reward, arrive_idx, 1)
    valid = jump & any_reached
    return delta, acc, arrival, valid
