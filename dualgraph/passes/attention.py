"""Attention's ops recognised and replaced by the ``attention`` op (``ops/attention.py``):
the lowering rule ``fuse_attention``'s precondition and rewrite (its row is in
``passes/lower.py``).

The pattern, each value read only by the next op and not returned::

    s = matmul(q, kt)                      # q (..., Lq, E), kt (..., E, Lk)
    s = mul(s, c) | div(s, c)              # optional; c a number (or a 1-element constant)
    s = add(s, mask) | add(mask, s)        # optional, a float mask of the scores' dtype
      | where(mask, fill, s)               #   or a bool mask filling a number in
    p = softmax(s, dim=-1)
    o = matmul(p, v)                       # v (..., Lk, Ev)
    [permute(o, dims -3 and -2 swapped)]   # optional: the heads put after the sequence

That is how user code writes it (``(q @ k.transpose(-2, -1)) * scale``, ``masked_fill``),
how ``F.scaled_dot_product_attention`` is traced, and how torch's ONNX export writes it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import Graph, Node, Value
from ..ops.attention import ATTENTION
from ..ops.elementwise import ADD, DIV, MUL, WHERE
from ..ops.linalg import MATMUL
from ..ops.reduce import SOFTMAX
from ..ops.shape import PERMUTE
from .core import Builder, Report, number, only_reader, readers


@dataclass
class Match:
    """One attention: the nodes it replaces (first to last) and the new op's operands."""
    nodes: list
    operands: list
    attrs: dict
    out: Value


def _producer(consumers: dict, x, reader: Node):
    """The node making ``x`` where ``reader`` is its only reader."""
    if not isinstance(x, Value) or x.producer is None:
        return None
    return x.producer if only_reader(consumers, x) is reader else None


def attention_patterns(graph: Graph) -> list[Match]:
    """The precondition: each ``softmax`` over the last dim of float scores that one
    ``matmul`` by the values reads, its input made (through an optional mask and scale,
    see the module docstring) by a ``matmul`` of operands of at least 2 dims."""
    consumers = readers(graph)
    found = []
    for node in graph.nodes:
        if node.op is not SOFTMAX or node.attrs["dim"] != node.outputs[0].ndim - 1:
            continue
        match = _match(graph, consumers, node)
        if match is not None:
            found.append(match)
    return found


def _match(graph: Graph, consumers: dict, softmax: Node) -> Match | None:
    p = softmax.outputs[0]
    last = only_reader(consumers, p)
    if last is None or last.op is not MATMUL or last.inputs[0] is not p:
        return None
    attrs = dict(scale=1.0, divide=False, fill=None, heads_out=False)
    nodes, mask, s = [softmax, last], [], softmax.inputs[0]
    step = _producer(consumers, s, softmax)
    if step is not None and step.op is WHERE:              # masked_fill(s, mask, fill)
        cond, fill, s = step.inputs
        attrs["fill"] = number(graph, fill)
        if attrs["fill"] is None or not isinstance(cond, Value) or cond.dtype != np.bool_:
            return None
        mask = [cond]
    elif step is not None and step.op is ADD:              # s + mask
        a, b = step.inputs
        s, m = (a, b) if _is_scores(consumers, a, step) else (b, a)
        if not isinstance(m, Value) or m.dtype != p.dtype:
            return None
        mask = [m]
    if mask:
        nodes.insert(0, step)
        step = _producer(consumers, s, step)
    if step is not None and step.op in (MUL, DIV):         # s * scale, s / scale
        a, b = step.inputs
        if step.op is MUL and number(graph, a) is not None:
            a, b = b, a
        scale = number(graph, b)
        if scale is None:
            return None
        attrs.update(scale=scale, divide=step.op is DIV)
        nodes.insert(0, step)
        s = a
        step = _producer(consumers, s, step)
    if step is None or step.op is not MATMUL:
        return None
    (q, kt), v = step.inputs, last.inputs[1]
    if (min(q.ndim, kt.ndim, v.ndim) < 2 or p.dtype.kind != "f" or s.dtype != p.dtype
            or tuple(s.shape) != tuple(p.shape)):   # (no broadcasting, no promotion)
        return None
    nodes.insert(0, step)
    out = last.outputs[0]
    after, n = only_reader(consumers, out), out.ndim
    if (after is not None and after.op is PERMUTE and n >= 3 and tuple(after.attrs["perm"])
            == tuple(range(n - 3)) + (n - 2, n - 3, n - 1)):
        attrs["heads_out"] = True
        nodes.append(after)
        out = after.outputs[0]
    return Match(nodes, [q, kt, v, *mask], attrs, out)


def _is_scores(consumers: dict, x, reader: Node) -> bool:
    """Whether ``x`` is the scores side of a mask's ``add``: made by a scale or a product
    that only the add reads."""
    step = _producer(consumers, x, reader)
    return step is not None and step.op in (MUL, DIV, MATMUL)


def fuse_attention(graph: Graph, matches: list, report: Report) -> Graph:
    """Each match of ``attention_patterns`` becomes one ``attention`` node at its last
    node's place, named as its result; the scores and weights are never materialised.

    Preserves: types, inputs and outputs; values up to rounding (the same products, scale,
    mask and softmax loop, in cache; the products' BLAS calls may differ).

    Before::

        graph(%q: f32[2,3,4], %kt: f32[2,4,5], %v: f32[2,5,4]) {
          %s: f32[2,3,5] = matmul(%q, %kt)
          %scaled: f32[2,3,5] = mul(%s, 0.5)
          %p: f32[2,3,5] = softmax(%scaled, dim=2)
          %o: f32[2,3,4] = matmul(%p, %v)
          return (%o)
        }

    After::

        graph(%q: f32[2,3,4], %kt: f32[2,4,5], %v: f32[2,5,4]) {
          %o: f32[2,3,4] = attention(%q, %kt, %v, scale=0.5, divide=False, fill=None,
              heads_out=False)
          return (%o)
        }
    """
    last = {m.nodes[-1]: m for m in matches}
    replaced = {node for m in matches for node in m.nodes}
    b = Builder(graph)
    for node in graph.nodes:
        m = last.get(node)
        if m is not None:
            (b.env[m.out],) = b.add(ATTENTION, [b.get(x) for x in m.operands], m.attrs,
                                    node.location, [m.out.name])
            report.count("attentions", f"{len(m.nodes)} nodes "
                         f"({', '.join(n.op.name for n in m.nodes)}) -> %{m.out.name}")
        elif node not in replaced:
            b.copy(node)
    report.nodes_after = len(b.graph.nodes)
    return b.finish()
