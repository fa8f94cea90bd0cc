"""A small training loop: one compiled graph per training step, and `fit` around it.

`TrainStep` turns a loss into a graph that runs forward, backward and the optimizer update
in one `execute()` (compiled once, with `lm.CPUCompiler()` by default); calling it with a
batch runs one step and returns the loss. `fit` iterates over epochs of batches with a
tqdm progress bar (loss, samples/s), calls an evaluation hook every N steps or epochs,
returns the `History` and can plot it to a PNG. Gradient accumulation sums the gradients
of `accumulate` micro-batches in a graph-held buffer before the optimizer step. With
`data_parallel=True` every rank of a `luminal.distributed` group runs the step on its
shard of each global batch and the gradients are averaged across ranks (one all-reduce
per optimizer step, inside the graph run). See docs/training.md ("Training loop") and
docs/distributed.md.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from luminal import backends, ops
from luminal.dtype import float16, float32, int32
from luminal.errors import DistributedError, ExecutionError, GraphError, LuminalError, ShapeError
from luminal.training.autograd import Autograd
from luminal.training.mixed_precision import GradScaler, autocast, compute_dtype
from luminal.training.optim import Optimizer, clip_grad_norm, output_array

if TYPE_CHECKING:
    from luminal.distributed.data_parallel import GradientBucket, ParameterShards
    from luminal.graph import Graph
    from luminal.nn.module import Module
    from luminal.tensor import GraphTensor
    from luminal.training.schedules import LRSchedule

EvalFn = Callable[[], Mapping[str, float]]
_DEFAULT = object()  # "the default for this argument" (a GradScaler for fp16)


class TrainStep:
    """Forward, backward and optimizer update of `loss` as one graph run.

    `inputs` are the graph inputs a batch fills, in order (`step(x, y)` sets them);
    `optimizer` is built on the parameters to train and its `step_graph` must not have been
    called yet. `schedule` (built on that optimizer, or a function of it) steps after every
    optimizer step.
    With `accumulate=k`, each call is one micro-batch: gradients are summed in a buffer
    held by the graph and the optimizer steps, with their mean, on every k-th call.
    `max_grad_norm` clips the (accumulated) gradient norm first. `outputs` are extra
    tensors to read after each call (`step.outputs["logits"].numpy()`). `compiler` is a
    compiler or a backend name (default "cpu": `lm.CPUCompiler()`); None runs on the
    reference runtime.
    `mixed_precision="fp16" | "bf16"` (build the loss under `autocast`, or use `build`)
    scales the loss with `scaler` (a `GradScaler`; by default one for fp16, none for
    bf16): a step whose gradients overflow is skipped and the scale backs off.
    `data_parallel=True` (the group from `luminal.distributed.init()`, called if needed):
    each call takes the global batch and runs on this rank's contiguous shard of it; the
    gradients and the loss are averaged over the ranks in one all-reduce before clipping,
    the overflow check and the optimizer, so all ranks apply the same update. At
    construction the ranks check that they built the same parameters and take rank 0's
    parameters and optimizer state. The loss must be a mean over the batch.
    """

    def __init__(
        self,
        loss: GraphTensor,
        inputs: Sequence[GraphTensor],
        optimizer: Optimizer,
        *,
        schedule: LRSchedule | Callable[[Optimizer], LRSchedule] | None = None,
        accumulate: int = 1,
        max_grad_norm: float | None = None,
        outputs: Mapping[str, GraphTensor] | None = None,
        compiler: Any = "cpu",
        mixed_precision: str | None = None,
        scaler: GradScaler | None | object = _DEFAULT,
        data_parallel: bool = False,
    ) -> None:
        self.graph: Graph = loss.graph
        self.inputs = list(inputs)
        self.optimizer = optimizer
        if schedule is not None and not hasattr(schedule, "step"):
            schedule = schedule(optimizer)  # a function of the optimizer (for `build`)
        self.schedule: LRSchedule | None = schedule  # type: ignore[assignment]
        self.accumulate = int(accumulate)
        self.outputs = dict(outputs or {})
        self._check(loss)
        self.loss = loss.retrieve()
        for tensor in self.outputs.values():
            tensor.retrieve()
        graph = self.graph
        self.scaler = _scaler_for(mixed_precision, scaler, optimizer)
        scaled = self.scaler.scale(loss) if self.scaler is not None else loss
        grads = graph.compile(Autograd(optimizer.params, scaled))
        if self.scaler is not None:
            grads = self.scaler.unscale(grads)
        self._buffers: list[tuple[GraphTensor, GraphTensor]] = []
        self._last_flag: GraphTensor | None = None
        if self.accumulate > 1:
            grads = self._accumulated(grads)
        self._bucket: GradientBucket | None = None
        if data_parallel:
            grads = self._data_parallel(grads)
        if max_grad_norm is not None:
            grads = clip_grad_norm(grads, max_grad_norm)
        if self.scaler is not None:
            self.scaler.check(grads)  # after accumulation: an inf in any micro-batch stays
        self._shards = self._sharded(optimizer)
        if self._shards is not None:
            self._shards.step_graph(graph, optimizer, grads)
        else:
            optimizer.step_graph(grads)
        self.broadcast_state()
        if compiler is not None:
            graph.compile(backends.compiler(compiler))
        if self._bucket is not None:
            self._bucket.connect(graph)
        if self._shards is not None:  # after compiling: its verification runs write the range
            self._shards.publish(graph, self._bucket.array)
        self.micro_step = 0  # calls so far
        self.optimizer_steps = 0  # optimizer steps taken or skipped (on an overflow)
        self.skipped_steps = 0

    @classmethod
    def build(
        cls,
        model: Module,
        loss_fn: Callable[[GraphTensor, GraphTensor], GraphTensor],
        optimizer: Callable[[list[GraphTensor]], Optimizer],
        input_shape: Sequence[Any],
        target_shape: Sequence[Any] = ("batch",),
        target_dtype: Any = int32,
        **kwargs: Any,
    ) -> TrainStep:
        """The usual case in one call: inputs `x` (input_shape, float32) and `y`, the loss
        `loss_fn(model(x), y)`, and `optimizer(model.parameters())`, e.g.
        `functools.partial(lm.training.Adam, lr=1e-3)`. The model's output is available as
        `step.outputs["prediction"]`; other keyword arguments go to `TrainStep`. With
        `mixed_precision`, the forward runs under `autocast` on `x` cast to that dtype."""
        graph = model.graph
        x = graph.tensor(tuple(input_shape), name="x")
        y = graph.tensor(tuple(target_shape), dtype=target_dtype, name="y")
        precision = kwargs.get("mixed_precision")
        if precision is None:
            prediction = model(x)
            loss = loss_fn(prediction, y)
        else:  # the forward in fp16/bf16, the loss in float32 (as torch.autocast)
            with autocast(model, precision) as dtype:
                prediction = model(x.cast(dtype))
            loss = loss_fn(prediction.cast(float32), y)
        outputs = {"prediction": prediction, **kwargs.pop("outputs", {})}
        return cls(loss, (x, y), optimizer(model.parameters()), outputs=outputs, **kwargs)

    # ---------------------------------------------------------------- building
    def _check(self, loss: GraphTensor) -> None:
        name = "TrainStep"
        if loss.ndim != 0 or not loss.dtype.is_float:
            raise ShapeError(
                f"{name}: loss must be a float scalar, got shape {loss._shape_text()} "
                f"and dtype {loss.dtype.value}"
            )
        if self.optimizer.graph is not self.graph:
            raise GraphError(f"{name}: the optimizer's parameters are in another graph")
        if self.accumulate < 1:
            raise LuminalError(f"{name}: accumulate must be >= 1, got {self.accumulate}")
        for index, tensor in enumerate(self.inputs):
            if tensor.graph is not self.graph:
                raise GraphError(f"{name}: input {index} belongs to another graph")
            if not isinstance(tensor.node.op, ops.Input) or not tensor.view.is_identity():
                raise GraphError(
                    f"{name}: input {index} of shape {tensor._shape_text()} is a "
                    f"{tensor.node.op.name}; batch inputs must be graph inputs (cx.tensor)"
                )

    def _accumulated(self, grads: list[GraphTensor]) -> list[GraphTensor]:
        """Sum gradients over micro-batches in float32 input buffers. Every run computes
        `total = buffer + grad`; the next buffer is `total * (1 - last)`, where `last` is a
        scalar input set to 1 on the k-th call (so the buffer restarts at exactly zero).
        The optimizer gets `total / k` on every run, but its new values are only applied
        on the k-th call; before that they are computed and thrown away."""
        graph = self.graph
        self._last_flag = graph.tensor((), dtype=float32, name="accumulate.last")
        self._last_flag.set(np.zeros((), np.float32))
        keep = 1.0 - self._last_flag
        averaged = []
        for param, grad in zip(self.optimizer.params, grads, strict=True):
            shape = tuple(int(d) for d in param.shape)
            label = param.node.op.label
            buffer = graph.tensor(shape, dtype=float32, name=f"{label}.grad_accumulator")
            buffer.set(np.zeros(shape, np.float32))
            total = buffer + grad.cast(float32)
            self._buffers.append((buffer, (total * keep).keep()))
            averaged.append(total * (1.0 / self.accumulate))
        return averaged

    def _data_parallel(self, grads: list[GraphTensor]) -> list[GraphTensor]:
        """Join the group, check that every rank built the same step, take rank 0's
        parameters and optimizer state, and average `grads` through the bucket."""
        import luminal.distributed as dist
        from luminal.distributed import data_parallel

        communicator = dist.init()
        optimizer = self.optimizer
        lines = [f"{type(optimizer).__name__}, accumulate={self.accumulate}"]
        lines += data_parallel.describe(optimizer.params)
        data_parallel.check_same(communicator, "TrainStep(data_parallel=True)", lines)
        self._bucket = data_parallel.GradientBucket(communicator)
        return data_parallel.averaged(self.graph, grads, self.loss, self._bucket)

    # ---------------------------------------------------------------- running
    def _sharded(self, optimizer: Optimizer) -> ParameterShards | None:
        """ZeRO-1 (each rank updates 1/W of the parameters, which the ranks share) where
        the ranks share memory and every run of the graph is an optimizer step that is
        applied: not with accumulation or a loss scaler (a run that does not step would
        still write the parameters in place), nor with outputs that the loss does not
        depend on (a kernel computing one could read the parameters after this rank's
        update; `prediction` is computed before), nor for LAMB."""
        bucket = self._bucket
        if bucket is None or bucket.peers is None or not optimizer.elementwise:
            return None
        if self.accumulate > 1 or self.scaler is not None:
            return None
        before = set(self.graph.topological_order([self.loss.node_id]))
        if any(t.node_id not in before for t in self.outputs.values()):
            return None
        from luminal.distributed.data_parallel import ParameterShards

        shards = ParameterShards.create(bucket.communicator, optimizer.params)
        if shards is not None:
            bucket.settle_fully = True
        return shards

    @property
    def params(self) -> list[GraphTensor]:
        return self.optimizer.params

    @property
    def rank(self) -> int:
        """This process's rank in the data-parallel group (0 without one)."""
        return self._bucket.communicator.rank if self._bucket is not None else 0

    @property
    def world_size(self) -> int:
        return self._bucket.communicator.world_size if self._bucket is not None else 1

    def set_batch(self, *arrays: np.ndarray) -> None:
        """Give each batch input its data (symbolic dims, e.g. "batch", bind to the sizes)."""
        if len(arrays) != len(self.inputs):
            raise LuminalError(
                f"TrainStep: got {len(arrays)} arrays for {len(self.inputs)} batch inputs"
            )
        for tensor, array in zip(self.inputs, arrays, strict=True):
            tensor.set(array)

    def __call__(self, *arrays: np.ndarray) -> float:
        """One micro-batch: run the graph and, on every `accumulate`-th call, apply the
        optimizer step and advance the schedule. Returns this batch's loss (data
        parallel: the mean over the whole global batch, the same on every rank)."""
        bucket = self._bucket
        if bucket is not None:
            arrays, bucket.weight = _shard(arrays, bucket.communicator)
            if self._shards is not None:
                self._shards.check(self.graph)
        self.set_batch(*arrays)
        last = (self.micro_step + 1) % self.accumulate == 0
        if self._last_flag is not None:
            self._last_flag.set(np.asarray(1.0 if last else 0.0, np.float32))
        if bucket is None:
            self.graph.execute()
        else:
            _execute_reducing(self.graph, bucket, last)
        if self._buffers:
            for buffer, new in self._buffers:
                self.graph.input_data[buffer.node_id] = output_array(self.graph, new)
        if last:
            skip = self.scaler is not None and self.scaler.overflowed()
            if self.scaler is not None:
                self.scaler.update(skip)
            if skip:  # params and state stay as they are; the buffers restart at zero
                self.skipped_steps += 1
                for buffer, _ in self._buffers:
                    self.graph.input_data[buffer.node_id] = np.zeros_like(
                        self.graph.input_data[buffer.node_id]
                    )
            else:
                self.optimizer.apply()
            if self.schedule is not None:  # stepped either way, as in torch's amp recipe
                self.schedule.step()
            self.optimizer_steps += 1
        self.micro_step += 1
        if bucket is None:
            return float(self.loss.numpy())
        if last:
            return bucket.loss
        return _global_loss(float(self.loss.numpy()), bucket)

    @property
    def pending(self) -> int:
        """Micro-batches accumulated since the last optimizer step."""
        return self.micro_step % self.accumulate

    # ---------------------------------------------------------------- checkpoints
    def _checkpoint_tensors(self, with_state: bool = True) -> dict[str, GraphTensor]:
        """Parameters ("param.i"), optimizer state ("kind.i") and the optimizer's step."""
        tensors = {f"param.{i}": p for i, p in enumerate(self.optimizer.params)}
        if with_state:
            for kind, states in self.optimizer.state.items():
                tensors.update({f"{kind}.{i}": t for i, t in enumerate(states)})
        tensors["optimizer.step"] = self.optimizer._step
        return tensors

    def _state_arrays(self) -> dict[str, np.ndarray]:
        """The optimizer state's whole arrays by checkpoint name (sharded: every rank's
        ranges gathered, a collective)."""
        data, states = self.graph.input_data, self.optimizer.state
        if self._shards is None:
            return {
                f"{k}.{i}": data[t.node_id] for k, ts in states.items() for i, t in enumerate(ts)
            }
        full = self._shards.gather_state(self.graph, states)
        return {f"{k}.{i}": a for k, arrays in full.items() for i, a in enumerate(arrays)}

    def broadcast_state(self) -> None:
        """Data parallel: give every rank rank 0's parameters, optimizer state and step
        (done at construction; again after changing weights on rank 0 only). With the
        optimizer sharded, each rank keeps its own range of the state."""
        if self._bucket is None:
            return
        from luminal.distributed.data_parallel import broadcast_inputs

        tensors = self._checkpoint_tensors(with_state=self._shards is None)
        broadcast_inputs(self._bucket.communicator, self.graph, list(tensors.values()))
        if self._shards is not None and self._shards.published:
            self._shards.publish(self.graph, self._bucket.array)

    def save(self, path: str | Path) -> None:
        """Write parameters and optimizer state as safetensors. Data parallel: every rank
        holds the same values, rank 0 writes, and all ranks return once it has written."""
        from luminal.weights import save_safetensors

        data = self.graph.input_data
        tensors = self._checkpoint_tensors(with_state=False)
        arrays = {name: data[t.node_id] for name, t in tensors.items()}
        arrays.update(self._state_arrays())
        if self.rank == 0:
            save_safetensors(arrays, path)
        if self._bucket is not None:
            self._bucket.communicator.barrier(None)

    def load(self, path: str | Path) -> None:
        """Read what `save` wrote (data parallel: rank 0 reads, the others receive it)."""
        from luminal.weights import load_safetensors

        tensors = self._checkpoint_tensors()
        if self._shards is not None:
            self._load_sharded(path, tensors)
            return
        if self.rank == 0:
            stored = load_safetensors(path)
            missing = sorted(set(tensors) - set(stored))
            if missing:
                raise LuminalError(f"TrainStep.load: {str(path)!r} lacks {missing[:3]}")
            for name, tensor in tensors.items():
                tensor.set(stored[name])
        self.broadcast_state()

    def _load_sharded(self, path: str | Path, tensors: dict[str, Any]) -> None:
        """`load` with the optimizer sharded: rank 0 reads, every rank receives the whole
        arrays and keeps its ranges of the state; the parameters go to the shared vector."""
        from luminal.weights import load_safetensors

        assert self._bucket is not None and self._shards is not None
        communicator, data = self._bucket.communicator, self.graph.input_data
        names = [name for name, t in tensors.items() if t is not None]
        stored = load_safetensors(path) if self.rank == 0 else {}
        missing = sorted(set(names) - set(stored)) if self.rank == 0 else []
        if missing:
            raise LuminalError(f"TrainStep.load: {str(path)!r} lacks {missing[:3]}")
        states = self.optimizer.state
        full: dict[str, list[np.ndarray]] = {}
        for kind in states:
            arrays = []
            for index, param in enumerate(self.optimizer.params):
                shape = tuple(int(d) for d in param.shape)
                array = stored.get(f"{kind}.{index}", np.zeros(shape, np.float32))
                arrays.append(communicator.broadcast(np.array(array, np.float32), 0, None))
            full[kind] = arrays
        self._shards.scatter_state(self.graph, states, full)
        for name, tensor in tensors.items():
            if self.rank == 0 and (name.startswith("param.") or name == "optimizer.step"):
                data[tensor.node_id] = np.array(stored[name], data[tensor.node_id].dtype)
        self.broadcast_state()


def _shard(arrays: Sequence[np.ndarray], communicator: Any) -> tuple[Sequence[np.ndarray], float]:
    from luminal.distributed.data_parallel import shard

    return shard(arrays, communicator.rank, communicator.world_size)


def _execute_reducing(graph: Graph, bucket: GradientBucket, last: bool) -> None:
    """Run the graph with the bucket's all-reduce live on optimizer steps; a collective
    that failed inside the run surfaces as its own DistributedError."""
    bucket.active = last
    try:
        bucket.ready()
        graph.execute()
        if last:
            bucket.settle()
    except ExecutionError as error:
        if isinstance(error.__cause__, DistributedError):
            raise error.__cause__ from None
        raise
    finally:
        bucket.active = False


def _global_loss(local: float, bucket: GradientBucket) -> float:
    """The mean loss of the global micro-batch (uneven shards weighted by size)."""
    value = np.array([local * bucket.weight], np.float32)
    bucket.communicator.all_reduce(value, "avg", None)
    return float(value[0])


def _scaler_for(
    mixed_precision: str | None, scaler: GradScaler | None | object, optimizer: Optimizer
) -> GradScaler | None:
    """The loss scaler a TrainStep uses: the one given, else a default GradScaler for
    fp16 (bf16 has float32's range and needs none). Master weights must be float32."""
    if mixed_precision is None:
        return None if scaler is _DEFAULT else scaler  # type: ignore[return-value]
    dtype = compute_dtype(mixed_precision)
    for index, param in enumerate(optimizer.params):
        if param.dtype != float32:
            raise LuminalError(
                f"TrainStep: mixed_precision={mixed_precision!r} keeps float32 master weights, "
                f"but parameter {index} of shape {param._shape_text()} is {param.dtype.value}"
            )
    if scaler is _DEFAULT:
        return GradScaler() if dtype == float16 else None
    return scaler  # type: ignore[return-value]


# ------------------------------------------------------------------------------ data
class ArrayLoader:
    """Batches of numpy arrays that share their first dim, reshuffled every pass from one
    seeded generator: iterating twice gives two different orders, and the same seed gives
    the same sequence of orders (deterministic training). Re-iterable, with `len()`."""

    def __init__(
        self,
        *arrays: np.ndarray,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if not arrays:
            raise LuminalError("ArrayLoader: needs at least one array")
        sizes = {len(a) for a in arrays}
        if len(sizes) != 1:
            raise ShapeError(f"ArrayLoader: arrays have different lengths {sorted(sizes)}")
        if batch_size < 1:
            raise LuminalError(f"ArrayLoader: batch_size must be >= 1, got {batch_size}")
        self.arrays = arrays
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.size = sizes.pop()
        self._rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        if self.drop_last:
            return self.size // self.batch_size
        return math.ceil(self.size / self.batch_size)

    def __iter__(self) -> Iterator[tuple[np.ndarray, ...]]:
        order = self._rng.permutation(self.size) if self.shuffle else np.arange(self.size)
        for batch in range(len(self)):
            index = order[batch * self.batch_size : (batch + 1) * self.batch_size]
            yield tuple(np.ascontiguousarray(a[index]) for a in self.arrays)


# ------------------------------------------------------------------------------ fit
@dataclass
class History:
    """What `fit` measured. `losses[i]` is the mean micro-batch loss of optimizer step
    `steps[i]` (1-based); `metrics[name][j]` was returned by the eval hook after step
    `metric_steps[j]`. Times are wall-clock seconds; training time excludes evaluation."""

    steps: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    epoch_losses: list[float] = field(default_factory=list)
    metric_steps: list[int] = field(default_factory=list)
    metrics: dict[str, list[float]] = field(default_factory=dict)
    samples: int = 0
    train_seconds: float = 0.0
    eval_seconds: float = 0.0

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.train_seconds if self.train_seconds > 0 else 0.0

    @property
    def last_metrics(self) -> dict[str, float]:
        """The latest value of every metric."""
        return {name: values[-1] for name, values in self.metrics.items() if values}

    def _record_metrics(self, step: int, values: Mapping[str, float]) -> None:
        self.metric_steps.append(step)
        for name, value in values.items():
            self.metrics.setdefault(name, [math.nan] * (len(self.metric_steps) - 1))
            self.metrics[name].append(float(value))
        for series in self.metrics.values():  # a metric the hook stopped returning
            if len(series) < len(self.metric_steps):
                series.append(math.nan)


def fit(
    step: TrainStep,
    data: Iterable[Sequence[np.ndarray]] | Callable[[int], Iterable[Sequence[np.ndarray]]],
    epochs: int = 1,
    *,
    eval_fn: EvalFn | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    plot_path: str | Path | None = None,
    log: Callable[[str], None] | None = print,
    save_path: str | Path | None = None,
) -> History:
    """Train for `epochs` passes over `data` and return the History.

    `data` yields batches as tuples of arrays in the order of `step.inputs` (an
    `ArrayLoader`, a list, ...); it must be re-iterable, or a function of the epoch number
    returning that epoch's batches. `eval_fn()` returns metrics such as
    `{"accuracy": 0.97}`; it runs every `eval_every` optimizer steps, or at the end of every
    epoch when `eval_every` is None, and each result is logged. `progress` shows a tqdm bar
    with the running loss and samples/s. `plot_path` writes the loss and metric curves as a
    PNG at the end (see `plot_history`). `save_path` gets a checkpoint (`step.save`) at
    the end of every epoch. Data parallel: every rank passes the same global batches;
    only rank 0 shows progress, logs, plots and writes the checkpoint.
    """
    if epochs < 0:
        raise LuminalError(f"fit: epochs must be >= 0, got {epochs}")
    if eval_every is not None and eval_every < 1:
        raise LuminalError(f"fit: eval_every must be >= 1 or None, got {eval_every}")
    if not callable(data) and epochs > 1 and iter(data) is data:  # type: ignore[arg-type]
        raise LuminalError(
            "fit: data is a one-pass iterator; pass a list, an ArrayLoader or a function "
            "of the epoch that returns the batches"
        )
    history = History()
    lead = step.rank == 0
    bar = _progress_bar(step, data, epochs, progress and lead)
    write = _writer(bar, log if lead else None)
    pending: list[float] = []

    def evaluate() -> None:
        if eval_fn is None:
            return
        start = time.perf_counter()
        values = dict(eval_fn())
        history.eval_seconds += time.perf_counter() - start
        history._record_metrics(step.optimizer_steps, values)
        text = ", ".join(f"{k} {v:.4f}" for k, v in values.items())
        write(f"step {step.optimizer_steps}: {text}")

    try:
        for epoch in range(epochs):
            batches = data(epoch) if callable(data) else data
            if bar is not None:
                bar.set_description(f"epoch {epoch + 1}/{epochs}")
            epoch_losses: list[float] = []
            for batch in batches:
                start = time.perf_counter()
                loss = step(*batch)
                history.train_seconds += time.perf_counter() - start
                history.samples += len(batch[0])
                pending.append(loss)
                epoch_losses.append(loss)
                if step.pending == 0:
                    history.steps.append(step.optimizer_steps)
                    history.losses.append(float(np.mean(pending)))
                    pending.clear()
                    if eval_every is not None and step.optimizer_steps % eval_every == 0:
                        evaluate()
                if bar is not None:
                    bar.update(1)
                    postfix = {
                        "loss": f"{np.mean(epoch_losses[-20:]):.4f}",
                        "samples/s": f"{history.samples_per_second:.0f}",
                    }
                    bar.set_postfix(postfix, refresh=False)
            if epoch_losses:
                history.epoch_losses.append(float(np.mean(epoch_losses)))
            if eval_every is None:
                evaluate()
            if save_path is not None:
                step.save(save_path)
    finally:
        if bar is not None:
            bar.close()
    if pending:
        write(f"fit: {len(pending)} micro-batch(es) accumulated but not applied yet")
    if plot_path is not None and lead:
        plot_history(history, plot_path)
    return history


def _progress_bar(step: TrainStep, data: Any, epochs: int, progress: bool) -> Any:
    if not progress:
        return None
    from tqdm.auto import tqdm

    try:
        total = len(data) * epochs
    except TypeError:
        total = None
    return tqdm(total=total, unit="batch", dynamic_ncols=True, leave=True)


def _writer(bar: Any, log: Callable[[str], None] | None) -> Callable[[str], None]:
    """Log lines above the progress bar (tqdm.write) or through `log`."""
    if log is None:
        return lambda text: None
    if bar is not None and log is print:
        from tqdm.auto import tqdm

        return tqdm.write
    return log


def plot_history(history: History, path: str | Path) -> Path:
    """Write the loss per optimizer step (with a moving average) and every metric against
    the step as a PNG (matplotlib's Agg renderer: no display needed). Returns the path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    panels = 2 if history.metrics else 1
    figure = Figure(figsize=(5.5 * panels, 4), dpi=100)
    FigureCanvasAgg(figure)  # render with Agg; pyplot and its global backend stay untouched
    axes = figure.subplots(1, panels, squeeze=False)[0]
    loss_axis = axes[0]
    if history.losses:
        loss_axis.plot(history.steps, history.losses, lw=0.8, alpha=0.5, label="loss")
        window = max(1, len(history.losses) // 20)
        if window > 1:
            smooth = np.convolve(history.losses, np.ones(window) / window, mode="valid")
            loss_axis.plot(history.steps[window - 1 :], smooth, lw=1.5, label=f"mean of {window}")
    loss_axis.set(xlabel="optimizer step", ylabel="training loss", title="Loss")
    loss_axis.grid(alpha=0.3)
    loss_axis.legend()
    if history.metrics:
        metric_axis = axes[1]
        for name, values in history.metrics.items():
            metric_axis.plot(history.metric_steps, values, marker="o", ms=3, label=name)
        metric_axis.set(xlabel="optimizer step", title="Evaluation")
        metric_axis.grid(alpha=0.3)
        metric_axis.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


__all__ = ["ArrayLoader", "History", "TrainStep", "fit", "plot_history"]
