"""``group_updates``: a training step's whole Adam/AdamW update in one node.

An optimiser step is one ``adam_update`` node per parameter. Each is one call into the
Adam loop plus Python around it, which costs more than the arithmetic for the many small
parameters of a model (biases, LayerNorm weights: W3 has 29 parameters, 14 of them of 128
floats). Grouping them leaves one call for the whole step.
"""
from __future__ import annotations

from ..graph import Graph, Node, Value
from .core import Builder, Report

_GROUPED = {"adam_update": "adam_update_group", "sgd_update": "sgd_update_group"}


def group_updates(graph: Graph) -> tuple[Graph, Report]:
    """The ``adam_update`` nodes with the same hyper-parameters whose results are only
    returned (a step's new parameters and optimiser state, nothing reads them inside the
    graph) become one ``adam_update_group`` node, placed where the last of them was.

    Preserves: types, inputs and outputs, and values bit for bit (each parameter's update
    is the same loop, element for element). A single update, or updates whose results are
    read by other nodes, stay as they are.

    Before::                                        After::

        %p1', %m1', %v1' = adam_update(%p1, %g1, ...)   ...
        ...                                             %p1', %m1', %v1', %p2', ... =
        %p2', %m2', %v2' = adam_update(%p2, %g2, ...)       adam_update_group(%p1, %g1,
                                                            ..., %p2, %g2, ...)
    """
    report = Report("group_updates", len(graph.nodes), len(graph.nodes))
    read = {x for node in graph.nodes for x in node.inputs if isinstance(x, Value)}
    groups: dict[tuple, list[Node]] = {}
    for node in graph.nodes:
        if node.op.name in _GROUPED and not read.intersection(node.outputs):
            key = (node.op.name, tuple(sorted(node.attrs.items())))
            groups.setdefault(key, []).append(node)
    groups = {key: members for key, members in groups.items() if len(members) > 1}
    if not groups:
        return graph, report
    last = {members[-1]: members for members in groups.values()}
    grouped = {node for members in groups.values() for node in members}
    b = Builder(graph)
    for node in graph.nodes:
        if node not in grouped:
            b.copy(node)
        elif node in last:
            _emit_group(b, last[node], report)
    report.nodes_after = len(b.graph.nodes)
    return b.finish(), report


def _emit_group(b: Builder, members: list[Node], report: Report) -> None:
    first = members[0]
    inputs = [b.get(x) for node in members for x in node.inputs]
    names = [v.name for node in members for v in node.outputs]
    outs = b.add(_GROUPED[first.op.name], inputs, dict(first.attrs), first.location, names)
    olds = [v for node in members for v in node.outputs]
    b.env.update(zip(olds, outs))
    report.count("grouped", f"{len(members)} {first.op.name} nodes -> "
                 f"{_GROUPED[first.op.name]}", n=len(members))
