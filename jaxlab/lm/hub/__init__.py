"""Hugging Face model directories in and out: ``config.json``, ``model.safetensors`` (or a sharded
set with ``model.safetensors.index.json``) and ``tokenizer.json``, read into and written from
:class:`jaxlab.lm.model.Decoder` parameters with the ``safetensors`` numpy API (no torch).

Supported architectures: Llama (``LlamaForCausalLM``: RMSNorm, RoPE with ``rope_theta`` and the
``llama3`` scaling, SwiGLU, grouped-query attention, tied or untied embeddings) and OLMoE
(``OlmoeForCausalLM``: the same with QK-norm and a softmax top-k MoE of SwiGLU experts in every
layer) and OLMo-2 (``Olmo2ForCausalLM``: QK-norm and post-norm blocks). Anything else is refused
by name (:class:`HubError`).
"""

from jaxlab.lm.hub.checkpoint import HFModel, load_hf, load_params, save_hf
from jaxlab.lm.hub.config import HubError, decoder_config_from_hf, hf_config_from_decoder
from jaxlab.lm.hub.tokenizer import HFTokenizer, load_tokenizer

__all__ = [
    "HFModel",
    "HFTokenizer",
    "HubError",
    "decoder_config_from_hf",
    "hf_config_from_decoder",
    "load_hf",
    "load_params",
    "load_tokenizer",
    "save_hf",
]
