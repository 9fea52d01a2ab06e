"""Matrix decompositions (QR, symmetric eigendecomposition, SVD, Cholesky, inverse) that stay
deadlock-free when batched on the CPU, and the batching rule behind them.

Why: on the CPU (jaxlib 0.10), a batched LAPACK call (``geqrf``, ``syevd``, ``gesdd``, ``getrf``,
``potrf``) splits its batch over XLA's intra-op thread pool from inside a pool thread. When
several such calls are independent in one program (decompositions under ``vmap``, the layers of a
network initialised under ``vmap`` over seeds), each waits for pool threads the others hold and
the program can hang with every thread waiting (four independent calls under a ``vmap`` over 8
are enough on a small machine; ``tests/core/test_linalg.py`` keeps a reproducer). The flags
``--xla_cpu_multi_thread_eigen=false`` and ``--xla_cpu_enable_concurrency_optimized_scheduler=false``
do not prevent it. jaxlib 0.11.2 compiles that parallel path out
of open-source builds; the project's pin still admits 0.10.

What: :func:`one_at_a_time` gives a function of unbatched arrays a ``vmap`` rule that, on the CPU,
runs the batch with ``lax.map`` (one unbatched LAPACK call at a time, which never enters the pool)
and, on every other platform, batches as usual (``lax.platform_dependent``), so GPU and TPU keep
their batched solvers. :func:`qr`, :func:`eigh`, :func:`svd`, :func:`cholesky` and :func:`inv`
are ``jnp.linalg``'s, routed through it for any leading batch axes and under ``vmap``; their
values equal ``jnp.linalg``'s per matrix. They are differentiable: the JVP is ``jnp.linalg``'s own
(so a *differentiated* batched decomposition is the plain batched call again; jaxlab
differentiates none today). Single unbatched calls (``graph.digl``'s ``solve``) need none of this.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float


def one_at_a_time(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a ``vmap`` rule that maps the batch one element at a time on the CPU.

    Args:
        fn: a function of arrays (unbatched), returning a pytree of arrays.

    Returns:
        A function with ``fn``'s values. Under ``vmap`` on the CPU it runs ``lax.map`` over the
        batch (unbatched arguments are broadcast); on other platforms it is ``vmap(fn)``. Nested
        ``vmap`` nests the maps. Not reverse-differentiable on its own (``custom_vmap``); wrap it
        in a ``custom_jvp`` as :func:`qr` does when gradients are needed.
    """

    @jax.custom_batching.custom_vmap
    def wrapped(*args):
        return fn(*args)

    @wrapped.def_vmap
    def _rule(axis_size, in_batched, *args):
        full = tuple(
            a if b else jnp.broadcast_to(a, (axis_size, *jnp.shape(a)))
            for a, b in zip(args, in_batched, strict=True)
        )

        def mapped(*xs):
            return jax.lax.map(lambda one: wrapped(*one), xs)

        def batched(*xs):
            return jax.vmap(fn)(*xs)

        out = jax.lax.platform_dependent(*full, cpu=mapped, default=batched)
        return out, jax.tree.map(lambda _: True, out)

    return wrapped


@cache
def _decomposition(name: str, **kwargs: Any) -> Callable[[jax.Array], Any]:
    """``jnp.linalg.<name>(·, **kwargs)`` for ``(..., m, n)`` inputs: leading axes and ``vmap``
    go through :func:`one_at_a_time`; the JVP is ``jnp.linalg``'s."""
    plain = getattr(jnp.linalg, name)

    def plain_call(x):
        return plain(x, **kwargs)

    safe = one_at_a_time(plain_call)

    @jax.custom_jvp
    def op(x):
        lead = x.ndim - 2
        f = safe
        for _ in range(lead):
            f = jax.vmap(f)
        return f(x)

    @op.defjvp
    def _jvp(primals, tangents):
        return jax.jvp(plain_call, primals, tangents)

    return op


def _check_matrix(name: str, a: Any) -> jax.Array:
    a = jnp.asarray(a)
    if a.ndim < 2:
        raise ValueError(f"{name}: expected an array of shape (..., m, n), got shape {a.shape}")
    return a


def _check_square(name: str, a: Any) -> jax.Array:
    a = _check_matrix(name, a)
    if a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{name}: expected square matrices (..., n, n), got shape {a.shape}")
    return a


def qr(
    a: Float[Array, "*batch m n"], mode: str = "reduced"
) -> tuple[Float[Array, "*batch m k"], Float[Array, "*batch k n"]]:
    """``jnp.linalg.qr(a, mode)`` (``"reduced"`` or ``"complete"``), deadlock-free when batched."""
    if mode not in ("reduced", "complete"):
        raise ValueError(f"qr: mode={mode!r}, expected 'reduced' or 'complete'")
    return _decomposition("qr", mode=mode)(_check_matrix("qr", a))


def eigh(
    a: Float[Array, "*batch n n"],
) -> tuple[Float[Array, "*batch n"], Float[Array, "*batch n n"]]:
    """``jnp.linalg.eigh(a)`` (ascending eigenvalues, eigenvectors in columns), deadlock-free when
    batched."""
    return _decomposition("eigh")(_check_square("eigh", a))


def cholesky(a: Float[Array, "*batch n n"]) -> Float[Array, "*batch n n"]:
    """``jnp.linalg.cholesky(a)`` (lower factor), deadlock-free when batched."""
    return _decomposition("cholesky")(_check_square("cholesky", a))


def inv(a: Float[Array, "*batch n n"]) -> Float[Array, "*batch n n"]:
    """``jnp.linalg.inv(a)``, deadlock-free when batched."""
    return _decomposition("inv")(_check_square("inv", a))


def svd(
    a: Float[Array, "*batch m n"], full_matrices: bool = False
) -> tuple[Float[Array, "*batch m k"], Float[Array, "*batch k"], Float[Array, "*batch k n"]]:
    """``jnp.linalg.svd(a, full_matrices)`` as ``(u, s, vh)``, deadlock-free when batched."""
    return _decomposition("svd", full_matrices=bool(full_matrices))(_check_matrix("svd", a))
