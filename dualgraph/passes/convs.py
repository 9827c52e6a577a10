"""Convolutions on weights laid out once: the lowering rule ``conv_packed`` (its row is in
``passes/lower.py``).

A dense convolution whose weight is a constant of the graph (a frozen parameter under
``no_grad``, an ONNX initializer, after BatchNorm is folded into it) is run by
``kernels/conv_packed.py``'s loop, which reads the weight as ``(pairs, C*kh*kw, 16)``:
sixteen output channels side by side for each tap. The rule stores that layout as a new
constant, made once when the graph is compiled, in place of the ``(Cout, C, kh, kw)`` one,
and the conv becomes ``conv2d_packed`` reading it, so no call re-lays the weight. Where
the loop takes a conv is the kernel module's choice (``conv_packed.packed_wins``); a weight
that anything else reads (a gradient, another kind of op, an output) stays as it is.
"""
from __future__ import annotations

import numpy as np

from .. import kernels
from ..graph import Graph, Node, Value
from ..ops.conv import CONV2D
from ..ops.epilogue import CONV2D_EPILOGUE, CONV2D_PACKED
from ..shapes import is_static
from .core import Builder, Report, live_readers

# the ops a constant weight of which the rule packs (their second input)
PACKED_READERS = (CONV2D, CONV2D_EPILOGUE)


def _packable(node: Node) -> bool:
    """Whether the loop takes ``node``'s conv: float32 operands of static shapes, one
    group, ``conv_packed.packed_wins``."""
    x, w, *rest = node.inputs
    a = node.attrs
    return (isinstance(x, Value) and is_static(x.shape) and node.outputs[0].ndim == 4
            and all(isinstance(v, Value) and v.dtype == np.float32 for v in (x, w, *rest))
            and a["groups"] == 1
            and kernels.conv_packed.packed_wins(tuple(x.shape), tuple(w.shape), a["padding"],
                                                a["groups"], np.float32))


def packable_weights(graph: Graph) -> list[Value]:
    """The precondition of ``conv_packed``: the 4-D float32 constants read only as the
    weight (second input, and nothing else) of ``PACKED_READERS`` nodes that
    ``_packable`` accepts, and not returned."""
    if not kernels.numba_available():
        return []
    live = live_readers(graph)
    found = []
    for w, arr in graph.constants.items():
        users = live.get(w, [])
        if (arr.ndim == 4 and arr.dtype == np.float32 and users
                and all(isinstance(u, Node) and u.op in PACKED_READERS and u.inputs[1] is w
                        and w not in (u.inputs[0], *u.inputs[2:]) and _packable(u)
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
              1), kernel_size=(3, 3), out_channels=16)
          return (%y)
        }
    """
    pending = set(weights)
    packed = {}
    b = Builder(graph)
    for node in graph.nodes:
        w = node.inputs[1] if node.op in PACKED_READERS else None
        if w not in pending:
            b.copy(node)
            continue
        if w not in packed:
            packed[w] = b.graph.add_constant(kernels.conv_packed.pack(graph.constants[w]),
                                             name=w.name + "_packed")
            report.count("conv weights packed", f"%{w.name}")
        x, *rest = [b.get(v) for v in (node.inputs[0], *node.inputs[2:])]
        a = node.attrs
        if node.op is CONV2D:
            bias = rest[0] if rest else b.graph.add_constant(
                np.zeros(w.shape[0], np.float32), name=w.name + "_bias")
            rest = [bias]
            a = dict(a, act="none", bounds=(-np.inf, np.inf), residual_at=None)
        attrs = {k: a[k] for k in ("act", "bounds", "residual_at", "stride", "padding",
                                   "dilation")}
        attrs.update(kernel_size=tuple(w.shape[2:]), out_channels=w.shape[0])
        (y,) = b.add(CONV2D_PACKED, [x, packed[w], *rest], attrs, node.location,
                     [node.outputs[0].name])
        b.env[node.outputs[0]] = y
    report.nodes_after = len(b.graph.nodes)
    return b.finish()
