"""Saving and loading graphs: JSON for the structure, safetensors for the constants.

``save(graph, "model.json")`` writes two files: ``model.json`` (the program) and
``model.safetensors`` beside it (the constants; see :func:`constants_path`), atomically as a
pair: the constants go (temp file, fsync, rename) to a pending name no old file knows, then
``model.json``, which records their size and SHA-256, replaces the old one (the commit), and
only then do the constants take their usual name; load looks under the pending name too.
A kill at any point leaves the old or the new graph loadable, and a pair that does not
belong together (a file copied from another save) is detected on load. Each save removes
what killed saves to the same path left (docs/reliability.md).

Loading never executes code: ops are looked up by name in the registry, dtypes by name in a
fixed table, attrs decoded from a tagged JSON encoding, and the rebuilt graph re-runs every
shape rule and is verified. Any problem with either file raises :class:`GraphFormatError`
naming the file and what is wrong.

The JSON encoding of attrs (and literals among node inputs, where a plain string is instead
the name of a value): numbers, booleans, null and strings are themselves; a JSON array is a
tuple; tagged objects with one key hold the rest: ``{"list": [...]}``, ``{"float": "nan"}``
(also "inf", "-inf"), ``{"dtype": "float32"}``, ``{"sym": "B"}``, ``{"slice": [start,
stop, step]}``, ``{"ellipsis": null}`` and ``{"graph": {...}}``.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re

import numpy as np
import safetensors

from .. import dtypes
from .._helpers import fsync_directory, is_rust_panic, remove_stale_temps, write_atomic
from ..ops.opdef import REGISTRY
from ..shapes import Sym
from .ir import Graph, GraphError, Value, parse_dim, type_str
from .verify import verify

FORMAT = "dualgraph.graph"
VERSION = 1

_DTYPES = {d.name: d.np for d in dtypes.ALL}   # the only dtypes a file may name
_DTYPE_NAMES = {dt: name for name, dt in _DTYPES.items()}
# the names safetensors headers use for them
_ST_DTYPES = {"bool": "BOOL", "int32": "I32", "int64": "I64", "float16": "F16",
              "bfloat16": "BF16", "float32": "F32", "float64": "F64"}
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_MAX_DIM = 2 ** 62


class GraphFormatError(ValueError):
    """A graph file (or its constants file) is unreadable, truncated, tampered or malformed."""


class _Malformed(Exception):
    """Internal: a problem found while decoding, with where in the document it is."""


def constants_path(path) -> str:
    """The constants file beside a graph file: ``model.json`` -> ``model.safetensors``."""
    root, ext = os.path.splitext(os.fspath(path))
    if ext == ".safetensors":
        raise ValueError(f"{path}: name the graph file, not its .safetensors file")
    return root + ".safetensors"


# -- saving --------------------------------------------------------------------------------------
def save(graph: Graph, path) -> None:
    """Write ``graph`` to ``path`` (JSON) and its constants beside it (safetensors).

    >>> import tempfile, os
    >>> g = Graph(); x = g.add_input((2,), "float32"); g.set_outputs([x])
    >>> d = tempfile.mkdtemp(); save(g, os.path.join(d, "g.json"))
    >>> sorted(os.listdir(d))
    ['g.json', 'g.safetensors']
    """
    verify(graph)
    tensors: dict[str, np.ndarray] = {}
    body = _encode_graph(graph, "", tensors)
    blob = _safetensors_bytes(tensors)
    doc = {"format": FORMAT, "version": VERSION,
           "constants": {"bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()},
           "graph": body}
    text = _dumps(doc)
    path = os.fspath(path)
    cpath = constants_path(path)
    for target in (path, cpath):
        remove_stale_temps(target)
    # The JSON's rename is the one commit point: before it the old JSON and the old
    # constants are untouched; after it the new JSON finds its constants under the pending
    # name until they take the usual name (load looks there too, by the recorded SHA-256).
    pending = _pending_path(cpath, doc["constants"]["sha256"])
    write_atomic(pending, blob)
    try:
        write_atomic(path, text.encode("utf-8"))
    except BaseException:
        _unlink(pending)   # not committed: the old graph file names the old constants
        raise
    os.replace(pending, cpath)
    fsync_directory(os.path.dirname(os.path.abspath(cpath)))
    _remove_pending(cpath)


def _pending_path(cpath: str, sha256: str) -> str:
    """Where a save puts the new constants before its commit: ``model.safetensors.<hash>``
    (no graph's constants file ends that way, so :func:`_remove_pending` removes only these)."""
    return f"{cpath}.{sha256[:16]}"


def _remove_pending(cpath: str) -> None:
    """Remove the pending constants that killed saves left beside ``cpath`` (once a save
    has committed, no graph file names them)."""
    directory, base = os.path.split(os.path.abspath(cpath))
    for name in os.listdir(directory):
        tail = name[len(base) + 1:]
        if (name.startswith(base + ".") and len(tail) == 16
                and all(c in "0123456789abcdef" for c in tail)):
            _unlink(os.path.join(directory, name))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass   # already gone


def _dumps(doc: dict) -> str:
    """JSON with one line per input, constant and node, so saved graphs diff well."""
    def dump(x):
        return json.dumps(x, allow_nan=False)   # non-finite floats are tagged instead

    g = doc["graph"]
    parts = [f'  "{key}": [' + ",".join(f"\n    {dump(item)}" for item in g[key]) + "\n  ]"
             for key in ("inputs", "constants", "nodes")]
    parts.append(f'  "outputs": {dump(g["outputs"])}')
    head = "".join(f"\n {dump(k)}: {dump(v)}," for k, v in doc.items() if k != "graph")
    return "{" + head + '\n "graph": {\n' + ",\n".join(parts) + "\n }\n}\n"


def _encode_graph(g: Graph, prefix: str, tensors: dict) -> dict:
    """``prefix`` keeps the tensor keys of subgraph constants apart (``3.body/w``)."""
    constants = []
    for v, arr in g.constants.items():
        tensors[prefix + v.name] = arr
        constants.append({**_encode_value(v), "tensor": prefix + v.name})
    nodes = []
    for i, node in enumerate(g.nodes):
        sub = f"{prefix}{i}."
        nodes.append({
            "op": node.op.name,
            "inputs": [x.name if isinstance(x, Value) else _encode_number(x)
                       for x in node.inputs],
            "attrs": {k: _encode_attr(v, f"{sub}{k}", tensors) for k, v in node.attrs.items()},
            "outputs": [_encode_value(v) for v in node.outputs],
            "location": node.location,
        })
    return {"inputs": [_encode_value(v) for v in g.inputs], "constants": constants,
            "nodes": nodes, "outputs": [v.name for v in g.outputs]}


def _encode_value(v: Value) -> dict:
    shape = [str(d) if isinstance(d, Sym) else d for d in v.shape]
    return {"name": v.name, "shape": shape, "dtype": _DTYPE_NAMES[v.dtype]}


def _encode_number(x):
    if isinstance(x, float) and not math.isfinite(x):
        return {"float": repr(x)}
    return x


def _encode_attr(val, label: str, tensors: dict):
    if isinstance(val, (bool, int, float, str)) or val is None:
        return _encode_number(val)
    if isinstance(val, tuple):
        return [_encode_attr(v, f"{label}[{i}]", tensors) for i, v in enumerate(val)]
    if isinstance(val, list):
        return {"list": [_encode_attr(v, f"{label}[{i}]", tensors) for i, v in enumerate(val)]}
    if isinstance(val, np.dtype):
        return {"dtype": _DTYPE_NAMES[val]}
    if isinstance(val, Sym):
        return {"sym": str(val)}
    if isinstance(val, slice):
        return {"slice": [_encode_attr(v, label, tensors)
                          for v in (val.start, val.stop, val.step)]}
    if val is Ellipsis:
        return {"ellipsis": None}
    if isinstance(val, Graph):
        return {"graph": _encode_graph(val, f"{label}/", tensors)}
    raise GraphError(f"cannot serialise attr {label}={val!r}")


def _safetensors_bytes(tensors: dict) -> bytes:
    # (C-contiguous and alive while serialize reads their memory; ascontiguousarray would
    # turn 0-d arrays into 1-d ones)
    arrays = {k: np.require(a, requirements="C") for k, a in tensors.items()}
    specs = {k: safetensors.TensorSpec(dtype=_DTYPE_NAMES[a.dtype],
                                       shape=list(a.shape), data_ptr=a.ctypes.data,
                                       data_len=a.nbytes)
             for k, a in arrays.items()}
    return bytes(safetensors.serialize(specs, metadata={"format": FORMAT,
                                                        "version": str(VERSION)}))


# -- loading -------------------------------------------------------------------------------------
def load(path) -> Graph:
    """Read a graph written by :func:`save`; raises :class:`GraphFormatError` on any problem.

    >>> import tempfile, os
    >>> g = Graph(); x = g.add_input((2,), "float32"); g.set_outputs([x])
    >>> p = os.path.join(tempfile.mkdtemp(), "g.json"); save(g, p)
    >>> print(load(p))
    graph(%x: f32[2]) {
      return (%x)
    }
    """
    path = os.fspath(path)
    try:
        cpath = constants_path(path)
    except ValueError as e:
        raise GraphFormatError(str(e)) from None
    doc = _read_json(path)
    try:
        tensors = _read_constants(cpath, doc.get("constants"))
    except _Malformed as e:
        raise GraphFormatError(f"{cpath}: {e}") from None
    try:
        graph = _decode_graph(doc.get("graph"), "graph", tensors)
        verify(graph)
    except (_Malformed, GraphError) as e:
        raise GraphFormatError(f"{path}: {e}") from None
    except RecursionError:
        raise GraphFormatError(f"{path}: the graph is nested too deeply") from None
    return graph


def _read_bytes(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise GraphFormatError(f"{path}: cannot read the {what}: {e.strerror or e}") from None


def _read_json(path: str) -> dict:
    def reject(token):
        raise ValueError(f"{token} is not valid JSON (non-finite floats are tagged)")
    try:
        doc = json.loads(_read_bytes(path, "graph file"), parse_constant=reject)
    except (ValueError, RecursionError) as e:   # UnicodeDecodeError is a ValueError
        raise GraphFormatError(f"{path}: not a valid JSON graph file: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise GraphFormatError(f"{path}: not a dualgraph graph file (no \"format\": "
                               f"\"{FORMAT}\")")
    if type(doc.get("version")) is not int or doc["version"] != VERSION:   # not True, 1.0
        raise GraphFormatError(f"{path}: format version {doc.get('version')!r} is not "
                               f"supported (this dualgraph reads version {VERSION})")
    return doc


def _constants_bytes(cpath: str, meta) -> bytes:
    """The constants the graph file's record names (size and SHA-256): in ``cpath``, or,
    after a save killed between its commit and its last rename, under the pending name."""
    if not isinstance(meta, dict):
        raise _Malformed("the graph file has no \"constants\" record")
    sha = meta.get("sha256")
    pending = (_pending_path(cpath, sha)
               if isinstance(sha, str) and re.fullmatch("[0-9a-f]{64}", sha) else None)
    if pending is not None and not os.path.exists(cpath) and os.path.exists(pending):
        cpath = pending
    blob = _read_bytes(cpath, "constants file")
    digest = hashlib.sha256(blob).hexdigest()
    if meta.get("bytes") == len(blob) and sha == digest:
        return blob
    if pending is not None and pending != cpath and os.path.exists(pending):
        other = _read_bytes(pending, "constants file")
        if meta.get("bytes") == len(other) and sha == hashlib.sha256(other).hexdigest():
            return other
    raise _Malformed(f"does not match its graph file ({len(blob)} bytes, sha256 "
                     f"{digest[:12]}..., the graph file expects {meta.get('bytes')!r} "
                     "bytes); it is truncated, changed, or from another save")


def _read_constants(cpath: str, meta) -> dict[str, np.ndarray]:
    blob = _constants_bytes(cpath, meta)
    try:
        entries = safetensors.deserialize(blob)
    except Exception as e:
        raise _Malformed(f"not a valid safetensors file: {e}") from None
    except BaseException as e:
        if not is_rust_panic(e):
            raise
        raise _Malformed(f"not a valid safetensors file: {e}") from None
    return {name: _decode_tensor(name, entry) for name, entry in entries}


def _decode_tensor(name: str, entry: dict) -> np.ndarray:
    by_st = {st: _DTYPES[n] for n, st in _ST_DTYPES.items()}
    dt, shape, data = by_st.get(entry["dtype"]), tuple(entry["shape"]), entry["data"]
    if dt is None:
        raise _Malformed(f"tensor {name!r} has unsupported dtype {entry['dtype']}")
    if len(data) != math.prod(shape) * dt.itemsize:
        raise _Malformed(f"tensor {name!r} has {len(data)} bytes for shape {shape}")
    arr = np.frombuffer(bytes(data), dtype=dt).reshape(shape)
    if dt == np.bool_ and np.frombuffer(bytes(data), np.uint8).max(initial=0) > 1:
        raise _Malformed(f"bool tensor {name!r} holds bytes other than 0 and 1")
    return arr   # read-only: frombuffer over bytes


def _field(obj, key: str, kind, where: str):
    if not isinstance(obj, dict):
        raise _Malformed(f"{where} should be an object, found {type(obj).__name__}")
    val = obj.get(key)
    if not isinstance(val, kind) or isinstance(val, bool) and kind is not bool:
        raise _Malformed(f"{where}.{key} should be {getattr(kind, '__name__', kind)}, "
                         f"found {val!r:.60}")
    return val


def _decode_graph(obj, where: str, tensors: dict) -> Graph:
    g = Graph()
    values: dict[str, Value] = {}

    def define(v: Value, name: str, at: str):
        if v.name != name:
            raise _Malformed(f"{at}: invalid or repeated value name {name!r}")
        values[name] = v

    for k, item in enumerate(_field(obj, "inputs", list, where)):
        at = f"{where}.inputs[{k}]"
        name, shape, dtype = _decode_value(item, at)
        define(g.add_input(shape, dtype, name=name), name, at)
    for k, item in enumerate(_field(obj, "constants", list, where)):
        at = f"{where}.constants[{k}]"
        name, shape, dtype = _decode_value(item, at)
        arr = tensors.get(_field(item, "tensor", str, at))
        if arr is None or arr.shape != shape or arr.dtype != dtype:
            raise _Malformed(f"{at}: the constants file has no {type_str(shape, dtype)} "
                             f"tensor {item['tensor']!r}")
        define(g.add_constant(arr, name=name), name, at)
    for k, item in enumerate(_field(obj, "nodes", list, where)):
        at = f"{where}.nodes[{k}]"
        for v in _decode_node(g, item, values, at, tensors):
            values[v.name] = v
    outputs = _field(obj, "outputs", list, where)
    g.set_outputs([_lookup(values, name, f"{where}.outputs") for name in outputs])
    return g


def _decode_node(g: Graph, obj, values: dict, at: str, tensors: dict):
    op_name = _field(obj, "op", str, at)
    op = REGISTRY.get(op_name)
    if op is None:
        raise _Malformed(f"{at}: no op named {op_name!r} in the registry")
    inputs = [_lookup(values, x, f"{at}.inputs") if isinstance(x, str)
              else _decode_number(x, f"{at}.inputs") for x in _field(obj, "inputs", list, at)]
    attrs = {key: _decode_attr(val, f"{at}.attrs.{key}", tensors)
             for key, val in _field(obj, "attrs", dict, at).items()}
    declared = [_decode_value(v, f"{at}.outputs[{j}]")
                for j, v in enumerate(_field(obj, "outputs", list, at))]
    location = obj.get("location")
    if location is not None and not isinstance(location, str):
        raise _Malformed(f"{at}.location should be a string or null")
    try:
        outs = g.add_node(op, inputs, attrs, location, names=[d[0] for d in declared])
    except Exception as e:   # shape rules run on untrusted attrs: any failure is the file's
        raise _Malformed(f"{at} ({op_name}): cannot rebuild the node: "
                         f"{type(e).__name__}: {e}") from None
    for v, (name, shape, dtype) in zip(outs, declared):
        if v.name != name:
            raise _Malformed(f"{at}: invalid or repeated value name {name!r}")
        if v.shape != shape or v.dtype != dtype:
            raise _Malformed(f"{at} ({op_name}): the file types output %{name} as "
                             f"{type_str(shape, dtype)} but the op's shape rule gives "
                             f"{type_str(v.shape, v.dtype)}")
    return outs


def _lookup(values: dict, name, at: str) -> Value:
    if not isinstance(name, str) or name not in values:
        raise _Malformed(f"{at}: {name!r} is not a value defined before this point")
    return values[name]


def _decode_value(obj, at: str):
    name = _field(obj, "name", str, at)
    dims = []
    for d in _field(obj, "shape", list, at):
        if isinstance(d, str):
            dims.append(_decode_sym(d, f"{at}.shape"))
        elif type(d) is int and 0 <= d < _MAX_DIM:
            dims.append(d)
        else:
            raise _Malformed(f"{at}.shape has an invalid dim {d!r:.40}")
    return name, tuple(dims), _decode_dtype(_field(obj, "dtype", str, at), at)


def _decode_sym(text: str, at: str):
    try:
        return parse_dim(text)
    except GraphError as e:
        raise _Malformed(f"{at}: {e}") from None


def _decode_dtype(name: str, at: str) -> np.dtype:
    if name not in _DTYPES:
        raise _Malformed(f"{at}: unknown dtype {name!r:.40}")
    return _DTYPES[name]


def _decode_number(x, at: str):
    if x is None or type(x) in (bool, int, float):
        return x
    if isinstance(x, dict) and len(x) == 1 and str(x.get("float")) in _NONFINITE:
        return _NONFINITE[x["float"]]
    raise _Malformed(f"{at}: {x!r:.40} is not a number, bool, null or value name")


def _decode_attr(x, at: str, tensors: dict):
    if x is None or type(x) in (bool, int, float, str):
        return x
    if isinstance(x, list):
        return tuple(_decode_attr(v, f"{at}[{i}]", tensors) for i, v in enumerate(x))
    if not isinstance(x, dict) or len(x) != 1:
        raise _Malformed(f"{at}: {x!r:.40} is not an attr encoding")
    (tag, val), = x.items()
    if tag == "float":
        return _decode_number(x, at)
    if tag == "list" and isinstance(val, list):
        return list(_decode_attr(val, at, tensors))
    if tag == "dtype" and isinstance(val, str):
        return _decode_dtype(val, at)
    if tag == "sym" and isinstance(val, str):
        return _decode_sym(val, at)
    if tag == "slice" and isinstance(val, list) and len(val) == 3:
        return slice(*(_decode_attr(v, at, tensors) for v in val))
    if tag == "ellipsis" and val is None:
        return Ellipsis
    if tag == "graph":
        return _decode_graph(val, at, tensors)
    raise _Malformed(f"{at}: {x!r:.40} is not an attr encoding")
