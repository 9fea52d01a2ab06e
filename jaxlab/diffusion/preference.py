"""Preference fine-tuning of diffusion models: Diffusion-DPO, DSPO and SFT on winners.

Setting (``huaishengzhu/DSPO:train.py``, a fork of the Diffusion-DPO trainer): a pair (x_w, x_l) of a
preferred and a dispreferred sample shares one time t and one noise eps,
x^w_t = alpha_t x_w + sigma_t eps and x^l_t = alpha_t x_l + sigma_t eps. With per-sample mean squared
errors of the trained model theta and the frozen reference,

    m^theta_w = mean ||eps_theta(x^w_t, t) - eps||^2,  likewise m^theta_l, m^ref_w, m^ref_l,

the preference margin is (``scale_term = -0.5 * beta``)

    z = -(beta / 2) [(m^theta_w - m^theta_l) - (m^ref_w - m^ref_l)].

- Diffusion-DPO (Wallace et al. 2023): L = -log sigmoid(z) (the paper's T omega(lambda_t) folded into
  beta, as in its code).
- DSPO (Zhu et al., ICLR 2025), SD1.5 branch: L = mean ||(eps_theta(x^w_t) - eps)
  - beta (1 - sigmoid(z)) (eps_theta(x^w_t) - eps_ref(x^w_t))||^2: score matching on the winner
  towards the target eps + beta (1 - sigmoid(z)) (eps_theta - eps_ref). The loser enters only
  through z; z is not stop-gradiented in the code (``stop_grad_weight`` offers it). With beta = 0
  this is denoising score matching on the winners.
- DSPO, SDXL branch (``variant="sdxl"``): with d = batch mean of mean ||eps_theta - eps_ref||^2 on
  the winners, L = mean ||(1 - sigmoid(z)) (eps_theta - eps_ref)||^2 if d >= 0.1, else
  mean (1 - sigmoid(z))^2 (no score-matching term, as in the DSPO authors' code).
- SFT: denoising score matching on the winners only.

All losses require noise prediction (the code asserts ``prediction_type == "epsilon"``).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.diffusion.losses import sample_noisy
from jaxlab.diffusion.model_wrapper import expand_to
from jaxlab.diffusion.schedules import Schedule

METHODS: tuple[str, ...] = ("dspo", "dpo", "sft")
EpsModel = Callable[[Float[Array, "batch ..."], Float[Array, " batch"]], Float[Array, "batch ..."]]


def _per_sample_mse(
    a: Float[Array, "batch ..."], b: Float[Array, "batch ..."]
) -> Float[Array, " batch"]:
    return jnp.mean(((a - b) ** 2).reshape(a.shape[0], -1), axis=-1)


def preference_margin(
    eps_w: Float[Array, "batch ..."],
    eps_l: Float[Array, "batch ..."],
    ref_w: Float[Array, "batch ..."],
    ref_l: Float[Array, "batch ..."],
    noise: Float[Array, "batch ..."],
    *,
    beta: float | Float[Array, ""],
) -> Float[Array, " batch"]:
    """z = -(beta/2) [(m^theta_w - m^theta_l) - (m^ref_w - m^ref_l)] per pair (module docstring)."""
    model_diff = _per_sample_mse(eps_w, noise) - _per_sample_mse(eps_l, noise)
    ref_diff = _per_sample_mse(ref_w, noise) - _per_sample_mse(ref_l, noise)
    return -0.5 * beta * (model_diff - ref_diff)


def diffusion_dpo_loss(
    eps_w, eps_l, ref_w, ref_l, noise, *, beta: float | Float[Array, ""]
) -> tuple[Float[Array, ""], Float[Array, " batch"]]:
    """Diffusion-DPO: mean -log sigmoid(z). Returns (loss, z)."""
    z = preference_margin(eps_w, eps_l, ref_w, ref_l, noise, beta=beta)
    return jnp.mean(jax.nn.softplus(-z)), z


def dspo_loss(
    eps_w,
    eps_l,
    ref_w,
    ref_l,
    noise,
    *,
    beta: float | Float[Array, ""],
    stop_grad_weight: bool = False,
    variant: str = "sd15",
) -> tuple[Float[Array, ""], Float[Array, " batch"]]:
    """DSPO (module docstring; ``variant`` "sd15" or "sdxl"). Returns (loss, z)."""
    z = preference_margin(eps_w, eps_l, ref_w, ref_l, noise, beta=beta)
    w = 1.0 - jax.nn.sigmoid(z)
    if stop_grad_weight:
        w = jax.lax.stop_gradient(w)
    pred2 = eps_w - ref_w
    if variant == "sd15":
        resid = (eps_w - noise) - beta * expand_to(w, eps_w) * pred2
        return jnp.mean(resid**2), z
    if variant == "sdxl":
        d = jnp.mean(_per_sample_mse(eps_w, ref_w))
        big = jnp.mean((expand_to(w, eps_w) * pred2) ** 2)
        small = jnp.mean(w**2)
        return jnp.where(d >= 0.1, big, small), z
    raise ValueError(f"variant: got {variant!r}, expected 'sd15' or 'sdxl'")


def sft_loss(eps_w, noise) -> Float[Array, ""]:
    """Supervised fine-tuning: noise-prediction DSM on the winners."""
    return jnp.mean((eps_w - noise) ** 2)


def pair_predictions(
    key: PRNGKeyArray,
    model: EpsModel,
    reference: EpsModel,
    x_w: Float[Array, "batch ..."],
    x_l: Float[Array, "batch ..."],
    schedule: Schedule,
):
    """Noise predictions of the model and the frozen reference on a batch of pairs.

    One t ~ U[t_min, t_max] and one eps per pair, shared by winner and loser (drawn exactly as
    :func:`jaxlab.diffusion.losses.eps_loss` draws them for x_w, so the losses can be compared).
    Returns (eps_w, eps_l, ref_w, ref_l, noise, t).
    """
    t, noise, xw_t = sample_noisy(key, x_w, schedule)
    xl_t = expand_to(schedule.alpha(t), x_l) * x_l + expand_to(schedule.sigma(t), x_l) * noise
    b = x_w.shape[0]
    xs = jnp.concatenate([xw_t, xl_t])
    ts = jnp.concatenate([t, t])
    out = model(xs, ts)
    ref = jax.lax.stop_gradient(reference(xs, ts))
    return out[:b], out[b:], ref[:b], ref[b:], noise, t


def preference_loss(
    key: PRNGKeyArray,
    model: EpsModel,
    reference: EpsModel,
    x_w: Float[Array, "batch ..."],
    x_l: Float[Array, "batch ..."],
    schedule: Schedule,
    *,
    method: str,
    beta: float | Float[Array, ""],
    stop_grad_weight: bool = False,
    variant: str = "sd15",
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """The loss of ``method`` ("dspo", "dpo" or "sft") on a batch of pairs, and metrics.

    Metrics: ``implicit_acc`` (fraction of pairs with z > 0), ``margin`` (mean z), ``model_mse``
    and ``ref_mse`` (mean of winner and loser errors), as logged by the DSPO trainer.
    """
    if method not in METHODS:
        raise ValueError(f"method: got {method!r}, expected one of {METHODS}")
    eps_w, eps_l, ref_w, ref_l, noise, _ = pair_predictions(
        key, model, reference, x_w, x_l, schedule
    )
    if method == "dspo":
        loss, z = dspo_loss(
            eps_w,
            eps_l,
            ref_w,
            ref_l,
            noise,
            beta=beta,
            stop_grad_weight=stop_grad_weight,
            variant=variant,
        )
    elif method == "dpo":
        loss, z = diffusion_dpo_loss(eps_w, eps_l, ref_w, ref_l, noise, beta=beta)
    else:
        loss = sft_loss(eps_w, noise)
        z = preference_margin(eps_w, eps_l, ref_w, ref_l, noise, beta=beta)
    metrics = dict(
        implicit_acc=jnp.mean((z > 0).astype(jnp.float32)),
        margin=jnp.mean(z),
        model_mse=0.5
        * (jnp.mean(_per_sample_mse(eps_w, noise)) + jnp.mean(_per_sample_mse(eps_l, noise))),
        ref_mse=0.5
        * (jnp.mean(_per_sample_mse(ref_w, noise)) + jnp.mean(_per_sample_mse(ref_l, noise))),
    )
    return loss, metrics


def implicit_accuracy(
    key: PRNGKeyArray,
    model: EpsModel,
    reference: EpsModel,
    x_w: Float[Array, "n ..."],
    x_l: Float[Array, "n ..."],
    schedule: Schedule,
    *,
    num_draws: int = 16,
) -> Float[Array, ""]:
    """Fraction of pairs whose margin, averaged over ``num_draws`` shared (t, eps) draws, is > 0.

    beta > 0 only scales z, so it does not change the sign; beta = 1 is used.
    """

    def one(k):
        eps_w, eps_l, ref_w, ref_l, noise, _ = pair_predictions(
            k, model, reference, x_w, x_l, schedule
        )
        return preference_margin(eps_w, eps_l, ref_w, ref_l, noise, beta=1.0)

    z = jax.lax.map(one, jax.random.split(key, num_draws))
    return jnp.mean((jnp.mean(z, axis=0) > 0).astype(jnp.float32))


def label_pairs(
    key: PRNGKeyArray,
    x_a: Float[Array, "n ..."],
    x_b: Float[Array, "n ..."],
    reward: Callable[[Float[Array, "n ..."]], Float[Array, " n"]],
    *,
    scale: float = 1.0,
) -> tuple[Float[Array, "n ..."], Float[Array, "n ..."]]:
    """Bradley-Terry labels: a is preferred with probability sigmoid(scale (r(a) - r(b))).

    Returns (winners, losers).
    """
    p = jax.nn.sigmoid(scale * (reward(x_a) - reward(x_b)))
    a_wins = jax.random.uniform(key, p.shape) < p
    sel = expand_to(a_wins, x_a)
    return jnp.where(sel, x_a, x_b), jnp.where(sel, x_b, x_a)
