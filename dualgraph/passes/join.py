"""``join_loss_gradient``: a cross-entropy and its backward become one op.

A training step computes ``cross_entropy(x, t)`` and, after autodiff, its backward
``cross_entropy_backward(g, x, t)`` from the same logits: two kernels that each find every
row's maximum and sum of exponentials, with their Python calls, argument checks and
target scans around them. On a classifier's small logits the calls cost far more than the
arithmetic, and the backward finds the logits less warm in the cache.
"""
from __future__ import annotations

from ..graph import Graph, Node, Value
from ..ops.loss import CROSS_ENTROPY, CROSS_ENTROPY_BACKWARD, CROSS_ENTROPY_WITH_GRAD
from .core import Builder, Report, describe

_ATTRS = ("ignore_index", "reduction")


def loss_gradient_pairs(graph: Graph) -> dict[Node, Node]:
    """The precondition: each ``cross_entropy(x, t)`` with a ``cross_entropy_backward(g, x,
    t)`` of the same logits, targets and attrs (the first such, if several) whose seed
    ``g`` exists before the loss (a constant, an input, or a value computed earlier: so it
    cannot depend on the loss)."""
    order = {node: i for i, node in enumerate(graph.nodes)}
    losses = {}
    for node in graph.nodes:
        if node.op is CROSS_ENTROPY:
            losses.setdefault(_key(node, node.inputs), node)
    pairs: dict[Node, Node] = {}
    for node in graph.nodes:
        if node.op is not CROSS_ENTROPY_BACKWARD:
            continue
        loss = losses.get(_key(node, node.inputs[1:]))
        if loss is not None and loss not in pairs and _before(node.inputs[0], loss, order):
            pairs[loss] = node
    return pairs


def join_loss_gradient(graph: Graph, pairs: dict, report: Report) -> Graph:
    """Each pair of ``loss_gradient_pairs`` is computed as one ``cross_entropy_with_grad(x,
    t, g)`` at the loss's place.

    Preserves: types, inputs and outputs, and values bit for bit (the joined kernel does
    the two kernels' arithmetic).

    Before::

        graph(%x: f32[4,3], %seed: f32[], %t: i64[4]) {
          %loss: f32[] = cross_entropy(%x, %t, ignore_index=-100, reduction='mean')
          %dx: f32[4,3] = cross_entropy_backward(%seed, %x, %t, ignore_index=-100,
              reduction='mean')
          return (%loss, %dx)
        }

    After::

        graph(%x: f32[4,3], %seed: f32[], %t: i64[4]) {
          %loss: f32[], %dx: f32[4,3] = cross_entropy_with_grad(%x, %t, %seed,
              ignore_index=-100, reduction='mean')
          return (%loss, %dx)
        }
    """
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
        loss, dx = b.add(CROSS_ENTROPY_WITH_GRAD, [b.get(x), b.get(t),
                                                   b.get(backward.inputs[0])],
                         dict(node.attrs), node.location,
                         [node.outputs[0].name, backward.outputs[0].name])
        b.env[node.outputs[0]], b.env[backward.outputs[0]] = loss, dx
        report.count("joined", f"{describe(node)} + %{backward.outputs[0].name}")
    report.nodes_after = len(b.graph.nodes)
    return b.finish()


def _key(node: Node, operands) -> tuple:
    return tuple(operands) + tuple(node.attrs[name] for name in _ATTRS)


def _before(g, loss: Node, order: dict) -> bool:
    """Whether ``g`` is computed before the node ``loss`` (or is a literal, an input or a
    constant)."""
    producer = g.producer if isinstance(g, Value) else None
    return producer is None or order[producer] < order[loss]
