"""The lowering rule ``expand_into_depthwise`` (its row is in ``passes/lower.py``, after
``blocked_channels``): a 1x1 convolution whose output only a depthwise convolution reads,
in a channel-blocked region, becomes one op that computes the 1x1's output a band of rows
at a time and the depthwise rows from it (``expand_depthwise_blocked``,
``kernels/conv_expand.py``), so that its output, ``t`` times wider than its input in an
inverted-residual block, is never written to memory and read back.

The precondition: a ``pointwise_blocked`` without a residual whose output one
``depthwise_blocked`` reads, once, as its input (not its residual), nothing else reading or
returning it; and the cost rule: that output, per image, larger than
:data:`MIN_EXPANDED_BYTES`. Smaller, it stays in L2 between the two ops, whose loops then
run on whole planes at their best (the fused loop measured 1.1x their time on 192 channels
of 28x28, 0.6-0.8x on 64 to 144 channels of 56x56 and 96 of 112x112).
"""
from __future__ import annotations

import math

from ..graph import Graph, Node
from ..ops.layout import DEPTHWISE_BLOCKED, EXPAND_DEPTHWISE_BLOCKED, POINTWISE_BLOCKED
from .core import Report, live_readers, merge_into_reader, only_reader

MIN_EXPANDED_BYTES = 768 << 10


def expansions(graph: Graph) -> list[tuple[Node, Node]]:
    """The precondition (the module docstring): ``(pointwise, depthwise)`` pairs."""
    live = live_readers(graph)
    found = []
    for node in graph.nodes:
        if node.op is not POINTWISE_BLOCKED or len(node.inputs) != 3:
            continue
        y = node.outputs[0]
        conv = only_reader(live, y)
        if (conv is None or conv.op is not DEPTHWISE_BLOCKED or conv.inputs[0] is not y
                or any(v is y for v in conv.inputs[1:])):
            continue
        if math.prod(y.shape[1:]) * y.dtype.itemsize > MIN_EXPANDED_BYTES:
            found.append((node, conv))
    return found


def expand_into_depthwise(graph: Graph, matches: list, report: Report) -> Graph:
    """Each match of ``expansions`` becomes one ``expand_depthwise_blocked(x, wp, b, w, db,
    *residual, expand_act=, expand_bounds=, act=, bounds=, residual_at=, stride=,
    padding=, dilation=)`` at the depthwise conv's place, named as its result.

    Preserves: types, inputs and outputs; values bit for bit (each output is the same
    chain of multiply-adds as the two ops make).

    Before::

        graph(%x: f32[1,2,66,66,8], %wp: f32[2,16,24], %b: f32[48], %w: f32[48,1,3,3],
              %db: f32[48]) {
          %e: f32[1,6,66,66,8] = pointwise_blocked(%x, %wp, %b, act='clamp', bounds=(0.0,
              6.0), residual_at=None)
          %y: f32[1,6,33,33,8] = depthwise_blocked(%e, %w, %db, act='clamp', bounds=(0.0,
              6.0), residual_at=None, stride=(2, 2), padding=((1, 1), (1, 1)),
              dilation=(1, 1))
          return (%y)
        }

    After::

        graph(%x: f32[1,2,66,66,8], %wp: f32[2,16,24], %b: f32[48], %w: f32[48,1,3,3],
              %db: f32[48]) {
          %y: f32[1,6,33,33,8] = expand_depthwise_blocked(%x, %wp, %b, %w, %db,
              expand_act='clamp', expand_bounds=(0.0, 6.0), act='clamp', bounds=(0.0, 6.0),
              residual_at=None, stride=(2, 2), padding=((1, 1), (1, 1)), dilation=(1, 1))
          return (%y)
        }
    """
    return merge_into_reader(graph, matches, EXPAND_DEPTHWISE_BLOCKED, lambda expand, conv: dict(
        expand_act=expand.attrs["act"], expand_bounds=expand.attrs["bounds"], **conv.attrs),
        "expansions into depthwise convs", report)
