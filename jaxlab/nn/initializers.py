"""Weight initialisers shared by the jaxlab.nn layers.

Three schemes are offered:

* truncated normal with a fixed standard deviation (OLMo/OLMoE: ``std=0.02`` truncated at
  ``±3σ``), chosen by passing ``init_std=0.02`` to a layer, and
* fan-in scaled normal (LeCun normal, ``Var = 1 / fan_in``), chosen by ``init_std=None``. The fan-in
  axes are given explicitly because jaxlab keeps attention kernels as 3-D ``[embed, heads, kv]``
  arrays, for which the default "second-to-last axis is the input" rule would be wrong;
* orthogonal (:func:`orthogonal`, the RL networks' and action heads' scheme, as in purejaxrl and
  Kinetix): flax's initialiser, with :func:`jaxlab.core.linalg.one_at_a_time`'s batching rule, so
  a network initialised under ``vmap`` over seeds runs one QR per key on the CPU instead of
  batched QRs, which deadlock XLA's intra-op thread pool (jaxlib 0.10; the module docstring of
  :mod:`jaxlab.core.linalg`). The values are those of the plain initialiser per key.
"""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxlab.core.linalg import one_at_a_time

Initializer = jax.nn.initializers.Initializer

TRUNCATION_SIGMAS = 3.0
"""Truncation of the fixed-std initialiser, in standard deviations (OLMo: ``a=-3σ, b=3σ``)."""


def kernel_init(
    init_std: float | None,
    *,
    in_axis: int | Sequence[int] = -2,
    out_axis: int | Sequence[int] = -1,
) -> Initializer:
    """Returns an initialiser for a weight matrix or tensor.

    Args:
        init_std: ``σ`` of the truncated normal ``N(0, σ²)`` restricted to ``[-3σ, 3σ]`` (values are
            ``σ·z`` with ``z`` a standard normal truncated to ``[-3, 3]``, as in
            ``torch.nn.init.trunc_normal_(std=σ, a=-3σ, b=3σ)``); ``None`` selects LeCun normal
            ``N(0, 1/fan_in)`` (truncated at 2σ, variance-corrected).
        in_axis: axis or axes of the kernel that are contracted with the input (fan-in).
        out_axis: axis or axes of the kernel that index the output features.

    Returns:
        A ``jax.nn.initializers`` initialiser ``(key, shape, dtype) -> array``.

    Raises:
        ValueError: if ``init_std`` is not positive.
    """
    if init_std is None:
        return jax.nn.initializers.variance_scaling(
            1.0, "fan_in", "truncated_normal", in_axis=in_axis, out_axis=out_axis
        )
    if not init_std > 0.0:
        raise ValueError(f"init_std={init_std!r}: expected a positive float or None")
    return jax.nn.initializers.truncated_normal(
        stddev=init_std, lower=-TRUNCATION_SIGMAS, upper=TRUNCATION_SIGMAS
    )


def embedding_init(init_std: float | None) -> Initializer:
    """Returns the initialiser of a ``[vocab, embed]`` embedding table.

    Args:
        init_std: ``σ`` of the ±3σ-truncated normal; ``None`` selects ``N(0, 1)`` per entry (the
            flax ``nn.Embed`` default, unit-variance rows).

    Returns:
        An initialiser ``(key, shape, dtype) -> array``.
    """
    if init_std is None:
        return jax.nn.initializers.normal(stddev=1.0)
    return kernel_init(init_std)


def orthogonal(scale: float = 1.0) -> Initializer:
    """Flax's ``orthogonal(scale)`` initialiser that stays deadlock-free under ``vmap`` on the
    CPU (module docstring): a batched key is mapped with ``lax.map``, one QR per key, so the
    result equals the plain initialiser applied to each key (other platforms batch as usual).

    Args:
        scale: the gain multiplying the orthogonal matrix.

    Returns:
        An initialiser ``(key, shape, dtype) -> array``.
    """
    base = nn.initializers.orthogonal(scale)

    def init(key, shape, dtype=jnp.float32):
        shape = tuple(shape)
        return one_at_a_time(lambda k: base(k, shape, dtype))(key)

    return init
