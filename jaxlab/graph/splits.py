"""Random node splits in the style of GPRGNN/JDR's ``random_planetoid_splits`` (jit-able).

``train_per_class`` random nodes of every class form the training set; of the remaining nodes,
taken in random order, the first ``num_val`` are the validation set and the rest the test set. The
JDR paper's "sparse" split uses 2.5% / 2.5% / 95% (``train_per_class = round(0.025 n / C)``,
``num_val = round(0.025 n)``) and its "dense" split 60% / 20% / 20%.
"""

from __future__ import annotations

from functools import partial
from typing import Literal

import flax.struct
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Int

SPLIT_RATES: dict[str, tuple[float, float]] = {"sparse": (0.025, 0.025), "dense": (0.6, 0.2)}


@flax.struct.dataclass
class Split:
    """Boolean node masks, each ``(n,)`` (or ``(seeds, n)`` when vmapped)."""

    train: Bool[Array, " n"]
    val: Bool[Array, " n"]
    test: Bool[Array, " n"]


def split_sizes(
    num_nodes: int, num_classes: int, kind: Literal["sparse", "dense"]
) -> tuple[int, int]:
    """``(train_per_class, num_val)`` for a named split, at least one node each.

    ``train_per_class = max(1, round(rate_train n / C))``, ``num_val = max(1, round(rate_val n))``
    (the ``max`` matters only for tiny graphs such as karate, where 2.5% rounds to zero).
    """
    if kind not in SPLIT_RATES:
        raise ValueError(f"split: got {kind!r}, expected one of {sorted(SPLIT_RATES)}")
    train_rate, val_rate = SPLIT_RATES[kind]
    per_class = max(1, int(round(train_rate * num_nodes / num_classes)))
    num_val = max(1, int(round(val_rate * num_nodes)))
    if per_class * num_classes + num_val >= num_nodes:
        raise ValueError(
            f"split: {kind!r} leaves no test nodes for {num_nodes} nodes and {num_classes} classes"
        )
    return per_class, num_val


@partial(jax.jit, static_argnames=("train_per_class", "num_val"))
def planetoid_split(
    key: jax.Array, labels: Int[Array, " n"], *, train_per_class: int, num_val: int
) -> Split:
    """A random class-balanced train set, then random validation and test sets.

    Args:
      key: PRNG key.
      labels: ``(n,)`` integer class ids.
      train_per_class: training nodes per class (all of a class if it has fewer).
      num_val: validation nodes, drawn from the non-training nodes.

    Returns:
      :class:`Split` with disjoint masks covering all nodes.
    """
    n = labels.shape[0]
    k_train, k_rest = jax.random.split(key)
    order = jnp.lexsort((jax.random.uniform(k_train, (n,)), labels))
    sorted_labels = labels[order]
    first_of_class = jnp.searchsorted(sorted_labels, sorted_labels, side="left")
    rank_in_class = jnp.zeros((n,), jnp.int32).at[order].set(jnp.arange(n) - first_of_class)
    train = rank_in_class < train_per_class
    rest_score = jnp.where(train, jnp.inf, jax.random.uniform(k_rest, (n,)))
    rest_rank = jnp.zeros((n,), jnp.int32).at[jnp.argsort(rest_score)].set(jnp.arange(n))
    val = (rest_rank < num_val) & ~train
    return Split(train=train, val=val, test=~train & ~val)
