"""RMSNorm and LayerNorm as the graph spells them, made one op each: the lowering rules
``fuse_rms_norm`` and ``fuse_layer_norm`` (their rows are in ``passes/lower.py``).

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
from ..ops.elementwise import ADD, DIV, MUL, SQRT, SUB
from ..ops.norm import LAYER_NORM, RMS_NORM
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


# -- LayerNorm as the graph spells it ---------------------------------------------------------
def layer_norm_patterns(graph: Graph) -> list[tuple[list[Node], Value, Value | None,
                                                     Value | None, float]]:
    """``(nodes, x, weight or None, bias or None, eps)`` for each LayerNorm over the last dim
    written out (a hand-written LayerNorm, an ONNX export below opset 17), after
    ``simplify`` (``pow(d, 2)`` is ``d * d``)::

        m = mean(x, dims=(last,), keepdim=True)
        d = sub(x, m)
        v = mean(mul(d, d), dims=(last,), keepdim=True)
        n = div(d, sqrt(add(v, eps)))   # eps a number (or a one-element constant)
        [n = mul(n, w) | mul(w, n)]     # optional: w of shape (last dim,)
        [n = add(n, b) | add(b, n)]     # optional: b of shape (last dim,)

    each value read only by the next op (``d`` by the square and the division), float32 or
    float64 throughout."""
    live = live_readers(graph)
    found = []
    for node in graph.nodes:
        if node.op is MEAN and isinstance(node.inputs[0], Value):
            match = _layer_norm_from(graph, live, node)
            if match is not None:
                found.append(match)
    return found


def _last_dim_mean(node, x: Value) -> bool:
    return (node is not None and node.op is MEAN and node.inputs[0] is x
            and tuple(node.attrs["dims"]) in ((x.ndim - 1,), (-1,)) and node.attrs["keepdim"])


def _layer_norm_from(graph: Graph, live: dict, mean: Node):
    x = mean.inputs[0]
    if x.dtype not in (np.float32, np.float64) or x.ndim < 1 or not _last_dim_mean(mean, x):
        return None
    sub = only_reader(live, mean.outputs[0])
    if sub is None or sub.op is not SUB or list(sub.inputs) != [x, mean.outputs[0]]:
        return None
    d = sub.outputs[0]
    users = live.get(d, [])
    square = next((u for u in users if isinstance(u, Node) and u.op is MUL
                   and list(u.inputs) == [d, d]), None)
    div = next((u for u in users if isinstance(u, Node) and u.op is DIV
                and u.inputs[0] is d), None)
    if square is None or div is None or sorted(map(id, users)) != sorted(
            [id(square), id(square), id(div)]):
        return None
    spread = only_reader(live, square.outputs[0])
    if not _last_dim_mean(spread, square.outputs[0]):
        return None
    add = only_reader(live, spread.outputs[0])
    eps = (number(graph, _other(add, spread.outputs[0])) if add is not None and add.op is ADD
           else None)
    sqrt = only_reader(live, add.outputs[0]) if eps is not None else None
    if sqrt is None or sqrt.op is not SQRT or div.inputs[1] is not sqrt.outputs[0]:
        return None
    nodes, y = [mean, sub, square, spread, add, sqrt, div], div.outputs[0]
    affine = {}
    for op, role in ((MUL, "weight"), (ADD, "bias")):
        last = only_reader(live, y)
        other = _other(last, y) if last is not None and last.op is op else None
        if (isinstance(other, Value) and other is not y
                and tuple(other.shape) == tuple(x.shape[-1:]) and other.dtype == x.dtype
                and last.outputs[0].dtype == x.dtype
                and tuple(last.outputs[0].shape) == tuple(x.shape)):
            nodes.append(last)
            affine[role], y = other, last.outputs[0]
    if tuple(y.shape) != tuple(x.shape) or y.dtype != x.dtype:
        return None
    return nodes, x, affine.get("weight"), affine.get("bias"), eps


def fuse_layer_norm(graph: Graph, matches: list, report: Report) -> Graph:
    """Each match of ``layer_norm_patterns`` becomes one ``layer_norm(x, w, b, n_dims=1,
    eps=)`` at its last node's place, named as its result (a missing weight or bias: a
    constant of ones or zeros): one loop over each row while it is in cache, where the
    spelled-out form took four kernels and three passes over the whole array, and a
    LayerNorm the transformer rules (``linear_norm``) then take into a product's pass.

    Preserves: types, inputs and outputs; values up to rounding (the kernel sums each row
    in another order).

    Before::

        graph(%x: f32[2,4]) {
          %m: f32[2,1] = mean(%x, dims=(1,), keepdim=True)
          %d: f32[2,4] = sub(%x, %m)
          %p: f32[2,4] = mul(%d, %d)
          %v: f32[2,1] = mean(%p, dims=(1,), keepdim=True)
          %s: f32[2,1] = add(%v, 1e-05)
          %r: f32[2,1] = sqrt(%s)
          %y: f32[2,4] = div(%d, %r)
          return (%y)
        }

    After::

        graph(%x: f32[2,4]) {
          %x_ones: f32[4] = constant([1.0, 1.0, 1.0, 1.0])
          %x_zeros: f32[4] = constant([0.0, 0.0, 0.0, 0.0])
          %y: f32[2,4], %y_mean: f32[2,1], %y_rstd: f32[2,1] = layer_norm(%x, %x_ones, %x_zeros, n_dims=1, eps=1e-05)
          return (%y)
        }
    """
    def emit(b, node, match):
        nodes, x, weight, bias, eps = match
        w, s = (b.get(v) if v is not None else
                b.graph.add_constant(np.full(x.shape[-1], fill, x.dtype), name=x.name + suffix)
                for v, fill, suffix in ((weight, 1, "_ones"), (bias, 0, "_zeros")))
        out = node.outputs[0]
        (b.env[out], _, _) = b.add(LAYER_NORM, [b.get(x), w, s], {"n_dims": 1, "eps": eps},
                                   node.location, [out.name, out.name + "_mean",
                                                   out.name + "_rstd"])
        report.count("layer norms", f"{len(nodes)} nodes -> %{out.name}")
    new = rebuild(graph, {m[0][-1]: m for m in matches},
                  {node for m in matches for node in m[0]}, emit)
    report.nodes_after = len(new.nodes)
    return new
