"""Standard ops that ONNX itself defines as a function of other ops (Celu, Shrink,
MeanVarianceNormalization, SoftmaxCrossEntropyLoss, ...) and models' local functions
are imported by running their body: one definition, ONNX's own, instead of a second
hand-written copy."""

from __future__ import annotations

from typing import Any

import onnx
import onnx.defs
from onnx import TensorProto, helper

from luminal.dtype import DType
from luminal.tensor import GraphTensor

_TYPES = {
    DType.float32: TensorProto.FLOAT,
    DType.float16: TensorProto.FLOAT16,
    DType.bfloat16: TensorProto.BFLOAT16,
    DType.int32: TensorProto.INT32,
    DType.bool: TensorProto.BOOL,
}


def _schema(op_type: str, domain: str, opset: int) -> Any:
    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except Exception:
        return None


def schema_function(
    op_type: str, domain: str, opset: int, ctx: Any = None
) -> onnx.FunctionProto | None:
    """The body ONNX defines for `op_type` at `opset` (None when it defines none).
    Without `ctx` only says whether one exists (a context-dependent body needs the
    node and its input types)."""
    schema = _schema(op_type, domain, opset)
    if schema is None:
        return None
    versions = [v for v in schema.function_opset_versions if v <= opset]
    dependent = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    if not versions and not dependent:
        return None
    if ctx is None:
        return onnx.FunctionProto()
    function = onnx.FunctionProto()
    if dependent and (not versions or max(dependent) >= max(versions)):
        types = [_type_proto(value).SerializeToString() for value in ctx.inputs]
        node = _with_defaults(ctx.node, schema)
        text = schema.get_context_dependent_function_with_opset_version(
            max(dependent), node.SerializeToString(), types
        )
    else:
        text = schema.get_function_with_opset_version(max(versions))
    function.ParseFromString(text)
    return function


def _with_defaults(node: onnx.NodeProto, schema: Any) -> onnx.NodeProto:
    """The node with the schema's default attribute values filled in."""
    node = _copy(node)
    present = {a.name for a in node.attribute}
    for name, attribute in schema.attributes.items():
        if name not in present and attribute.default_value.name:
            node.attribute.append(attribute.default_value)
    return node


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    return copy


def _type_proto(value: Any) -> onnx.TypeProto:
    import numpy as np

    if value is None:
        return onnx.TypeProto()
    if isinstance(value, GraphTensor):
        dims = [d.as_int() for d in value.view.shape]  # None where symbolic
        return helper.make_tensor_type_proto(_TYPES[value.dtype], dims)
    array = np.asarray(value)
    elem = (
        TensorProto.INT64 if array.dtype == object else helper.np_dtype_to_tensor_dtype(array.dtype)
    )
    return helper.make_tensor_type_proto(elem, list(array.shape))


def expand(
    node: onnx.NodeProto, function: onnx.FunctionProto, prefix: str, schema: Any = None
) -> list[onnx.NodeProto]:
    """The function's nodes with formal inputs/outputs renamed to the node's, internal
    values prefixed, and attribute references replaced by the node's attributes."""
    names: dict[str, str] = {}
    for index, formal in enumerate(function.input):
        names[formal] = node.input[index] if index < len(node.input) else ""
    for index, formal in enumerate(function.output):
        if index < len(node.output) and node.output[index]:
            names[formal] = node.output[index]
    attributes = {a.name: a for a in node.attribute}
    for default in function.attribute_proto:
        attributes.setdefault(default.name, default)
    if schema is None:
        schema = _schema(node.op_type, node.domain or "", 10**6)
    if schema is not None:
        for name, attribute in schema.attributes.items():
            if name not in attributes and attribute.default_value.name:
                attributes[name] = attribute.default_value

    def rename(name: str) -> str:
        if not name:
            return ""
        return names.get(name, prefix + name)

    body = []
    for inner in function.node:
        copy = _copy(inner)
        copy.input[:] = [rename(n) for n in inner.input]
        copy.output[:] = [rename(n) for n in inner.output]
        resolved = []
        for attribute in inner.attribute:
            if attribute.ref_attr_name:
                source = attributes.get(attribute.ref_attr_name)
                if source is None:
                    continue
                value = onnx.AttributeProto()
                value.CopyFrom(source)
                value.name = attribute.name
                resolved.append(value)
            elif attribute.type == onnx.AttributeProto.GRAPH:
                resolved.append(_renamed_graph_attribute(attribute, rename))
            else:
                resolved.append(attribute)
        del copy.attribute[:]
        copy.attribute.extend(resolved)
        body.append(copy)
    return body


def _renamed_graph_attribute(attribute: onnx.AttributeProto, rename: Any) -> onnx.AttributeProto:
    """A subgraph (If branch, Loop/Scan body) inside a function body reads the body's
    values by name, so every name in it is renamed as the body's are (ONNX names are
    unique, so the subgraph's own names stay distinct once prefixed)."""
    copy = onnx.AttributeProto()
    copy.CopyFrom(attribute)
    _rename_graph(copy.g, rename)
    return copy


def _rename_graph(graph: onnx.GraphProto, rename: Any) -> None:
    for info in [*graph.input, *graph.output, *graph.value_info]:
        info.name = rename(info.name)
    for init in graph.initializer:
        init.name = rename(init.name)
    for node in graph.node:
        node.input[:] = [rename(n) for n in node.input]
        node.output[:] = [rename(n) for n in node.output]
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                _rename_graph(attribute.g, rename)
