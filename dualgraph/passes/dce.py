"""Dead-code elimination."""
from __future__ import annotations

import numpy as np

from ..dtypes import to_np
from ..graph import Graph, Node, Value
from ..shapes import is_static
from .core import Builder, Report, describe, nbytes, numel

# The most output elements dce computes to prove a dead checking node's indices in range.
PROOF_ELEMENTS = 1 << 16


def dce(graph: Graph, keep_checks: bool = True) -> tuple[Graph, Report]:
    """Remove nodes none of whose outputs are used, and constants nothing reads.

    Preserves: the inputs (the signature), the outputs and every value they depend on, and
    the order of the nodes kept. Every op is pure, so a node whose results nobody reads can
    go; the graph outputs are the roots, and so is every node that ``communicates`` (the
    other ranks wait for it) and every node that ``checks_values`` (an index out of range
    raises eagerly, so it must when compiled) unless :func:`_proved_in_range`, or unless
    ``keep_checks`` is False (a caller that checks the same values elsewhere).

    Before::                              After::

        %a = exp(%x)                          %b = neg(%x)
        %b = neg(%x)                          return (%b)
        return (%b)
    """
    live = set(graph.outputs)
    kept = set()
    for node in reversed(graph.nodes):
        if (node.op.communicates or not live.isdisjoint(node.outputs)
                or keep_checks and node.op.checks_values
                and not _proved_in_range(node, graph.constants)):
            kept.add(node)
            live.update([x for x in node.inputs if isinstance(x, Value)])
    report = Report("dce", len(graph.nodes), len(kept))
    if len(kept) == len(graph.nodes) and all(v in live for v in graph.constants):
        return graph, report   # nothing to remove: no copy (graphs are immutable)
    b = Builder(graph)
    b.keep([node for node in graph.nodes if node in kept])
    for node in graph.nodes:
        if node not in kept:
            report.count("removed", describe(node))
            report.bytes_saved += sum(nbytes(v) for v in node.outputs)
    for v in graph.constants:
        if v not in live:
            report.count("constants removed", f"removed constant {v!r}")
            report.bytes_saved += nbytes(v)
    return b.finish(), report


def _proved_in_range(node: Node, constants: dict) -> bool:
    """Whether ``node`` of a ``checks_values`` op can't raise: its integer inputs are
    constants, every shape is static and its kernel runs on them with the other inputs
    zero (those checks read only the integer inputs' values)."""
    if not all(is_static(v.shape) for v in node.inputs + node.outputs if isinstance(v, Value)):
        return False
    if sum(numel(v.shape) for v in node.outputs) > PROOF_ELEMENTS:
        return False
    args = []
    for x in node.inputs:
        if isinstance(x, Value) and x in constants:
            x = constants[x]
        elif isinstance(x, Value):
            if to_np(x.dtype).kind in "iu":
                return False   # an index known only at run time
            x = np.zeros(x.shape, to_np(x.dtype))
        args.append(x)
    try:
        node.op.kernel(*args, **node.attrs)
    except Exception:   # out of range: kept, so that it raises at run time as eagerly
        return False
    return True
