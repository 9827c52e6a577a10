"""Graphs as readable programs: one node a line, typed, with the user's source location.

The text is deterministic (golden tests compare it). Subgraphs in attrs print as ``@label``
in the node's line and as indented blocks under it::

    graph(%x: f32[B,3]) {
      %exp: f32[B,3] = exp(%x)    # model.py:3
      %sum: f32[] = sum(%exp, dims=(0, 1), keepdim=False, dtype=None)    # model.py:4
      return (%sum)
    }
"""
from __future__ import annotations

import numpy as np

from .._helpers import short_location
from ..shapes import Sym
from .ir import Graph, Value, subgraphs

_MAX_CONST_ELEMENTS = 8   # larger constants print as `constant` alone


def format_graph(graph: Graph, indent: str = "") -> str:
    """The program text of ``graph``, each line prefixed with ``indent``."""
    params = ", ".join(repr(v) for v in graph.inputs)
    lines = [f"{indent}graph({params}) {{"]
    body = indent + "  "
    for v, arr in graph.constants.items():
        lines.append(f"{body}{v!r} = {_format_constant(arr)}")
    for node in graph.nodes:
        lines.append(body + format_node(node))
        for label, sub in subgraphs(node.attrs):
            block = format_graph(sub, body + "  ")
            lines.append(f"{body}  @{label} = {block.lstrip()}")
    outs = ", ".join(f"%{v.name}" for v in graph.outputs)
    lines.append(f"{body}return ({outs})")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def format_node(node) -> str:
    """``%y: f32[3] = add(%x, 1.0)    # model.py:3`` (one line; subgraphs as ``@label``)."""
    outs = ", ".join(repr(v) for v in node.outputs)
    args = [format_operand(x) for x in node.inputs]
    args += [f"{k}={format_attr(v, k)}" for k, v in node.attrs.items()]
    line = f"{outs} = {node.op.name}({', '.join(args)})"
    if node.location:
        line += f"    # {short_location(node.location)}"
    return line


def format_operand(x) -> str:
    return f"%{x.name}" if isinstance(x, Value) else repr(x)


def format_attr(val, label: str) -> str:
    """An attr value as source-like text; ``label`` names a subgraph found inside it."""
    if isinstance(val, Graph):
        return f"@{label}"
    if isinstance(val, tuple):
        items = [format_attr(v, f"{label}[{i}]") for i, v in enumerate(val)]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if isinstance(val, list):
        return f"[{', '.join(format_attr(v, f'{label}[{i}]') for i, v in enumerate(val))}]"
    if isinstance(val, np.dtype):
        return val.name
    if isinstance(val, Sym):
        return str(val)
    if val is Ellipsis:
        return "..."
    return repr(val)   # numbers, bools, None, strings, slices


def _format_constant(arr: np.ndarray) -> str:
    if arr.size > _MAX_CONST_ELEMENTS:
        return "constant"
    return f"constant({_format_array(arr)})"


def _format_array(arr: np.ndarray) -> str:
    if arr.ndim == 0:
        x = arr[()]
        return str(bool(x)) if arr.dtype == np.bool_ else str(x)
    return "[" + ", ".join(_format_array(a) for a in arr) + "]"

