"""Task vectors: parameter-tree differences, their arithmetic, low-rank and magnitude-pruned forms.

Ilharco et al. (2023) and Li et al., "When is task vector provably effective for model editing?
A generalization analysis of nonlinear transformers" (ICLR 2025, arXiv 2504.10957): a task vector
is ``ΔΨ_T = Ψ_T − Ψ_0`` (fine-tuned minus pre-trained weights) and a model is edited as

    Ψ = Ψ_0 + Σ_i λ_i ΔΨ_i                                                    (paper eq. 4)

(addition: ``λ_i > 0`` for several tasks; negation: ``λ_i < 0`` to unlearn task ``i``). The paper
shows (its §4.3) that the results hold for low-rank and sparse task vectors: :func:`low_rank`
truncates the SVD of every matrix, :func:`magnitude_prune` keeps the largest entries.

Parameter trees are plain pytrees (flax ``params``); every function here is jit- and vmap-able
(vmap :func:`edit` over a grid of ``λ``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxlab.core import linalg

PyTree = Any


def _check_same_structure(name: str, a: PyTree, b: PyTree) -> None:
    sa, sb = jax.tree.structure(a), jax.tree.structure(b)
    if sa != sb:
        raise ValueError(f"{name}: parameter trees differ in structure ({sa} vs {sb})")
    for (path, leaf_a), leaf_b in zip(
        jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b), strict=True
    ):
        if jnp.shape(leaf_a) != jnp.shape(leaf_b):
            raise ValueError(
                f"{name}: leaf {jax.tree_util.keystr(path)} has shape "
                f"{jnp.shape(leaf_a)} vs {jnp.shape(leaf_b)} (task vectors from models of "
                "different shapes)"
            )


def task_vector(finetuned: PyTree, pretrained: PyTree) -> PyTree:
    """``ΔΨ = Ψ_T − Ψ_0`` leaf by leaf.

    Raises:
      ValueError: naming ``finetuned`` and the first leaf whose shape differs.
    """
    _check_same_structure("finetuned", finetuned, pretrained)
    return jax.tree.map(jnp.subtract, finetuned, pretrained)


def add(*vectors: PyTree) -> PyTree:
    """``Σ_i ΔΨ_i``."""
    for i, v in enumerate(vectors[1:], 1):
        _check_same_structure(f"vectors[{i}]", v, vectors[0])
    return jax.tree.map(lambda *xs: sum(xs[1:], xs[0]), *vectors)


def scale(vector: PyTree, coefficient: Float[Array, ""] | float) -> PyTree:
    """``λ · ΔΨ``."""
    return jax.tree.map(lambda x: coefficient * x, vector)


def negate(vector: PyTree) -> PyTree:
    """``−ΔΨ``."""
    return jax.tree.map(jnp.negative, vector)


def edit(pretrained: PyTree, vectors: Sequence[PyTree], coefficients: Float[Array, " n"]) -> PyTree:
    """``Ψ_0 + Σ_i λ_i ΔΨ_i`` (eq. 4); ``coefficients`` may be traced (vmap over a λ grid).

    Raises:
      ValueError: a vector whose tree or leaf shapes differ from ``pretrained`` (named
        ``vectors[i]``), or a coefficient count that differs from the number of vectors.
    """
    if jnp.shape(coefficients) != (len(vectors),):
        raise ValueError(
            f"coefficients: shape {jnp.shape(coefficients)}, expected ({len(vectors)},)"
        )
    for i, v in enumerate(vectors):
        _check_same_structure(f"vectors[{i}]", v, pretrained)

    def combine(p, *deltas):
        return p + sum(coefficients[i] * d for i, d in enumerate(deltas))

    return jax.tree.map(combine, pretrained, *vectors)


def low_rank(vector: PyTree, rank: int) -> PyTree:
    """Every matrix leaf (``ndim >= 2``, trailing two axes) replaced by its best rank-``rank``
    approximation ``U_r Σ_r V_rᵀ`` (truncated SVD); vectors and scalars are kept as they are."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"rank: got {rank!r}, expected a positive int")

    def truncate(x):
        if jnp.ndim(x) < 2:
            return x
        u, s, vt = linalg.svd(x, full_matrices=False)
        r = min(rank, s.shape[-1])
        return (u[..., :, :r] * s[..., None, :r]) @ vt[..., :r, :]

    return jax.tree.map(truncate, vector)


def magnitude_prune(vector: PyTree, keep: float) -> PyTree:
    """Keeps the fraction ``keep`` of entries of largest magnitude in each leaf, zeroing the rest
    (ties at the threshold are kept)."""
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep: got {keep!r}, expected a fraction in (0, 1]")

    def prune(x):
        flat = jnp.abs(jnp.ravel(x))
        k = max(1, int(round(keep * flat.size)))
        threshold = jnp.sort(flat)[flat.size - k]
        return jnp.where(jnp.abs(x) >= threshold, x, jnp.zeros_like(x))

    return jax.tree.map(prune, vector)


def cosine(a: PyTree, b: PyTree) -> Float[Array, ""]:
    """Cosine similarity of two task vectors flattened into one vector each."""
    _check_same_structure("b", b, a)
    dot = sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))
    na = jnp.sqrt(sum(jnp.vdot(x, x) for x in jax.tree.leaves(a)))
    nb = jnp.sqrt(sum(jnp.vdot(x, x) for x in jax.tree.leaves(b)))
    return dot / jnp.maximum(na * nb, 1e-30)
