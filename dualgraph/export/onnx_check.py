"""The ONNX import's checks of a model's parts against the ONNX standard, before any of them
is converted: a node against its op's schema (``onnx.defs.get_schema``: how many inputs and
outputs, which are required, which attributes with which types), and a tensor's dims and
data. Each check returns what is wrong as a sentence (the importer adds the file and node),
or None, so that a malformed model is an ``OnnxError`` naming the problem rather than
whatever a converter would trip over (a ``KeyError`` for a missing attr, an ``IndexError``
for a missing input). The checks an op's meaning adds (Conv's ``pads`` hold two numbers per
spatial dim, an axis is in range) sit next to its import rule.

>>> import onnx
>>> node = onnx.helper.make_node("Relu", ["x", "z"], ["y"])
>>> node_problem(onnx, node, 17)
'Relu takes 1 input, got 2'
"""
from __future__ import annotations

import numpy as np

_SUB_BYTE = {"INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2"}   # (packed: 2 or 4 a byte)


def node_problem(onnx, node, opset: int) -> str | None:
    """What is wrong with ``node`` under its op's schema at ``opset``, or None."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return f"ONNX has no op {node.op_type} at opset {opset}"
    return (_arity(node.op_type, "input", node.input, schema.inputs,
                   schema.min_input, schema.max_input)
            or _arity(node.op_type, "output", node.output, schema.outputs,
                      schema.min_output, schema.max_output)
            or _attrs_problem(onnx, node, schema, opset))


def _arity(op_type, what, names, formals, low, high) -> str | None:
    n = len(names)
    if not low <= n <= high:
        want = str(low) if low == high else f"{low} to {high}" if high < 2 ** 31 - 1 else \
            f"at least {low}"
        return f"{op_type} takes {want} {what}{'' if want == '1' else 's'}, got {n}"
    for k, name in enumerate(names):
        formal = formals[min(k, len(formals) - 1)]
        if not name and formal.option.name != "Optional":
            return (f"{what} {k} ({formal.name}) of {op_type} is required, but its name is "
                    "empty (only optional ones may be omitted)")
    return None


def _attrs_problem(onnx, node, schema, opset: int) -> str | None:
    seen = set()
    for a in node.attribute:
        if a.name in seen:
            return f"attr {a.name!r} is given twice"
        seen.add(a.name)
        formal = schema.attributes.get(a.name)
        if formal is None:
            known = ", ".join(sorted(schema.attributes)) or "none"
            return (f"{node.op_type} (opset {opset}) has no attr {a.name!r} (its attrs: "
                    f"{known})")
        if a.ref_attr_name:
            return f"attr {a.name!r} refers to a function's attr, outside a function"
        if int(a.type) != int(formal.type):
            got = _attr_type_name(onnx, a.type)
            return (f"attr {a.name!r} of {node.op_type} must be {formal.type.name}, got "
                    f"{got}")
    missing = sorted(n for n, f in schema.attributes.items() if f.required and n not in seen)
    if missing:
        return f"{node.op_type} requires attr {missing[0]!r}, which the node lacks"
    return None


def _attr_type_name(onnx, t: int) -> str:
    try:
        return "no type" if t == 0 else onnx.AttributeProto.AttributeType.Name(t)
    except ValueError:
        return f"type number {t}"


def tensor_problem(onnx, proto) -> str | None:
    """What is wrong with TensorProto ``proto``'s dims and data, or None: negative dims, a
    data type ONNX lacks, raw data of the wrong length (``numpy_helper.to_array`` would
    fail with a bare NumPy error, or read a different shape)."""
    dims = list(proto.dims)
    if any(d < 0 for d in dims):
        return f"has negative dims {dims}"
    try:
        type_name = onnx.TensorProto.DataType.Name(proto.data_type)
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(proto.data_type))
    except (ValueError, KeyError, TypeError):
        return f"has data type number {proto.data_type}, which ONNX does not define"
    if (proto.data_location == onnx.TensorProto.EXTERNAL or not proto.HasField("raw_data")
            or dtype == object or type_name in _SUB_BYTE):
        return None   # (onnx.load reads external data; to_array checks the other forms)
    need = int(np.prod(dims, dtype=np.float64)) * dtype.itemsize
    if len(proto.raw_data) != need:
        return (f"({type_name} {dims}) holds {len(proto.raw_data)} bytes of raw data; its "
                f"dims need {need}")
    return None
