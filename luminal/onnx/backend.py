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


class LuminalRep(BackendRep):
    """An imported model, ready to run on lists or dicts of numpy arrays.

    A model whose shapes depend on an input's value (ONNX's node tests feed Reshape's
    shape or Reduce's axes as inputs) is imported at the first run, with those inputs
    as constants, and again whenever their values change."""

    def __init__(self, model: onnx.ModelProto, compiler: Any = None) -> None:
        self.model = model
        self.compiler = compiler
        self.input_names = [
            i.name
            for i in model.graph.input
            if i.name not in {t.name for t in model.graph.initializer}
        ]
        declared = {o.name: o.type.tensor_type.elem_type for o in model.graph.output}
        self.output_types = {
            name: dtypes.numpy_dtype(kind) if kind else None for name, kind in declared.items()
        }
        self.constant_names: list[str] = []
        self.constant_key: tuple | None = None
        self.graph: Graph | None = None
        self._import({})

    def _import(self, constants: dict[str, np.ndarray]) -> bool:
        """Import with `constants`; False (and the input remembered) when another input
        turns out to fix a shape."""
        graph = Graph()
        try:
            self.inputs, self.outputs = load(self.model, graph, constants=constants)
        except NeedsConstantInput as error:
            wanted = [error.input_name] if error.input_name else self._integer_inputs()
            wanted = [n for n in wanted if n not in self.constant_names]
            if not wanted and not error.input_name:
                wanted = [n for n in self._scalar_inputs() if n not in self.constant_names]
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
        if not self.constant_names:
            return
        while True:
            constants = {n: np.asarray(feeds[n]) for n in self.constant_names}
            key = tuple((n, a.dtype.str, a.shape, a.tobytes()) for n, a in constants.items())
            if key == self.constant_key and self.graph is not None:
                return
            if self._import(constants):
                self.constant_key = key
                return

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        feeds = self._feeds(inputs)
        self._specialise(feeds)
        assert self.graph is not None
        for name, array in feeds.items():
            if name in self.inputs:
                self.inputs[name].set(dtypes.to_luminal_array(np.asarray(array), f"input {name!r}"))
        self.graph.execute()
        results = []
        for name, tensor in self.outputs.items():
            value = tensor.numpy()
            wanted = self.output_types.get(name)
            results.append(_cast_out(value, wanted) if wanted is not None else value)
        return tuple(results)

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
