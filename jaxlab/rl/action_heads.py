"""Policy heads: map a feature vector to a distrax action distribution for an env's action space.

Three kinds, chosen from the action space (``head_for_space``):

* ``Discrete(n)``: ``Categorical(logits)`` with ``logits = W h + b``, ``W`` orthogonal(0.01).
* ``MultiDiscrete(nvec)``: independent categoricals per entry, ``pi(a) = prod_i Cat(a_i; l_i)``.
  The ``sum(nvec)`` logits are laid out in a ``[len(nvec), max(nvec)]`` table whose unused slots
  hold ``-1e9`` (probability exactly 0 after the softmax, so they contribute nothing to the log
  probability or the entropy), wrapped in ``distrax.Independent`` over the entries.
* ``Box(shape)``: ``MultivariateNormalDiag(mu(h), exp(log_std))`` with a state-independent,
  learned ``log_std`` initialised to 0 (the original's continuous head).
"""

from __future__ import annotations

import dataclasses

import distrax
import flax.linen as nn
import jax.numpy as jnp
import numpy as np
from flax.linen.initializers import constant
from jaxtyping import Array, Float

from jaxlab.envs.spaces import Box, Discrete, MultiDiscrete, Space
from jaxlab.nn.initializers import orthogonal

_MASKED_LOGIT = -1e9


@dataclasses.dataclass(frozen=True)
class HeadSpec:
    """Static description of an action head.

    Attributes:
        kind: ``"discrete"``, ``"multi_discrete"`` or ``"continuous"``.
        sizes: number of choices (``(n,)`` for discrete, ``nvec`` for multi-discrete) or the
            action vector's length (``(d,)``) for continuous.
    """

    kind: str
    sizes: tuple[int, ...]

    @property
    def num_outputs(self) -> int:
        """Width of the linear layer feeding the distribution."""
        return int(sum(self.sizes)) if self.kind != "continuous" else int(self.sizes[0])


def head_for_space(space: Space) -> HeadSpec:
    """The head matching an action space.

    Raises:
        ValueError: for spaces other than Discrete, MultiDiscrete and 1-D Box.
    """
    if isinstance(space, Discrete):
        return HeadSpec("discrete", (space.n,))
    if isinstance(space, MultiDiscrete):
        return HeadSpec("multi_discrete", tuple(int(n) for n in space.nvec))
    if isinstance(space, Box) and len(space.shape) == 1:
        return HeadSpec("continuous", (int(space.shape[0]),))
    raise ValueError(
        f"action space={space!r}; expected Discrete, MultiDiscrete or a 1-D Box for a policy head"
    )


def multi_discrete_logits(
    flat: Float[Array, "*batch k"], sizes: tuple[int, ...]
) -> Float[Array, "*batch e m"]:
    """Flat logits ``[..., sum(sizes)]`` -> padded table ``[..., len(sizes), max(sizes)]``."""
    width = max(sizes)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    idx = np.zeros((len(sizes), width), np.int32)
    valid = np.zeros((len(sizes), width), bool)
    for i, (o, n) in enumerate(zip(offsets, sizes, strict=True)):
        idx[i, :n] = o + np.arange(n)
        valid[i, :n] = True
    table = flat[..., idx]
    return jnp.where(jnp.broadcast_to(valid, table.shape), table, _MASKED_LOGIT)


def make_distribution(
    spec: HeadSpec, out: Float[Array, "*batch k"], log_std: Float[Array, " d"] | None = None
) -> distrax.Distribution:
    """The distribution of head ``spec`` from its linear outputs ``out`` (and ``log_std``)."""
    if spec.kind == "discrete":
        return distrax.Categorical(logits=out)
    if spec.kind == "multi_discrete":
        return distrax.Independent(
            distrax.Categorical(logits=multi_discrete_logits(out, spec.sizes)),
            reinterpreted_batch_ndims=1,
        )
    if spec.kind == "continuous":
        if log_std is None:
            raise ValueError("continuous head needs log_std")
        return distrax.MultivariateNormalDiag(out, jnp.broadcast_to(jnp.exp(log_std), out.shape))
    raise ValueError(
        f"HeadSpec.kind={spec.kind!r}; expected discrete, multi_discrete or continuous"
    )


class ActionHead(nn.Module):
    """Linear layer (orthogonal(0.01) init, as in purejaxrl/Kinetix) + the distribution of ``spec``.

    Attributes:
        spec: which head.
    """

    spec: HeadSpec

    @nn.compact
    def __call__(self, h: Float[Array, "*batch d"]) -> distrax.Distribution:
        """``h [..., d]`` -> a distribution with batch shape ``[...]``."""
        out = nn.Dense(
            self.spec.num_outputs, kernel_init=orthogonal(0.01), bias_init=constant(0.0)
        )(h)
        log_std = None
        if self.spec.kind == "continuous":
            log_std = self.param("log_std", nn.initializers.zeros, (self.spec.num_outputs,))
        return make_distribution(self.spec, out, log_std)
