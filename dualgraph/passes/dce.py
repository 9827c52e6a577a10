"""Dead-code elimination."""
from __future__ import annotations

from ..graph import Graph, Value
from .core import Builder, Report, describe, nbytes


def dce(graph: Graph) -> tuple[Graph, Report]:
    """Remove nodes none of whose outputs are used, and constants nothing reads.

    Preserves: the inputs (the signature), the outputs and every value they depend on, and
    the order of the nodes kept. Every op is pure, so a node whose results nobody reads can
    go; the graph outputs are the roots, and so is every node that ``communicates`` (the
    other ranks wait for it).

    Before::                              After::

        %a = exp(%x)                          %b = neg(%x)
        %b = neg(%x)                          return (%b)
        return (%b)
    """
    live = set(graph.outputs)
    kept = set()
    for node in reversed(graph.nodes):
        if node.op.communicates or not live.isdisjoint(node.outputs):
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
