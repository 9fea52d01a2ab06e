"""Discrete conditional-independence tests of one query ``x _||_ y | z``: Pearson's chi-square
and the likelihood-ratio G^2, on integer codes ``0..card-1``.

The rows are grouped by their configuration of the conditioning variables (strata); in every
stratum the ``x``-by-``y`` table of counts ``O`` is compared with ``E = O_x. O_.y / O_..``:
chi-square ``sum (O - E)^2 / E`` (cells with ``E > 0``), G^2 ``2 sum O log(O / E)`` (cells with
``O > 0``). Degrees of freedom are summed over the strata that occur, each
``(rows with a count - 1) (columns with a count - 1)``, so empty rows and columns cost none (as
causal-learn's ``chisq`` / ``gsq``); no degree of freedom gives ``p = 1``.

Strata are numbered densely as each conditioning variable is added (a sort per variable), so the
table is ``(n, kmax, kmax)`` whatever the number of configurations; ``z`` is padded to a fixed
width with a column mask, so one compiled program serves every conditioning-set size, under
``lax.map`` over queries or ``vmap`` over datasets.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int


def _dense_ids(code: Int[Array, " n"]) -> Int[Array, " n"]:
    """``code`` relabelled ``0..u-1`` in sorted order of its ``u`` distinct values."""
    order = jnp.argsort(code)
    s = code[order]
    new = jnp.concatenate([jnp.zeros(1, code.dtype), (s[1:] != s[:-1]).astype(code.dtype)])
    return jnp.zeros_like(code).at[order].set(jnp.cumsum(new))


@partial(jax.jit, static_argnames=("kmax", "g_squared"))
def discrete_pvalue(
    x: Int[Array, " n"],
    y: Int[Array, " n"],
    z: Int[Array, "n m"],
    zmask: Bool[Array, " m"],
    zcard: Int[Array, " m"],
    *,
    kmax: int,
    g_squared: bool = False,
) -> Float[Array, ""]:
    """p-value of ``x _||_ y | z[:, zmask]`` (see the module docstring).

    Args:
        x, y: (n,) codes in ``[0, kmax)``.
        z: (n, m) codes of the padded conditioning set; ``zcard`` their cardinalities.
        zmask: (m,) which columns of ``z`` are members.
        kmax: static upper bound on the cardinalities of x and y.
        g_squared: G^2 instead of Pearson's chi-square.
    """
    n = x.shape[0]
    stratum = jnp.zeros(n, jnp.int32)
    for k in range(z.shape[1]):
        nxt = _dense_ids(stratum * zcard[k] + z[:, k])
        stratum = jnp.where(zmask[k], nxt, stratum)
    obs = jnp.zeros((n, kmax, kmax), jnp.float32).at[stratum, x, y].add(1.0)
    rows = obs.sum(2)
    cols = obs.sum(1)
    tot = rows.sum(1)
    exp = rows[:, :, None] * cols[:, None, :] / jnp.maximum(tot, 1.0)[:, None, None]
    if g_squared:
        ratio = jnp.where(obs > 0, obs / jnp.where(exp > 0, exp, 1.0), 1.0)
        stat = 2.0 * jnp.sum(obs * jnp.log(ratio))
    else:
        stat = jnp.sum(jnp.where(exp > 0, (obs - exp) ** 2 / jnp.where(exp > 0, exp, 1.0), 0.0))
    nr = (rows > 0).sum(1)
    nc = (cols > 0).sum(1)
    dof = jnp.sum(jnp.where(tot > 0, (nr - 1) * (nc - 1), 0)).astype(jnp.float32)
    p = jax.scipy.special.gammaincc(jnp.maximum(dof, 1.0) / 2.0, jnp.maximum(stat, 0.0) / 2.0)
    return jnp.where(dof > 0, p, 1.0)
