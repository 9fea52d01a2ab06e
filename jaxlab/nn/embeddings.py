"""Token embedding table and (untied or tied) output head."""

import flax.linen as nn
import jax.numpy as jnp
from jax.typing import DTypeLike
from jaxtyping import Array, Float, Int

from jaxlab.nn.initializers import embedding_init, kernel_init
from jaxlab.nn.quantization import QuantConfig, sow_calibration


class TokenEmbedding(nn.Module):
    """Looks token ids up in a ``[vocab, embed]`` table ``E``: ``h_0 = E[ids]``.

    Attributes:
        vocab_size: number of rows.
        d_model: embedding width.
        init_std: ``None`` for ``N(0, 1)`` rows (flax default), else the std of a ±3σ truncated
            normal (OLMoE: 0.02).
        dtype: dtype of the returned embeddings.
        param_dtype: parameter dtype.
    """

    vocab_size: int
    d_model: int
    init_std: float | None = 0.02
    dtype: DTypeLike = jnp.float32
    param_dtype: DTypeLike = jnp.float32

    def setup(self) -> None:
        """Creates the table ``embedding: [vocab, embed]``."""
        if self.vocab_size <= 0 or self.d_model <= 0:
            raise ValueError(
                f"vocab_size={self.vocab_size!r}, d_model={self.d_model!r}: expected positive ints"
            )
        self.embedding = self.param(
            "embedding",
            nn.with_logical_partitioning(embedding_init(self.init_std), ("vocab", "embed")),
            (self.vocab_size, self.d_model),
            self.param_dtype,
        )

    def __call__(self, ids: Int[Array, "batch seq"]) -> Float[Array, "batch seq embed"]:
        """Embeds ``ids`` (values in ``[0, vocab_size)``; out-of-range ids are clamped).

        Args:
            ids: integer token ids ``[batch, seq]``.

        Returns:
            ``[batch, seq, embed]`` in ``dtype``.
        """
        h = jnp.take(self.embedding, ids, axis=0, mode="clip").astype(self.dtype)
        return nn.with_logical_constraint(h, ("batch", "seq", "embed"))

    def attend(self, h: Float[Array, "batch seq embed"]) -> Float[Array, "batch seq vocab"]:
        """Tied output projection ``logits = h Eᵀ`` (float32).

        Args:
            h: final hidden states ``[batch, seq, embed]``.

        Returns:
            ``[batch, seq, vocab]`` float32 logits.
        """
        return jnp.einsum(
            "bsd,vd->bsv", h, self.embedding.astype(h.dtype), preferred_element_type=jnp.float32
        )


class OutputHead(nn.Module):
    """Untied output projection ``logits = h W_out`` with ``W_out: [embed, vocab]``, no bias.

    Attributes:
        vocab_size: number of output classes.
        init_std: ``None`` for LeCun-normal, else the std of a ±3σ truncated normal.
        param_dtype: parameter dtype.
        quant: fake quantisation (group ``"head"``, off unless listed in ``quant.targets``):
            kernel per vocabulary column, input per tensor; the input is ``sow``n into
            ``quant_calibration`` (``head_in``) for GPTQ.
    """

    vocab_size: int
    init_std: float | None = 0.02
    param_dtype: DTypeLike = jnp.float32
    quant: QuantConfig | None = None

    @nn.compact
    def __call__(self, h: Float[Array, "batch seq embed"]) -> Float[Array, "batch seq vocab"]:
        """Projects hidden states to float32 logits.

        Args:
            h: ``[batch, seq, embed]``.

        Returns:
            ``[batch, seq, vocab]`` float32 logits.
        """
        if self.vocab_size <= 0:
            raise ValueError(f"vocab_size={self.vocab_size!r}: expected a positive int")
        w = self.param(
            "kernel",
            nn.with_logical_partitioning(kernel_init(self.init_std), ("embed", "vocab")),
            (h.shape[-1], self.vocab_size),
            self.param_dtype,
        )
        quant = self.quant or QuantConfig()
        w = quant.weights("head", w.astype(h.dtype), (0,))
        h = quant.activations("head", h)
        sow_calibration(self, "head_in", h)
        logits = jnp.einsum("bsd,dv->bsv", h, w, preferred_element_type=jnp.float32)
        return nn.with_logical_constraint(logits, ("batch", "seq", "vocab"))
