"""Sequential Monte Carlo for syntactic and semantic control of an LM (Loula et al., ICLR 2025).

Target over EOS-terminated sequences of at most ``max_tokens`` tokens:

    g(x) = p_LM(x EOS) · Phi_eff(x) · Phi_exp(x) / Z,

with ``Phi_eff`` a cheap *condition* potential used inside the proposal (e.g. a regex or grammar
DFA) and ``Phi_exp`` an optional expensive *critic* used only in the weights. Particles are
extended one token at a time by a properly weighted token sampler, i.e. one whose weight
satisfies ``E[w f(v)] = Σ_v f(v) p_LM(v | x) w_eff(v | x)`` (genlm-control's contract):

* ``direct``: ``v ~ p_LM(· | x)``, ``log w = logw_next_eff(x)[v]``;
* ``constrained`` (locally constrained proposal with its importance weight):
  ``v ~ p_LM(v | x) w_eff(v | x) / L(x)``, ``log w = log L(x)``,
  ``L(x) = Σ_{v ∈ V ∪ {EOS}} p_LM(v | x) w_eff(v | x)``;
* ``constrained_unweighted``: the same proposal with ``log w = 0`` (locally constrained decoding,
  improperly weighted, biased towards myopically likely sequences; a baseline).

The critic is a twist: a particle's weight also gains ``critic.token_logw(x, v)``, i.e.
``prefix_exp(x v) - prefix_exp(x)`` (or ``complete_exp(x) - prefix_exp(x)`` at EOS), so the
intermediate targets are ``p_LM · prefix_eff · prefix_exp`` and the final one is ``g``. The length
limit is part of the target: after ``max_tokens`` tokens only EOS has non-zero weight.

After each step, when ``ESS = (Σ w)^2 / Σ w^2 < ess_threshold · N`` (and a particle is still
running) the particles are resampled (:mod:`jaxlab.decoding.resampling`) and every weight is
reset to the mean weight, which keeps ``log_ml = log((1/N) Σ_i w_i)`` an unbiased estimate of
``Z`` on the natural scale. ``ess_threshold = 0`` is importance sampling. All particles are
one batch of the injected LM (one call per step) and potentials are vmapped over particles;
lengths are fixed, so the whole run is one ``lax.scan`` and can itself be vmapped over seeds.

EOS convention: the LM has ``V + 1`` logits with EOS last (see
:func:`jaxlab.decoding.interface.with_eos_last`); potentials use ``V`` tokens with EOS = ``V``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from jaxlab.decoding import resampling
from jaxlab.decoding.interface import CausalLM, Params
from jaxlab.decoding.potentials import Potential

PROPOSALS: tuple[str, ...] = ("direct", "constrained", "constrained_unweighted")


@dataclasses.dataclass(frozen=True)
class SMCConfig:
    """Static configuration of :func:`smc`.

    Attributes:
        num_particles: ``N``.
        max_tokens: most tokens before EOS.
        proposal: token sampler, one of :data:`PROPOSALS`.
        resampling: scheme, one of :data:`jaxlab.decoding.resampling.METHODS`.
        pad_id: filler id in the output after each particle's end.
    """

    num_particles: int
    max_tokens: int
    proposal: str = "constrained"
    resampling: str = "multinomial"
    pad_id: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.num_particles, int) or self.num_particles < 1:
            raise ValueError(
                f"SMCConfig.num_particles={self.num_particles!r}: expected an int >= 1"
            )
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"SMCConfig.max_tokens={self.max_tokens!r}: expected an int >= 1")
        if self.proposal not in PROPOSALS:
            raise ValueError(f"SMCConfig.proposal={self.proposal!r}: expected one of {PROPOSALS}")
        if self.resampling not in resampling.METHODS:
            raise ValueError(
                f"SMCConfig.resampling={self.resampling!r}: expected one of {resampling.METHODS}"
            )


@struct.dataclass
class SMCResult:
    """Weighted particles approximating ``g`` and the evidence estimate.

    Attributes:
        tokens: ``[N, max_tokens]`` generated tokens (EOS not stored), ``pad_id`` after the end.
        lengths: ``[N]`` number of tokens before EOS.
        log_weights: ``[N]`` final unnormalised log weights (``-inf``: outside the support).
        log_ml: ``log((1/N) Σ_i w_i)``, an estimate of ``log Z``.
        ess: ``[max_tokens + 1]`` effective sample size after each step, before resampling.
        resampled: ``[max_tokens + 1]`` whether the step resampled.
    """

    tokens: Int[Array, "particles max_tokens"]
    lengths: Int[Array, " particles"]
    log_weights: Float[Array, " particles"]
    log_ml: Float[Array, ""]
    ess: Float[Array, " steps"]
    resampled: Bool[Array, " steps"]

    @property
    def posterior_weights(self) -> Float[Array, " particles"]:
        """Normalised particle weights (the posterior puts this mass on each particle)."""
        return resampling.normalized_weights(self.log_weights)


def propose_token(
    key: PRNGKeyArray,
    lm_log_probs: Float[Array, "*particles vocab_plus_eos"],
    condition_logw: Float[Array, "*particles vocab_plus_eos"],
    proposal: str,
) -> tuple[Int[Array, "*particles"], Float[Array, "*particles"]]:
    """Properly weighted token draws (module docstring), independently for every row.

    If the constrained proposal has no admissible token (``L = 0``) it returns EOS with weight
    ``-inf``.

    Args:
        key: PRNG key (one draw per row).
        lm_log_probs: ``[..., V + 1]`` normalised LM log-probabilities, EOS last.
        condition_logw: ``[..., V + 1]`` condition next-token log weights, EOS last.
        proposal: one of :data:`PROPOSALS` (static).

    Returns:
        ``(token [...], log_weight_increment [...])``; ``token = V`` is EOS.
    """
    eos = lm_log_probs.shape[-1] - 1
    if proposal == "direct":
        token = jax.random.categorical(key, lm_log_probs, axis=-1).astype(jnp.int32)
        weight = jnp.take_along_axis(condition_logw, token[..., None], axis=-1)[..., 0]
        return token, weight
    joint = lm_log_probs + condition_logw
    local_z = jax.nn.logsumexp(joint, axis=-1)
    feasible = local_z > -jnp.inf
    token = jax.random.categorical(key, jnp.where(feasible[..., None], joint, 0.0), axis=-1)
    token = jnp.where(feasible, token, eos).astype(jnp.int32)
    if proposal == "constrained":
        return token, local_z
    return token, jnp.where(feasible, 0.0, -jnp.inf)


def _broadcast_state(state, n: int):
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *jnp.shape(x))), state)


def _select(mask: Bool[Array, " n"], new, old):
    def pick(a, b):
        m = mask.reshape(mask.shape + (1,) * (a.ndim - 1))
        return jnp.where(m, a, b)

    return jax.tree.map(pick, new, old)


def _check_smc_args(
    prompt: Array, eos: int, condition: Potential | None, critic: Potential | None
) -> None:
    """Raises ValueError on an empty or batched prompt or a potential over another vocabulary."""
    if prompt.ndim != 1 or prompt.shape[0] < 1:
        raise ValueError(f"prompt.shape={prompt.shape}: expected [prompt_len >= 1]")
    for name, pot in (("condition", condition), ("critic", critic)):
        if pot is not None and pot.vocab_size != eos:
            raise ValueError(
                f"{name}.vocab_size={pot.vocab_size}: expected lm.vocab_size - 1 = {eos} "
                "(potentials exclude EOS, the LM's last id)"
            )


def _resample_if_degenerate(key_res, particles, log_w, done, ess_threshold, method: str):
    """Resamples the particles (and equalises their weights) when ESS < threshold · N."""
    n = log_w.shape[0]
    current_ess = resampling.ess(log_w)
    do_resample = (current_ess < ess_threshold * n) & jnp.any(~done) & jnp.any(log_w > -jnp.inf)
    ancestors = resampling.resample(key_res, log_w, method)
    ancestors = jnp.where(do_resample, ancestors, jnp.arange(n, dtype=jnp.int32))
    particles = jax.tree.map(lambda x: x[ancestors], particles)
    mean_log_w = jax.nn.logsumexp(log_w) - jnp.log(n)
    log_w = jnp.where(do_resample, jnp.full_like(log_w, mean_log_w), log_w)
    return particles, log_w, current_ess, do_resample


def smc(
    key: PRNGKeyArray,
    lm: CausalLM,
    lm_params: Params,
    prompt: Int[Array, " prompt_len"],
    *,
    config: SMCConfig,
    condition: Potential | None = None,
    critic: Potential | None = None,
    ess_threshold: Float[Array, ""] | float = 0.5,
) -> SMCResult:
    """Runs SMC for ``g ∝ p_LM · Phi_eff · Phi_exp`` (module docstring).

    ``lm`` and ``config`` are static under ``jit``; ``condition``/``critic`` are pytrees.

    Args:
        key: PRNG key.
        lm: injected LM with ``V + 1`` logits, EOS last.
        lm_params: LM parameters.
        prompt: ``[P]`` prompt ids shared by all particles (``P >= 1``, e.g. a BOS token).
        config: static configuration.
        condition: ``Phi_eff`` (used by the proposal), or ``None`` (weight one).
        critic: ``Phi_exp`` applied as a twist, or ``None``.
        ess_threshold: resample when ``ESS < ess_threshold · N`` (``0``: never).

    Returns:
        :class:`SMCResult`.
    """
    n, steps = config.num_particles, config.max_tokens + 1
    eos = lm.vocab_size - 1
    prompt = jnp.asarray(prompt)
    _check_smc_args(prompt, eos, condition, critic)
    prompt_len = prompt.shape[0]
    lm_state = lm.init_state(lm_params, n, prompt_len + steps)
    prompts = jnp.broadcast_to(prompt.astype(jnp.int32), (n, prompt_len))
    _, lm_state = lm.apply(lm_params, lm_state, prompts, jnp.zeros(n, jnp.int32))
    length_mask = jnp.concatenate([jnp.full((eos,), -jnp.inf), jnp.zeros((1,))])

    def body(carry, inputs):
        t, key_prop, key_res = inputs
        lm_state, last, tokens, lengths, done, log_w, c_state, k_state = carry
        position = jnp.full((n,), prompt_len - 1, jnp.int32) + t
        logits, lm_state = lm.apply(lm_params, lm_state, last[:, None], position)
        lm_log_probs = jax.nn.log_softmax(logits[:, 0].astype(jnp.float32), axis=-1)
        if condition is None:
            cond_logw = jnp.zeros_like(lm_log_probs)
        else:
            cond_logw = jax.vmap(condition.logw_next)(c_state)
        cond_logw = cond_logw + jnp.where(t == steps - 1, length_mask, 0.0)[None, :]
        token, inc = propose_token(key_prop, lm_log_probs, cond_logw, config.proposal)
        if critic is not None:
            inc = inc + jax.vmap(critic.token_logw)(k_state, token)
        active = ~done
        grow = active & (token != eos)
        safe_token = jnp.minimum(token, eos - 1)
        log_w = log_w + jnp.where(active, inc, 0.0)
        if condition is not None:
            c_state = _select(grow, jax.vmap(condition.step)(c_state, safe_token), c_state)
        if critic is not None:
            k_state = _select(grow, jax.vmap(critic.step)(k_state, safe_token), k_state)
        tokens = tokens.at[:, t].set(jnp.where(grow, token, config.pad_id))
        lengths = lengths + grow.astype(jnp.int32)
        last = jnp.where(grow, token, last)
        done = done | (active & ~grow) | (t == steps - 1)
        particles = (lm_state, last, tokens, lengths, done, c_state, k_state)
        particles, log_w, current_ess, do_resample = _resample_if_degenerate(
            key_res, particles, log_w, done, ess_threshold, config.resampling
        )
        lm_state, last, tokens, lengths, done, c_state, k_state = particles
        carry = (lm_state, last, tokens, lengths, done, log_w, c_state, k_state)
        return carry, (current_ess, do_resample)

    c_state = None if condition is None else _broadcast_state(condition.initial_state(), n)
    k_state = None if critic is None else _broadcast_state(critic.initial_state(), n)
    carry = (
        lm_state,
        jnp.full((n,), prompt[-1], jnp.int32),
        jnp.full((n, steps), config.pad_id, jnp.int32),
        jnp.zeros(n, jnp.int32),
        jnp.zeros(n, jnp.bool_),
        jnp.zeros(n, jnp.float32),
        c_state,
        k_state,
    )
    keys = jax.random.split(key, 2 * steps)
    inputs = (jnp.arange(steps), keys[:steps], keys[steps:])
    carry, (ess_trace, resampled) = jax.lax.scan(body, carry, inputs)
    _, _, tokens, lengths, _, log_w, _, _ = carry
    return SMCResult(
        tokens=tokens[:, : config.max_tokens],
        lengths=lengths,
        log_weights=log_w,
        log_ml=jax.nn.logsumexp(log_w) - jnp.log(n),
        ess=ess_trace,
        resampled=resampled,
    )


def importance_sampling(
    key: PRNGKeyArray,
    lm: CausalLM,
    lm_params: Params,
    prompt: Int[Array, " prompt_len"],
    *,
    config: SMCConfig,
    condition: Potential | None = None,
    critic: Potential | None = None,
) -> SMCResult:
    """Importance sampling: :func:`smc` without resampling (``ess_threshold = 0``)."""
    return smc(
        key,
        lm,
        lm_params,
        prompt,
        config=config,
        condition=condition,
        critic=critic,
        ess_threshold=0.0,
    )


def sample_rerank(
    key: PRNGKeyArray,
    lm: CausalLM,
    lm_params: Params,
    prompt: Int[Array, " prompt_len"],
    *,
    num_samples: int,
    max_tokens: int,
    potentials: Sequence[Potential],
) -> SMCResult:
    """Sample-then-rerank: ``N`` plain LM samples, weighted at the end by ``Π_k complete_k(x)``.

    The potentials are evaluated only on finished sequences (sequence-level ``complete``), never
    during generation. The weights are proper for ``g ∝ p_LM · Π_k Phi_k`` restricted to
    ``max_tokens`` tokens, so ``log_ml`` estimates the same ``Z`` as :func:`smc`.

    Args:
        key: PRNG key.
        lm: injected LM, EOS last.
        lm_params: LM parameters.
        prompt: ``[P]`` prompt ids.
        num_samples: ``N`` (static).
        max_tokens: most tokens before EOS (static).
        potentials: factors of the target (each over the LM vocabulary without EOS).

    Returns:
        :class:`SMCResult` (``ess`` and ``resampled`` describe the sampling pass).
    """
    config = SMCConfig(num_particles=num_samples, max_tokens=max_tokens, proposal="direct")
    result = importance_sampling(key, lm, lm_params, prompt, config=config)
    log_w = result.log_weights
    for pot in potentials:
        log_w = log_w + jax.vmap(pot.complete)(result.tokens, result.lengths)
    return result.replace(log_weights=log_w, log_ml=jax.nn.logsumexp(log_w) - jnp.log(num_samples))


def posterior_over_sequences(result: SMCResult) -> dict[tuple[int, ...], float]:
    """Host-side posterior over distinct decoded sequences (particle weights summed).

    Args:
        result: a (non-vmapped) SMC result.

    Returns:
        ``{token tuple: probability}`` for sequences with positive weight.
    """
    tokens = np.asarray(result.tokens)
    lengths = np.asarray(result.lengths)
    probs = np.asarray(result.posterior_weights)
    finite = np.isfinite(np.asarray(result.log_weights))
    posterior: dict[tuple[int, ...], float] = {}
    for row, length, prob, ok in zip(tokens, lengths, probs, finite, strict=True):
        if ok and prob > 0:
            seq = tuple(int(t) for t in row[:length])
            posterior[seq] = posterior.get(seq, 0.0) + float(prob)
    return posterior
