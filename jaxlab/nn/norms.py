"""Root-mean-square layer normalisation (Zhang & Sennrich, 2019)."""

import flax.linen as nn
import jax.numpy as jnp
from jax.typing import DTypeLike
from jaxtyping import Array, Float


class RMSNorm(nn.Module):
    """RMSNorm over one or more trailing feature axes.

    ``y = x / sqrt(mean(x², axes) + eps) · g`` with a learned gain ``g`` (initialised to 1) of the
    shape of the normalised axes and no bias (Zhang & Sennrich 2019, eq. 4; OLMoE uses it without
    bias). The statistics are computed in float32 whatever the input dtype; the result is cast
    back to ``dtype`` (default: the input dtype).

    Attributes:
        num_axes: how many trailing axes are normalised jointly (1: the usual ``[..., embed]``;
            2: e.g. OLMoE's QK-norm over the concatenated heads ``[..., heads, kv]``).
        axis_names: logical axis names of the gain, one per normalised axis.
        eps: added to the mean square.
        dtype: output dtype; ``None`` keeps the input dtype.
        param_dtype: dtype of the gain.
    """

    num_axes: int = 1
    axis_names: tuple[str | None, ...] = ("embed",)
    eps: float = 1e-5
    dtype: DTypeLike | None = None
    param_dtype: DTypeLike = jnp.float32

    @nn.compact
    def __call__(self, x: Float[Array, "*batch features"]) -> Float[Array, "*batch features"]:
        """Normalises ``x`` over its last ``num_axes`` axes.

        Args:
            x: input ``[..., *features]``.

        Returns:
            The normalised input, same shape.
        """
        if len(self.axis_names) != self.num_axes:
            raise ValueError(
                f"axis_names={self.axis_names!r}: expected {self.num_axes} names (num_axes)"
            )
        axes = tuple(range(x.ndim - self.num_axes, x.ndim))
        feature_shape = x.shape[x.ndim - self.num_axes :]
        gain = self.param(
            "scale",
            nn.with_logical_partitioning(nn.initializers.ones_init(), self.axis_names),
            feature_shape,
            self.param_dtype,
        )
        x32 = x.astype(jnp.float32)
        mean_square = jnp.mean(jnp.square(x32), axis=axes, keepdims=True)
        gain = jnp.reshape(
            gain.astype(jnp.float32), (1,) * (x.ndim - self.num_axes) + feature_shape
        )
        y = x32 * jnp.reciprocal(jnp.sqrt(mean_square + self.eps)) * gain
        return y.astype(self.dtype or x.dtype)
