"""``share_conv_columns``: a convolution and its weight gradient share one im2col.

``conv2d`` and ``conv2d_weight_grad`` each lay their input out as im2col columns (a copy
as large as the input times the kernel size) before their GEMM. In a training step both
read the same input with the same kernel and attrs, so the second copy is redone work.
Only for convs whose whole batch's columns are one cache-sized block of the eager kernels
(``ops.conv.columns_fit_one_block``): bigger ones build their columns a block at a time,
in cache, which a whole-batch im2col shared between two nodes would undo.
"""
from __future__ import annotations

from ..graph import Graph, Node, Value
from ..ops.conv import (CONV2D, CONV2D_COLUMNS, CONV2D_FROM_COLUMNS, CONV2D_WEIGHT_GRAD,
                        CONV2D_WEIGHT_GRAD_FROM_COLUMNS, columns_fit_one_block)
from .core import Builder, Report, describe, nbytes

_CONV = ("stride", "padding", "dilation", "groups")


def shared_columns(graph: Graph) -> tuple[dict, set] | None:
    """The precondition: an input ``x`` read by ``conv2d(x, w[, b])`` and by
    ``conv2d_weight_grad(x, g)`` with the same kernel size and attrs, each of whose operands
    share one dtype. Returns ``({node: key}, {the keys shared})``, or None."""
    keys = {node: _key(node) for node in graph.nodes}
    forward = {k for n, k in keys.items() if k is not None and n.op is CONV2D}
    shared = {k for n, k in keys.items() if k in forward and n.op is CONV2D_WEIGHT_GRAD}
    return (keys, shared) if shared else None


def share_conv_columns(graph: Graph, found: tuple, report: Report) -> Graph:
    """Each input of ``shared_columns`` has its columns computed once:
    ``conv2d_columns(x)``, read by ``conv2d_from_columns`` and
    ``conv2d_weight_grad_from_columns``.

    Preserves: types, inputs and outputs, and values bit for bit (the same GEMMs on the
    same columns).

    Before::

        graph(%x: f32[1,1,4,4], %w: f32[1,1,2,2], %gy: f32[1,1,3,3]) {
          %y: f32[1,1,3,3] = conv2d(%x, %w, stride=(1, 1), padding=((0, 0), (0, 0)),
              dilation=(1, 1), groups=1)
          %gw: f32[1,1,2,2] = conv2d_weight_grad(%x, %gy, kernel_size=(2, 2), stride=(1, 1),
              padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1)
          return (%y, %gw)
        }

    After::

        graph(%x: f32[1,1,4,4], %w: f32[1,1,2,2], %gy: f32[1,1,3,3]) {
          %x_columns: f32[1,4,9] = conv2d_columns(%x, kernel_size=(2, 2), stride=(1, 1),
              padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1)
          %y: f32[1,1,3,3] = conv2d_from_columns(%x_columns, %x, %w, stride=(1, 1),
              padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1)
          %gw: f32[1,1,2,2] = conv2d_weight_grad_from_columns(%x_columns, %x, %gy,
              kernel_size=(2, 2), stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1),
              groups=1)
          return (%y, %gw)
        }
    """
    keys, shared = found
    b = Builder(graph)
    columns: dict[tuple, Value] = {}
    for node in graph.nodes:
        key = keys[node]
        if key not in shared:
            b.copy(node)
            continue
        x, kernel = key[0], key[1]
        attrs = {name: node.attrs[name] for name in _CONV}
        if key not in columns:
            (columns[key],) = b.add(CONV2D_COLUMNS, [b.get(x)],
                                    {"kernel_size": kernel, **attrs}, node.location,
                                    [f"{x.name}_columns"])
            report.count("shared", f"%{x.name}: {describe(node)}")
            report.bytes_saved += nbytes(columns[key])
        operands = [columns[key]] + [b.get(v) for v in node.inputs]
        if node.op is CONV2D:
            new = b.add(CONV2D_FROM_COLUMNS, operands, attrs, node.location,
                        [node.outputs[0].name])
        else:
            new = b.add(CONV2D_WEIGHT_GRAD_FROM_COLUMNS, operands,
                        {"kernel_size": kernel, **attrs}, node.location,
                        [node.outputs[0].name])
        b.env[node.outputs[0]] = new[0]
    report.nodes_after = len(b.graph.nodes)
    return b.finish()


def _key(node: Node):
    """``(input, kernel size, attrs...)`` of a conv or weight gradient whose operands share
    one dtype and whose batch's columns are one block, else None."""
    if node.op is CONV2D:
        kernel, cout = tuple(node.inputs[1].shape[2:]), node.inputs[1].shape[0]
    elif node.op is CONV2D_WEIGHT_GRAD:
        kernel, cout = tuple(node.attrs["kernel_size"]), node.inputs[1].shape[1]
    else:
        return None
    operands = [v for v in node.inputs if isinstance(v, Value)]
    if len({v.dtype for v in operands}) != 1 or not all(type(k) is int for k in kernel):
        return None
    x, attrs = node.inputs[0], tuple(node.attrs[name] for name in _CONV)
    w_shape = (cout, x.shape[1] // node.attrs["groups"]) + kernel
    if not columns_fit_one_block(x.shape, w_shape, *attrs, x.dtype.itemsize):
        return None
    return (x, kernel) + attrs
