"""Real models built from luminal modules, loading Hugging Face checkpoints by name."""

from luminal.models.llama import Llama, LlamaSession
from luminal.models.sampling import generate, sample_logits, top_k_filter, top_p_filter

__all__ = ["Llama", "LlamaSession", "generate", "sample_logits", "top_k_filter", "top_p_filter"]

from luminal.models.bert import Bert, SentenceEncoder  # noqa: E402
from luminal.models.pooling import l2_normalize, mean_pooling  # noqa: E402

__all__ += ["Bert", "SentenceEncoder", "l2_normalize", "mean_pooling"]
