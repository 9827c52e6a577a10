"""``group_updates``: a training step's whole optimiser update in one node.

An optimiser step is one ``adam_update`` (``sgd_update``) node per parameter. Each is one
call into the update loop plus Python around it, which costs more than the arithmetic for
the many small parameters of a model (biases, LayerNorm weights). Grouping them leaves one
call for the whole step.
"""
from __future__ import annotations

from ..graph import Graph, Node, Value
from ..ops.opdef import REGISTRY, OpDef
from .core import Builder, Report


def grouped_ops() -> dict[OpDef, OpDef]:
    """Each op that a group op runs many nodes of (its ``group_of``) -> the group op."""
    return {op.group_of: op for op in REGISTRY.values() if op.group_of is not None}


def update_groups(graph: Graph) -> list[list[Node]]:
    """The precondition: the nodes of an op with a group op (``adam_update``,
    ``sgd_update``), with the same hyper-parameters, whose results nothing in the graph
    reads (they are only returned), two or more of them."""
    grouping = grouped_ops()
    read = {x for node in graph.nodes for x in node.inputs if isinstance(x, Value)}
    groups: dict[tuple, list[Node]] = {}
    for node in graph.nodes:
        if node.op in grouping and not read.intersection(node.outputs):
            key = (node.op, tuple(sorted(node.attrs.items())))
            groups.setdefault(key, []).append(node)
    return [members for members in groups.values() if len(members) > 1]


def group_updates(graph: Graph, groups: list, report: Report) -> Graph:
    """Each group of ``update_groups`` becomes one node of the group op, placed where the
    last of them was.

    Preserves: types, inputs and outputs, and values bit for bit (each parameter's update
    is the same loop, element for element).

    Before::

        graph(%p: f32[3], %p_grad: f32[3], %p_buf: f32[3], %q: f32[3], %q_grad: f32[3],
            %q_buf: f32[3]) {
          %p_new: f32[3], %p_buf_new: f32[3] = sgd_update(%p, %p_grad, %p_buf, lr=0.1,
              momentum=0.9, dampening=0.0, nesterov=False)
          %q_new: f32[3], %q_buf_new: f32[3] = sgd_update(%q, %q_grad, %q_buf, lr=0.1,
              momentum=0.9, dampening=0.0, nesterov=False)
          return (%p_new, %p_buf_new, %q_new, %q_buf_new)
        }

    After::

        graph(%p: f32[3], %p_grad: f32[3], %p_buf: f32[3], %q: f32[3], %q_grad: f32[3],
            %q_buf: f32[3]) {
          %p_new: f32[3], %p_buf_new: f32[3], %q_new: f32[3],
              %q_buf_new: f32[3] = sgd_update_group(%p, %p_grad, %p_buf, %q, %q_grad, %q_buf,
              lr=0.1, momentum=0.9, dampening=0.0, nesterov=False)
          return (%p_new, %p_buf_new, %q_new, %q_buf_new)
        }
    """
    grouping = grouped_ops()
    last = {members[-1]: members for members in groups}
    grouped = {node for members in groups for node in members}
    b = Builder(graph)
    for node in graph.nodes:
        if node not in grouped:
            b.copy(node)
        elif node in last:
            _emit_group(b, last[node], grouping[node.op], report)
    report.nodes_after = len(b.graph.nodes)
    return b.finish()


def _emit_group(b: Builder, members: list[Node], op: OpDef, report: Report) -> None:
    first = members[0]
    inputs = [b.get(x) for node in members for x in node.inputs]
    names = [v.name for node in members for v in node.outputs]
    outs = b.add(op, inputs, dict(first.attrs), first.location, names)
    olds = [v for node in members for v in node.outputs]
    b.env.update(zip(olds, outs))
    report.count("grouped", f"{len(members)} {first.op.name} nodes -> {op.name}",
                 n=len(members))
