"""Real models built from luminal modules, loading Hugging Face checkpoints by name."""

from luminal.models.llama import Llama, LlamaSession
from luminal.models.sampling import generate, sample_logits, top_k_filter, top_p_filter

__all__ = ["Llama", "LlamaSession", "generate", "sample_logits", "top_k_filter", "top_p_filter"]
