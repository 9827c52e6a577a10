"""Squeeze-and-excitation as the graph spells it, made one op: the lowering rule
``squeeze_excite`` (its row is in ``passes/lower.py``).

MobileNetV3's, EfficientNet's and SENet's blocks (torchvision's ``SqueezeExcitation``, and
their ONNX export) write ``x * gate(conv(act(conv(avg_pool(x)))))``; after ``simplify``
(global average pooling is a mean) and ``conv_epilogue`` (each small conv takes its
activation)::

    m = mean(x, dims=(2, 3), keepdim=True)          # x: (N, C, H, W)
    h = conv2d_epilogue(m, w1, b1, act=a1)          # 1x1, (N, S, 1, 1); or a conv2d
    g = conv2d_epilogue(h, w2, b2, act=a2)          # 1x1, (N, C, 1, 1); or a conv2d
    y = mul(x, g)                                   # (or g * x)

each value read only by the next op, the convs of one group, stride 1, no padding or
dilation, with a bias and no residual. Five calls, four of them on a few hundred
elements, become one ``squeeze_excite`` (``ops/excite.py``): a loop per image.

In a channel-blocked region (``passes/layout.py``) the block's next op is usually the 1x1
projection of the gated image; the rule ``gate_into_weights`` (its row after
``blocked_channels``) moves the gate into that conv's weights, per image, where the gated
copy of the weights is no larger than the image: the image is then read once for its
means and once by the conv, not also scaled into a new array.
"""
from __future__ import annotations

import numpy as np

from ..graph import Graph, Node, Value
from ..ops.conv import CONV2D
from ..ops.elementwise import MUL
from ..ops.epilogue import CONV2D_EPILOGUE
from ..ops.excite import SQUEEZE_EXCITE
from ..ops.layout import GATED_POINTWISE_BLOCKED, POINTWISE_BLOCKED, SQUEEZE_EXCITE_BLOCKED
from ..ops.reduce import MEAN
from .core import Report, live_readers, merge_into_reader, needed, only_reader, rebuild

_POINT = dict(stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1)


def squeeze_excites(graph: Graph) -> list[tuple[list[Node], Value, list, list]]:
    """The precondition (the module docstring): ``(nodes, x, [conv1, conv2], [(act,
    bounds)] * 2)`` for each ``mean`` of a float32/float64 ``x`` that starts the pattern."""
    live = live_readers(graph)
    found = []
    for node in graph.nodes:
        x = node.inputs[0] if node.op is MEAN else None
        if (not isinstance(x, Value) or x.ndim != 4 or x.dtype not in (np.float32, np.float64)
                or tuple(node.attrs["dims"]) != (2, 3) or not node.attrs["keepdim"]):
            continue
        convs, v = [], node.outputs[0]
        for _ in range(2):
            conv = only_reader(live, v)
            if not _point_conv(conv, v):
                break
            convs.append(conv)
            v = conv.outputs[0]
        scale = only_reader(live, v) if len(convs) == 2 else None
        if (scale is None or scale.op is not MUL
                or {id(u) for u in scale.inputs} != {id(x), id(v)}
                or tuple(v.shape) != tuple(x.shape[:2]) + (1, 1)
                or tuple(scale.outputs[0].shape) != tuple(x.shape)
                or scale.outputs[0].dtype != x.dtype):
            continue
        acts = [(c.attrs["act"], tuple(c.attrs["bounds"])) if c.op is CONV2D_EPILOGUE
                else ("none", (-np.inf, np.inf)) for c in convs]
        found.append(([node, *convs, scale], x, convs, acts))
    return found


def _point_conv(conv: Node | None, v: Value) -> bool:
    """Whether ``conv`` is a 1x1 conv2d (or conv2d_epilogue without a residual) of ``v``,
    with a bias, one group, stride 1, no padding or dilation, in ``v``'s dtype."""
    if conv is None or conv.op not in (CONV2D, CONV2D_EPILOGUE) or conv.inputs[0] is not v:
        return False
    w, b = conv.inputs[1], conv.inputs[2] if len(conv.inputs) == 3 else None
    return (isinstance(w, Value) and isinstance(b, Value) and w.ndim == 4
            and tuple(w.shape[2:]) == (1, 1) and w.dtype == b.dtype == v.dtype
            and conv.outputs[0].dtype == v.dtype
            and all(tuple(np.ravel(conv.attrs[k])) == tuple(np.ravel(want))
                    for k, want in _POINT.items()))


def squeeze_excite(graph: Graph, matches: list, report: Report) -> Graph:
    """Each match of ``squeeze_excites`` becomes one ``squeeze_excite(x, w1, b1, w2, b2,
    acts=, bounds=)`` at the product's place, named as its result. Dead nodes are dropped
    (they may read a value of a match).

    Preserves: types, inputs and outputs; values up to rounding (the mean and the small
    products sum in another order; the activations are the conv epilogue's formulas).

    Before::

        graph(%x: f32[2,6,5,5], %w1: f32[2,6,1,1], %b1: f32[2], %w2: f32[6,2,1,1],
              %b2: f32[6]) {
          %m: f32[2,6,1,1] = mean(%x, dims=(2, 3), keepdim=True)
          %h: f32[2,2,1,1] = conv2d_epilogue(%m, %w1, %b1, act='relu', bounds=(-inf, inf),
              residual_at=None, stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1),
              groups=1)
          %g: f32[2,6,1,1] = conv2d_epilogue(%h, %w2, %b2, act='sigmoid', bounds=(-inf, inf),
              residual_at=None, stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1),
              groups=1)
          %y: f32[2,6,5,5] = mul(%x, %g)
          return (%y)
        }

    After::

        graph(%x: f32[2,6,5,5], %w1: f32[2,6,1,1], %b1: f32[2], %w2: f32[6,2,1,1],
              %b2: f32[6]) {
          %y: f32[2,6,5,5] = squeeze_excite(%x, %w1, %b1, %w2, %b2, acts=('relu', 'sigmoid'),
              bounds=((-inf, inf), (-inf, inf)))
          return (%y)
        }
    """
    def emit(b, node, match):
        nodes, x, convs, acts = match
        out = node.outputs[0]
        inputs = [b.get(x)] + [b.get(v) for c in convs for v in c.inputs[1:3]]
        attrs = dict(acts=tuple(a for a, _ in acts),
                     bounds=tuple((float(lo), float(hi)) for _, (lo, hi) in acts))
        (b.env[out],) = b.add(SQUEEZE_EXCITE, inputs, attrs, node.location, [out.name])
        report.count("squeeze-excitations", f"{len(nodes)} nodes -> %{out.name}")
    live = needed(graph)
    dropped = {node for m in matches for node in m[0]} | {
        node for node in graph.nodes if not any(v in live for v in node.outputs)}
    new = rebuild(graph, {m[0][-1]: m for m in matches}, dropped, emit)
    report.nodes_after = len(new.nodes)
    return new


def gated_pointwises(graph: Graph) -> list[tuple[Node, Node]]:
    """The precondition of ``gate_into_weights``: ``(excite, conv)`` for each
    ``squeeze_excite_blocked`` whose output only a ``pointwise_blocked`` reads, as its
    input (not its residual), where each image's gated copy of the packed weight is no
    larger than the image (the padded output channels at most the plane's positions: the
    copy then costs no more than the channel scale's pass, which reads and writes the
    image)."""
    live = live_readers(graph)
    found = []
    for node in graph.nodes:
        if node.op is not SQUEEZE_EXCITE_BLOCKED:
            continue
        conv = only_reader(live, node.outputs[0])
        if conv is None or conv.op is not POINTWISE_BLOCKED or conv.inputs[0] is not (
                node.outputs[0]) or any(v is node.outputs[0] for v in conv.inputs[1:]):
            continue
        _, _, h, w, _ = node.outputs[0].shape
        groups, _, width = conv.inputs[1].shape
        if groups * width <= h * w:
            found.append((node, conv))
    return found


def gate_into_weights(graph: Graph, matches: list, report: Report) -> Graph:
    """Each match of ``gated_pointwises`` becomes one ``gated_pointwise_blocked(x, w1, b1,
    w2, b2, wp, b, *residual, gate_acts=, gate_bounds=, act=, bounds=, residual_at=)`` at
    the conv's place, named as its result: ``conv(x * gate, w) = conv(x, w * gate)``, the
    gate scaling the weight's input channels, per image, instead of the image.

    Preserves: types, inputs and outputs; values up to rounding (each product is ``(w *
    g) * x`` where it was ``w * (x * g)``).

    Before::

        graph(%x: f32[1,2,9,9,8], %w1: f32[2,16,1,1], %b1: f32[2], %w2: f32[16,2,1,1],
              %b2: f32[16], %wp: f32[1,16,24], %b: f32[24]) {
          %s: f32[1,2,9,9,8] = squeeze_excite_blocked(%x, %w1, %b1, %w2, %b2,
              acts=('relu', 'clamp'), bounds=((-inf, inf), (0.0, 1.0)))
          %y: f32[1,3,9,9,8] = pointwise_blocked(%s, %wp, %b, act='none', bounds=(-inf,
              inf), residual_at=None)
          return (%y)
        }

    After::

        graph(%x: f32[1,2,9,9,8], %w1: f32[2,16,1,1], %b1: f32[2], %w2: f32[16,2,1,1],
              %b2: f32[16], %wp: f32[1,16,24], %b: f32[24]) {
          %y: f32[1,3,9,9,8] = gated_pointwise_blocked(%x, %w1, %b1, %w2, %b2, %wp, %b,
              gate_acts=('relu', 'clamp'), gate_bounds=((-inf, inf), (0.0, 1.0)),
              act='none', bounds=(-inf, inf), residual_at=None)
          return (%y)
        }
    """
    return merge_into_reader(graph, matches, GATED_POINTWISE_BLOCKED, lambda excite, conv: dict(
        gate_acts=excite.attrs["acts"], gate_bounds=excite.attrs["bounds"], **conv.attrs),
        "gates into weights", report)
