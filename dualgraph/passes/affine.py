"""Inference folding: a per-channel affine chain after a convolution or linear layer whose
weight (and bias) are constants (eval-mode BatchNorm once its ``1 / sqrt(running_var + eps)``
is folded: ``sub``, ``mul``, ``mul``, ``add`` by per-channel constants) folds into that
layer's weight and bias. Shared by the ONNX export (``export/onnx_fold.py``, where the
parameters are known arrays) and the lowering rule ``fold_batchnorm`` (``passes/lower.py``,
where they are constants of the graph).

The precondition, checked per chain: the layer's weight (and bias) are known arrays, each
value of the chain but its last is read by the next step only (not by another node, nor a
graph output), and each step adds, subtracts, multiplies or divides by a constant that
varies along the output's channel dim only (a (C, 1, 1) running mean against
(N, C, H, W)), in the output's dtype. Then, per channel, ``y * s + t`` of
``y = conv(x, W, b)`` is ``conv(x, W * s, b * s + t)``.
"""
from __future__ import annotations

import numpy as np

from ..graph import Graph, Value
from ..ops.conv import CONV2D
from ..ops.elementwise import ADD, DIV, MUL, SUB
from ..ops.linalg import LINEAR
from .core import Builder, live_readers, needed

# the layers whose output's channel k is ``x (*) W[k] + b[k]``, and where that channel dim
# sits in the output counted from the end (conv2d: (N, C, H, W), linear: (..., C))
LAYERS = {CONV2D: -3, LINEAR: -1}


def affine_chains(graph: Graph, arrays: dict) -> dict:
    """The precondition: ``{layer node: (chain nodes, scale, shift)}`` for each conv2d or
    linear whose weight and bias are in ``arrays`` (Value -> array) followed by a
    per-channel affine chain read only along the chain (by the nodes the outputs need:
    ``simplify`` leaves the nodes it replaced for ``dce``)."""
    read_by = live_readers(graph)
    chains = {}
    for node in graph.nodes:
        axis = LAYERS.get(node.op)
        params = node.inputs[1:]
        if axis is not None and all(p is None or p in arrays for p in params):
            chain = _affine_chain(node.outputs[0], axis, arrays, read_by)
            if chain:
                chains[node] = chain
    return chains


def fold_affine_chains(graph: Graph, chains: dict, arrays: dict, report=None) -> Graph:
    """``graph`` with each chain of ``affine_chains`` folded into its layer's new constant
    weight and bias; the layer is named as the chain's last value. Dead nodes are dropped
    (they may read a value of a chain)."""
    b, live = Builder(graph), needed(graph)
    skip = {n for steps, _, _ in chains.values() for n in steps}
    for node in graph.nodes:
        if node in skip or not any(v in live for v in node.outputs):
            continue
        if node not in chains:
            b.copy(node)
            continue
        steps, scale, shift = chains[node]
        out = node.outputs[0]
        weight = np.asarray(arrays[node.inputs[1]], np.float64)
        bias = node.inputs[2] if len(node.inputs) > 2 else None
        bias = np.zeros(weight.shape[0]) if bias is None else np.asarray(arrays[bias],
                                                                          np.float64)
        weight = weight * scale.reshape((-1,) + (1,) * (weight.ndim - 1))
        new_w = b.graph.add_constant(weight.astype(out.dtype), name=node.inputs[1].name)
        new_b = b.graph.add_constant((bias * scale + shift).astype(out.dtype),
                                     name=f"{node.inputs[1].name}_bias")
        last = steps[-1].outputs[0]
        (new,) = b.add(node.op, [b.get(node.inputs[0]), new_w, new_b], node.attrs,
                       location=node.location, names=[last.name])
        b.env[last] = new
        if report is not None:
            report.count("affine chains folded",
                         f"%{out.name} + {len(steps)} per-channel steps -> {node.op.name} "
                         f"%{last.name} with folded weight and bias")
    if report is not None:
        report.nodes_after = len(b.graph.nodes)
    return b.finish()


def _affine_chain(value, axis: int, arrays: dict, read_by: dict):
    """The nodes of the per-channel affine chain after ``value`` and its (scale, shift)
    per channel, or None where there is none."""
    channels = value.shape[axis]
    if not isinstance(channels, int):
        return None   # (a symbolic channel count: no constant fits it)
    scale, shift = np.ones(channels), np.zeros(channels)
    steps = []
    while True:
        users = read_by.get(value, [])
        if len(users) != 1 or not hasattr(users[0], "op"):
            break
        node = users[0]
        step = _step(node, value, axis, channels, arrays)
        if step is None:
            break
        factor, offset = step
        scale, shift = scale * factor, shift * factor + offset
        steps.append(node)
        value = node.outputs[0]
    return (steps, scale, shift) if steps else None


def _step(node, value, axis: int, channels: int, arrays: dict):
    """(factor, offset) per channel of ``node`` on ``value`` when it is ``value * f + o``
    by a per-channel constant, else None."""
    if node.op not in (ADD, SUB, MUL, DIV) or len(node.inputs) != 2:
        return None
    out = node.outputs[0]
    if out.dtype != value.dtype or tuple(out.shape) != tuple(value.shape):
        return None
    first = node.inputs[0] is value
    other = node.inputs[1] if first else node.inputs[0]
    if other is value:
        return None
    c = _per_channel(other, value, axis, channels, arrays)
    if c is None:
        return None
    one, zero = np.ones(channels), np.zeros(channels)
    if node.op is ADD:
        return one, c
    if node.op is SUB:
        return (one, -c) if first else (-one, c)
    if node.op is MUL:
        return c, zero
    return (1 / c, zero) if first else None   # (c / y is not affine in y)


def _per_channel(x, value, axis: int, channels: int, arrays: dict):
    """``x`` (a constant or a literal) as one float64 number per channel, when it varies
    along the channel dim of ``value`` only; else None."""
    if isinstance(x, Value):
        if x not in arrays:
            return None
        a = np.asarray(arrays[x])
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        a = np.asarray(x, np.float64)
    else:
        return None
    if a.ndim > value.ndim or a.ndim >= -axis and a.shape[axis] not in (1, channels):
        return None
    others = [n for k, n in enumerate(a.shape) if k - a.ndim != axis]
    if any(n != 1 for n in others):
        return None
    flat = a.reshape(-1).astype(np.float64)
    return np.broadcast_to(flat, (channels,)).copy() if flat.size in (1, channels) else None
