"""Speculative decoding (SPEED) and speculative cascades (Narasimhan et al., ICLR 2025).

One iteration, for every row of the batch in lock-step:

1. The drafter proposes ``gamma`` tokens ``x_t ~ q_t`` autoregressively (``q_t`` processed by
   :func:`jaxlab.decoding.sampling.processed_log_probs`).
2. The verifier scores the prefix's last token and all drafts in one call, giving
   ``p_1 … p_{gamma+1}``.
3. Each position gets a target ``pi_t = delta(q_t, p_t)`` from a deferral rule (below); drafts
   are accepted left to right with probability ``min(1, pi_t(x_t) / q_t(x_t))``. At the first
   rejection the token is redrawn from the residual ``norm(max(0, pi_t - q_t))``; if all are
   accepted a bonus token is drawn from ``p_{gamma+1}`` (or from ``pi_{gamma+1}`` with
   ``cascade_bonus``, which costs one more drafter step). This is lossless speculative sampling
   (Leviathan et al. 2023, Chen et al. 2023) against ``pi``, so each emitted token is distributed
   exactly as ``pi_t`` and a draft is accepted with probability ``1 - TV(q_t, pi_t)``.

Deferral rules (paper §3-4; ``q``, ``p`` are processed probabilities, ``q°``, ``p°`` the
unscaled ``T = 1`` probabilities on which the rules decide, as in the authors' colab):

* ``speed``: ``pi = p`` (exact speculative decoding).
* ``chow`` (Eq. 2): ``pi = q`` if ``max q° >= 1 - alpha`` else ``p``.
* ``diff`` (Eq. 5): ``pi = q`` if ``max q° >= max p° - alpha`` else ``p``.
* ``opt`` (Eq. 10, plug-in optimal rule): ``pi = q`` if
  ``max q° >= max p° - alpha · TV(q, p)`` with ``TV(q, p) = sum_v max(0, q(v) - p(v))``, else ``p``.
* token-specific (Eqs. 13-15), with an accepted set ``A``:
  ``pi(v) = q(v) 1[v ∈ A] + (1 - sum_{u ∈ A} q(u)) p(v)``, where ``A`` is
  ``{v : q°(v) >= max p° - alpha}`` (``token_v1``), ``{v : p°(v) >= max p° - alpha}``
  (``token_v2``) or ``{v : p°(v) >= (1 - alpha) max p°}`` (``token_v3``).
* ``lossy`` (Leviathan et al. 2023, App. A.5, lenience ``l = alpha``): accept with
  ``min(1, p(x) / ((1 - l) q(x)))``, residual ``norm(max(0, p - q))``; no closed-form ``pi``.

The rule is a traced pytree (:class:`CascadeRule`: an integer id and ``alpha``), so one compiled
decoder serves all rules and ``alpha`` sweeps can be vmapped.

Models are injected (:class:`jaxlab.decoding.interface.CausalLM`). Cache bookkeeping: before an
iteration with confirmed length ``n`` the verifier's state is valid below ``n - 1`` and the
drafter's below ``n - 2``; the drafter's first call re-feeds the two last confirmed tokens (so a
fully accepted block, whose last draft it never fed, needs no extra call), and rejected
positions are simply overwritten later (contract item 2).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray

from jaxlab.decoding import sampling
from jaxlab.decoding.generate import check_prompt, place_prompt
from jaxlab.decoding.interface import CausalLM, Params

RULE_NAMES: tuple[str, ...] = (
    "speed",
    "lossy",
    "chow",
    "diff",
    "opt",
    "token_v1",
    "token_v2",
    "token_v3",
)
_RESIDUAL_FLOOR = 1e-12


@struct.dataclass
class CascadeRule:
    """A deferral rule as traced data (build it with :func:`cascade_rule`).

    Attributes:
        rule_id: index into :data:`RULE_NAMES`.
        alpha: the rule's lenience / threshold parameter.
    """

    rule_id: Int[ArrayLike, ""]
    alpha: Float[ArrayLike, ""]


def cascade_rule(name: str, alpha: float = 0.0) -> CascadeRule:
    """Builds a :class:`CascadeRule` from its name.

    Args:
        name: one of :data:`RULE_NAMES`.
        alpha: rule parameter (ignored by ``speed``).

    Returns:
        The rule.
    """
    if name not in RULE_NAMES:
        raise ValueError(f"rule={name!r}: expected one of {RULE_NAMES}")
    return CascadeRule(
        rule_id=jnp.asarray(RULE_NAMES.index(name), jnp.int32),
        alpha=jnp.asarray(alpha, jnp.float32),
    )


@dataclasses.dataclass(frozen=True)
class SpeculativeConfig:
    """Static (shape-fixing) configuration of :func:`speculative_decode`.

    Attributes:
        gamma: draft tokens per iteration (``>= 1``).
        max_len: total length bound, prompt included.
        cascade_bonus: draw the bonus token from ``pi_{gamma+1}`` (one extra drafter step) instead
            of from the verifier's ``p_{gamma+1}``.
        pad_id: filler id after each row's end.
    """

    gamma: int = 4
    max_len: int = 32
    cascade_bonus: bool = False
    pad_id: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.gamma, int) or self.gamma < 1:
            raise ValueError(f"SpeculativeConfig.gamma={self.gamma!r}: expected an int >= 1")
        if not isinstance(self.max_len, int) or self.max_len < 2:
            raise ValueError(f"SpeculativeConfig.max_len={self.max_len!r}: expected an int >= 2")


def _scalar(x: ArrayLike) -> Array:
    return jnp.asarray(x, jnp.float32)


def deferral_target(
    q: Float[Array, "*batch vocab"],
    p: Float[Array, "*batch vocab"],
    q_raw: Float[Array, "*batch vocab"],
    p_raw: Float[Array, "*batch vocab"],
    rule: CascadeRule,
) -> Float[Array, "*batch vocab"]:
    """The per-position target ``pi = delta(q, p)`` of a deferral rule (module docstring).

    ``speed`` and ``lossy`` return ``p``.

    Args:
        q: drafter probabilities after temperature / filtering, ``[..., V]``.
        p: verifier probabilities after temperature / filtering, ``[..., V]``.
        q_raw: drafter ``T = 1`` probabilities (rule decisions), ``[..., V]``.
        p_raw: verifier ``T = 1`` probabilities (rule decisions), ``[..., V]``.
        rule: the deferral rule.

    Returns:
        ``pi``, ``[..., V]``, a probability vector per row.
    """
    alpha = _scalar(rule.alpha)
    max_q = jnp.max(q_raw, axis=-1, keepdims=True)
    max_p = jnp.max(p_raw, axis=-1, keepdims=True)
    tv = jnp.sum(jnp.maximum(q - p, 0.0), axis=-1, keepdims=True)

    def sequence_rule(keep: Bool[Array, "..."]) -> Array:
        return jnp.where(keep, q, p)

    def token_rule(accepted: Bool[Array, "..."]) -> Array:
        kept = jnp.where(accepted, q, 0.0)
        return kept + (1.0 - jnp.sum(kept, axis=-1, keepdims=True)) * p

    candidates = [
        p,
        p,
        sequence_rule(max_q >= 1.0 - alpha),
        sequence_rule(max_q >= max_p - alpha),
        sequence_rule(max_q >= max_p - alpha * tv),
        token_rule(q_raw >= max_p - alpha),
        token_rule(p_raw >= max_p - alpha),
        token_rule(p_raw >= (1.0 - alpha) * max_p),
    ]
    return jnp.stack(candidates)[jnp.asarray(rule.rule_id, jnp.int32)]


def acceptance_and_residual(
    q: Float[Array, "*batch vocab"],
    p: Float[Array, "*batch vocab"],
    q_raw: Float[Array, "*batch vocab"],
    p_raw: Float[Array, "*batch vocab"],
    drafts: Int[Array, "*batch"],
    rule: CascadeRule,
) -> tuple[Float[Array, "*batch"], Float[Array, "*batch vocab"]]:
    """Acceptance probability of each draft and the residual distribution of its position.

    ``a = min(1, pi(x) / q(x))`` and ``r = norm(max(0, pi - q))`` (lossless SPEED against
    ``pi``); for ``lossy``, ``a = min(1, p(x) / ((1 - alpha) q(x)))`` and
    ``r = norm(max(0, p - q))``. If the residual has no mass (``pi = q`` up to rounding) it falls
    back to ``pi``, which keeps the step exact because the acceptance is then one.

    Args:
        q: drafter probabilities ``[..., V]``.
        p: verifier probabilities ``[..., V]``.
        q_raw: drafter ``T = 1`` probabilities ``[..., V]``.
        p_raw: verifier ``T = 1`` probabilities ``[..., V]``.
        drafts: drafted tokens ``[...]`` (drawn from ``q``).
        rule: the deferral rule.

    Returns:
        ``(a [...], r [..., V])``.
    """
    pi = deferral_target(q, p, q_raw, p_raw, rule)
    is_lossy = jnp.asarray(rule.rule_id, jnp.int32) == RULE_NAMES.index("lossy")
    q_x = jnp.take_along_axis(q, drafts[..., None], axis=-1)[..., 0]
    pi_x = jnp.take_along_axis(pi, drafts[..., None], axis=-1)[..., 0]
    scale = jnp.where(is_lossy, 1.0 - _scalar(rule.alpha), 1.0)
    denominator = scale * q_x
    ratio = jnp.where(denominator > 0, pi_x / jnp.where(denominator > 0, denominator, 1.0), 1.0)
    accept = jnp.minimum(1.0, ratio)
    residual = jnp.maximum(pi - q, 0.0)
    mass = jnp.sum(residual, axis=-1, keepdims=True)
    residual = jnp.where(
        mass > _RESIDUAL_FLOOR, residual / jnp.where(mass > _RESIDUAL_FLOOR, mass, 1.0), pi
    )
    return accept, residual


@struct.dataclass
class VerifyOutput:
    """Result of :func:`verify` for one block.

    Attributes:
        num_accepted: ``[B]`` leading drafts accepted (``0 … gamma``).
        next_token: ``[B]`` correction (residual) or bonus token emitted after them.
        accept_prob: ``[B, gamma]`` acceptance probability of every draft.
    """

    num_accepted: Int[Array, " batch"]
    next_token: Int[Array, " batch"]
    accept_prob: Float[Array, "batch gamma"]


def verify(
    key: PRNGKeyArray,
    q: Float[Array, "batch gamma vocab"],
    p: Float[Array, "batch gamma vocab"],
    q_raw: Float[Array, "batch gamma vocab"],
    p_raw: Float[Array, "batch gamma vocab"],
    drafts: Int[Array, "batch gamma"],
    bonus: Float[Array, "batch vocab"],
    rule: CascadeRule,
) -> VerifyOutput:
    """Accept/reject a block of drafts (Leviathan et al. 2023, Alg. 1, against ``pi``).

    ``k`` is the number of leading drafts with ``u_t < a_t`` (``u_t ~ U(0, 1)``); the next token
    is drawn from the residual at position ``k + 1`` if ``k < gamma``, else from ``bonus``.

    Args:
        key: PRNG key.
        q: drafter probabilities at the drafted positions.
        p: verifier probabilities at the drafted positions.
        q_raw: drafter ``T = 1`` probabilities.
        p_raw: verifier ``T = 1`` probabilities.
        drafts: drafted tokens.
        bonus: ``[B, V]`` distribution of the token after a fully accepted block.
        rule: the deferral rule.

    Returns:
        :class:`VerifyOutput`.
    """
    gamma = drafts.shape[1]
    key_u, key_next = jax.random.split(key)
    accept_prob, residual = acceptance_and_residual(q, p, q_raw, p_raw, drafts, rule)
    accepted = jax.random.uniform(key_u, accept_prob.shape) < accept_prob
    num_accepted = jnp.sum(jnp.cumprod(accepted.astype(jnp.int32), axis=1), axis=1)
    at = jnp.minimum(num_accepted, gamma - 1)[:, None, None]
    correction = jnp.take_along_axis(residual, at, axis=1)[:, 0]
    dist = jnp.where((num_accepted < gamma)[:, None], correction, bonus)
    next_token = jax.random.categorical(key_next, jnp.log(dist), axis=-1).astype(jnp.int32)
    return VerifyOutput(
        num_accepted=num_accepted.astype(jnp.int32),
        next_token=next_token,
        accept_prob=accept_prob,
    )


@struct.dataclass
class SpeculativeStats:
    """Per-row counters of :func:`speculative_decode` (prompt prefill calls not counted).

    Attributes:
        target_calls: verifier calls (one per iteration).
        draft_calls: drafter calls.
        drafted: draft tokens proposed.
        verified: drafts whose acceptance test was reached (``min(k + 1, gamma)`` per block).
        accepted: drafts accepted.
        generated: tokens emitted (after stop / length truncation).
    """

    target_calls: Int[Array, " batch"]
    draft_calls: Int[Array, " batch"]
    drafted: Int[Array, " batch"]
    verified: Int[Array, " batch"]
    accepted: Int[Array, " batch"]
    generated: Int[Array, " batch"]

    @property
    def acceptance_rate(self) -> Float[Array, ""]:
        """Pooled ``accepted / verified``: estimates ``E[1 - TV(q_t, pi_t)]``."""
        return jnp.sum(self.accepted) / jnp.maximum(jnp.sum(self.verified), 1)

    @property
    def mean_accepted_length(self) -> Float[Array, ""]:
        """Pooled mean number of accepted drafts per verifier call."""
        return jnp.sum(self.accepted) / jnp.maximum(jnp.sum(self.target_calls), 1)

    @property
    def tokens_per_target_call(self) -> Float[Array, ""]:
        """Pooled tokens emitted per verifier call (1 for target-only decoding)."""
        return jnp.sum(self.generated) / jnp.maximum(jnp.sum(self.target_calls), 1)


@struct.dataclass
class SpeculativeOutput:
    """Result of :func:`speculative_decode`.

    Attributes:
        tokens: ``[B, max_len]`` prompt then generation, ``pad_id`` at ``>= lengths``.
        lengths: ``[B]`` total valid lengths.
        stats: :class:`SpeculativeStats`.
    """

    tokens: Int[Array, "batch max_len"]
    lengths: Int[Array, " batch"]
    stats: SpeculativeStats


def target_from_logits(
    q_logits: Float[Array, "*batch vocab"],
    p_logits: Float[Array, "*batch vocab"],
    rule: CascadeRule,
    sampling_params: sampling.SamplingParams | None = None,
) -> Float[Array, "*batch vocab"]:
    """``pi = delta(q, p)`` computed from raw logits exactly as the decoder does.

    Args:
        q_logits: drafter logits ``[..., V]``.
        p_logits: verifier logits ``[..., V]``.
        rule: the deferral rule.
        sampling_params: temperature / filters shared by both models.

    Returns:
        ``pi``, ``[..., V]``.
    """
    sampling_params = sampling.SamplingParams() if sampling_params is None else sampling_params
    q = jnp.exp(sampling.processed_log_probs(q_logits, sampling_params))
    p = jnp.exp(sampling.processed_log_probs(p_logits, sampling_params))
    return deferral_target(q, p, jax.nn.softmax(q_logits), jax.nn.softmax(p_logits), rule)


def _check_vocabularies(draft: CausalLM, target: CausalLM) -> None:
    """Raises ValueError unless drafter and verifier share one vocabulary."""
    if draft.vocab_size != target.vocab_size:
        raise ValueError(
            f"draft.vocab_size={draft.vocab_size} != target.vocab_size={target.vocab_size}: "
            "speculative decoding needs one shared vocabulary"
        )


def _draft_block(
    draft: CausalLM,
    draft_params: Params,
    sampling_params: sampling.SamplingParams,
    keys: Array,
    d_state: object,
    buffer: Int[Array, "batch capacity"],
    n: Int[Array, " batch"],
):
    """Drafts one token per key: logits ``[B, num_q, V]``, tokens ``[B, num_q]``, new state."""
    start = jnp.maximum(n - 2, 0)
    last_two = jnp.take_along_axis(buffer, start[:, None] + jnp.arange(2)[None, :], axis=1)
    logits, d_state = draft.apply(draft_params, d_state, last_two, start)
    first = jnp.take_along_axis(logits, (n - 1 - start)[:, None, None], axis=1)[:, 0]
    x_first = sampling.sample(keys[0], first, sampling_params)

    def step(carry, key_i):
        d_state, x_prev, position = carry
        logits, d_state = draft.apply(draft_params, d_state, x_prev[:, None], position)
        x = sampling.sample(key_i, logits[:, 0], sampling_params)
        return (d_state, x, position + 1), (logits[:, 0], x)

    (d_state, _, _), (rest_logits, rest_x) = jax.lax.scan(step, (d_state, x_first, n), keys[1:])
    q_logits = jnp.concatenate([first[:, None], jnp.moveaxis(rest_logits, 0, 1)], axis=1)
    xs = jnp.concatenate([x_first[:, None], jnp.moveaxis(rest_x, 0, 1)], axis=1)
    return q_logits, xs, d_state


def _new_tokens(drafts, k, next_token, stop_tokens, n, *, max_len: int, pad_id: int):
    """A round's ``[B, gamma + 1]`` tokens, their stop hits, and how many each row emits."""
    batch, gamma = drafts.shape
    j = jnp.arange(gamma + 1)[None, :]
    padded = jnp.concatenate([drafts, jnp.full((batch, 1), pad_id, jnp.int32)], axis=1)
    new = jnp.where(j < k[:, None], padded, jnp.where(j == k[:, None], next_token[:, None], pad_id))
    stop_hits = sampling.is_stop(new, stop_tokens) & (j <= k[:, None])
    emitted = jnp.where(jnp.any(stop_hits, axis=1), jnp.argmax(stop_hits, axis=1) + 1, k + 1)
    emitted = jnp.minimum(emitted, max_len - n).astype(jnp.int32)
    return new, stop_hits, emitted


def _round_probs(
    q_logits, p_logits, sampling_params: sampling.SamplingParams, rule, *, gamma: int, bonus: bool
):
    """Processed and raw drafter/verifier distributions and the bonus token's distribution."""
    q = jnp.exp(sampling.processed_log_probs(q_logits, sampling_params))
    p = jnp.exp(sampling.processed_log_probs(p_logits, sampling_params))
    q_raw = jax.nn.softmax(q_logits.astype(jnp.float32), axis=-1)
    p_raw = jax.nn.softmax(p_logits.astype(jnp.float32), axis=-1)
    if bonus:
        bonus_p = deferral_target(q[:, gamma], p[:, gamma], q_raw[:, gamma], p_raw[:, gamma], rule)
    else:
        bonus_p = p[:, gamma]
    return q, p, q_raw, p_raw, bonus_p


def _add_stats(stats: SpeculativeStats, act, k, emitted, *, gamma: int, num_q: int):
    """``stats`` plus one round's counts for the active rows (``act`` is 1 or 0)."""
    return SpeculativeStats(
        target_calls=stats.target_calls + act,
        draft_calls=stats.draft_calls + act * num_q,
        drafted=stats.drafted + act * gamma,
        verified=stats.verified + act * jnp.minimum(k + 1, gamma),
        accepted=stats.accepted + act * k,
        generated=stats.generated + act * emitted,
    )


def speculative_decode(
    key: PRNGKeyArray,
    draft: CausalLM,
    target: CausalLM,
    draft_params: Params,
    target_params: Params,
    prompt: Int[Array, "batch prompt_len"],
    prompt_lengths: Int[Array, " batch"],
    *,
    config: SpeculativeConfig,
    rule: CascadeRule | None = None,
    sampling_params: sampling.SamplingParams | None = None,
    stop_tokens: Int[Array, " num_stop"] | None = None,
) -> SpeculativeOutput:
    """Speculative decoding / speculative cascade over a batch (module docstring).

    ``draft``, ``target`` and ``config`` are static under ``jit``. Both models share
    ``sampling_params`` (mismatched settings would break exactness). Each model is prefilled
    with the prompt once; the states are then created with capacity
    ``max_len + gamma + 1`` (a KV cache must allow that many positions).

    Args:
        key: PRNG key.
        draft: small model ``q``.
        target: large model ``p``.
        draft_params: drafter parameters.
        target_params: verifier parameters.
        prompt: ``[B, P]`` right-padded prompt ids.
        prompt_lengths: ``[B]`` valid prompt lengths (``1 <= prompt_lengths[b] <= P``).
        config: static configuration.
        rule: deferral rule (default ``speed``: exact speculative decoding).
        sampling_params: temperature / top-k / top-p for both models (default ``T = 1``).
        stop_tokens: ``[S]`` ids that end a row (kept in the output), or ``None``.

    Returns:
        :class:`SpeculativeOutput`.
    """
    prompt, prompt_lengths = jnp.asarray(prompt), jnp.asarray(prompt_lengths)
    check_prompt(prompt, prompt_lengths, config.max_len)
    _check_vocabularies(draft, target)
    rule = cascade_rule("speed") if rule is None else rule
    sampling_params = sampling.SamplingParams() if sampling_params is None else sampling_params
    gamma, max_len, pad_id = config.gamma, config.max_len, config.pad_id
    num_q = gamma + int(config.cascade_bonus)
    batch, prompt_len = prompt.shape
    capacity = max_len + gamma + 1
    rows = jnp.arange(batch)

    buffer = place_prompt(prompt, capacity, pad_id)
    zeros = jnp.zeros(batch, jnp.int32)
    d_state = draft.init_state(draft_params, batch, capacity)
    t_state = target.init_state(target_params, batch, capacity)
    _, d_state = draft.apply(draft_params, d_state, buffer[:, :prompt_len], zeros)
    _, t_state = target.apply(target_params, t_state, buffer[:, :prompt_len], zeros)
    lengths = jnp.clip(prompt_lengths.astype(jnp.int32), 1, prompt_len)

    def body(carry):
        key, buffer, n, done, d_state, t_state, stats = carry
        keys = jax.random.split(key, num_q + 2)
        key, key_verify = keys[0], keys[1]
        q_logits, xs, d_state = _draft_block(
            draft, draft_params, sampling_params, keys[2:], d_state, buffer, n
        )
        drafts = xs[:, :gamma]
        chunk = jnp.concatenate([buffer[rows, n - 1][:, None], drafts], axis=1)
        p_logits, t_state = target.apply(target_params, t_state, chunk, n - 1)

        q, p, q_raw, p_raw, bonus = _round_probs(
            q_logits, p_logits, sampling_params, rule, gamma=gamma, bonus=config.cascade_bonus
        )
        gamma_probs = (q[:, :gamma], p[:, :gamma], q_raw[:, :gamma], p_raw[:, :gamma])
        out = verify(key_verify, *gamma_probs, drafts, bonus, rule)
        k = out.num_accepted
        new, stop_hits, emitted = _new_tokens(
            drafts, k, out.next_token, stop_tokens, n, max_len=max_len, pad_id=pad_id
        )
        buffer = jax.vmap(lambda row, tok, s: jax.lax.dynamic_update_slice(row, tok, (s,)))(
            buffer, new, n
        )
        active = ~done
        act = active.astype(jnp.int32)
        new_n = n + act * emitted
        done = done | (active & (jnp.any(stop_hits, axis=1) | (new_n >= max_len)))
        stats = _add_stats(stats, act, k, emitted, gamma=gamma, num_q=num_q)
        return key, buffer, new_n, done, d_state, t_state, stats

    zero_stats = SpeculativeStats(*(zeros for _ in range(6)))
    carry = (key, buffer, lengths, lengths >= max_len, d_state, t_state, zero_stats)
    carry = jax.lax.while_loop(lambda c: jnp.any(~c[3]), body, carry)
    _, buffer, lengths, _, _, _, stats = carry
    positions = jnp.arange(max_len)[None, :]
    tokens = jnp.where(positions < lengths[:, None], buffer[:, :max_len], pad_id)
    return SpeculativeOutput(tokens=tokens, lengths=lengths, stats=stats)
