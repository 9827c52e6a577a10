"""Convolutions on weights laid out once: the lowering rules ``conv_winograd`` and
``conv_packed`` (their rows are in ``passes/lower.py``).

A dense convolution whose weight is a constant of the graph (a frozen parameter under
``no_grad``, an ONNX initializer, after BatchNorm is folded into it) is run by
``kernels/conv_packed.py``'s loop, which reads the weight as ``(pairs, C*kh*kw, 16)``:
sixteen output channels side by side for each tap. The rule stores that layout as a new
constant, made once when the graph is compiled, in place of the ``(Cout, C, kh, kw)`` one,
and the conv becomes ``conv2d_packed`` reading it, so no call re-lays the weight. Where
the loop takes a conv is the kernel module's choice (``conv_packed.packed_wins``); a weight
that anything else reads (a gradient, another kind of op, an output) stays as it is.

``conv_winograd`` runs first and takes the 3x3 stride-1 convs that Winograd's F(2x2, 3x3)
runs faster (``kernels/conv_winograd.py``; the cost rule ``conv_winograd.faster``, by
channels and tiles): their weight becomes the ``(16, Cout, C)`` transform ``G w G^T``,
made once, read by ``conv2d_winograd``. The weights it leaves go to ``conv_packed``.
"""
from __future__ import annotations

import numpy as np

from .. import kernels
from ..graph import Graph, Node, Value
from ..ops.conv import CONV2D
from ..ops.epilogue import CONV2D_EPILOGUE, CONV2D_PACKED, CONV2D_WINOGRAD
from ..shapes import is_static
from .core import Builder, Report, live_readers

# the ops a constant weight of which the rule packs (their second input)
PACKED_READERS = (CONV2D, CONV2D_EPILOGUE)


def _float32_static(node: Node) -> bool:
    """Whether ``node``'s conv has float32 operands and a static input shape."""
    x, w, *rest = node.inputs
    return (isinstance(x, Value) and is_static(x.shape) and node.outputs[0].ndim == 4
            and all(isinstance(v, Value) and v.dtype == np.float32 for v in (x, w, *rest)))


def _packable(node: Node) -> bool:
    """Whether a loop on the packed weight takes ``node``'s conv:
    ``conv_packed.packed_wins`` (one group, or groups whose pairs are half busy or more), or
    ``conv_pointpacked.wins`` (1x1 convs of one group); not the few-channel convs that
    ``conv_shallow`` runs faster on the weight as it is (``conv_shallow.wins``)."""
    x, w = node.inputs[:2]
    a = node.attrs
    return (_float32_static(node)
            and not kernels.conv_shallow.wins(tuple(x.shape), tuple(w.shape),
                                              tuple(node.outputs[0].shape[2:]), a["stride"],
                                              a["padding"], a["groups"], np.float32)
            and (kernels.conv_packed.packed_wins(tuple(x.shape), tuple(w.shape),
                                                 a["padding"], a["groups"], np.float32)
                 or (a["groups"] == 1
                     and kernels.conv_pointpacked.wins(tuple(x.shape), tuple(w.shape),
                                                       a["stride"], a["padding"],
                                                       a["dilation"], 1, np.float32))))


def _winograd(node: Node) -> bool:
    """Whether Winograd's loops take ``node``'s conv (``conv_winograd.wanted``) and run it
    faster than the packed loop (``conv_winograd.faster``)."""
    x, w = node.inputs[:2]
    cw, a = kernels.conv_winograd, node.attrs
    return (_float32_static(node) and node.attrs["groups"] == 1
            and cw.wanted(tuple(x.shape), tuple(w.shape), a["stride"], a["padding"],
                          a["dilation"], 1, np.float32)
            and cw.faster(tuple(x.shape), tuple(w.shape), tuple(node.outputs[0].shape[2:])))


def packable_weights(graph: Graph) -> list[Value]:
    """The precondition of ``conv_packed``: the 4-D float32 constants read only as the
    weight (second input, and nothing else) of ``PACKED_READERS`` nodes that
    ``_packable`` accepts, all with the same ``groups`` (which the packed layout depends
    on), and not returned."""
    live = live_readers(graph)
    return [w for w in _weights(graph, _packable)
            if len({u.attrs["groups"] for u in live[w]}) == 1]


def winograd_weights(graph: Graph) -> list[Value]:
    """The precondition of ``conv_winograd``: as ``packable_weights``, the convs those
    that ``_winograd`` accepts."""
    return _weights(graph, _winograd)


def _weights(graph: Graph, takes) -> list[Value]:
    """The 4-D float32 constants read only as the weight of ``PACKED_READERS`` nodes that
    ``takes`` accepts, and not returned."""
    if not kernels.numba_available():
        return []
    live = live_readers(graph)
    found = []
    for w, arr in graph.constants.items():
        users = live.get(w, [])
        if (arr.ndim == 4 and arr.dtype == np.float32 and users
                and all(isinstance(u, Node) and u.op in PACKED_READERS and u.inputs[1] is w
                        and w not in (u.inputs[0], *u.inputs[2:]) and takes(u)
                        for u in users)):
            found.append(w)
    return found


def conv_packed(graph: Graph, weights: list, report: Report) -> Graph:
    """Each weight of ``packable_weights`` becomes one constant ``<w>_packed``,
    ``kernels.conv_packed.pack(w)``, and each of its convs a ``conv2d_packed`` reading it
    (a conv without an epilogue with ``act='none'``; without a bias with a zero bias
    constant), named as the conv's output.

    Preserves: types, inputs and outputs; values up to the rounding of the sums (the loop
    adds the taps in another order than a GEMM).

    Before::

        graph(%x: f32[1,16,5,5]) {
          %w: f32[16,16,3,3] = constant
          %b: f32[16] = constant
          %y: f32[1,16,5,5] = conv2d_epilogue(%x, %w, %b, act='relu', bounds=(-inf, inf),
              residual_at=None, stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1),
              groups=1)
          return (%y)
        }

    After::

        graph(%x: f32[1,16,5,5]) {
          %w_packed: f32[1,144,16] = constant
          %b: f32[16] = constant
          %y: f32[1,16,5,5] = conv2d_packed(%x, %w_packed, %b, act='relu', bounds=(-inf,
              inf), residual_at=None, stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1,
              1), kernel_size=(3, 3), out_channels=16, groups=1)
          return (%y)
        }
    """
    return _relayout(graph, weights, report, CONV2D_PACKED,
                     lambda w, a: kernels.conv_packed.pack(w, a["groups"]), "packed",
                     lambda w, a: dict(stride=a["stride"], padding=a["padding"],
                                       dilation=a["dilation"], kernel_size=tuple(w.shape[2:]),
                                       out_channels=w.shape[0], groups=a["groups"]))


def conv_winograd(graph: Graph, weights: list, report: Report) -> Graph:
    """Each weight of ``winograd_weights`` becomes one constant ``<w>_winograd``,
    ``kernels.conv_winograd.transform_weight(w)`` (``G w G^T`` at each of the 16 points of
    a 4x4 tile), and each of its convs a ``conv2d_winograd`` reading it (as
    ``conv_packed``'s: the epilogue's attrs, a zero bias where there is none).

    Preserves: types, inputs and outputs; values up to rounding (the transforms' sums, of
    an error below the direct conv's: docs/kernels.md).

    Before::

        graph(%x: f32[1,128,14,14]) {
          %w: f32[128,128,3,3] = constant
          %b: f32[128] = constant
          %y: f32[1,128,14,14] = conv2d_epilogue(%x, %w, %b, act='relu', bounds=(-inf,
              inf), residual_at=None, stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1,
              1), groups=1)
          return (%y)
        }

    After::

        graph(%x: f32[1,128,14,14]) {
          %w_winograd: f32[16,128,128] = constant
          %b: f32[128] = constant
          %y: f32[1,128,14,14] = conv2d_winograd(%x, %w_winograd, %b, act='relu',
              bounds=(-inf, inf), residual_at=None, padding=((1, 1), (1, 1)))
          return (%y)
        }
    """
    return _relayout(graph, weights, report, CONV2D_WINOGRAD,
                     lambda w, a: kernels.conv_winograd.transform_weight(w), "winograd",
                     lambda w, a: dict(padding=a["padding"]))


def _relayout(graph: Graph, weights: list, report: Report, op, layout, suffix: str,
              conv_attrs) -> Graph:
    """Each weight ``w`` of ``weights`` as one constant ``<w>_<suffix>``, ``layout(w, attrs)``
    (the attrs of its first conv: ``packable_weights`` keeps weights of one ``groups``), and
    each of its convs an ``op`` node reading it, with the epilogue's attrs and
    ``conv_attrs(w, attrs)`` (a conv without an epilogue with ``act='none'``; without a
    bias with a zero bias constant), named as the conv's output."""
    pending = set(weights)
    laid_out = {}
    b = Builder(graph)
    for node in graph.nodes:
        w = node.inputs[1] if node.op in PACKED_READERS else None
        if w not in pending:
            b.copy(node)
            continue
        if w not in laid_out:
            laid_out[w] = b.graph.add_constant(layout(graph.constants[w], node.attrs),
                                               name=f"{w.name}_{suffix}")
            report.count(f"conv weights {suffix}", f"%{w.name}")
        x, *rest = [b.get(v) for v in (node.inputs[0], *node.inputs[2:])]
        a = node.attrs
        if node.op is CONV2D:
            bias = rest[0] if rest else b.graph.add_constant(
                np.zeros(w.shape[0], np.float32), name=w.name + "_bias")
            rest = [bias]
            a = dict(a, act="none", bounds=(-np.inf, np.inf), residual_at=None)
        attrs = {k: a[k] for k in ("act", "bounds", "residual_at")}
        attrs.update(conv_attrs(w, a))
        (y,) = b.add(op, [x, laid_out[w], *rest], attrs, node.location,
                     [node.outputs[0].name])
        b.env[node.outputs[0]] = y
    report.nodes_after = len(b.graph.nodes)
    return b.finish()
