"""Feed-forward networks: a generic multi-layer perceptron and the SwiGLU transformer FFN."""

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike
from jaxtyping import Array, Float

from jaxlab.nn.initializers import kernel_init
from jaxlab.nn.quantization import QuantConfig, sow_calibration


class MLP(nn.Module):
    """Multi-layer perceptron ``h_{l+1} = σ(h_l W_l + b_l)``, no activation after the last layer
    unless ``activate_final``.

    Kernels are annotated with alternating logical axes so that consecutive layers can be sharded
    without naming the same logical axis twice in one kernel: layer ``l`` has kernel axes
    ``(a_l, a_{l+1})`` with ``a_0 = "embed"``, odd ``a`` = ``"mlp"``, even ``a`` = ``"embed"``.

    Attributes:
        features: output width of each layer; the last entry is the output size.
        activation: elementwise non-linearity ``σ``.
        activate_final: apply ``σ`` after the last layer too.
        use_bias: add a bias (initialised to 0) in every layer.
        init_std: ``None`` for LeCun-normal kernels, else the std of a ±3σ truncated normal.
        dtype: computation dtype (``None``: the input's).
        param_dtype: parameter dtype.
    """

    features: tuple[int, ...]
    activation: Callable[[jax.Array], jax.Array] = nn.relu
    activate_final: bool = False
    use_bias: bool = True
    init_std: float | None = None
    dtype: DTypeLike | None = None
    param_dtype: DTypeLike = jnp.float32

    @nn.compact
    def __call__(self, x: Float[Array, "*batch d_in"]) -> Float[Array, "*batch d_out"]:
        """Applies the layers to the last axis of ``x``.

        Args:
            x: input ``[..., d_in]``.

        Returns:
            ``[..., features[-1]]``.
        """
        if not self.features or any(f <= 0 for f in self.features):
            raise ValueError(f"features={self.features!r}: expected a non-empty tuple of ints > 0")
        names = ["embed" if i % 2 == 0 else "mlp" for i in range(len(self.features) + 1)]
        dtype = self.dtype or x.dtype
        h = x
        for i, width in enumerate(self.features):
            kernel = self.param(
                f"kernel_{i}",
                nn.with_logical_partitioning(kernel_init(self.init_std), (names[i], names[i + 1])),
                (h.shape[-1], width),
                self.param_dtype,
            )
            h = jnp.einsum("...i,io->...o", h.astype(dtype), kernel.astype(dtype))
            if self.use_bias:
                bias = self.param(
                    f"bias_{i}",
                    nn.with_logical_partitioning(nn.initializers.zeros_init(), (names[i + 1],)),
                    (width,),
                    self.param_dtype,
                )
                h = h + jnp.reshape(bias.astype(dtype), (1,) * (h.ndim - 1) + (width,))
            if i < len(self.features) - 1 or self.activate_final:
                h = self.activation(h)
        return h


class SwiGLU(nn.Module):
    """The SwiGLU feed-forward block of OLMo/OLMoE/LLaMA (Shazeer 2020, "GLU Variants", eq. 6).

    ``FFN(x) = (SiLU(x W_gate) ⊙ (x W_up)) W_down`` with ``W_gate, W_up: [embed, mlp]``,
    ``W_down: [mlp, embed]`` and no biases. ``d_model`` is taken from the input.

    This is the default FFN of :class:`jaxlab.nn.transformer.TransformerBlock`; a mixture of
    experts replaces it through the block's ``ffn`` factory and must keep the same call signature
    ``ffn(x: [..., embed]) -> [..., embed]``.

    Attributes:
        d_ff: hidden width (the ``mlp`` axis).
        init_std: ``None`` for LeCun-normal kernels, else the std of a ±3σ truncated normal
            (OLMoE: 0.02).
        dtype: computation dtype (``None``: the input's).
        param_dtype: parameter dtype.
        quant: fake quantisation (group ``"mlp"``): kernels per output channel, the inputs of
            the up/gate and down projections per tensor. ``None``: exact full precision. The
            inputs are ``sow``n into ``quant_calibration`` (``up_in``, ``down_in``) for GPTQ.
    """

    d_ff: int
    init_std: float | None = 0.02
    dtype: DTypeLike | None = None
    param_dtype: DTypeLike = jnp.float32
    quant: QuantConfig | None = None

    @nn.compact
    def __call__(self, x: Float[Array, "*batch embed"]) -> Float[Array, "*batch embed"]:
        """Applies the gated feed-forward map to the last axis of ``x``.

        Args:
            x: input ``[..., embed]``.

        Returns:
            ``[..., embed]``.
        """
        if self.d_ff <= 0:
            raise ValueError(f"d_ff={self.d_ff!r}: expected a positive int")
        d_model = x.shape[-1]
        dtype = self.dtype or x.dtype
        init = nn.with_logical_partitioning(kernel_init(self.init_std), ("embed", "mlp"))
        w_gate = self.param("wi_gate", init, (d_model, self.d_ff), self.param_dtype)
        w_up = self.param("wi_up", init, (d_model, self.d_ff), self.param_dtype)
        w_down = self.param(
            "wo",
            nn.with_logical_partitioning(kernel_init(self.init_std), ("mlp", "embed")),
            (self.d_ff, d_model),
            self.param_dtype,
        )
        quant = self.quant or QuantConfig()
        w_gate, w_up, w_down = (
            quant.weights("mlp", w.astype(dtype), (0,)) for w in (w_gate, w_up, w_down)
        )
        x = quant.activations("mlp", x.astype(dtype))
        sow_calibration(self, "up_in", x)
        gate = jnp.einsum("...d,df->...f", x, w_gate)
        up = jnp.einsum("...d,df->...f", x, w_up)
        hidden = quant.activations("mlp", nn.silu(gate) * up)
        sow_calibration(self, "down_in", hidden)
        return jnp.einsum("...f,fd->...d", hidden, w_down)
