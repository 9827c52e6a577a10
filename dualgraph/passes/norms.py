"""RMSNorm as the graph spells it, made one op: the lowering rule ``fuse_rms_norm`` (its
row is in ``passes/lower.py``).

T5's ``T5LayerNorm``, Llama's ``RMSNorm``, ``F.rms_norm`` and their ONNX export all write
``x * rsqrt(mean(x * x, -1, keepdim=True) + eps) * w``; after ``simplify`` (``pow(x, 2)`` is
``x * x``) and ``rsqrt`` as its composite::

    p = mul(x, x)
    m = mean(p, dims=(last,), keepdim=True)
    s = add(m, eps)                 # eps a number (or a one-element constant)
    d = div(1, sqrt(s))
    y = mul(x, d)                   # (or d * x)
    [y = mul(y, w) | mul(w, y)]     # optional: w of shape (last dim,)

Each value read only by the next op. The elementwise fusion makes that three loops (the
squares and their mean, the reciprocal square root per row, the scaling), two of them
over the whole array; ``rms_norm`` (``ops/norm.py``) is one loop over each row while it
is in cache, and a row epilogue the fusion can put after an elementwise group (a residual
add before it).
"""
from __future__ import annotations

import numpy as np

from ..graph import Graph, Node, Value
from ..ops.elementwise import ADD, DIV, MUL, SQRT
from ..ops.norm import RMS_NORM
from ..ops.reduce import MEAN
from .core import Report, live_readers, number, only_reader, rebuild


def _other(node: Node, v: Value):
    a, b = node.inputs
    return b if a is v else a


def rms_norm_patterns(graph: Graph) -> list[tuple[list[Node], Value, Value | None, float]]:
    """The precondition (the module docstring): ``(nodes, x, weight or None, eps)`` for
    each ``mul(x, x)`` of a float32/float64 ``x`` that starts the pattern."""
    live = live_readers(graph)
    found = []
    for node in graph.nodes:
        if node.op is not MUL or node.inputs[0] is not node.inputs[1]:
            continue
        x = node.inputs[0]
        if not isinstance(x, Value) or x.dtype.kind != "f" or x.ndim < 1:
            continue
        match = _rest(graph, live, node, x)
        if match is not None:
            found.append(match)
    return found


def _rest(graph: Graph, live: dict, square: Node, x: Value):
    mean = only_reader(live, square.outputs[0])
    if (mean is None or mean.op is not MEAN or tuple(mean.attrs["dims"]) != (x.ndim - 1,)
            or not mean.attrs["keepdim"] or mean.outputs[0].dtype != x.dtype):
        return None
    add = only_reader(live, mean.outputs[0])
    eps = number(graph, _other(add, mean.outputs[0])) if add is not None and add.op is ADD else None
    sqrt = only_reader(live, add.outputs[0]) if eps is not None else None
    if sqrt is None or sqrt.op is not SQRT:
        return None
    div = only_reader(live, sqrt.outputs[0])
    if (div is None or div.op is not DIV or div.inputs[1] is not sqrt.outputs[0]
            or number(graph, div.inputs[0]) != 1.0):
        return None
    scale = only_reader(live, div.outputs[0])
    if scale is None or scale.op is not MUL or _other(scale, div.outputs[0]) is not x:
        return None
    nodes, y = [square, mean, add, sqrt, div, scale], scale.outputs[0]
    if tuple(y.shape) != tuple(x.shape) or y.dtype != x.dtype:
        return None
    last, weight = only_reader(live, y), None
    if last is not None and last.op is MUL:
        w = _other(last, y)
        if (isinstance(w, Value) and w is not y and tuple(w.shape) == tuple(x.shape[-1:])
                and w.dtype == x.dtype and last.outputs[0].dtype == x.dtype
                and tuple(last.outputs[0].shape) == tuple(x.shape)):
            nodes.append(last)
            weight = w
    return nodes, x, weight, eps


def fuse_rms_norm(graph: Graph, matches: list, report: Report) -> Graph:
    """Each match of ``rms_norm_patterns`` becomes one ``rms_norm(x, w, eps=)`` at its last
    node's place, named as its result (without a weight, ``w`` is a constant of ones).

    Preserves: types, inputs and outputs; values up to rounding (the squares are summed in
    another order than ``mean`` sums them).

    Before::

        graph(%x: f32[2,3,4], %w: f32[4]) {
          %p: f32[2,3,4] = mul(%x, %x)
          %m: f32[2,3,1] = mean(%p, dims=(2,), keepdim=True)
          %s: f32[2,3,1] = add(%m, 1e-06)
          %r: f32[2,3,1] = sqrt(%s)
          %d: f32[2,3,1] = div(1, %r)
          %n: f32[2,3,4] = mul(%x, %d)
          %y: f32[2,3,4] = mul(%n, %w)
          return (%y)
        }

    After::

        graph(%x: f32[2,3,4], %w: f32[4]) {
          %y: f32[2,3,4], %y_rstd: f32[2,3,1] = rms_norm(%x, %w, eps=1e-06)
          return (%y)
        }
    """
    def emit(b, node, match):
        nodes, x, weight, eps = match
        w = (b.get(weight) if weight is not None else
             b.graph.add_constant(np.ones(x.shape[-1], x.dtype), name=x.name + "_ones"))
        out = node.outputs[0]
        (b.env[out], _) = b.add(RMS_NORM, [b.get(x), w], {"eps": eps}, node.location,
                                [out.name, out.name + "_rstd"])
        report.count("rms norms", f"{len(nodes)} nodes -> %{out.name}")
    new = rebuild(graph, {m[0][-1]: m for m in matches},
                  {node for m in matches for node in m[0]}, emit)
    report.nodes_after = len(new.nodes)
    return new
