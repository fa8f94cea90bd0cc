"""`onnx.backend.base.Backend` for luminal, so ONNX's own conformance suite
(`onnx.backend.test.BackendTest`) runs against it.

`prepare(model, device="CPU", compiler=None)` imports the model into a fresh graph;
with a compiler (e.g. `lm.CPUCompiler()`) the graph is compiled, otherwise runs use
the reference runtime. Outputs come back in the element types the model declares.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep

from luminal.errors import ExecutionError
from luminal.graph import Graph
from luminal.onnx import dtypes
from luminal.onnx.errors import NeedsConstantInput
from luminal.onnx.loader import load, read_model

# graphs a model keeps, one per distinct value of its shape-fixing inputs (oldest dropped)
MAX_SPECIALISED = 8


class LuminalRep(BackendRep):
    """An imported model, ready to run on lists or dicts of numpy arrays.

    A model whose shapes depend on an input's value (ONNX's node tests feed Reshape's
    shape or Reduce's axes as inputs; NonZero, Unique and NonMaxSuppression size their
    outputs by their data) is imported at the first run, with those inputs as constants,
    and again whenever their values change."""

    def __init__(self, model: onnx.ModelProto, compiler: Any = None) -> None:
        self.model = model
        self.compiler = compiler
        self.input_names = [
            i.name
            for i in model.graph.input
            if i.name not in {t.name for t in model.graph.initializer}
        ]
        self.output_types = {o.name: _element_type(o.type) for o in model.graph.output}
        # sequence/optional inputs: imported at the first run, with their structure
        self.structured = [
            i.name
            for i in model.graph.input
            if i.name in self.input_names and i.type.WhichOneof("value") != "tensor_type"
        ]
        self.constant_names: list[str] = []
        self.constant_key: tuple | None = None
        self.specialised: dict[tuple, tuple[Graph, dict, dict]] = {}
        self.graph: Graph | None = None
        self.structures: dict[str, Any] = {}
        if not self.structured:
            self._import({})

    def _import(self, constants: dict[str, np.ndarray]) -> bool:
        """Import with `constants`; False (and the input remembered) when another input
        turns out to fix a shape."""
        graph = Graph()
        try:
            self.inputs, self.outputs = load(
                self.model, graph, constants=constants, structures=self.structures
            )
        except NeedsConstantInput as error:
            wanted = [error.input_name] if error.input_name else self._integer_inputs()
            wanted = [n for n in wanted if n not in self.constant_names]
            if not wanted and not error.input_name:
                wanted = [n for n in self._scalar_inputs() if n not in self.constant_names]
            if not wanted and not error.input_name:  # NonZero(x > 0): the data itself
                wanted = [n for n in self.input_names if n not in self.constant_names]
            if not wanted:
                raise
            self.constant_names.extend(wanted)
            self.graph = None
            return False
        if self.compiler is not None:
            graph.compile(self.compiler)
        self.graph = graph
        return True

    def _integer_inputs(self) -> list[str]:
        """Inputs that may carry shape values (integers), when a shape is computed from
        inputs rather than read from one."""
        kinds = {i.name: i.type.tensor_type.elem_type for i in self.model.graph.input}
        return [n for n in self.input_names if kinds.get(n) in dtypes.INTEGER_TYPES]

    def _scalar_inputs(self) -> list[str]:
        """Inputs of one element (a float Range's bounds), the last resort when a
        shape is computed from inputs and the integer inputs were not enough."""
        shapes = {i.name: i.type.tensor_type.shape.dim for i in self.model.graph.input}
        return [
            n
            for n in self.input_names
            if all(d.HasField("dim_value") and d.dim_value == 1 for d in shapes.get(n, [None]))
        ]

    def _specialise(self, feeds: dict[str, Any]) -> None:
        """The graph for these constant values: a cached one (the last few distinct
        values each keep theirs), else a fresh import."""
        if not self.constant_names and not self.structured:
            return
        self.structures = {n: _structure(feeds[n]) for n in self.structured}
        while True:
            constants = {n: np.asarray(feeds[n]) for n in self.constant_names}
            key = tuple((n, a.dtype.str, a.shape, a.tobytes()) for n, a in constants.items())
            key = (*key, repr(self.structures))
            if key == self.constant_key and self.graph is not None:
                return
            if key in self.specialised:
                self.graph, self.inputs, self.outputs = self.specialised[key]
                self.constant_key = key
                return
            if self._import(constants):
                self.constant_key = key
                if len(self.specialised) >= MAX_SPECIALISED:
                    self.specialised.pop(next(iter(self.specialised)))
                self.specialised[key] = (self.graph, self.inputs, self.outputs)
                return

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        feeds = self._feeds(inputs)
        self._specialise(feeds)
        assert self.graph is not None
        for name, value in feeds.items():
            if name in self.inputs:
                _set(self.inputs[name], value, name)
        self.graph.execute()
        return tuple(
            _result(tensor, self.output_types.get(name)) for name, tensor in self.outputs.items()
        )

    def _feeds(self, inputs: Any) -> dict[str, Any]:
        names = self.input_names
        if isinstance(inputs, dict):
            return dict(inputs)
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        inputs = list(inputs)
        if len(inputs) != len(names):
            raise ExecutionError(
                f"run: the model takes {len(names)} inputs {names}, got {len(inputs)}"
            )
        return dict(zip(names, inputs, strict=True))


def _element_type(kind: onnx.TypeProto) -> np.dtype | None:
    """The numpy type of a tensor, or of a sequence's or optional's tensors."""
    which = kind.WhichOneof("value")
    if which == "sequence_type":
        return _element_type(kind.sequence_type.elem_type)
    if which == "optional_type":
        return _element_type(kind.optional_type.elem_type)
    elem = kind.tensor_type.elem_type if which == "tensor_type" else 0
    return dtypes.numpy_dtype(elem) if elem else None


def _structure(value: Any) -> Any:
    """What load(structures=) needs of a fed value: None, a list, or a shape."""
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return [_structure(v) for v in value]
    return tuple(np.shape(value))


def _set(target: Any, value: Any, name: str) -> None:
    """Feed a graph input, or the element inputs of a sequence."""
    if target is None:
        return
    if isinstance(target, list):
        for i, (t, v) in enumerate(zip(target, value, strict=True)):
            _set(t, v, f"{name}[{i}]")
        return
    target.set(dtypes.to_luminal_array(np.asarray(value), f"input {name!r}"))


def _result(tensor: Any, wanted: np.dtype | None) -> Any:
    if tensor is None:
        return None
    if isinstance(tensor, list):
        return [_result(t, wanted) for t in tensor]
    value = tensor.numpy()
    return _cast_out(value, wanted) if wanted is not None else value


def _cast_out(value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A luminal result in the model's declared type (float64 and narrow integers
    were computed as float32 / int32)."""
    if value.dtype == dtype:
        return value
    if dtype.kind in "iu" and value.dtype.kind == "f":
        value = np.trunc(value)
    return value.astype(dtype)


class LuminalBackend(Backend):
    """luminal as an ONNX backend: CPU only, reference runtime unless given a compiler."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> LuminalRep:
        proto, _ = read_model(model)
        return LuminalRep(proto, kwargs.get("compiler"))

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper().startswith("CPU")

    @classmethod
    def run_model(
        cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Sequence[np.ndarray],
        device: str = "CPU",
        outputs_info: Sequence[tuple[Any, tuple]] | None = None,
        **kwargs: Any,
    ) -> tuple[np.ndarray, ...]:
        """Run one node on numpy inputs (a one-node model built around it)."""
        arrays = [np.asarray(a) for a in inputs]
        names = [name for name in node.input if name]
        infos = [
            helper.make_tensor_value_info(name, dtypes.from_numpy(a.dtype), a.shape)
            for name, a in zip(names, arrays, strict=False)
        ]
        outputs = [helper.make_tensor_value_info(name, 0, None) for name in node.output if name]
        graph = helper.make_graph([node], "run_node", infos, outputs)
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        inferred = onnx.shape_inference.infer_shapes(model)
        del model.graph.output[:]
        model.graph.output.extend(inferred.graph.output)
        return cls.prepare(model, device, **kwargs).run(arrays)


prepare = LuminalBackend.prepare
run_model = LuminalBackend.run_model
run_node = LuminalBackend.run_node
supports_device = LuminalBackend.supports_device
