"""Tensor-parallel causal LMs (Megatron-LM's split): each rank holds 1/world_size of every
layer and the ranks sum their partial results twice per layer.

    import luminal as lm, luminal.distributed as dist
    dist.init()                                       # mpiexec -n 2 / torchrun ...
    model = lm.models.from_pretrained(folder, lm.Graph(), tensor_parallel=True)
    tokens = lm.models.generate(model, prompt, 32)    # the same call on every rank

The split, per decoder layer (rank r of W):

- attention: q/k/v projections column-parallel (rank r computes query heads
  [r*H/W, (r+1)*H/W) and their key/value heads), so attention itself needs no
  communication and each rank's KV cache holds only its heads; `o_proj`
  row-parallel (the columns of its heads), then an all-reduce of the partial sums;
- MLP: gate/up column-parallel, `down_proj` row-parallel, then an all-reduce;
- biases of the row-parallel projections are added on rank 0 only (the others hold
  zeros), so the sum counts them once;
- token embedding and norms replicated (a lookup of a few rows costs nothing to
  repeat); the vocabulary head vocab-parallel: rank r computes logits for rows
  [r*n, (r+1)*n) of it, n = ceil(vocab / W) (the last shard padded with zero rows),
  and an all-gather gives every rank the full logits, so every rank samples the same
  next token with no further message. A tied head uses the rows of the replicated
  embedding.

The collectives are `Function` nodes (`luminal.distributed.graph_collectives`) between
compiled segments. Each rank's model is an ordinary decoder built from a config whose
head and MLP sizes are this rank's (`model.config`); the checkpoint's config is
`model.tensor_parallel.config`. Loading slices each checkpoint tensor: from a
safetensors folder only this rank's rows or columns are read (through a memory map),
from a state dict the full tensors are sliced. Supported: decoders made of
`SelfAttention` and `GatedMLP` with separate projections (Llama, Mistral, Qwen2,
Gemma); fused projections (Phi-3, GPT-2) raise LuminalError.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from luminal.distributed import api as dist
from luminal.distributed.backend import Communicator
from luminal.distributed.data_parallel import check_same
from luminal.distributed.graph_collectives import all_gather_last_dim, all_reduce_sum
from luminal.errors import LuminalError, ShapeError
from luminal.graph import Graph
from luminal.models.decoder import CausalLM, load_tokenizer
from luminal.nn.attention import SelfAttention
from luminal.nn.layers import Linear
from luminal.nn.module import _as_numpy, build_then_load
from luminal.nn.transformer import DecoderLayer, GatedMLP
from luminal.tensor import GraphTensor
from luminal.weights import LlamaConfig, load_hf_config, read_safetensors_header, safetensors_files
from luminal.weights.safetensors_io import STORAGE_DTYPES, as_float_dtype, is_floating

PathLike = str | os.PathLike[str]

# projections whose output features are split (rows of weight and bias), and those
# whose input features are (columns of the weight; the bias lives on rank 0)
COLUMN_PARALLEL = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
ROW_PARALLEL = ("o_proj", "down_proj")


@dataclasses.dataclass(frozen=True)
class TensorParallelPlan:
    """Which part of the checkpoint `config` this rank holds, and how each tensor is cut."""

    config: LlamaConfig
    communicator: Communicator

    @property
    def rank(self) -> int:
        return self.communicator.rank

    @property
    def world_size(self) -> int:
        return self.communicator.world_size

    @property
    def vocab_rows(self) -> int:
        """Rows of the vocabulary head per rank (the last rank's padded with zeros)."""
        return -(-self.config.vocab_size // self.world_size)

    def vocab_range(self) -> tuple[int, int]:
        """The checkpoint rows of the head this rank computes, [start, stop)."""
        start = min(self.rank * self.vocab_rows, self.config.vocab_size)
        return start, min(start + self.vocab_rows, self.config.vocab_size)

    def local_config(self) -> LlamaConfig:
        """The config of this rank's shard: H/W query heads, KV/W key/value heads and
        intermediate_size/W MLP columns of the checkpoint's head_dim."""
        c, world = self.config, self.world_size
        assert c.num_key_value_heads is not None
        return dataclasses.replace(
            c,
            num_attention_heads=c.num_attention_heads // world,
            num_key_value_heads=c.num_key_value_heads // world,
            intermediate_size=c.intermediate_size // world,
            head_dim=c.head_dim,
        )

    def check_divisible(self, owner: str) -> None:
        """ShapeError naming every size that does not split evenly over the ranks."""
        c, world = self.config, self.world_size
        assert c.head_dim is not None and c.num_key_value_heads is not None
        hidden, dim = c.hidden_size, c.head_dim
        sizes = [
            ("num_attention_heads", c.num_attention_heads, "q_proj", c.num_attention_heads * dim),
            ("num_key_value_heads", c.num_key_value_heads, "k_proj", c.num_key_value_heads * dim),
            ("intermediate_size", c.intermediate_size, "gate_proj", c.intermediate_size),
        ]
        bad = [
            f"{field}={count} (the {rows} rows of {proj}.weight ({rows}, {hidden}))"
            for field, count, proj, rows in sizes
            if count % world
        ]
        if bad:
            raise ShapeError(
                f"{owner}: tensor parallelism over {world} ranks gives each rank an equal "
                f"share of the attention heads, key/value heads and MLP columns, but "
                f"{'; '.join(bad)} {'is' if len(bad) == 1 else 'are'} not divisible by {world}"
            )

    # ---------------------------------------------------------------- cutting tensors
    def rule(self, name: str) -> str:
        """How the checkpoint tensor `name` is cut: "rows", "columns", "rank0" (a
        row-parallel bias), "vocab" (the head) or "replicate"."""
        parts = name.split(".")
        if name == "lm_head.weight":
            return "vocab"
        if len(parts) < 2 or parts[-1] not in ("weight", "bias"):
            return "replicate"
        if parts[-2] in COLUMN_PARALLEL:
            return "rows"
        if parts[-2] in ROW_PARALLEL:
            return "columns" if parts[-1] == "weight" else "rank0"
        return "replicate"

    def full_shape(self, rule: str, local: tuple[int, ...]) -> tuple[int, ...]:
        """The checkpoint shape of a tensor this rank holds as `local` under `rule`."""
        world = self.world_size
        if rule == "rows":
            return (local[0] * world, *local[1:])
        if rule == "columns":
            return (local[0], local[1] * world)
        if rule == "vocab":
            return (self.config.vocab_size, *local[1:])
        return local

    def shard(self, owner: str, name: str, value: Any, local: tuple[int, ...]) -> Any:
        """This rank's part of checkpoint tensor `name` (anything with `.shape` that numpy
        slicing works on: an array, a torch tensor, a `StoredTensor`)."""
        rule = self.rule(name)
        expected = self.full_shape(rule, local)
        shape = tuple(int(d) for d in value.shape)
        if shape != expected:
            raise ShapeError(
                f"{owner}: checkpoint tensor {name!r} has shape {shape}, expected {expected} "
                f"(rank {self.rank} of {self.world_size} holds {local} of it, cut by {rule})"
            )
        r = self.rank
        if rule == "rows":
            return value[r * local[0] : (r + 1) * local[0]]
        if rule == "columns":
            return value[:, r * local[1] : (r + 1) * local[1]]
        if rule == "rank0":
            return value[...] if r == 0 else np.zeros(local, np.float32)
        if rule == "vocab":
            start, stop = self.vocab_range()
            rows = _as_numpy(value[start:stop])
            padding = np.zeros((local[0] - rows.shape[0], *local[1:]), rows.dtype)
            return np.concatenate([rows, padding]) if padding.size else rows
        return value[...]


class ParallelDecoderLayer(DecoderLayer):
    """`DecoderLayer` whose attention and MLP outputs are partial sums (row-parallel
    o_proj and down_proj): each is all-reduced before the residual add."""

    def __init__(
        self, layer: DecoderLayer, names: tuple[str, str, str, str], communicator: Communicator
    ) -> None:
        super().__init__(layer.graph, *layer.parts, names=names)
        object.__setattr__(self, "communicator", communicator)

    def combine(self, partial: GraphTensor) -> GraphTensor:
        return all_reduce_sum(partial, self.communicator)


class TensorParallelLM(CausalLM):
    """Mixed in before a decoder class by `tensor_parallel_class`: the model is built from
    this rank's `local_config()`, its layers all-reduce, its head is vocab-parallel and
    `load_state_dict` takes the checkpoint's full tensors and keeps this rank's part."""

    tensor_parallel: TensorParallelPlan

    def __init__(
        self,
        graph: Graph,
        config: Mapping[str, Any] | LlamaConfig,
        communicator: Communicator | None = None,
    ) -> None:
        if not isinstance(config, self.config_class):
            config = self.config_class.from_dict(config)
        plan = TensorParallelPlan(config, dist.init() if communicator is None else communicator)
        plan.check_divisible(type(self).__name__)
        object.__setattr__(self, "tensor_parallel", plan)
        with graph.atomic():  # an unsupported layout leaves the graph as it was
            super().__init__(graph, plan.local_config())
            self._check_layout()

    def _check_layout(self) -> None:
        for index, layer in enumerate(self.decoder.blocks):
            attention, mlp = layer.parts[:2]
            if type(attention) is not SelfAttention or type(mlp) is not GatedMLP:
                raise LuminalError(
                    f"{type(self).__name__}: tensor parallelism splits SelfAttention with "
                    f"separate q/k/v/o projections and GatedMLP; layer {index} has "
                    f"{type(attention).__name__} and {type(mlp).__name__}"
                )

    def build_layer(self, graph: Graph, index: int) -> DecoderLayer:
        layer = super().build_layer(graph, index)
        return ParallelDecoderLayer(layer, self.names.layer, self.tensor_parallel.communicator)

    def build_head(self, graph: Graph) -> Linear | None:
        if self.config.tie_word_embeddings:
            return None
        return Linear(graph, self.config.hidden_size, self.tensor_parallel.vocab_rows, False)

    def head(self, hidden: GraphTensor) -> GraphTensor:
        plan = self.tensor_parallel
        if self.lm_head is not None:
            local = self.lm_head(hidden)
        else:  # tied: this rank's rows of the replicated embedding, padded like the head
            start, stop = plan.vocab_range()
            rows = self.decoder.token_embedding.weight[start:stop]
            rows = rows.pad(((0, plan.vocab_rows - (stop - start)), (0, 0)))
            local = hidden @ rows.T
        return all_gather_last_dim(local, plan.communicator, self.config.vocab_size)

    def replica(self, graph: Graph) -> CausalLM:
        plan = self.tensor_parallel
        return type(self)(graph, plan.config, plan.communicator)

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """The checkpoint's full state dict (transformers' names and shapes): each
        tensor is cut to this rank's part (see the module docstring) before loading."""
        state = self.checkpoint_state(state)
        shapes = {name: tuple(t.shape) for name, t in self.named_tensors()}
        owner = type(self).__name__
        local = {
            name: self.tensor_parallel.shard(owner, name, value, shapes[name])
            if name in shapes
            else value
            for name, value in state.items()
        }
        super().load_state_dict(local, strict)

    def extra_repr(self) -> str:
        plan = self.tensor_parallel
        return f"{super().extra_repr()}, rank={plan.rank} of {plan.world_size}"


_CLASSES: dict[type, type] = {}


def tensor_parallel_class(cls: type[CausalLM]) -> type[TensorParallelLM]:
    """`cls` (Llama, Mistral, ...) split across ranks: a subclass named
    `TensorParallel<cls>` taking `(graph, config, communicator=None)`."""
    if issubclass(cls, TensorParallelLM):
        return cls
    if not (isinstance(cls, type) and issubclass(cls, CausalLM)):
        raise LuminalError(f"tensor parallelism needs a CausalLM class, got {cls!r}")
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"TensorParallel{cls.__name__}", (TensorParallelLM, cls), {})
    return _CLASSES[cls]


def _communicator(tensor_parallel: Any) -> Communicator:
    if isinstance(tensor_parallel, Communicator):
        return tensor_parallel
    if tensor_parallel is True:
        return dist.init()
    raise LuminalError(
        f"tensor_parallel must be True or a luminal.distributed Communicator, got "
        f"{tensor_parallel!r}"
    )


def check_same_config(communicator: Communicator, owner: str, config: LlamaConfig) -> None:
    """DistributedError on every rank unless all ranks build the same model."""
    fields = dataclasses.asdict(config)
    lines = [f"{owner} {key}={fields[key]!r}" for key in sorted(fields)]
    check_same(communicator, owner, lines)


def tensor_parallel_model(
    cls: type[CausalLM],
    graph: Graph,
    config: Mapping[str, Any] | LlamaConfig,
    communicator: Communicator | None = None,
) -> TensorParallelLM:
    """This rank's shard of `cls(graph, config)` (initial weights drawn per shard; load
    the checkpoint's full state dict with `load_state_dict`). The ranks check that they
    build the same config (a collective: call it on every rank)."""
    parallel = tensor_parallel_class(cls)
    communicator = dist.init() if communicator is None else communicator
    model = parallel(graph, config, communicator)
    check_same_config(communicator, type(model).__name__, model.tensor_parallel.config)
    return model


def from_pretrained_sharded(
    cls: type[CausalLM], folder: PathLike, graph: Graph, dtype: Any, tensor_parallel: Any
) -> TensorParallelLM:
    """`cls.from_pretrained(folder, graph, tensor_parallel=...)`: the config checked on
    every rank, this rank's shard built without initial values, and only its rows or
    columns of each tensor read from the safetensors files."""
    parallel = tensor_parallel_class(cls)
    communicator = _communicator(tensor_parallel)
    config = parallel.config_class.from_dict(load_hf_config(folder))
    check_same_config(communicator, parallel.__name__, config)
    target = as_float_dtype(dtype, "from_pretrained")
    model = build_then_load(
        graph,
        lambda: parallel(graph, config, communicator),
        lambda: StoredCheckpoint(folder, target),
    )
    model.tokenizer = load_tokenizer(folder)
    return model


# ---------------------------------------------------------------- reading slices
class StoredTensor:
    """One tensor of a safetensors file, read only where it is sliced: `tensor[index]`
    memory-maps the file and copies that part, converted to `dtype` when floating."""

    def __init__(self, path: Path, info: Mapping[str, Any], start: int, dtype: Any) -> None:
        self.path, self.start, self.dtype = path, start, dtype
        self.shape = tuple(info["shape"])
        self.storage = STORAGE_DTYPES[info["dtype"]]
        self.offset = start + info["data_offsets"][0]

    def __getitem__(self, index: Any) -> np.ndarray:
        if 0 in self.shape:
            part = np.zeros(self.shape, self.storage)[index]
        else:
            stored = np.memmap(self.path, self.storage, "r", self.offset, self.shape)
            part = stored[index]
        floating = self.dtype is not None and is_floating(self.storage)
        return np.array(part, dtype=self.dtype if floating else self.storage)


class StoredCheckpoint(Mapping[str, StoredTensor]):
    """The tensors of a safetensors checkpoint (file, folder or index) by name, none of
    them read yet."""

    def __init__(self, source: PathLike, dtype: Any = None) -> None:
        self.tensors: dict[str, StoredTensor] = {}
        for path in safetensors_files(source):
            header, start = read_safetensors_header(path)
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                if name in self.tensors:
                    raise LuminalError(
                        f"load_safetensors: tensor {name!r} is in both "
                        f"{str(self.tensors[name].path)!r} and {str(path)!r}"
                    )
                self.tensors[name] = StoredTensor(path, info, start, dtype)

    def __getitem__(self, name: str) -> StoredTensor:
        return self.tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)


__all__ = [
    "COLUMN_PARALLEL",
    "ROW_PARALLEL",
    "ParallelDecoderLayer",
    "StoredCheckpoint",
    "StoredTensor",
    "TensorParallelLM",
    "TensorParallelPlan",
    "check_same_config",
    "from_pretrained_sharded",
    "tensor_parallel_class",
    "tensor_parallel_model",
]
