"""`load`: an ONNX model into a luminal graph, all or nothing.

The model is read and checked first (file, opsets, every op has a rule or a standard
function body, element types); only then are nodes added, inside `Graph.atomic()`,
so a failure part-way (a bad attribute, a shape that does not fit) rolls every added
node back. Values known at load time (initializers, Constant, shape arithmetic) stay
numpy arrays until an op needs them in the graph; see `folding.py`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from luminal.errors import LuminalError
from luminal.graph import Graph
from luminal.onnx import dtypes, functions, patterns
from luminal.onnx.context import NodeContext, Value, is_static
from luminal.onnx.errors import NeedsConstantInput, OnnxImportError, UnsupportedOpError, node_text
from luminal.onnx.folding import FOLDERS, lift_array
from luminal.onnx.ops import DOMAIN_RULES, RULES
from luminal.tensor import GraphTensor

DEFAULT_DOMAINS = ("", "ai.onnx")
Opsets = dict[str, int]


def read_model(model: Any) -> tuple[onnx.ModelProto, str | None]:
    """A ModelProto (external data loaded) and the folder it came from; a missing,
    corrupt or truncated file raises OnnxImportError."""
    if isinstance(model, onnx.ModelProto):
        return model, None
    if isinstance(model, bytes):
        try:
            return onnx.load_from_string(model), None
        except Exception as error:
            raise OnnxImportError(f"onnx.load: the bytes are not an ONNX model ({error})") from None
    path = os.fspath(model)
    if not os.path.isfile(path):
        raise OnnxImportError(f"onnx.load: no model file at {path!r}")
    try:
        proto = onnx.load(path)
    except Exception as error:
        raise OnnxImportError(
            f"onnx.load: {path!r} is not a readable ONNX model (corrupt, truncated, or its "
            f"external data is missing): {type(error).__name__}: {error}"
        ) from None
    if not proto.graph.node and not proto.graph.output:
        raise OnnxImportError(f"onnx.load: {path!r} holds no graph (empty or truncated file)")
    return proto, os.path.dirname(os.path.abspath(path))


def model_opsets(proto: onnx.ModelProto) -> Opsets:
    opsets = {(entry.domain or ""): entry.version for entry in proto.opset_import}
    if "" not in opsets and "ai.onnx" in opsets:
        opsets[""] = opsets["ai.onnx"]
    return opsets


def check_supported(graph: onnx.GraphProto, opsets: Opsets, local: Iterable[str]) -> None:
    """Raise UnsupportedOpError for the first op with neither a rule nor a function body
    (subgraphs of If/Loop/Scan included), before anything is added to the graph."""
    local = set(local)
    for node in graph.node:
        domain = node.domain or ""
        opset = opsets.get(domain, opsets.get("", 0))
        if (domain, node.op_type) not in local and not has_rule(node.op_type, domain, opset):
            raise UnsupportedOpError(
                f"{node_text(node, domain, opset)}: luminal has no rule for this op and "
                "ONNX defines no function body for it"
            )
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                check_supported(attribute.g, opsets, local)


def has_rule(op_type: str, domain: str, opset: int) -> bool:
    if domain in DEFAULT_DOMAINS and op_type in RULES:
        return True
    if (domain, op_type) in DOMAIN_RULES:
        return True
    return functions.schema_function(op_type, domain, opset) is not None


def load(
    model: Any,
    cx: Graph,
    *,
    constants: dict[str, Any] | None = None,
    structures: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Import `model` (a path, bytes or ModelProto) into `cx`: (inputs, outputs), dicts
    of name -> GraphTensor in the model's order. Inputs take data with `.set()`; outputs
    are retrieved. Initializers become weights (inputs holding data) when an op needs
    them in the graph. `constants` fixes the value of graph inputs that determine shapes
    (a Reshape's target, a Reduce's axes); they are then not graph inputs.
    `structures` describes graph inputs of sequence or optional type: a list of element
    shapes for a sequence (each element becomes a graph input, and `inputs[name]` a
    list), a shape for an optional holding a tensor, None for an empty optional.
    Sequence outputs come back as lists, an empty optional output as None. Nothing is
    added to `cx` if the import fails."""
    proto, base_dir = read_model(model)
    opsets = model_opsets(proto)
    local = {(f.domain or "", f.name): f for f in proto.functions}
    check_supported(proto.graph, opsets, local)
    importer = Importer(cx, opsets, base_dir, local, constants, structures)
    with cx.atomic():
        return importer.import_graph(proto.graph)


class Importer:
    """Walks one model's graph (and its subgraphs), keeping name -> value."""

    def __init__(
        self,
        cx: Graph,
        opsets: Opsets,
        base_dir: str | None,
        local: dict | None = None,
        constants: dict[str, Any] | None = None,
        structures: dict[str, Any] | None = None,
    ) -> None:
        self.cx = cx
        self.structures = structures or {}
        self._param_sizes: dict[str, set[int]] = {}  # named dims of structured inputs
        self.opsets = opsets
        self.base_dir = base_dir
        self.local = local or {}
        # (name, id) -> (the array, kept alive so its id stays unique, and its tensor)
        self.lifted: dict[tuple[str, int], tuple[np.ndarray, GraphTensor]] = {}
        self.expansions = 0
        self.constants = {k: np.asarray(v) for k, v in (constants or {}).items()}
        self.graph_inputs: dict[int, str] = {}
        self.elem_types: dict[str, int] = {}

    # ---------------------------------------------------------------- graph
    def import_graph(self, graph: onnx.GraphProto) -> tuple[dict[str, Any], dict[str, Any]]:
        env: dict[str, Value] = {}
        for info in [*graph.input, *graph.value_info, *graph.output]:
            if info.type.WhichOneof("value") == "tensor_type" and info.type.tensor_type.elem_type:
                self.elem_types[info.name] = info.type.tensor_type.elem_type
        for init in graph.initializer:
            self.elem_types[init.name] = init.data_type
            env[init.name] = self._initializer(init)
        for sparse in graph.sparse_initializer:
            raise OnnxImportError(f"sparse initializer {sparse.values.name!r} is not supported")
        inputs: dict[str, Any] = {}
        for info in graph.input:
            if info.name in self.structures:
                _collect_sizes(info.type, self.structures[info.name], self._param_sizes)
        for info in graph.input:
            if info.name in env:
                continue
            if info.name in self.constants:
                env[info.name] = self.constants[info.name]
                continue
            if info.type.WhichOneof("value") == "tensor_type":
                inputs[info.name] = self._input(info)
                self.graph_inputs[id(inputs[info.name])] = info.name
            else:
                inputs[info.name] = self._structured(info.type, info.name)
            env[info.name] = inputs[info.name]
        self.run_nodes(patterns.rewrite(graph, self.opsets.get("", 0)), env, self.opsets)
        outputs: dict[str, Any] = {}
        for info in graph.output:
            optional = info.type.WhichOneof("value") == "optional_type"
            if info.name not in env or (env[info.name] is None and not optional):
                raise OnnxImportError(f"graph output {info.name!r} is produced by no node")
            outputs[info.name] = self._output(env[info.name], info.name)
        return inputs, outputs

    def _output(self, value: Value, name: str) -> Any:
        """A retrieved tensor, a list of them (a sequence) or None (an empty optional)."""
        if value is None:
            return None
        if isinstance(value, list):
            return [self._output(v, f"{name}[{i}]") for i, v in enumerate(value)]
        return self.as_tensor(value, name).retrieve()

    def _structured(self, kind: onnx.TypeProto, name: str) -> Any:
        """A sequence or optional graph input, built from `structures[name]`."""
        if name not in self.structures:
            raise UnsupportedOpError(
                f"graph input {name!r} is a {kind.WhichOneof('value')}: pass its structure "
                "with load(..., structures={name: [shapes]}) (the backend does this)"
            )
        return self._element(kind, name, self.structures[name])

    def _element(self, kind: onnx.TypeProto, name: str, structure: Any) -> Any:
        which = kind.WhichOneof("value")
        if which == "optional_type":
            return (
                None
                if structure is None
                else self._element(kind.optional_type.elem_type, name, structure)
            )
        if which == "sequence_type":
            inner = kind.sequence_type.elem_type
            return [self._element(inner, f"{name}[{i}]", s) for i, s in enumerate(structure)]
        if which != "tensor_type":
            raise UnsupportedOpError(f"graph input {name!r} holds a {which}")
        dtype = dtypes.luminal_dtype(kind.tensor_type.elem_type)
        declared = list(kind.tensor_type.shape.dim) if kind.tensor_type.HasField("shape") else []
        dims: list[Any] = [int(d) for d in structure]
        if len(declared) == len(dims):  # a named dim with one size stays symbolic
            dims = [
                d.dim_param if len(self._param_sizes.get(d.dim_param, ())) == 1 else size
                for d, size in zip(declared, dims, strict=True)
            ]
        tensor = self.cx.tensor(tuple(dims), dtype=dtype, name=name)
        self.graph_inputs[id(tensor)] = name
        return tensor

    def _initializer(self, init: onnx.TensorProto) -> np.ndarray:
        if not dtypes.is_supported(init.data_type):
            raise OnnxImportError(
                f"initializer {init.name!r} has element type {dtypes.type_name(init.data_type)}, "
                "which luminal does not compute in (see docs/onnx.md)"
            )
        try:
            return np.asarray(numpy_helper.to_array(init, self.base_dir or ""))
        except Exception as error:
            raise OnnxImportError(
                f"initializer {init.name!r} cannot be read (external data missing or "
                f"truncated?): {type(error).__name__}: {error}"
            ) from None

    def _input(self, info: onnx.ValueInfoProto) -> GraphTensor:
        kind = info.type.WhichOneof("value")
        if kind != "tensor_type":
            raise UnsupportedOpError(f"graph input {info.name!r} is a {kind}, not a tensor")
        tensor_type = info.type.tensor_type
        dtype = dtypes.luminal_dtype(tensor_type.elem_type)
        if not tensor_type.HasField("shape"):
            raise UnsupportedOpError(f"graph input {info.name!r} has no shape (rank unknown)")
        dims: list[Any] = []
        for axis, dim in enumerate(tensor_type.shape.dim):
            if dim.HasField("dim_value"):
                dims.append(int(dim.dim_value))
            else:
                dims.append(dim.dim_param or f"{info.name}_dim{axis}")
        return self.cx.tensor(tuple(dims), dtype=dtype, name=info.name)

    # ---------------------------------------------------------------- nodes
    def run_nodes(self, nodes: Iterable[onnx.NodeProto], env: dict[str, Value], opsets: Opsets):
        for node in nodes:
            results = self.run_node(node, env, opsets)
            for name, value in zip(node.output, results, strict=False):
                if name:
                    env[name] = value

    def run_node(self, node: onnx.NodeProto, env: dict[str, Value], opsets: Opsets) -> list:
        domain = node.domain or ""
        opset = opsets.get(domain, opsets.get("", 0))
        inputs = []
        for name in node.input:
            if name and name not in env:
                raise OnnxImportError(
                    f"{node_text(node, domain, opset)}: input {name!r} is produced by no "
                    "earlier node (the graph is not topologically sorted or is truncated)"
                )
            inputs.append(env[name] if name else None)
        ctx = NodeContext(
            self.cx,
            node,
            inputs,
            opset,
            domain,
            self.as_tensor,
            lambda g, feeds: self.run_subgraph(g, feeds, env, opsets),
            self.graph_inputs,
            self.elem_types,
        )
        try:
            results = self._dispatch(ctx, env, opsets)
        except NeedsConstantInput:
            raise
        except LuminalError as error:
            if node_text(node, domain, opset) in str(error):
                raise
            raise type(error)(f"{ctx.describe()}: {error}") from error
        except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError) as error:
            raise OnnxImportError(f"{ctx.describe()}: {type(error).__name__}: {error}") from error
        if not isinstance(results, list | tuple):
            results = [results]
        # numpy folds 0-d values to scalars (np.equal of two 0-d arrays): keep arrays
        return [np.asarray(r) if isinstance(r, np.generic) else r for r in results]

    def _dispatch(self, ctx: NodeContext, env: dict[str, Value], opsets: Opsets) -> Any:
        node, domain = ctx.node, ctx.domain
        if (domain, node.op_type) in self.local:
            return self._expand(ctx, self.local[(domain, node.op_type)], env, opsets)
        if domain in DEFAULT_DOMAINS and node.op_type in RULES:
            folder = FOLDERS.get(node.op_type)
            needed = ctx.inputs[:1] if node.op_type == "CastLike" else ctx.inputs  # only a type
            present = [v for v in needed if v is not None]
            if folder is not None and present and all(is_static(v) for v in present):
                folded = folder(ctx)
                if folded is not None:
                    return folded
            return RULES[node.op_type](ctx)
        if (domain, node.op_type) in DOMAIN_RULES:
            return DOMAIN_RULES[(domain, node.op_type)](ctx)
        function = functions.schema_function(node.op_type, domain, ctx.opset, ctx)
        if function is None:
            raise ctx.unsupported("luminal has no rule for this op")
        return self._expand(ctx, function, env, opsets)

    def _expand(self, ctx: NodeContext, function: onnx.FunctionProto, env, opsets) -> list:
        """Run a function body (a local function or a standard op's definition) in a
        scope of its own; its values are prefixed so they never clash with the graph's."""
        self.expansions += 1
        prefix = f"__{ctx.node.op_type}_{self.expansions}__"
        body = functions.expand(ctx.node, function, prefix)
        inner = dict(opsets)
        inner.update({(e.domain or ""): e.version for e in function.opset_import})
        scope = dict(env)
        self.run_nodes(body, scope, inner)
        return [scope.get(name) if name else None for name in ctx.node.output]

    def run_subgraph(
        self, graph: onnx.GraphProto, feeds: dict[str, Value], env: dict[str, Value], opsets
    ) -> list[Value]:
        """Run an If/Loop/Scan body inline: it sees the outer values plus `feeds`."""
        scope = dict(env)
        for init in graph.initializer:
            scope[init.name] = self._initializer(init)
        scope.update(feeds)
        self.run_nodes(graph.node, scope, opsets)
        missing = [o.name for o in graph.output if o.name not in scope]
        if missing:
            raise OnnxImportError(f"subgraph {graph.name!r}: outputs {missing} are not produced")
        return [scope[o.name] for o in graph.output]

    # ---------------------------------------------------------------- values
    def as_tensor(self, value: Value, name: str) -> GraphTensor:
        if isinstance(value, GraphTensor):
            return value
        key = (name, id(value))
        if key not in self.lifted:
            self.lifted[key] = (value, lift_array(self.cx, value, name))
        return self.lifted[key][1]


def _collect_sizes(kind: onnx.TypeProto, structure: Any, sizes: dict[str, set[int]]) -> None:
    """The sizes every named dim of a sequence/optional input takes in `structure`: a
    name seen with two sizes (elements of different lengths) stays a fixed size."""
    which = kind.WhichOneof("value")
    if structure is None:
        return
    if which == "optional_type":
        _collect_sizes(kind.optional_type.elem_type, structure, sizes)
    elif which == "sequence_type":
        for item in structure:
            _collect_sizes(kind.sequence_type.elem_type, item, sizes)
    elif which == "tensor_type" and kind.tensor_type.HasField("shape"):
        dims = kind.tensor_type.shape.dim
        if len(dims) == len(structure):
            for d, size in zip(dims, structure, strict=True):
                if d.dim_param:
                    sizes.setdefault(d.dim_param, set()).add(int(size))
