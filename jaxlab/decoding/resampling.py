"""Resampling schemes and the effective sample size for particle methods.

Every scheme maps ``(key, log_weights[N])`` to ancestor indices ``a[N]`` whose counts
``c_i = #{j : a_j = i}`` are unbiased, ``E[c_i] = N w_i`` with ``w = softmax(log_weights)``
(Douc, Cappé & Moulines 2005):

* multinomial: ``a_j ~ Categorical(w)`` i.i.d.;
* stratified: ``a_j = F^{-1}((j + U_j) / N)``, ``U_j ~ U(0, 1)`` independent;
* systematic: ``a_j = F^{-1}((j + U) / N)`` with one shared ``U`` (``c_i ∈ {⌊N w_i⌋, ⌈N w_i⌉}``);
* residual: ``⌊N w_i⌋`` deterministic copies, the remaining ``R = N - Σ ⌊N w_i⌋`` drawn
  multinomially from ``(N w_i - ⌊N w_i⌋) / R``.

``F^{-1}`` is the inverse CDF of ``w``; zero-weight particles are never selected. If every
weight is ``-inf`` the weights are treated as uniform (the caller's estimate is ``-inf`` anyway).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray

METHODS: tuple[str, ...] = ("multinomial", "stratified", "systematic", "residual")


def normalized_weights(log_weights: Float[Array, " n"]) -> Float[Array, " n"]:
    """``softmax(log_weights)``, uniform when every weight is ``-inf``."""
    any_finite = jnp.any(log_weights > -jnp.inf)
    safe = jnp.where(any_finite, log_weights, 0.0)
    return jax.nn.softmax(safe)


def ess(log_weights: Float[Array, " n"]) -> Float[Array, ""]:
    """Effective sample size ``(Σ w)^2 / Σ w^2`` (0 when every weight is ``-inf``)."""
    any_finite = jnp.any(log_weights > -jnp.inf)
    safe = jnp.where(any_finite, log_weights, 0.0)
    value = jnp.exp(2.0 * jax.nn.logsumexp(safe) - jax.nn.logsumexp(2.0 * safe))
    return jnp.where(any_finite, value, 0.0)


def _inverse_cdf(weights: Float[Array, " n"], u: Float[Array, " n"]) -> Int[Array, " n"]:
    cdf = jnp.cumsum(weights)
    cdf = cdf / cdf[-1]
    idx = jnp.searchsorted(cdf, u, side="right")
    return jnp.clip(idx, 0, weights.shape[0] - 1).astype(jnp.int32)


def multinomial(key: PRNGKeyArray, log_weights: Float[Array, " n"]) -> Int[Array, " n"]:
    """I.i.d. categorical ancestors, ``a_j = F^{-1}(U_j)`` (``O(N log N)``, no ``N x N`` noise)."""
    n = log_weights.shape[0]
    return _inverse_cdf(normalized_weights(log_weights), jax.random.uniform(key, (n,)))


def stratified(key: PRNGKeyArray, log_weights: Float[Array, " n"]) -> Int[Array, " n"]:
    """One uniform per stratum ``[j/N, (j+1)/N)``."""
    n = log_weights.shape[0]
    u = (jnp.arange(n) + jax.random.uniform(key, (n,))) / n
    return _inverse_cdf(normalized_weights(log_weights), u)


def systematic(key: PRNGKeyArray, log_weights: Float[Array, " n"]) -> Int[Array, " n"]:
    """A single shared uniform offset for all strata."""
    n = log_weights.shape[0]
    u = (jnp.arange(n) + jax.random.uniform(key, ())) / n
    return _inverse_cdf(normalized_weights(log_weights), u)


def residual(key: PRNGKeyArray, log_weights: Float[Array, " n"]) -> Int[Array, " n"]:
    """Deterministic ``⌊N w_i⌋`` copies plus multinomial draws on the residual weights."""
    n = log_weights.shape[0]
    w = normalized_weights(log_weights)
    scaled = n * w
    copies = jnp.floor(scaled).astype(jnp.int32)
    remaining = n - jnp.sum(copies)
    rest = scaled - copies
    rest_mass = jnp.sum(rest)
    rest_probs = jnp.where(rest_mass > 0, rest / jnp.where(rest_mass > 0, rest_mass, 1.0), w)
    draws = _inverse_cdf(rest_probs, jax.random.uniform(key, (n,)))
    used = jnp.arange(n) < remaining
    extra = jnp.zeros(n, jnp.int32).at[draws].add(used.astype(jnp.int32))
    counts = copies + extra
    return jnp.repeat(jnp.arange(n, dtype=jnp.int32), counts, total_repeat_length=n)


_SCHEMES = {
    "multinomial": multinomial,
    "stratified": stratified,
    "systematic": systematic,
    "residual": residual,
}


def resample(key: PRNGKeyArray, log_weights: Float[Array, " n"], method: str) -> Int[Array, " n"]:
    """Ancestor indices with the named scheme (``method`` is static).

    Args:
        key: PRNG key.
        log_weights: ``[N]`` unnormalised log weights.
        method: one of :data:`METHODS`.

    Returns:
        ``[N]`` int32 ancestor indices.
    """
    if method not in _SCHEMES:
        raise ValueError(f"method={method!r}: expected one of {METHODS}")
    return _SCHEMES[method](key, log_weights)
