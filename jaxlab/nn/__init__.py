"""jaxlab.nn: layers shared by several families (flax.linen, logical-axis annotated).

Logical axis names used by the parameters: ``"embed"``, ``"mlp"``, ``"heads"``, ``"kv"``,
``"vocab"`` (``"expert"`` is reserved for mixture-of-experts layers); activations are constrained
with ``("batch", "seq", "embed")``.
"""

from jaxlab.nn.attention import (
    KVCache,
    MultiHeadAttention,
    causal_padding_mask,
    dot_product_attention,
)
from jaxlab.nn.conv import Conv, ConvTranspose
from jaxlab.nn.embeddings import OutputHead, TokenEmbedding
from jaxlab.nn.initializers import embedding_init, kernel_init, orthogonal
from jaxlab.nn.mlp import MLP, SwiGLU
from jaxlab.nn.norms import RMSNorm
from jaxlab.nn.quantization import QuantConfig, fake_quant, quantize_dequantize
from jaxlab.nn.rope import apply_rope, rope_inverse_frequencies
from jaxlab.nn.transformer import FFNFactory, TransformerBlock

__all__ = [
    "MLP",
    "Conv",
    "ConvTranspose",
    "FFNFactory",
    "KVCache",
    "MultiHeadAttention",
    "OutputHead",
    "QuantConfig",
    "RMSNorm",
    "SwiGLU",
    "TokenEmbedding",
    "TransformerBlock",
    "apply_rope",
    "causal_padding_mask",
    "dot_product_attention",
    "embedding_init",
    "fake_quant",
    "kernel_init",
    "orthogonal",
    "quantize_dequantize",
    "rope_inverse_frequencies",
]
