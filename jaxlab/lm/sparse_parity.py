"""The (n, k) sparse-parity task with fresh online samples, and the correlation probes.

Progressive distillation (Panigrahi et al., ICLR 2025, arXiv 2410.05464, §3): inputs
``x ∈ {±1}^n`` are uniform, the label is the parity of a hidden support ``S`` of ``k`` coordinates,
``y = Π_{i∈S} x_i``, learned as a 2-class problem (class ``(1 - y) / 2``, as in the paper's code).
The support is the first ``k`` coordinates (the paper's default, ``randomize_features=0``).

The probe of the implicit curriculum is the correlation of a model's class-1 probability with a
monomial, ``E_x[f(x) · Π_{i∈A} x_i]``; degree-1 monomials ``x_i`` for ``i ∈ S`` carry the
curriculum (large at the teacher's phase transition, zero for the exact parity).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray

from jaxlab.core.config import ConfigError

MAX_ENUMERATED_N = 20


@dataclasses.dataclass(frozen=True)
class SparseParity:
    """Static description of the (n, k) sparse-parity task.

    Attributes:
      n: input dimension.
      k: support size (the support is coordinates ``0 … k-1``).
    """

    n: int = 40
    k: int = 4

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ConfigError("n", self.n, "a positive int")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or not 1 <= self.k <= self.n:
            raise ConfigError("k", self.k, f"an int in [1, n={self.n}]")


def labels(task: SparseParity, x: Float[Array, "*batch n"]) -> Int[Array, "*batch"]:
    """Class ``(1 - Π_{i<k} x_i) / 2`` of ``x``: 0 for even, 1 for odd parity of the support."""
    parity = jnp.prod(x[..., : task.k], axis=-1)
    return ((1 - parity) // 2).astype(jnp.int32)


def sample(
    key: PRNGKeyArray, task: SparseParity, batch: int
) -> tuple[Float[Array, "batch n"], Int[Array, " batch"]]:
    """``batch`` fresh uniform inputs ``x ∈ {±1}^n`` (float32) and their classes."""
    x = jax.random.rademacher(key, (batch, task.n), dtype=jnp.float32)
    return x, labels(task, x)


def all_inputs(n: int) -> Float[Array, "rows n"]:
    """Every point of ``{±1}^n`` (``rows = 2^n``; row ``j`` has ``x_i = 1 - 2·bit_i(j)``), for exact
    expectations.

    Raises:
      ConfigError: ``n > MAX_ENUMERATED_N`` (``2^n`` rows would not fit).
    """
    if not 1 <= n <= MAX_ENUMERATED_N:
        raise ConfigError("n", n, f"an int in [1, {MAX_ENUMERATED_N}] to enumerate {{±1}}^n")
    rows = jnp.arange(2**n, dtype=jnp.int32)[:, None]
    bits = (rows >> jnp.arange(n, dtype=jnp.int32)[None, :]) & 1
    return 1.0 - 2.0 * bits.astype(jnp.float32)


def degree1_correlations(
    probs: Float[Array, " batch"], x: Float[Array, "batch n"]
) -> Float[Array, " n"]:
    """``E[f(x) x_i]`` for every coordinate ``i``, with ``f`` the class-1 probability.

    Exact when ``x`` is all of ``{±1}^n`` (:func:`all_inputs`), a Monte-Carlo estimate (standard
    error ``≈ std(f)/√batch``) for a uniform sample.
    """
    return jnp.mean(probs[:, None] * x, axis=0)


def monomial_correlation(
    probs: Float[Array, " batch"], x: Float[Array, "batch n"], coords: tuple[int, ...]
) -> Float[Array, ""]:
    """``E[f(x) Π_{i∈coords} x_i]`` (the probe for a monomial of any degree)."""
    return jnp.mean(probs * jnp.prod(x[:, jnp.asarray(coords)], axis=-1))


def support_ratio(
    task: SparseParity, correlations: Float[Array, "... n"]
) -> tuple[Float[Array, "..."], Float[Array, "..."]]:
    """Mean ``|E[f x_i]|`` on the support and off it: ``(on, off)``."""
    mag = jnp.abs(correlations)
    on = jnp.mean(mag[..., : task.k], axis=-1)
    off = jnp.mean(mag[..., task.k :], axis=-1) if task.k < task.n else jnp.zeros_like(on)
    return on, off
