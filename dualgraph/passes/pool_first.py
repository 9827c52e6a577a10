"""An average pool after a pointwise (1x1) convolution, moved before it: the lowering rule
``pool_before_conv`` (its row is in ``passes/lower.py``).

A 1x1 conv of stride 1 without padding is, at every position, the same linear map of the
channels (``W x_p + b``); an average pool is, for every channel, the same weighted sum of
positions (``sum_p x_p / d`` over a window). The two commute: ``pool(conv(x))`` is
``conv(pool(x))`` wherever the bias survives the pool, that is where each window's divisor
``d`` is the number of positions it sums (no padding counted in, no ``divisor_override``),
or where there is no bias. Pooled first, the conv runs on the pooled plane: a 2x2/2 pool
leaves it a quarter of its products (DenseNet's transitions, BN-ReLU-1x1-avgpool), for a
pool over the conv's input channels instead of its output channels.
"""
from __future__ import annotations

from ..graph import Graph, Node, Value
from ..ops.conv import AVG_POOL2D, CONV2D
from ..shapes import is_static
from .core import Report, live_readers, only_reader, rebuild


def pooled_pointwise_convs(graph: Graph) -> dict[Node, Node]:
    """The precondition of ``pool_before_conv``: ``{avg_pool2d node: conv2d node}`` where
    the pool reads a 4-D ``conv2d`` with a 1x1 kernel, stride 1, no padding nor dilation
    (any groups), whose output nothing else reads nor returns; the pool shrinks the
    plane (of static height and width; the batch may be symbolic); and without a bias,
    or each window's divisor is its count of summed positions (no ``divisor_override``,
    and no padding or padding left out of the count)."""
    read_by = live_readers(graph)
    found = {}
    for pool in graph.nodes:
        if pool.op is not AVG_POOL2D or not isinstance(pool.inputs[0], Value):
            continue
        y = pool.inputs[0]
        conv = y.producer
        if conv is None or conv.op is not CONV2D or only_reader(read_by, y) is not pool:
            continue
        x, w, *bias = conv.inputs
        a, p = conv.attrs, pool.attrs
        pointwise = (tuple(w.shape[2:]) == (1, 1) and tuple(a["stride"]) == (1, 1)
                     and not any(q for pair in a["padding"] for q in pair)
                     and tuple(a["dilation"]) == (1, 1))
        out = pool.outputs[0]
        shrinks = (y.ndim == 4 and is_static(y.shape[2:]) and is_static(out.shape[2:])
                   and out.shape[2] * out.shape[3] < y.shape[2] * y.shape[3])
        divisor_counts = p["divisor_override"] is None and (
            not any(p["padding"]) or not p["count_include_pad"])
        if pointwise and shrinks and (not bias or divisor_counts):
            found[pool] = conv
    return found


def pool_before_conv(graph: Graph, pairs: dict, report: Report) -> Graph:
    """Each pool of ``pooled_pointwise_convs`` becomes the same pool of the conv's input
    (named with ``_pooled``) and the conv of that, named as the pool's result; the conv
    before it is dropped.

    Preserves: types, inputs and outputs; values up to rounding (the same products and
    sums, the pool's before the conv's).

    Before::

        graph(%x: f32[1,4,6,6], %w: f32[3,4,1,1], %b: f32[3]) {
          %y: f32[1,3,6,6] = conv2d(%x, %w, %b, stride=(1, 1), padding=((0, 0), (0, 0)),
              dilation=(1, 1), groups=1)
          %z: f32[1,3,3,3] = avg_pool2d(%y, kernel_size=(2, 2), stride=(2, 2), padding=(0,
              0), ceil_mode=False, count_include_pad=True, divisor_override=None)
          return (%z)
        }

    After::

        graph(%x: f32[1,4,6,6], %w: f32[3,4,1,1], %b: f32[3]) {
          %z_pooled: f32[1,4,3,3] = avg_pool2d(%x, kernel_size=(2, 2), stride=(2, 2),
              padding=(0, 0), ceil_mode=False, count_include_pad=True, divisor_override=None)
          %z: f32[1,3,3,3] = conv2d(%z_pooled, %w, %b, stride=(1, 1), padding=((0, 0), (0,
              0)), dilation=(1, 1), groups=1)
          return (%z)
        }
    """
    def emit(b, pool, conv):
        x, *params = conv.inputs
        out = pool.outputs[0]
        (pooled,) = b.add(AVG_POOL2D, [b.get(x)], pool.attrs, pool.location,
                          [out.name + "_pooled"])
        (b.env[out],) = b.add(CONV2D, [pooled, *[b.get(v) for v in params]], conv.attrs,
                              conv.location, [out.name])
        report.count("pools before 1x1 convs", f"%{out.name}: {x.shape[1]} channels pooled "
                                               f"before the conv, not {out.shape[1]}")
    new = rebuild(graph, pairs, set(pairs.values()), emit)
    report.nodes_after = len(new.nodes)
    return new
