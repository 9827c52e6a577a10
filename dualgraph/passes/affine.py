"""Inference folding: a per-channel affine chain after a convolution or linear layer whose
weight (and bias) are constants (eval-mode BatchNorm once its ``1 / sqrt(running_var + eps)``
is folded: ``sub``, ``mul``, ``mul``, ``add`` by per-channel constants) folds into that
layer's weight and bias. Shared by the ONNX export (``export/onnx_fold.py``, where the
parameters are known arrays) and the lowering rule ``fold_batchnorm`` (``passes/lower.py``,
where they are constants of the graph).

Before the layer, a per-channel chain on its input folds too (the rule
``fold_input_affine``): per input channel ``c``, ``conv(x * s + t, W, b)`` is ``conv(x,
W * s[c], b + sum W * t[c])`` where the conv has no padding (at a padded border the
shift would be summed over taps that read the padding's zeros: a kxk conv with padding
keeps its chain; a 1x1 conv's chain with an activation is ``conv_prologue``'s), and
``linear(x * s + t, W, b)`` is ``linear(x, W * s, b + W @ t)``.

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
    def fold(node, chain, weight, bias):
        steps, scale, shift = chain
        last = steps[-1].outputs[0]
        item = (f"%{node.outputs[0].name} + {len(steps)} per-channel steps -> "
                f"{node.op.name} %{last.name} with folded weight and bias")
        return (weight * scale.reshape((-1,) + (1,) * (weight.ndim - 1)),
                bias * scale + shift, node.inputs[0], last, ("affine chains folded", item))
    return _fold(graph, chains, arrays, report, fold)


def _fold(graph: Graph, chains: dict, arrays: dict, report, fold) -> Graph:
    """``graph`` with each layer node of ``chains`` and its chain's steps (``chain[0]``)
    replaced by the layer on ``fold(node, chain, weight, bias)``'s ``(weight, bias, input,
    value it defines, (report kind, item))``, weight and bias float64 arrays (a zero bias
    where it had none) made new constants of the layer's dtype. Dead nodes are dropped."""
    b, live = Builder(graph), needed(graph)
    skip = {n for chain in chains.values() for n in chain[0]}
    for node in graph.nodes:
        if node in skip or not any(v in live for v in node.outputs):
            continue
        if node not in chains:
            b.copy(node)
            continue
        weight = np.asarray(arrays[node.inputs[1]], np.float64)
        bias = node.inputs[2] if len(node.inputs) > 2 else None
        bias = np.zeros(weight.shape[0]) if bias is None else np.asarray(arrays[bias],
                                                                          np.float64)
        weight, bias, x, defined, (kind, item) = fold(node, chains[node], weight, bias)
        dtype, name = node.outputs[0].dtype, node.inputs[1].name
        new_w = b.graph.add_constant(weight.astype(dtype), name=name)
        new_b = b.graph.add_constant(bias.astype(dtype), name=f"{name}_bias")
        (b.env[defined],) = b.add(node.op, [b.get(x), new_w, new_b], node.attrs,
                                  location=node.location, names=[defined.name])
        if report is not None:
            report.count(kind, item)
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


def input_affine_chains(graph: Graph, arrays: dict) -> dict:
    """``{layer node: (chain nodes, scale, shift)}`` for each conv2d without padding or
    linear whose weight and bias are in ``arrays`` and whose input is the end of a
    per-channel affine chain along its input channels (the module docstring), each value
    of the chain read only by the next step (the last by the layer only, once)."""
    read_by = live_readers(graph)
    chains = {}
    for node in graph.nodes:
        axis = LAYERS.get(node.op)
        if (axis is None or not all(p is None or p in arrays for p in node.inputs[1:])
                or node.op is CONV2D and any(p for pair in node.attrs["padding"]
                                             for p in pair)):
            continue
        chain = _input_chain(node, axis, arrays, read_by)
        if chain:
            chains[node] = chain
    return chains


def _input_chain(layer, axis: int, arrays: dict, read_by: dict):
    """``(steps, scale, shift, x)``: the per-channel steps before ``layer``'s input (first
    to last), the chain's start ``x``, the input being ``x * scale + shift``; or None."""
    value, reader = layer.inputs[0], layer
    channels = value.shape[axis] if isinstance(value, Value) else None
    if not isinstance(channels, int):
        return None
    scale, shift = np.ones(channels), np.zeros(channels)
    steps = []
    while read_by.get(value, []) == [reader] and value.producer is not None:
        node = value.producer
        operands = [x for x in node.inputs if isinstance(x, Value) and x not in arrays]
        step = _step(node, operands[0], axis, channels, arrays) if len(operands) == 1 \
            else None
        if step is None:
            break
        factor, offset = step
        scale, shift = factor * scale, offset * scale + shift
        steps.insert(0, node)
        value, reader = operands[0], node
    return (steps, scale, shift, value) if steps else None


def fold_input_chains(graph: Graph, chains: dict, arrays: dict, report) -> Graph:
    """``graph`` with each chain of ``input_affine_chains`` folded into its layer's new
    constant weight and bias, the layer reading the chain's start. Dead nodes are
    dropped."""
    def fold(node, chain, w, bias):
        steps, scale, shift, x = chain
        if node.op is CONV2D:   # (input channel c of output o: its group's c-th)
            per = np.arange(w.shape[0]) // (w.shape[0] // node.attrs["groups"]) * w.shape[1]
            at = per[:, None] + np.arange(w.shape[1])
            s, t = scale[at][:, :, None, None], shift[at][:, :, None, None]
        else:
            s, t = scale[None, :], shift[None, :]
        out = node.outputs[0]
        item = (f"{len(steps)} per-channel steps + {node.op.name} %{out.name} -> "
                f"{node.op.name} with folded weight and bias")
        return (w * s, bias + (w * t).reshape(w.shape[0], -1).sum(1), x, out,
                ("input chains folded", item))
    return _fold(graph, chains, arrays, report, fold)
