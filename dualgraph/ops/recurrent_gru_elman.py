"""Whole GRU and Elman (tanh or relu) layers, one direction each, as one op each way.

As ``lstm_layer`` (recurrent_layer.py) does for the LSTM: ``nn.GRU`` and ``nn.RNN`` ran one
step op per time step, each paying an op's fixed cost (dispatch, the tape or a graph node,
checks, fresh arrays) around a product of a few rows. Here the recurrence runs in one
kernel through the drivers the LSTM's uses (``recur``, ``recur_back``): the hidden weight
laid out once per call, each step's product into one buffer and the cell's gate arithmetic
written straight into the stacked outputs; the backward walks the steps back with the hidden
product's gradient rows stacked, so the hidden weight's gradient is one GEMM over all steps
(two: the first step reads ``h0``), and the input projection's gradients are the ordinary
``linear`` VJP of ``xg = linear(x, W_ih, b_ih)`` over the whole sequence.

``gru_layer(xg (T, B, 3H), h0 (B, H), w_hh (3H, H), b_hh)`` (torch's gate order r, z, n; the
reset gate multiplies ``W_hn h + b_hn``, as torch does) returns ``y`` (T, B, H), ``h_n`` and,
for the backward only, the activations [r | z | new | hn] (T, B, 4H) of every step.
``rnn_layer(xg (T, B, H), h0, w_hh (H, H), b_hh, nonlinearity)`` returns ``y`` and ``h_n``;
its backward reads ``y`` alone (tanh' = 1 - y², relu' = [y > 0]). Each step computes what
the step ops compute (``gru_cell``; ``tanh``/``relu`` of ``xg + linear(h, w_hh, b_hh)``),
the decompositions, to float rounding.
"""
from __future__ import annotations

import numpy as np

from ..dispatch import apply
from ..shapes import ShapedType, ShapeError
from . import elementwise as ew
from . import shape as shape_ops
from ._util import empty_into, is_float, needs_grad, out_part
from .opdef import defop
from .recurrent import (GRU_CELL, _gru_backward_decomposition, _gru_gates, _gru_gates_backward,
                        _half_in_float32, _second_derivatives, _zeros_for)
from .recurrent_layer import _initial_or, _steps, hidden_weight_grads, recur, recur_back

__all__: list = []

_NONLINEARITIES = ("tanh", "relu")


def _check(name: str, gates: int, xg, h0, w_hh, *b_hh):
    """The shape and dtype checks of a layer op with ``gates`` blocks per hidden unit."""
    xs, hs, ws = (tuple(t.shape) for t in (xg, h0, w_hh))
    if (len(xs) != 3 or len(hs) != 2 or xs[1] != hs[0] or xs[2] != gates * hs[1]
            or ws != (gates * hs[1], hs[1])
            or (b_hh and tuple(b_hh[0].shape) != (gates * hs[1],))):
        bias = f", bias_hh {tuple(b_hh[0].shape)}" if b_hh else ""
        g = f"{gates}H" if gates > 1 else "H"
        raise ShapeError(f"{name}: input gates of shape {xs}, state {hs}, weight_hh {ws}"
                         f"{bias} don't fit: expected gates (T, B, {g}), state (B, H), "
                         f"weight_hh ({g}, H) and bias_hh ({g},)")
    dts = {t.dtype for t in (xg, h0, w_hh, *b_hh)}
    if len(dts) != 1 or not is_float(xg.dtype):
        raise TypeError(f"{name}: gates, state and weights must be of one float dtype, "
                        f"got {sorted(str(d) for d in dts)}")
    return ShapedType(xs[:2] + hs[1:], xg.dtype), ShapedType(hs, xg.dtype)


def _infer_backward(gy, gh_n, xg, h0, w_hh, *rest, need, **attrs):
    """The types of a layer backward's gradients of (xg, h0, w_hh, b_hh)."""
    dt = xg.dtype
    return tuple(ShapedType(tuple(t.shape), dt) for t in (xg, h0, w_hh)) + (
        ShapedType((tuple(w_hh.shape)[0],), dt),)


def _vjp_of(backward, saved: tuple):
    """A layer op's VJP: its ``backward`` op on the output gradients (zeros where none),
    the inputs and the saved outputs (indices ``saved``)."""
    def vjp(g, out, xg, h0, w_hh, *b_hh, **attrs):
        need = tuple(needs_grad(t) for t in (xg, h0, w_hh)) + (bool(b_hh) and
                                                               needs_grad(b_hh[0]),)
        gy, gh = _zeros_for(g[0], out[0]), _zeros_for(g[1], out[1])
        grads = apply(backward, gy, gh, xg, h0, w_hh, *b_hh, *(out[k] for k in saved),
                      need=need, **attrs)
        return tuple(gi if n else None for gi, n in zip(grads, need))[:3 + len(b_hh)]
    return vjp


def _second_derivatives_of(decomposition, saved: int):
    """A layer backward's VJP: autodiff of the first derivatives of the layer's
    ``decomposition`` (the saved outputs, the last ``saved`` inputs, are a cache)."""
    def vjp(gg, out, gy, gh_n, xg, h0, w_hh, *rest, need, **attrs):
        def layer(*inputs):
            return decomposition(*inputs, **attrs)[:2]
        seconds = _second_derivatives(layer, (gy, gh_n), (xg, h0, w_hh, *rest[:-saved]), gg,
                                      need)
        return seconds[:-1] + (None,) * saved
    return vjp


def _stacked(outputs, h, xg, h0):
    """``(y, h_n)`` of a decomposition's step outputs (zeros (0, B, H) for no steps)."""
    if not outputs:
        from .creation import zeros
        return zeros(0, *h0.shape, dtype=xg.dtype), h0
    return shape_ops.stack(outputs, 0), h


# -- GRU ------------------------------------------------------------------------------------
def _gru_layer_kernel(xg, h0, w_hh, *b_hh, reverse, out=None):
    """(``out``: ``fills_out``, the stacked results written into the arrays given.)"""
    _infer_gru_layer(xg, h0, w_hh, *b_hh, reverse=reverse)   # (its checks, as a graph's)
    length, batch, gates = xg.shape
    n = gates // 3
    y = empty_into(out_part(out, 0), (length, batch, n), xg.dtype)
    acts = empty_into(out_part(out, 2), (length, batch, 4 * n), xg.dtype)
    xg = np.ascontiguousarray(xg)

    def step(t, hg, h):
        if b_hh:
            hg += b_hh[0]
        _gru_gates(xg[t], hg, h, y[t], acts[t])
        return y[t]
    h = recur(h0, w_hh, length, reverse, step)
    return y, np.array(h), acts


def _infer_gru_layer(xg, h0, w_hh, *b_hh, reverse):
    y, h = _check("gru_layer", 3, xg, h0, w_hh, *b_hh)
    return y, h, ShapedType(tuple(y.shape)[:2] + (4 * tuple(h.shape)[1],), xg.dtype)


def _gru_layer_decomposition(xg, h0, w_hh, *b_hh, reverse):
    """The loop of ``gru_cell`` ops the layer stands for."""
    steps = shape_ops.unbind(xg, 0)
    y, acts = [None] * len(steps), [None] * len(steps)
    h = h0
    for t in _steps(len(steps), reverse):
        h, acts[t] = apply(GRU_CELL, steps[t], h, w_hh, *b_hh)
        y[t] = h
    if not steps:
        from .creation import zeros
        return (*_stacked(y, h, xg, h0), zeros(0, h0.shape[0], 4 * h0.shape[1], dtype=xg.dtype))
    return (*_stacked(y, h, xg, h0), shape_ops.stack(acts, 0))


def _gru_layer_backward_kernel(gy, gh_n, xg, h0, w_hh, *rest, need, reverse, out=None):
    """Gradients of (xg, h0, w_hh, b_hh) from those of (y, h_n); ``rest`` ends with the
    forward's saved y and activations. (``out``: ``fills_out``, the input gates' gradient
    written into the first array given.)"""
    y, acts = (np.ascontiguousarray(a) for a in rest[-2:])
    dt = acts.dtype
    d_xg = empty_into(out_part(out, 0), xg.shape, dt)
    d_hg = np.empty(xg.shape, dt)
    direct = np.empty(h0.shape, dt)
    h0 = np.ascontiguousarray(h0)

    def step(t, g):
        _gru_gates_backward(g, _initial_or(y, t, reverse, h0), acts[t], d_xg[t], d_hg[t],
                            direct)
        return d_hg[t], direct
    dh = recur_back(gy, gh_n, w_hh, reverse, step)
    dw, db = hidden_weight_grads(d_hg, h0, y, w_hh, need[2], need[3], reverse)
    return d_xg, dh, dw, db


def _gru_layer_backward_decomposition(gy, gh_n, xg, h0, w_hh, *rest, need, reverse):
    """Step by step with the cell backward's decomposition (ordinary ops)."""
    from .creation import zeros_like
    y, acts = rest[-2:]
    b_hh = rest[:-2]
    d_xg, dw, db = [None] * xg.shape[0], zeros_like(w_hh), zeros_like(w_hh[:, 0])
    dh = gh_n
    for t in _steps(xg.shape[0], not reverse):
        d_xg[t], dh, dw_t, db_t = _gru_backward_decomposition(
            gy[t] + dh, xg[t], _initial_or(y, t, reverse, h0), w_hh, *b_hh, acts[t],
            need=(True,) * 4)
        dw, db = dw + dw_t, db + db_t
    stacked = shape_ops.stack(d_xg, 0) if d_xg else zeros_like(xg)
    return (stacked, dh, dw if need[2] else zeros_like(w_hh),
            db if need[3] else zeros_like(w_hh[:, 0]))


# -- Elman: tanh or relu of the summed projections --------------------------------------------
def _rnn_layer_kernel(xg, h0, w_hh, *b_hh, nonlinearity, reverse, out=None):
    """(``out``: ``fills_out``, the stacked output written into the array given.)"""
    _infer_rnn_layer(xg, h0, w_hh, *b_hh, nonlinearity=nonlinearity, reverse=reverse)
    y = empty_into(out_part(out, 0), xg.shape, xg.dtype)

    def step(t, hg, h):
        hg += xg[t]
        if b_hh:
            hg += b_hh[0]
        if nonlinearity == "tanh":
            return np.tanh(hg, out=y[t])
        return np.maximum(hg, 0, out=y[t])
    h = recur(h0, w_hh, xg.shape[0], reverse, step)
    return y, np.array(h)


def _infer_rnn_layer(xg, h0, w_hh, *b_hh, nonlinearity, reverse):
    if nonlinearity not in _NONLINEARITIES:
        raise ValueError(f"rnn_layer: nonlinearity must be 'tanh' or 'relu', got "
                         f"{nonlinearity!r}")
    return _check("rnn_layer", 1, xg, h0, w_hh, *b_hh)


def _rnn_step(xg, h, w_hh, *b_hh, nonlinearity):
    from .linalg import linear
    pre = xg + linear(h, w_hh, *b_hh)
    return ew.tanh(pre) if nonlinearity == "tanh" else ew.relu(pre)


def _rnn_layer_decomposition(xg, h0, w_hh, *b_hh, nonlinearity, reverse):
    """The loop of steps ``act(xg[t] + linear(h, w_hh, b_hh))`` the layer stands for."""
    steps = shape_ops.unbind(xg, 0)
    y = [None] * len(steps)
    h = h0
    for t in _steps(len(steps), reverse):
        h = y[t] = _rnn_step(steps[t], h, w_hh, *b_hh, nonlinearity=nonlinearity)
    return _stacked(y, h, xg, h0)


def _rnn_layer_backward_kernel(gy, gh_n, xg, h0, w_hh, *rest, need, nonlinearity, reverse,
                               out=None):
    """Gradients of (xg, h0, w_hh, b_hh) from those of (y, h_n); ``rest`` ends with the
    forward's y. (``out``: ``fills_out``, the pre-activations' gradient, which is the input
    gates', written into the first array given.)"""
    y = rest[-1]
    d_pre = empty_into(out_part(out, 0), xg.shape, y.dtype)

    def step(t, g):
        if nonlinearity == "tanh":   # g * (1 - y²)
            np.multiply(y[t], y[t], out=d_pre[t])
            np.subtract(1, d_pre[t], out=d_pre[t])
            d_pre[t] *= g
        else:
            np.multiply(g, y[t] > 0, out=d_pre[t])
        return d_pre[t], None
    dh = recur_back(gy, gh_n, w_hh, reverse, step)
    dw, db = hidden_weight_grads(d_pre, np.asarray(h0), y, w_hh, need[2], need[3], reverse)
    return d_pre, dh, dw, db


def _rnn_layer_backward_decomposition(gy, gh_n, xg, h0, w_hh, *rest, need, nonlinearity,
                                      reverse):
    """Step by step with ordinary ops: the pre-activation's gradient from the saved output,
    then the hidden product's gradients."""
    from .creation import zeros_like
    y = rest[-1]
    d_pre, dw, db = [None] * xg.shape[0], zeros_like(w_hh), zeros_like(w_hh[:, 0])
    dh = gh_n
    for t in _steps(xg.shape[0], not reverse):
        g = gy[t] + dh
        d = g * (1 - y[t] * y[t]) if nonlinearity == "tanh" else g * ew.sign(y[t])
        d_pre[t], dh = d, d @ w_hh
        dw, db = dw + d.t() @ _initial_or(y, t, reverse, h0), db + d.sum(0)
    stacked = shape_ops.stack(d_pre, 0) if d_pre else zeros_like(xg)
    return (stacked, dh, dw if need[2] else zeros_like(w_hh),
            db if need[3] else zeros_like(w_hh[:, 0]))


def _layer_ops(name: str, kernel, infer, decomposition, backward_kernel, backward_decomposition,
               attrs: tuple, saved: tuple, outputs: int):
    """A layer op with ``outputs`` outputs and its compiler-only backward (whose VJP is the
    second derivatives of the decomposition); ``saved``: the outputs the backward reads
    after the inputs."""
    backward = defop(f"{name}_backward", _half_in_float32(backward_kernel), _infer_backward,
                     compiler_only=True, decomposition=backward_decomposition,
                     vjp=_second_derivatives_of(decomposition, len(saved)),
                     attrs=("need",) + attrs, num_outputs=4, saves="i", onnx=None,
                     fills_out=True)
    forward = defop(name, _half_in_float32(kernel), infer, vjp=_vjp_of(backward, saved),
                    attrs=attrs, num_outputs=outputs, decomposition=decomposition,
                    differentiable_outputs=(0, 1), saves="io", saved_outputs=saved,
                    autocast="lower", fills_out=True)
    return forward, backward


GRU_LAYER, GRU_LAYER_BACKWARD = _layer_ops(
    "gru_layer", _gru_layer_kernel, _infer_gru_layer, _gru_layer_decomposition,
    _gru_layer_backward_kernel, _gru_layer_backward_decomposition, ("reverse",), (0, 2), 3)
RNN_LAYER, RNN_LAYER_BACKWARD = _layer_ops(
    "rnn_layer", _rnn_layer_kernel, _infer_rnn_layer, _rnn_layer_decomposition,
    _rnn_layer_backward_kernel, _rnn_layer_backward_decomposition,
    ("nonlinearity", "reverse"), (0,), 2)


def gru_layer(xg, h0, w_hh, b_hh=None, reverse: bool = False):
    """``(y, h_n)`` of a GRU layer's direction over the whole sequence from the input's
    gate pre-activations ``xg = W_ih x + b_ih`` (T, B, 3H), the initial state ``h0``
    (B, H) and the hidden weight and bias (torch's gate order r, z, n).

    >>> import dualgraph as dg
    >>> y, h = gru_layer(dg.zeros(5, 2, 6), dg.zeros(2, 2), dg.zeros(6, 2))
    >>> tuple(y.shape), tuple(h.shape)
    ((5, 2, 2), (2, 2))
    """
    y, h_n, _ = apply(GRU_LAYER, xg, h0, w_hh, *(() if b_hh is None else (b_hh,)),
                      reverse=reverse)
    return y, h_n


def rnn_layer(xg, h0, w_hh, b_hh=None, nonlinearity: str = "tanh", reverse: bool = False):
    """``(y, h_n)`` of an Elman layer's direction, ``h_t = act(xg[t] + W_hh h_(t-1) +
    b_hh)`` with ``act`` tanh or relu, from the input's projection ``xg = W_ih x + b_ih``
    (T, B, H), the initial state ``h0`` (B, H) and the hidden weight and bias.

    >>> import dualgraph as dg
    >>> y, h = rnn_layer(dg.ones(5, 2, 3), dg.zeros(2, 3), dg.zeros(3, 3), nonlinearity="relu")
    >>> float(h.sum())
    6.0
    """
    return tuple(apply(RNN_LAYER, xg, h0, w_hh, *(() if b_hh is None else (b_hh,)),
                       nonlinearity=nonlinearity, reverse=reverse))
