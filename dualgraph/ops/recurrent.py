"""Fused recurrent-cell ops: the LSTM cell's gate arithmetic in one kernel.

An LSTM step is two matmuls and then a dozen small elementwise ops on the gates; run one
op at a time, their dispatch and temporaries cost more than the matmuls (torch fuses them
too). ``lstm_cell(gates, c)`` takes the pre-activations ``[i | f | g | o]`` and the old
cell state and returns ``(h', c')``. Its VJP is the fused ``lstm_cell_backward``, whose own
VJP is the autodiff of the same backward written with elementwise ops, so gradients of
gradients still work.
"""
from __future__ import annotations

import numpy as np

from .. import kernels
from ..dispatch import apply
from ..shapes import ShapedType, ShapeError
from . import elementwise as ew
from . import shape as shape_ops
from ._util import is_float
from .opdef import defop

__all__: list = []


def _gates(gates):
    """The activated gates as views: sigmoid(x) = (1 + tanh(x/2)) / 2 on the whole block
    (stable, and one pass per ufunc), then tanh for the cell gate."""
    n = gates.shape[-1] // 4
    act = np.multiply(gates, 0.5)
    np.tanh(act, out=act)
    act *= 0.5
    act += 0.5
    act[..., 2 * n:3 * n] = np.tanh(gates[..., 2 * n:3 * n])
    return act[..., :n], act[..., n:2 * n], act[..., 2 * n:3 * n], act[..., 3 * n:]


def _lstm_kernel(gates, c):
    """``(h', c', activated gates)``: the third output is kept for the backward only."""
    if kernels.enabled(gates, c):
        n = c.shape[-1]
        gates2, c2 = kernels.rows(gates, 4 * n), kernels.rows(c, n)
        h, c_new, acts = np.empty_like(c2), np.empty_like(c2), np.empty_like(gates2)
        kernels.activations.lstm_cell(gates2, c2, h, c_new, acts)
        return h.reshape(c.shape), c_new.reshape(c.shape), acts.reshape(gates.shape)
    i, f, g, o = acts = _gates(gates)
    c_new = f * c + i * g
    return o * np.tanh(c_new), c_new, np.concatenate(acts, axis=-1)


def _infer_lstm(gates, c):
    gs, cs = tuple(gates.shape), tuple(c.shape)
    if gs[:-1] != cs[:-1] or gs[-1] != 4 * cs[-1]:
        raise ShapeError(f"lstm_cell: gates of shape {gs} need 4x the last dim of the cell "
                         f"state, which has shape {cs}")
    if not is_float(gates.dtype) or gates.dtype != c.dtype:
        raise TypeError(f"lstm_cell: gates ({gates.dtype}) and state ({c.dtype}) must be "
                        "of one float dtype")
    return ShapedType(cs, c.dtype), ShapedType(cs, c.dtype), ShapedType(gs, c.dtype)


def _lstm_backward_kernel(gh, gc, gates, c, acts):
    n = acts.shape[-1] // 4
    if kernels.enabled(acts, gh, gc, c):
        c2 = kernels.rows(c, n)
        d_gates, dc = np.empty((c2.shape[0], 4 * n), c.dtype), np.empty_like(c2)
        kernels.activations.lstm_cell_backward(kernels.rows(gh, n), kernels.rows(gc, n), c2,
                                       kernels.rows(acts, 4 * n), d_gates, dc)
        return d_gates.reshape(acts.shape), dc.reshape(c.shape)
    i, f, g, o = (acts[..., k * n:(k + 1) * n] for k in range(4))
    c_new = f * c + i * g
    tc = np.tanh(c_new)
    dc_new = gc + gh * o * (1 - tc * tc)
    d_gates = np.concatenate([dc_new * g * i * (1 - i), dc_new * c * f * (1 - f),
                              dc_new * i * (1 - g * g), gh * tc * o * (1 - o)], axis=-1)
    return d_gates, dc_new * f


def _lstm_backward_composite(gh, gc, gates, c):
    """The same backward with elementwise ops: what the fused kernel computes."""
    i, f, g, o = shape_ops.chunk(gates, 4, -1)
    i, f, g, o = ew.sigmoid(i), ew.sigmoid(f), ew.tanh(g), ew.sigmoid(o)
    tc = ew.tanh(f * c + i * g)
    dc_new = gc + gh * o * (1 - tc * tc)
    d_gates = shape_ops.cat([dc_new * g * i * (1 - i), dc_new * c * f * (1 - f),
                             dc_new * i * (1 - g * g), gh * tc * o * (1 - o)], -1)
    return d_gates, dc_new * f


def _zeros_for(g, like):
    from .creation import zeros_like
    return zeros_like(like) if g is None else g


def _lstm_vjp(g, out, gates, c):
    gh, gc = _zeros_for(g[0], out[0]), _zeros_for(g[1], out[1])
    return apply(LSTM_CELL_BACKWARD, gh, gc, gates, c, out[2])


def _lstm_backward_vjp(g, out, gh, gc, gates, c, acts):
    """Second derivatives: autodiff of the elementwise form of the same backward (the
    activated gates are a cache of ``gates``, so they get no gradient of their own)."""
    from ..autograd.engine import grad
    from ..autograd.tape import enable_grad
    with enable_grad():
        leaves = [x.detach().requires_grad_() for x in (gh, gc, gates, c)]
        outs = _lstm_backward_composite(*leaves)
        cots = [_zeros_for(gi, o) for gi, o in zip(g, outs)]
        return grad(outs, leaves, cots, create_graph=True, allow_unused=True) + (None,)


LSTM_CELL = defop("lstm_cell", _lstm_kernel, _infer_lstm, vjp=_lstm_vjp, num_outputs=3,
                  differentiable_outputs=(0, 1), saves="io", onnx=None)
LSTM_CELL_BACKWARD = defop(
    "lstm_cell_backward", _lstm_backward_kernel,
    lambda gh, gc, gates, c, acts: (ShapedType(tuple(gates.shape), gates.dtype),
                                    ShapedType(tuple(c.shape), c.dtype)),
    vjp=_lstm_backward_vjp, num_outputs=2, saves="i", onnx=None)


def lstm_cell(gates, c):
    """``(h', c')`` of an LSTM step from gate pre-activations ``[i | f | g | o]`` (torch's
    gate order) and the cell state ``c``."""
    h, c_new, _ = apply(LSTM_CELL, gates, c)
    return h, c_new


METHODS: dict = {}
