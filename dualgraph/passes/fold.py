"""Constant folding and propagation."""
from __future__ import annotations

import numpy as np

from ..graph import Graph, Node, Value
from ..shapes import Sym, is_static
from .core import Builder, Report, describe, nbytes, numel

MAX_FOLD_ELEMENTS = 1 << 20   # larger results stay computed: they would bloat the graph


def fold_constants(graph: Graph, max_elements: int = MAX_FOLD_ELEMENTS,
                   known: dict | None = None) -> tuple[Graph, Report]:
    """Evaluate, with the registry kernel, each node whose inputs are all constants or
    literals, and replace its outputs by constants; a ``shape_only`` op (``full_like``) of
    a static shape folds too, whatever its input. Folding runs in node order, so folded
    results feed later folds (propagation).

    Preserves: every value's type and (bitwise) value, the inputs and outputs. Results of
    more than ``max_elements`` elements, symbolic shapes and symbolic attrs are not folded.
    ``known`` maps inputs to the arrays they hold (the ONNX export's parameters, which it
    writes as constants): nodes of those fold too.

    Before::                              After::

        %c: f32[2] = constant([1, 2])         %b: f32[2] = constant([-2, -4])
        %a = mul(%c, 2.0)                     %y = add(%x, %b)
        %b = neg(%a)                          return (%y)
        %y = add(%x, %b)
        return (%y)
    """
    report = Report("fold_constants", len(graph.nodes), len(graph.nodes))
    known = known or {}
    start = next((i for i, node in enumerate(graph.nodes) if node.op.shape_only or all(
        not isinstance(x, Value) or x in graph.constants or x in known
        for x in node.inputs)), None)
    if start is None:
        return graph, report   # nothing starts a fold: no copy (graphs are immutable)
    b = Builder(graph)
    b.arrays.update(known)   # (read as arrays by the folds; other readers keep the input)
    b.keep(graph.nodes[:start])   # (the nodes before the first that may fold stay)
    for node in graph.nodes[start:]:
        results = _evaluate(node, b.arrays, max_elements)
        if results is None:
            b.copy(node)
            continue
        b.arrays.update(zip(node.outputs, results))   # constants once something reads them
        report.count("folded", describe(node))
        report.bytes_saved += sum(nbytes(v) for v in node.outputs)   # no longer computed
    report.nodes_after = len(b.graph.nodes)
    new = b.finish()
    report.count("constant bytes added", n=_constant_bytes(new) - _constant_bytes(graph))
    return new, report


def _evaluate(node: Node, constants: dict, max_elements: int):
    """The node's output arrays, or None when it must stay a node; ``constants`` maps the
    values known so far to their arrays."""
    shape_only = node.op.shape_only
    if node.op.communicates:
        return None   # every rank runs it at run time, in order with the others
    if not shape_only and not all(not isinstance(x, Value) or x in constants
                                  for x in node.inputs):
        return None   # (the common case, checked first: a big graph folds a few nodes)
    if not all(is_static(v.shape) and numel(v.shape) <= max_elements for v in node.outputs):
        return None
    if _has_symbols(node.attrs.values()):
        return None
    if shape_only:
        (x,) = node.inputs
        args = [np.broadcast_to(np.zeros((), x.dtype), x.shape)]   # its type, no data
    else:
        args = [constants[x] if isinstance(x, Value) else x for x in node.inputs]
    try:
        raw = node.op.kernel(*args, **node.attrs)
    except Exception:   # e.g. an index out of range: leave the error to run time
        return None
    outs = (raw,) if node.op.num_outputs == 1 else tuple(raw)
    outs = [np.asarray(o) for o in outs]
    # a kernel breaking its shape rule is a bug the interpreter reports; don't fold it away
    if any(o.shape != v.shape or o.dtype != v.dtype for o, v in zip(outs, node.outputs)):
        return None
    return outs


def _has_symbols(vals) -> bool:
    return any(isinstance(v, Sym) or isinstance(v, (tuple, list)) and _has_symbols(v)
               for v in vals)


def _constant_bytes(graph: Graph) -> int:
    return sum(arr.nbytes for arr in graph.constants.values())
