"""Loading weights: safetensors checkpoints, GGUF (llama.cpp) files, Hugging Face configs."""

from luminal.weights.gguf_io import (
    dequantize,
    dequantize_q4_0,
    dequantize_q8_0,
    gguf_llama_config,
    gguf_llama_state_dict,
    gguf_to_hf_name,
    load_gguf,
    unpermute_rope,
)
from luminal.weights.hf_config import BertConfig, LlamaConfig, load_hf_config
from luminal.weights.safetensors_io import (
    load_safetensors,
    read_safetensors_header,
    safetensors_files,
    save_safetensors,
)

__all__ = [
    "BertConfig",
    "LlamaConfig",
    "dequantize",
    "dequantize_q4_0",
    "dequantize_q8_0",
    "gguf_llama_config",
    "gguf_llama_state_dict",
    "gguf_to_hf_name",
    "load_gguf",
    "load_hf_config",
    "load_safetensors",
    "read_safetensors_header",
    "safetensors_files",
    "save_safetensors",
    "unpermute_rope",
]
