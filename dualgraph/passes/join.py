"""``join_loss_gradient``: a cross-entropy and its backward become one op.

A training step computes ``cross_entropy(x, t)`` and, after autodiff, its backward
``cross_entropy_backward(g, x, t)`` from the same logits: two kernels that each find every
row's maximum and sum of exponentials, with their Python calls, argument checks and
target scans around them. On a classifier's small logits (W1's 128 x 10) the calls cost far
more than the arithmetic, and the backward finds the logits less warm in the cache.
"""
from __future__ import annotations

from ..graph import Graph, Node, Value
from .core import Builder, Report, describe

_ATTRS = ("ignore_index", "reduction")


def join_loss_gradient(graph: Graph) -> tuple[Graph, Report]:
    """Where ``cross_entropy(x, t)`` and ``cross_entropy_backward(g, x, t)`` read the same
    logits and targets with the same attrs, and the seed gradient ``g`` exists before the
    loss (a constant, an input, or a value computed earlier: so it cannot depend on the
    loss), compute both as one ``cross_entropy_with_grad(x, t, g)`` at the loss's place.

    Preserves: types, inputs and outputs, and values bit for bit (the joined kernel does
    the two kernels' arithmetic). Graphs without such a pair are returned as they are.

    Before::                                   After::

        %loss = cross_entropy(%x, %t)              %loss, %dx = cross_entropy_with_grad(
        ...                                            %x, %t, %g)
        %dx = cross_entropy_backward(%g, %x, %t)   ...
    """
    report = Report("join_loss_gradient", len(graph.nodes), len(graph.nodes))
    pairs = _pairs(graph)
    if not pairs:
        return graph, report
    b = Builder(graph)
    joined = set(pairs.values())
    for node in graph.nodes:
        if node in joined:
            continue    # (its output was mapped when its loss was joined)
        backward = pairs.get(node)
        if backward is None:
            b.copy(node)
            continue
        x, t = node.inputs
        loss, dx = b.add("cross_entropy_with_grad", [b.get(x), b.get(t),
                                                     b.get(backward.inputs[0])],
                         dict(node.attrs), node.location,
                         [node.outputs[0].name, backward.outputs[0].name])
        b.env[node.outputs[0]], b.env[backward.outputs[0]] = loss, dx
        report.count("joined", f"{describe(node)} + %{backward.outputs[0].name}")
    report.nodes_after = len(b.graph.nodes)
    return b.finish(), report


def _pairs(graph: Graph) -> dict[Node, Node]:
    """Each loss node with the backward that joins it (the first such, if several)."""
    order = {node: i for i, node in enumerate(graph.nodes)}
    losses = {}
    for node in graph.nodes:
        if node.op.name == "cross_entropy":
            losses.setdefault(_key(node, node.inputs), node)
    pairs: dict[Node, Node] = {}
    for node in graph.nodes:
        if node.op.name != "cross_entropy_backward":
            continue
        loss = losses.get(_key(node, node.inputs[1:]))
        if loss is not None and loss not in pairs and _before(node.inputs[0], loss, order):
            pairs[loss] = node
    return pairs


def _key(node: Node, operands) -> tuple:
    return tuple(operands) + tuple(node.attrs[name] for name in _ATTRS)


def _before(g, loss: Node, order: dict) -> bool:
    """Whether ``g`` is computed before the node ``loss`` (or is a literal, an input or a
    constant)."""
    producer = g.producer if isinstance(g, Value) else None
    return producer is None or order[producer] < order[loss]
