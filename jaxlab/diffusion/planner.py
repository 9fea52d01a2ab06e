"""Diffusion Planner (Zheng et al., ICLR 2025): joint prediction and planning as one generation.

A DiT generates the future states of the ego and its neighbours jointly (the paper's §3).
Trajectories are x in R^{A x (1 + T) x 4}, A = 1 + N agents (ego first), T future steps, each
state (x, y, cos h, sin h) in the ego frame; index 0 is the current state, fixed in training and
re-imposed after every solver step (the samplers' ``correct_fn``, the original's
``correcting_xt_fn``). States are normalised per dimension, x_n = (x - mean) / std.

Scene inputs (the token format of :mod:`jaxlab.envs.driving`, passed as a dict of arrays with a
leading batch axis): ``ego`` (3,), ``current`` (A, 4), ``neighbours`` (N, Hp, 8) with
``neighbour_valid`` (N,), per-step ``neighbour_step_valid`` (N, Hp) and ``neighbour_types`` (N, 3)
one-hot (vehicle, pedestrian, bicycle), ``static`` (S, 6) with ``static_valid``, ``lanes``
(L, P, 4) with ``lane_valid``, ``lane_boundaries`` (L, P, 4) (left and right boundary offsets
from the centre points), ``lane_traffic_light`` (L, 4) one-hot (green, yellow, red, unknown),
``lane_speed_limit`` (L,) m/s with ``lane_speed_limit_valid`` (L,) (the original's
``lanes_has_speed_limit``), ``route`` (R, P, 4) with ``route_valid`` (R,).

Network (``model/module/*`` of the original, at small width):

- encoder (``encoder.py``): MLP-Mixer tokens (token mixing over the Hp past steps or the P lane
  points, then channel mixing, mean-pooled) for neighbours (each step's features zeroed where the
  step is invalid, plus the step's validity as a feature; an agent-type embedding added) and lanes
  (centre and boundaries; a traffic-light embedding and a speed-limit embedding, a learned
  "unknown" vector where no limit is known, added), an MLP for parked cars and for the ego's
  motion state, a position embedding of each token's (x, y, cos, sin) and a token-kind embedding,
  fused by a pre-norm transformer with the key padding mask; padded tokens enter as zeros and
  leave as zeros, so nothing of a masked entry's content reaches the output;
- decoder: per-agent token = MLP(flatten((1 + T) x 4)) + ego/neighbour embedding; DiT blocks
  with adaLN-Zero on (route Mixer encoding + time embedding), self-attention over agents with the
  validity mask, cross-attention to the encoder tokens (non-residual as in the original's code,
  ``cross_residual`` for the residual form); an adaLN final layer regresses the x_0 estimate.

Training (``loss.py``): VP-linear SDE (beta in [0.1, 20]), t ~ U[1e-3, 1], x_0 prediction,
L = mean_{valid neighbours, t} ||D - x_0||^2 + alpha mean_{ego, t} ||D - x_0||^2 (squared error
summed over the 4 state dimensions, index 0 excluded: it is pinned).

Sampling (``decoder.py``): x_T = temperature * N(0, I) with the current state pinned, DPM-Solver++
(2M, multistep) over logSNR-uniform steps, then one final data prediction (``denoise_to_zero``);
optional classifier guidance by the energies of :mod:`jaxlab.diffusion.planner_energies` through
:func:`jaxlab.diffusion.guidance.windowed_guidance`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from jaxlab.core.config import ConfigError
from jaxlab.diffusion import samplers
from jaxlab.diffusion.dit import DiTBlock
from jaxlab.diffusion.guidance import windowed_guidance
from jaxlab.diffusion.losses import capped_snr_weight, x0_errors
from jaxlab.diffusion.model_wrapper import data_from_noise, expand_to, model_wrapper
from jaxlab.diffusion.planner_energies import make_energy
from jaxlab.diffusion.precond import edm_coefficients, edm_loss_weight
from jaxlab.diffusion.schedules import VPLinear, get_time_steps
from jaxlab.diffusion.time_embedding import sinusoidal_embedding
from jaxlab.nn import MLP, MultiHeadAttention

SCENE_KEYS: tuple[str, ...] = (
    "ego",
    "current",
    "neighbours",
    "neighbour_valid",
    "neighbour_step_valid",
    "neighbour_types",
    "static",
    "static_valid",
    "lanes",
    "lane_valid",
    "lane_boundaries",
    "lane_traffic_light",
    "lane_speed_limit",
    "lane_speed_limit_valid",
    "route",
    "route_valid",
)


# features per token of each observation kind that the observation normalisation covers
OBS_FEATURES: dict[str, int] = {"ego": 3, "agent": 8, "static": 6, "lane": 4}
F6 = tuple[float, float, float, float, float, float]
F8 = tuple[float, float, float, float, float, float, float, float]


@dataclasses.dataclass(frozen=True)
class PlannerConfig:
    """Static configuration of the planner (sizes fix shapes; hashable, a static argument).

    Attributes:
        n_neighbours, history, n_static, n_lanes, lane_points, n_route, horizon: input capacities
            (must match the scene tokens) and the number T of generated future steps. ``n_route``
            is the number of route lanes (the original's 25; the driving world's routes end
            within four 60 m windows, so its presets use fewer).
        width, heads, encoder_depth, decoder_depth: network sizes (original: 192, 6, 3, 3).
        cross_residual: False reproduces the original's non-residual cross-attention stage.
        ego_weight: alpha of the loss.
        x0_skip: False (the original) regresses x_0 directly, D = F(x_t, t); True adds a skip
            path, D = alpha_t x_t + sigma_t F (F is -v of Salimans & Ho 2022), so that at low
            noise D follows x_t by construction. Not the paper's; off by default (its effect on
            the route modes is in ``experiments/planner_modes``).
        skip_sigma_data: EDM's sigma_data of the ``x0_skip`` path, D = c_skip x_t / alpha_t +
            c_out F at sigma_t / alpha_t (:func:`jaxlab.diffusion.precond.edm_coefficients`);
            1.0 is alpha_t x_t + sigma_t F.
        skip_edm_weight: with ``x0_skip``, weigh each sample's x_0 errors by EDM's
            lambda = 1 / c_out^2 (Karras et al. 2022, eq. 8), so that F's error counts alike at
            every noise level. Not the paper's; off by default.
        snr_weight_cap: 0 (the original) weighs the x_0 loss uniformly in t; a value > 1 weighs
            each sample's errors by ``losses.capped_snr_weight`` (clip(SNR(t), 1, cap)), charging
            low noise levels more. Not the paper's; off by default.
        steps, order, temperature: DPM-Solver++ steps (10), order (2), and the scale of x_T (0.5).
        guidance: ((energy name, weight), ...) composed at sampling; weight 0 entries are dropped.
        guidance_window: (t_lo, t_hi) of the guidance, in [0, 1] (the original's (0.005, 0.1)).
            The original's window leaves out the final data prediction at t_min = 1e-3; a
            window that reaches below t_min adds one energy step to it,
            x_0 <- x_0 - (sigma_min^2 / alpha) w grad E, which matters for a denoiser that
            ignores x_t (it would undo the guided steps).
        guidance_max_shift: the most, in metres, that one guided noise prediction may move any
            ego plan point of the data prediction (a push that would move one further is scaled
            down as a whole, its direction and smoothness along time kept; see
            :func:`cap_ego_shift`); 0 leaves the push unbounded (the original's). At the default
            1 m, collision weights up to 20 leave the closed-loop jump and backward-step rates
            those of unguided plans; it also bounds the drivable push (which then no longer
            keeps plans on the road better; ``experiments/planner_guidance``).
        norm_mean, norm_std: per-dimension normalisation of (x, y, cos, sin) (the original's
            ``normalization.json``; the defaults are :func:`fit_normalization` of expert logs of
            the driving world, 64 scenes x 30 steps, all scene types).
        obs_norm: normalise the scene tokens per feature before the encoder, x_n = (x - mean) /
            std, padded entries kept at zero (the original's ``ObservationNormalizer``); off by
            default, the figures of ``experiments/planner_modes`` were made without it.
        ego_obs_mean, ego_obs_std: of the ego token (speed, acceleration, yaw rate);
            agent_obs_*: of the neighbours' history tokens (x, y, cos, sin, vx, vy, length,
            width); static_obs_*: of the parked cars (x, y, cos, sin, length, width);
            lane_obs_*: of lane and route points (x, y, cos, sin). The defaults are
            :func:`fit_observation_normalization` of the same expert logs as ``norm_*``.
        dt: time between trajectory steps (s), used by the energies.
        target_speed: the target-speed energy's speed (m/s).
    """

    n_neighbours: int = 4
    history: int = 5
    n_static: int = 2
    n_lanes: int = 6
    lane_points: int = 16
    n_route: int = 1
    horizon: int = 16
    width: int = 64
    heads: int = 4
    encoder_depth: int = 2
    decoder_depth: int = 2
    cross_residual: bool = False
    ego_weight: float = 1.0
    x0_skip: bool = False
    skip_sigma_data: float = 1.0
    skip_edm_weight: bool = False
    snr_weight_cap: float = 0.0
    steps: int = 10
    order: int = 2
    temperature: float = 0.5
    guidance: tuple[tuple[str, float], ...] = ()
    guidance_window: tuple[float, float] = (0.005, 0.1)
    guidance_max_shift: float = 1.0
    norm_mean: tuple[float, float, float, float] = (21.0, -0.65, 0.77, -0.06)
    norm_std: tuple[float, float, float, float] = (23.0, 12.9, 0.45, 0.45)
    obs_norm: bool = False
    ego_obs_mean: tuple[float, float, float] = (6.31, -0.208, 0.0176)
    ego_obs_std: tuple[float, float, float] = (0.971, 0.609, 0.118)
    agent_obs_mean: F8 = (27.0, -0.845, 0.8, -0.105, 4.85, -0.666, 4.5, 2.0)
    agent_obs_std: F8 = (18.5, 9.66, 0.359, 0.468, 2.54, 2.97, 0.1, 0.1)
    static_obs_mean: F6 = (18.2, -2.16, 0.999, 0.003, 4.5, 2.0)
    static_obs_std: F6 = (16.3, 1.53, 0.1, 0.1, 0.1, 0.1)
    lane_obs_mean: tuple[float, float, float, float] = (14.3, -0.597, 0.606, -0.157)
    lane_obs_std: tuple[float, float, float, float] = (19.1, 12.1, 0.638, 0.448)
    dt: float = 0.1
    target_speed: float = 8.0

    def __post_init__(self):
        for name in (
            "n_neighbours",
            "history",
            "n_static",
            "n_lanes",
            "lane_points",
            "n_route",
            "horizon",
            "width",
            "heads",
            "encoder_depth",
            "decoder_depth",
            "steps",
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(name, v, "a positive int")
        if self.width % self.heads or self.width % 2:
            raise ConfigError("width", self.width, f"an even multiple of heads={self.heads}")
        if self.order not in (1, 2, 3):
            raise ConfigError("order", self.order, "1, 2 or 3")
        if not self.temperature > 0:
            raise ConfigError("temperature", self.temperature, "a float > 0")
        if not self.dt > 0:
            raise ConfigError("dt", self.dt, "a time step > 0 (s)")
        if not self.target_speed >= 0:
            raise ConfigError("target_speed", self.target_speed, "a speed >= 0 (m/s)")
        if not self.ego_weight >= 0:
            raise ConfigError("ego_weight", self.ego_weight, "a loss weight >= 0")
        lo, hi = self.guidance_window
        if not 0.0 <= lo < hi <= 1.0:
            raise ConfigError(
                "guidance_window", self.guidance_window, "(t_lo, t_hi), 0 <= t_lo < t_hi <= 1"
            )
        if not (math.isfinite(self.guidance_max_shift) and self.guidance_max_shift >= 0):
            raise ConfigError(
                "guidance_max_shift", self.guidance_max_shift, "a distance >= 0 (m; 0: no cap)"
            )
        if not (self.snr_weight_cap == 0 or self.snr_weight_cap > 1):
            raise ConfigError("snr_weight_cap", self.snr_weight_cap, "0 (off) or a float > 1")
        if not self.skip_sigma_data > 0:
            raise ConfigError("skip_sigma_data", self.skip_sigma_data, "a float > 0")
        if self.skip_edm_weight and not self.x0_skip:
            raise ConfigError("skip_edm_weight", True, "False unless x0_skip is True")
        if self.skip_edm_weight and self.snr_weight_cap:
            raise ConfigError(
                "snr_weight_cap", self.snr_weight_cap, "0 when skip_edm_weight is True"
            )
        if any(s <= 0 for s in self.norm_std):
            raise ConfigError("norm_std", self.norm_std, "four floats > 0")
        for kind, n in OBS_FEATURES.items():
            for part in ("mean", "std"):
                name = f"{kind}_obs_{part}"
                v = getattr(self, name)
                if len(v) != n or (part == "std" and any(s <= 0 for s in v)):
                    raise ConfigError(name, v, f"{n} floats" + (" > 0" if part == "std" else ""))
        # validates names and weights (a clear error for an unknown energy)
        make_energy(self.guidance, {}, self, check_only=True)

    @property
    def n_agents(self) -> int:
        return 1 + self.n_neighbours

    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        """Per-scene shapes of the scene tokens the planner was built for."""
        n, p = self.n_neighbours, self.lane_points
        return {
            "ego": (3,),
            "current": (1 + n, 4),
            "neighbours": (n, self.history, 8),
            "neighbour_valid": (n,),
            "neighbour_step_valid": (n, self.history),
            "neighbour_types": (n, 3),
            "static": (self.n_static, 6),
            "static_valid": (self.n_static,),
            "lanes": (self.n_lanes, p, 4),
            "lane_valid": (self.n_lanes,),
            "lane_boundaries": (self.n_lanes, p, 4),
            "lane_traffic_light": (self.n_lanes, 4),
            "lane_speed_limit": (self.n_lanes,),
            "lane_speed_limit_valid": (self.n_lanes,),
            "route": (self.n_route, p, 4),
            "route_valid": (self.n_route,),
        }


def check_scene(cfg: PlannerConfig, scene: Mapping[str, Array], *, batched: bool = True) -> None:
    """Raise ``ConfigError`` naming the field when a scene does not fit the planner's capacities
    (shapes are static, so this runs at trace time, before compilation)."""
    for k, shape in cfg.input_shapes().items():
        if k not in scene:
            raise ConfigError(f"scene.{k}", None, f"an array of per-scene shape {shape}")
        got = tuple(np.shape(scene[k]))[1 if batched else 0 :]
        if got != shape:
            raise ConfigError(
                f"scene.{k}", got, f"per-scene shape {shape} (the planner's static capacity)"
            )


def check_finite(name: str, value) -> None:
    """Host-side check for NaN/inf in training data (a clear error naming the field)."""
    arr = np.asarray(value)
    if not np.all(np.isfinite(arr)):
        bad = int(np.sum(~np.isfinite(arr)))
        raise ConfigError(name, f"{bad} non-finite values", "finite trajectories (no NaN/inf)")


# ---------------------------------------------------------------------------------------------
# network
# ---------------------------------------------------------------------------------------------


class MixerBlock(nn.Module):
    """MLP-Mixer block (Tolstikhin et al. 2021): x += MLP_tok(LN(x)^T)^T; x += MLP_ch(LN(x))."""

    width: int

    @nn.compact
    def __call__(self, x: Float[Array, "... n w"]) -> Float[Array, "... n w"]:
        n = x.shape[-2]
        y = jnp.swapaxes(nn.LayerNorm(name="ln_tok")(x), -1, -2)
        x = x + jnp.swapaxes(MLP((2 * n, n), activation=nn.gelu, name="tok")(y), -1, -2)
        return x + MLP((2 * self.width, self.width), activation=nn.gelu, name="ch")(
            nn.LayerNorm(name="ln_ch")(x)
        )


class MixerEncoder(nn.Module):
    """(..., n, f) point sequences -> (..., width) tokens: embed, Mixer blocks, LN, mean pool."""

    width: int
    depth: int = 1

    @nn.compact
    def __call__(self, x: Float[Array, "... n f"]) -> Float[Array, "... w"]:
        h = nn.Dense(self.width, name="embed")(x)
        for i in range(self.depth):
            h = MixerBlock(self.width, name=f"mix{i}")(h)
        return jnp.mean(nn.LayerNorm(name="ln")(h), axis=-2)


def _masked(x: Array, valid: Array) -> Array:
    """``x`` with the entries ``valid`` (a prefix of its shape) rules out set to zero."""
    return jnp.where(valid.reshape(valid.shape + (1,) * (x.ndim - valid.ndim)), x, 0.0)


class SceneEncoder(nn.Module):
    """Scene tokens -> (tokens (B, K, W), mask (B, K), route encoding (B, W)), K = N + S + L + 1
    (neighbours, parked cars, lanes, the ego's motion state). The masking of the original's
    ``encoder.py``: a neighbour's invalid history steps are zeroed and flagged by a validity
    feature; padded neighbours, parked cars and lanes are zero tokens excluded as attention keys,
    and their outputs are zero; the route encoding is the mean over the valid route lanes."""

    cfg: PlannerConfig

    @nn.compact
    def __call__(self, scene):
        c = self.cfg
        w = c.width
        scene = normalize_scene(c, scene)
        types = self.param("types", nn.initializers.normal(0.02), (4, w))
        b = scene["ego"].shape[0]
        step_valid = scene["neighbour_step_valid"]
        nb_valid = scene["neighbour_valid"] & jnp.any(step_valid, -1)
        nb_in = jnp.concatenate(
            [_masked(scene["neighbours"], step_valid), step_valid[..., None].astype(jnp.float32)],
            -1,
        )
        nb = MixerEncoder(w, name="neighbours")(nb_in)
        nb = nb + nn.Dense(w, name="agent_type")(scene["neighbour_types"]) + types[0][None, None]
        st = MLP((w, w), activation=nn.gelu, name="static")(scene["static"]) + types[1][None, None]
        lane_in = jnp.concatenate([scene["lanes"], scene["lane_boundaries"]], -1)
        ln = MixerEncoder(w, name="lanes")(lane_in)
        unknown = self.param("unknown_speed_limit", nn.initializers.normal(0.02), (w,))
        limit = nn.Dense(w, name="speed_limit")(scene["lane_speed_limit"][..., None])
        limit = jnp.where(scene["lane_speed_limit_valid"][..., None], limit, unknown[None, None])
        ln = (
            ln
            + limit
            + nn.Dense(w, name="traffic_light")(scene["lane_traffic_light"])
            + types[2][None, None]
        )
        ego = (
            MLP((w, w), activation=nn.gelu, name="ego")(scene["ego"])[:, None]
            + types[3][None, None]
        )
        # position embedding: (x, y, cos, sin) now (neighbours), of the car, of the lane's middle
        mid = c.lane_points // 2
        pos = jnp.concatenate(
            [
                scene["neighbours"][:, :, -1, :4],
                scene["static"][..., :4],
                scene["lanes"][:, :, mid],
            ],
            1,
        )
        mask = jnp.concatenate(
            [nb_valid, scene["static_valid"], scene["lane_valid"], jnp.ones((b, 1), bool)], 1
        )
        tok = jnp.concatenate([nb, st, ln], 1) + nn.Dense(w, name="pos_emb")(pos)
        tok = _masked(jnp.concatenate([tok, ego], 1), mask)
        for i in range(c.encoder_depth):
            y, _ = MultiHeadAttention(
                n_heads=c.heads,
                head_dim=w // c.heads,
                causal=False,
                use_rope=False,
                name=f"attn{i}",
            )(nn.LayerNorm(name=f"ln_a{i}")(tok), padding_mask=mask)
            tok = tok + y
            tok = tok + MLP((4 * w, w), activation=nn.gelu, name=f"mlp{i}")(
                nn.LayerNorm(name=f"ln_m{i}")(tok)
            )
        tok = _masked(nn.LayerNorm(name="ln_out")(tok), mask)
        r = MixerEncoder(w, name="route")(scene["route"])  # (B, R, W)
        rv = scene["route_valid"].astype(r.dtype)[..., None]
        route = jnp.sum(_masked(r, scene["route_valid"]), 1) / jnp.maximum(jnp.sum(rv, 1), 1.0)
        return tok, mask, route


class TrajectoryDecoder(nn.Module):
    """The DiT over agents: (B, A, 1 + T, 4) noisy trajectories -> x_0 estimates (normalised)."""

    cfg: PlannerConfig

    @nn.compact
    def __call__(self, x, t, tokens, token_mask, route, agent_mask):
        c = self.cfg
        w = c.width
        b, a = x.shape[:2]
        tok = MLP((w, w), activation=nn.gelu, name="embed")(x.reshape(b, a, -1))
        agent = self.param("agent", nn.initializers.normal(0.02), (2, w))
        kind = jnp.concatenate([agent[:1], jnp.broadcast_to(agent[1:], (a - 1, w))], 0)
        tok = tok + kind[None]
        temb = sinusoidal_embedding(jnp.broadcast_to(t, (b,)) * 1000.0, w)
        temb = MLP((w, w), activation=nn.silu, name="time")(temb)
        y = route + temb
        for i in range(c.decoder_depth):
            tok = DiTBlock(w, c.heads, cross_residual=c.cross_residual, name=f"block{i}")(
                tok, y, mask=agent_mask, context=tokens, context_mask=token_mask
            )
        shift, scale = jnp.split(
            nn.Dense(2 * w, kernel_init=nn.initializers.zeros_init(), name="ada_out")(nn.silu(y)),
            2,
            axis=-1,
        )
        tok = nn.LayerNorm(use_scale=False, use_bias=False, name="ln_out")(tok)
        tok = tok * (1 + scale[:, None]) + shift[:, None]
        out = nn.Dense(x.shape[2] * 4, kernel_init=nn.initializers.zeros_init(), name="out")(tok)
        return out.reshape(x.shape)


class DiffusionPlannerNet(nn.Module):
    """Encoder + decoder; ``encode(scene)`` once per plan, ``decode(x, t, enc, scene)`` per step."""

    cfg: PlannerConfig

    def setup(self):
        self.encoder = SceneEncoder(self.cfg)
        self.decoder = TrajectoryDecoder(self.cfg)

    def encode(self, scene):
        return self.encoder(scene)

    def decode(self, x, t, enc, scene):
        tokens, mask, route = enc
        agent_mask = jnp.concatenate([jnp.ones((x.shape[0], 1), bool), scene["neighbour_valid"]], 1)
        return self.decoder(x, t, tokens, mask, route, agent_mask)

    def __call__(self, x, t, scene):
        return self.decode(x, t, self.encode(scene), scene)


# ---------------------------------------------------------------------------------------------
# normalisation, pinning, loss
# ---------------------------------------------------------------------------------------------


def normalize(cfg: PlannerConfig, x: Float[Array, "... 4"]) -> Float[Array, "... 4"]:
    mean = jnp.asarray(cfg.norm_mean, x.dtype).reshape((1,) * (x.ndim - 1) + (4,))
    std = jnp.asarray(cfg.norm_std, x.dtype).reshape((1,) * (x.ndim - 1) + (4,))
    return (x - mean) / std


def denormalize(cfg: PlannerConfig, x: Float[Array, "... 4"]) -> Float[Array, "... 4"]:
    mean = jnp.asarray(cfg.norm_mean, x.dtype).reshape((1,) * (x.ndim - 1) + (4,))
    std = jnp.asarray(cfg.norm_std, x.dtype).reshape((1,) * (x.ndim - 1) + (4,))
    return x * std + mean


def fit_normalization(
    future: np.ndarray, valid: np.ndarray
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-dimension mean and std of the valid agents' future states (the original's
    ``normalization.json``), std floored at 0.1."""
    return _masked_stats(future, valid)


def _masked_stats(x, valid=None) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Mean and std over the last axis's features of the entries ``valid`` selects (leading
    axes of ``x``), std floored at 0.1."""
    x = np.asarray(x)
    if valid is not None:
        x = x[np.asarray(valid, bool)]
    x = x.reshape(-1, x.shape[-1])
    return tuple(float(v) for v in x.mean(0)), tuple(float(v) for v in np.maximum(x.std(0), 0.1))


def fit_observation_normalization(
    logs: Mapping[str, np.ndarray],
) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
    """Per-feature mean and std of the valid scene tokens of expert logs, by observation kind
    (``PlannerConfig.<kind>_obs_mean/std``), std floored at 0.1 (so that constant features, the
    cars' sizes, map to 0)."""
    return {
        "ego": _masked_stats(logs["ego"]),
        "agent": _masked_stats(logs["neighbours"], logs["neighbour_valid"]),
        "static": _masked_stats(logs["static"], logs["static_valid"]),
        "lane": _masked_stats(logs["lanes"], logs["lane_valid"]),
    }


def normalize_scene(cfg: PlannerConfig, scene: Mapping[str, Array]) -> dict[str, Array]:
    """The scene with its tokens normalised per feature (``cfg.obs_norm``; the identity when
    off), padded entries left at zero."""
    scene = dict(scene)
    if not cfg.obs_norm:
        return scene
    for key, kind, valid in (
        ("ego", "ego", None),
        ("neighbours", "agent", "neighbour_valid"),
        ("static", "static", "static_valid"),
        ("lanes", "lane", "lane_valid"),
        ("route", "lane", "route_valid"),
    ):
        x = scene[key]
        shape = (1,) * (x.ndim - 1) + (-1,)
        mean = jnp.asarray(getattr(cfg, f"{kind}_obs_mean"), x.dtype).reshape(shape)
        std = jnp.asarray(getattr(cfg, f"{kind}_obs_std"), x.dtype).reshape(shape)
        x = (x - mean) / std
        if valid is not None:
            v = scene[valid]
            x = jnp.where(v.reshape(v.shape + (1,) * (x.ndim - v.ndim)), x, 0.0)
        scene[key] = x
    return scene


def pin_current(current_n: Float[Array, "B A 4"]) -> Callable:
    """The correction x[:, :, 0] <- current (normalised), for the samplers and the loss."""

    def correct(x, t):
        del t
        return x.at[:, :, 0].set(current_n.astype(x.dtype))

    return correct


def cap_ego_shift(cfg: PlannerConfig) -> Callable | None:
    """The guidance push's bound (``limit_fn`` of :func:`windowed_guidance`): a normalised
    data-prediction shift (B, A, 1 + T, 4) whose largest ego point displacement, in metres, m_b
    exceeds ``cfg.guidance_max_shift`` is scaled by max_shift / m_b per scene. None with no cap."""
    cap = float(cfg.guidance_max_shift)
    if cap == 0:
        return None

    def limit(shift):
        std = jnp.asarray(cfg.norm_std[:2], shift.dtype).reshape(1, 1, 2)
        d = jnp.sqrt(jnp.sum((shift[:, 0, :, :2] * std) ** 2, -1) + 1e-12)  # (B, 1 + T)
        scale = jnp.minimum(1.0, cap / jnp.max(d, -1))
        return shift * scale[:, None, None, None]

    return limit


def make_net(cfg: PlannerConfig) -> DiffusionPlannerNet:
    return DiffusionPlannerNet(cfg)


def denoise(
    params,
    x: Float[Array, "B A T1 4"],
    t: Float[Array, " B"],
    enc,
    scene: Mapping[str, Array],
    cfg: PlannerConfig,
    schedule: VPLinear,
) -> Float[Array, "B A T1 4"]:
    """The normalised x_0 estimate D(x_t, t) from the encoder output ``enc``. ``x0_skip``:
    :func:`jaxlab.diffusion.precond.edm_coefficients`' c_skip / c_out (sigma_data =
    ``skip_sigma_data``, sigma = sigma_t / alpha_t) applied to x_t / alpha_t; for sigma_data 1
    that is alpha_t x_t + sigma_t F (alpha_t^2 + sigma_t^2 = 1)."""
    out = make_net(cfg).apply(params, x, t, enc, scene, method=DiffusionPlannerNet.decode)
    if not cfg.x0_skip:
        return out
    tb = jnp.broadcast_to(t, x.shape[:1])
    alpha, sigma = (v.astype(x.dtype) for v in (schedule.alpha(tb), schedule.sigma(tb)))
    c_skip, c_out, _, _ = edm_coefficients(sigma / alpha, cfg.skip_sigma_data)
    return expand_to(c_skip / alpha, x) * x + expand_to(c_out, x) * out


def skip_loss_weight(
    schedule: VPLinear, sigma_data: float, t: Float[Array, " B"]
) -> Float[Array, " B"]:
    """:func:`jaxlab.diffusion.precond.edm_loss_weight` at sigma = sigma_t / alpha_t, for the
    x_0 errors of the ``x0_skip`` path."""
    return edm_loss_weight(schedule.sigma(t) / schedule.alpha(t), sigma_data)


def init_planner(key: PRNGKeyArray, cfg: PlannerConfig, scene: Mapping[str, Array]):
    """Parameters for a batch of scenes (used for the shapes only)."""
    check_scene(cfg, scene)
    b = np.shape(scene["current"])[0]
    x = jnp.zeros((b, cfg.n_agents, 1 + cfg.horizon, 4))
    bits = jax.random.bits(key, (4,), jnp.uint32)
    return make_net(cfg).init(jax.random.wrap_key_data(bits, impl="rbg"), x, jnp.zeros(b), scene)


def planner_loss(
    params,
    key: PRNGKeyArray,
    scene: Mapping[str, Array],
    future: Float[Array, "B A T 4"],
    cfg: PlannerConfig,
    schedule: VPLinear | None = None,
    scene_weight: Float[Array, " n"] | None = None,
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """The x_0 loss of the module docstring. ``future``: ground-truth future states (ego frame)
    with invalid neighbours' rows arbitrary (masked by ``scene["neighbour_valid"]``).

    ``scene_weight`` (B,), if given, weighs each scene's errors (importance weights over the
    training scenes, >= 0): the ego's term is the weighted mean of the scenes' ego errors, the
    neighbours' the weighted mean over valid neighbours. The optimum of the loss at a fixed scene
    (the conditional distribution of the futures given the scene) is unchanged; the weights move
    the network's capacity and the gradient's noise between kinds of scenes."""
    check_scene(cfg, scene)
    if scene_weight is not None and tuple(scene_weight.shape) != (future.shape[0],):
        raise ConfigError("scene_weight", tuple(scene_weight.shape), f"({future.shape[0]},)")
    if future.shape[1:] != (cfg.n_agents, cfg.horizon, 4):
        raise ConfigError(
            "future",
            tuple(future.shape[1:]),
            f"(agents, horizon, 4) = {(cfg.n_agents, cfg.horizon, 4)}",
        )
    schedule = VPLinear() if schedule is None else schedule
    net = make_net(cfg)
    nb_valid = scene["neighbour_valid"]
    valid = jnp.concatenate([jnp.ones_like(nb_valid[:, :1]), nb_valid], 1)
    # invalid agents' targets become zeros (a NaN placeholder there must not leak anywhere)
    future = jnp.where(valid[:, :, None, None], future, 0.0)
    cur_n = normalize(cfg, scene["current"])
    x0 = jnp.concatenate([cur_n[:, :, None], normalize(cfg, future)], 2)
    x0 = jnp.where(valid[:, :, None, None], x0, 0.0)
    enc = net.apply(params, scene, method=DiffusionPlannerNet.encode)

    def denoiser(xt, t):
        return denoise(params, xt, t, enc, scene, cfg, schedule)

    time_weight = None
    if cfg.snr_weight_cap:
        time_weight = functools.partial(capped_snr_weight, schedule, cap=cfg.snr_weight_cap)
    if cfg.skip_edm_weight:
        time_weight = functools.partial(skip_loss_weight, schedule, cfg.skip_sigma_data)
    err = x0_errors(
        key, denoiser, x0, schedule, correct_fn=pin_current(cur_n), time_weight=time_weight
    )
    per_step = jnp.sum(err, -1)[:, :, 1:]  # (B, A, T); index 0 is pinned
    w_nb = jnp.broadcast_to(nb_valid[:, :, None], per_step[:, 1:].shape)
    if scene_weight is None:
        ego = jnp.mean(per_step[:, 0])
        nb = jnp.sum(jnp.where(w_nb, per_step[:, 1:], 0.0)) / jnp.maximum(jnp.sum(w_nb), 1)
    else:
        w = scene_weight.astype(per_step.dtype)
        ego = jnp.sum(w * jnp.mean(per_step[:, 0], -1)) / jnp.maximum(jnp.sum(w), 1e-12)
        wb = jnp.broadcast_to(w[:, None, None], w_nb.shape)
        nb = jnp.sum(jnp.where(w_nb, wb * per_step[:, 1:], 0.0)) / jnp.maximum(
            jnp.sum(jnp.where(w_nb, wb, 0.0)), 1e-12
        )
    loss = nb + cfg.ego_weight * ego
    return loss, {"loss": loss, "ego_loss": ego, "neighbour_loss": nb}


# ---------------------------------------------------------------------------------------------
# sampling
# ---------------------------------------------------------------------------------------------


def planner_eps_fn(
    params,
    scene: Mapping[str, Array],
    cfg: PlannerConfig,
    *,
    guidance: tuple[tuple[str, float], ...] | None = None,
    schedule: VPLinear | None = None,
    x0_fn: Callable | None = None,
) -> tuple[Callable, Callable]:
    """(eps_fn, pin): the samplers' noise prediction of the planner for these scenes (encoder run
    once, guidance by the composed energies in the config's window) and the correction that pins
    the normalised current state at index 0.

    ``x0_fn(x0_hat, x_t, t) -> x0``, if given, replaces the denoiser's normalised data prediction
    before guidance (an analysis hook: e.g. swap in a known optimal estimate for some agents or
    some t, and sample with the same solver)."""
    schedule = VPLinear() if schedule is None else schedule
    guidance = cfg.guidance if guidance is None else guidance
    net = make_net(cfg)
    pin = pin_current(normalize(cfg, scene["current"]))
    enc = net.apply(params, scene, method=DiffusionPlannerNet.encode)

    def x0_net(x, mt):
        x0 = denoise(params, x, mt, enc, scene, cfg, schedule)
        return x0 if x0_fn is None else x0_fn(x0, x, mt)

    eps_fn = model_wrapper(x0_net, schedule, model_type="data")
    energy = make_energy(guidance, scene, cfg)
    if energy is not None:
        eps_fn = windowed_guidance(
            eps_fn,
            lambda x0, t: energy(denormalize(cfg, x0)),
            schedule,
            weight=1.0,
            t_window=cfg.guidance_window,
            limit_fn=cap_ego_shift(cfg),
        )
    return eps_fn, pin


def sample_trajectories(
    params,
    key: PRNGKeyArray | None,
    scene: Mapping[str, Array],
    cfg: PlannerConfig,
    *,
    steps: int | None = None,
    guidance: tuple[tuple[str, float], ...] | None = None,
    noise: Float[Array, "B A T1 4"] | None = None,
    schedule: VPLinear | None = None,
    include_current: bool = False,
    x0_fn: Callable | None = None,
    sampler: str = "dpm_solver++",
) -> Float[Array, "B A T 4"]:
    """Sample joint futures (B, A, T, 4) in the ego frame (de-normalised, current state excluded
    unless ``include_current``: then (B, A, 1 + T, 4)).

    x_T = temperature * noise (standard normal from ``key`` unless ``noise`` is given; then ``key``
    may be None), the current
    state pinned after every DPM-Solver++ step, a final data prediction at t_min. ``steps`` and
    ``guidance`` default to the config's; ``x0_fn`` as in :func:`planner_eps_fn`.
    ``sampler="ancestral"`` replaces DPM-Solver++ by :func:`samplers.ancestral` on the same time
    steps (the reverse SDE, its noise drawn from ``key``, which it then needs; a diagnostic).
    """
    if sampler not in ("dpm_solver++", "ancestral"):
        raise ConfigError("sampler", sampler, "'dpm_solver++' or 'ancestral'")
    if sampler == "ancestral" and key is None:
        raise ConfigError("key", None, "a PRNG key (the ancestral sampler draws noise)")
    check_scene(cfg, scene)
    schedule = VPLinear() if schedule is None else schedule
    steps = cfg.steps if steps is None else steps
    b = scene["current"].shape[0]
    shape = (b, cfg.n_agents, 1 + cfg.horizon, 4)
    if noise is None:
        if key is None:
            raise ConfigError("key", None, "a PRNG key (or pass noise)")
        noise = jax.random.normal(key, shape)
    elif tuple(noise.shape) != shape:
        raise ConfigError("noise", tuple(noise.shape), f"{shape} (batch, agents, 1 + horizon, 4)")
    eps_fn, pin = planner_eps_fn(
        params, scene, cfg, guidance=guidance, schedule=schedule, x0_fn=x0_fn
    )
    ts = get_time_steps(schedule, steps, "logsnr")
    spec = samplers.SamplerSpec(name="dpm_solver++", order=cfg.order)
    x_T = pin(cfg.temperature * noise, None)
    if sampler == "ancestral":
        k = jax.random.fold_in(key, 1)
        x = samplers.ancestral(eps_fn, x_T, ts, k, schedule=schedule, correct_fn=pin)
    else:
        x = samplers.sample(spec, eps_fn, x_T, ts, schedule=schedule, correct_fn=pin)
    # denoise_to_zero: one more data prediction at t_min, then pin
    t_end = jnp.full((b,), ts[-1])
    x0 = pin(data_from_noise(eps_fn(x, t_end), x, t_end, schedule), None)
    out = denormalize(cfg, x0).at[:, :, 0].set(scene["current"].astype(x0.dtype))
    return out if include_current else out[:, :, 1:]
