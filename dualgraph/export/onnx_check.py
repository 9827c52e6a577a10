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

# INT attrs that ONNX defines as 0 or 1 (whatever op has them): dualgraph reads them as
# Python truth, ONNX's shape inference and runtimes as ``== 1`` or ``!= 0``, so another value
# would be read differently (Mod's fmod too, checked by its rule: its name is an op's)
_FLAGS = {"keepdims", "noop_with_empty_axes", "transA", "transB", "ceil_mode",
          "count_include_pad", "largest", "sorted", "training_mode", "allowzero", "exclusive",
          "reverse", "detect_negative", "detect_positive", "upper", "select_last_index",
          "storage_order"}
_SUB_BYTE = {"INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2"}   # (packed: 2 or 4 a byte)


def _domain(node) -> str:
    return "" if node.domain in ("", "ai.onnx") else node.domain


def node_problem(onnx, node, opset: int) -> str | None:
    """What is wrong with ``node`` under its op's schema at ``opset``, or None."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, _domain(node))
    except onnx.defs.SchemaError:
        return f"ONNX has no op {node.op_type} at opset {opset}"
    return (bad_name(list(node.input) + list(node.output), "the node's inputs and outputs")
            or _arity(node.op_type, "input", node.input, schema.inputs,
                   schema.min_input, schema.max_input)
            or _arity(node.op_type, "output", node.output, schema.outputs,
                      schema.min_output, schema.max_output)
            or _attrs_problem(onnx, node, schema, opset))


def input_types_problem(onnx, node, opset: int, dtypes) -> str | None:
    """What is wrong with the types of ``node``'s inputs (``dtypes``: a NumPy dtype per input,
    None where omitted; an ``object`` array is a shape, int64) under the schema's type
    constraints, or None: each input has a type its parameter allows, and the inputs that
    share a type variable (Add's A and B are both T) have the same one."""
    schema = onnx.defs.get_schema(node.op_type, opset, _domain(node))
    allowed = {c.type_param_str: list(c.allowed_type_strs) for c in schema.type_constraints}
    bound = {}
    for k, dtype in enumerate(dtypes):
        if dtype is None:
            continue
        formal = schema.inputs[min(k, len(schema.inputs) - 1)]
        got = _tensor_type(onnx, dtype)
        ok = allowed.get(formal.type_str, [formal.type_str])
        if got not in ok:
            names = ", ".join(t[7:-1] for t in ok if t.startswith("tensor("))
            return (f"input {k} ({formal.name}) of {node.op_type} is a {got}, which it does "
                    f"not take (it takes {names or 'no tensor'})")
        if formal.is_homogeneous and formal.type_str in allowed:
            first, other = bound.setdefault(formal.type_str, (k, got))
            if other != got:
                return (f"inputs {first} and {k} of {node.op_type} must have the same type "
                        f"({formal.type_str}), got {other} and {got}")
    return None


def _tensor_type(onnx, dtype) -> str:
    """ONNX's name of the type of a tensor of NumPy ``dtype``: ``tensor(float)``."""
    if dtype == object:
        return "tensor(int64)"
    code = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return f"tensor({onnx.TensorProto.DataType.Name(code).lower()})"


def bad_name(names, where: str) -> str | None:
    """A sentence when one of ``names`` is not text (protobuf hands over a name that is not
    UTF-8 as bytes), else None."""
    for name in names:
        if not isinstance(name, str):
            return f"the name {name!r} in {where} is not UTF-8 text"
    return None


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
        if a.name in _FLAGS and a.i not in (0, 1):
            return f"attr {a.name!r} of {node.op_type} is {a.i}; it must be 0 or 1"
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
    fail with a bare NumPy error, or read a different shape), data left in an external file
    (``to_array`` would read it from a path relative to the working directory)."""
    dims = list(proto.dims)
    if any(d < 0 for d in dims):
        return f"has negative dims {dims}"
    try:
        type_name = onnx.TensorProto.DataType.Name(proto.data_type)
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(proto.data_type))
    except (ValueError, KeyError, TypeError):
        return f"has data type number {proto.data_type}, which ONNX does not define"
    if proto.data_location == onnx.TensorProto.EXTERNAL:   # (a path's are read on loading)
        return ("keeps its data in an external file, which is read only when the model is "
                "loaded from its path (dg.onnx.load(path), or onnx.load(path) first)")
    if not proto.HasField("raw_data") or dtype == object or type_name in _SUB_BYTE:
        return None   # (to_array checks the typed fields' lengths)
    need = int(np.prod(dims, dtype=np.float64)) * dtype.itemsize
    if len(proto.raw_data) != need:
        return (f"({type_name} {dims}) holds {len(proto.raw_data)} bytes of raw data; its "
                f"dims need {need}")
    return None
