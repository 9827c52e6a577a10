"""Common-subexpression elimination."""
from __future__ import annotations

import hashlib

import numpy as np

from ..graph import Graph, Node, Value
from ..shapes import Sym
from ..ops.opdef import OpDef
from .core import Builder, Report, describe, nbytes


def cse(graph: Graph) -> tuple[Graph, Report]:
    """Merge nodes that compute the same op on the same inputs with equal attrs, and
    constants bound to bitwise-identical arrays.

    Preserves: every value (a merged value is replaced by its first occurrence, which is
    defined earlier), the order of the nodes kept, the inputs and the number of outputs.
    Attrs are compared structurally and by type (``1`` is not ``1.0``, ``0.0`` is not
    ``-0.0``); two constants are equal only when dtype, shape and bytes are identical.

    Before::                              After::

        %a = exp(%x)                          %a = exp(%x)
        %b = exp(%x)                          %c = add(%a, %a)
        %c = add(%a, %b)                      return (%c)
        return (%c)
    """
    report = Report("cse", len(graph.nodes), len(graph.nodes))
    if not _has_duplicates(graph):
        return graph, report   # nothing to merge: no copy (graphs are immutable)
    b = Builder(graph)
    seen_constants: dict[tuple, Value] = {}
    for v, arr in graph.constants.items():
        first = seen_constants.setdefault(_array_key(arr), v)
        if first is not v:
            b.env[v] = b.get(first)
            report.count("constants merged", f"{v!r} -> %{first.name}")
            report.bytes_saved += nbytes(v)
    seen: dict[tuple, tuple] = {}
    for node in graph.nodes:
        if node.op.communicates:   # two sends are two messages
            b.copy(node)
            continue
        inputs = [b.get(x) for x in node.inputs]
        key = node_key(node.op, inputs, node.attrs)
        if key in seen:
            b.env.update(zip(node.outputs, seen[key]))
            report.count("merged", f"{describe(node)}  ->  %{seen[key][0].name}")
            report.bytes_saved += sum(nbytes(v) for v in node.outputs)
        else:
            seen[key] = b.copy(node)
    report.nodes_after = len(b.graph.nodes)
    return b.finish(), report


def _has_duplicates(graph: Graph) -> bool:
    """Whether ``cse`` would merge anything: its scan on the old values, up to the first
    merge."""
    keys = {_array_key(arr): v for v, arr in graph.constants.items()}
    if len(keys) != len(graph.constants):
        return True
    seen: dict[tuple, Node] = {}
    for node in graph.nodes:
        key = node_key(node.op, node.inputs, node.attrs) + (
            (id(node),) if node.op.communicates else ())
        if key in seen:
            return True
        seen[key] = node
    return False


def node_key(op: OpDef, inputs, attrs: dict) -> tuple:
    """A hashable key equal for two op calls exactly when they compute the same thing
    (``op(a, b)`` and ``op(b, a)`` too when the op is commutative)."""
    # values by identity; literals by type and repr (so -0.0 != 0.0 and nan == nan)
    keys = [("value", id(x)) if isinstance(x, Value) else (type(x).__name__, repr(x))
            for x in inputs]
    if op.commutative and len(keys) == 2:
        keys.sort()   # (keys of one kind hold ids, or reprs: any two compare)
    return op, tuple(keys), attr_key(attrs) if attrs else ()


def attr_key(val):
    """Structural key of an attr value (dicts of attrs included): equal keys mean equal
    attrs. Subgraphs compare by identity (two separately built bodies are not merged)."""
    if isinstance(val, dict):
        return tuple(sorted((k, attr_key(v)) for k, v in val.items()))
    if isinstance(val, (tuple, list)):
        return type(val).__name__, tuple(attr_key(v) for v in val)
    if isinstance(val, slice):
        return "slice", attr_key((val.start, val.stop, val.step))
    if isinstance(val, Graph):
        return "graph", id(val)
    if isinstance(val, (np.dtype, Sym)):
        return type(val).__name__, str(val)
    return type(val).__name__, repr(val)


def _array_key(arr: np.ndarray) -> tuple:
    digest = hashlib.sha256(np.ascontiguousarray(arr).reshape(-1).view(np.uint8)).hexdigest()
    return arr.dtype.str, arr.shape, digest
