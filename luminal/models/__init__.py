"""Real models built from luminal modules, loading Hugging Face checkpoints by name.

Causal language models are configurations of one decoder (`luminal.models.decoder`):
`Llama`, `Mistral`, `Qwen2`, `Phi3`, `Gemma`, `GPT2`; `from_pretrained(path, cx)` picks
the class from the folder's `config.json` (`luminal.models.registry`)."""

from luminal.models.decoder import CausalLM, DecoderSession, load_tokenizer
from luminal.models.gemma import Gemma
from luminal.models.gpt2 import GPT2
from luminal.models.llama import Llama, LlamaSession
from luminal.models.mistral import Mistral
from luminal.models.phi3 import Phi3
from luminal.models.qwen2 import Qwen2
from luminal.models.sampling import generate, sample_logits, top_k_filter, top_p_filter

__all__ = [
    "CausalLM",
    "DecoderSession",
    "GPT2",
    "Gemma",
    "Llama",
    "LlamaSession",
    "Mistral",
    "Phi3",
    "Qwen2",
    "generate",
    "load_tokenizer",
    "sample_logits",
    "top_k_filter",
    "top_p_filter",
]

from luminal.models.bert import Bert, SentenceEncoder  # noqa: E402
from luminal.models.pooling import l2_normalize, mean_pooling  # noqa: E402

__all__ += ["Bert", "SentenceEncoder", "l2_normalize", "mean_pooling"]

from luminal.models.registry import from_pretrained, register  # noqa: E402

__all__ += ["from_pretrained", "register"]

from luminal.models.whisper import Whisper, WhisperConfig  # noqa: E402
from luminal.models.whisper_session import WhisperGenerationConfig, WhisperSession  # noqa: E402

__all__ += ["Whisper", "WhisperConfig", "WhisperGenerationConfig", "WhisperSession"]

from luminal.models import yolo  # noqa: E402
from luminal.models.yolo import YOLOv8  # noqa: E402

__all__ += ["YOLOv8", "yolo"]
