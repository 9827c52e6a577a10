"""Fused recurrent-cell ops: the LSTM and GRU cells' gate arithmetic in one kernel each.

An LSTM step is two matmuls and then a dozen small elementwise ops on the gates; run one
op at a time, their dispatch and temporaries cost more than the matmuls (torch fuses them
too). ``lstm_cell(xg, h, c, w_hh, b_hh)`` takes the input's gate pre-activations
``[i | f | g | o]``, the state and the hidden weights, and returns ``(h', c')``: the hidden
projection is inside, so a step is one node forward and one backward. Its VJP is the fused
``lstm_cell_backward``, whose own VJP is the autodiff of the same step written with matmul
and elementwise ops, so gradients of gradients still work.
"""
from __future__ import annotations

import numpy as np

from .. import kernels
from ..dispatch import apply
from ..shapes import ShapedType, ShapeError
from . import elementwise as ew
from . import shape as shape_ops
from ._util import column_sum, is_float, needs_grad, zeros_view
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


def _cell(gates, c):
    """``(h', c', activated gates)`` from the gate pre-activations and the cell state, in
    NumPy (the Numba loop's formulas: ``_lstm_kernel``)."""
    i, f, g, o = acts = _gates(gates)
    c_new = f * c + i * g
    return o * np.tanh(c_new), c_new, np.concatenate(acts, axis=-1)


def _half_in_float32(kernel):
    """``kernel`` for operands of one half-precision dtype (an autocast step): run in
    float32 and the results rounded back, as matmul's kernel does (NumPy has no
    half-precision GEMM, and the cell's loops are float32), so they have the dtype the
    shape rule promises."""
    def run(*arrays, **attrs):
        dts = {a.dtype for a in arrays}
        low = dts.pop() if len(dts) == 1 else None
        if low is None or not is_float(low) or low.itemsize != 2:
            return kernel(*arrays, **attrs)
        wide = (a.astype(np.float32) for a in arrays)
        return tuple(out.astype(low) for out in kernel(*wide, **attrs))
    return run


def _lstm_kernel(xg, h, c, w_hh, *b_hh):
    """``(h', c', activated gates)``: the third output is kept for the backward only."""
    _infer_lstm(xg, h, c, w_hh, *b_hh)   # (its dtype and shape checks, as a graph's)
    n = c.shape[-1]
    hg = np.matmul(h.reshape(-1, h.shape[-1]), w_hh.T)
    if kernels.enabled(hg, xg, c, min_elements=0):   # (NumPy's form: a dozen calls)
        c2 = kernels.rows(c, n)
        bias = np.ascontiguousarray(b_hh[0]) if b_hh else np.zeros(4 * n, c.dtype)
        h_new, c_new, acts = np.empty_like(c2), np.empty_like(c2), np.empty_like(hg)
        kernels.activations.lstm_cell(hg, kernels.rows(xg, 4 * n), bias, c2, h_new, c_new,
                                      acts)
        return h_new.reshape(c.shape), c_new.reshape(c.shape), acts.reshape(xg.shape)
    gates = hg.reshape(xg.shape)
    gates += xg
    if b_hh:
        gates += b_hh[0]
    return _cell(gates, c)


def _infer_lstm(xg, h, c, w_hh, *b_hh):
    xs, hs, cs, ws = (tuple(t.shape) for t in (xg, h, c, w_hh))
    if xs[:-1] != cs[:-1] or xs[-1] != 4 * cs[-1] or hs[:-1] != cs[:-1]:
        raise ShapeError(f"lstm_cell: input gates of shape {xs}, hidden state {hs} and cell "
                         f"state {cs} don't fit: the cell state must be (..., n), the gates "
                         "(..., 4n), the hidden state (..., p) with the same leading dims")
    want_w, want_b = (4 * cs[-1], hs[-1]), (4 * cs[-1],)
    if ws != want_w or (b_hh and tuple(b_hh[0].shape) != want_b):
        raise ShapeError(f"lstm_cell: weight_hh of shape {ws} (and bias_hh) don't fit a "
                         f"hidden state of shape {hs} and cell state {cs}: expected {want_w} "
                         f"and {want_b}")
    dts = {t.dtype for t in (xg, h, c, w_hh, *b_hh)}
    if len(dts) != 1 or not is_float(xg.dtype):
        raise TypeError(f"lstm_cell: gates, states and weights must be of one float dtype, "
                        f"got {sorted(str(d) for d in dts)}")
    return ShapedType(cs, c.dtype), ShapedType(cs, c.dtype), ShapedType(xs, c.dtype)


def _cell_backward(gh, gc, c, acts):
    """The gradients of the gate pre-activations and of the old cell state."""
    n = acts.shape[-1] // 4
    if kernels.enabled(acts, gh, gc, c, min_elements=0):
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


def _lstm_backward_kernel(gh, gc, xg, h, c, w_hh, *rest, need):
    """Gradients of (input gates, h, c, weight_hh, bias_hh), each only if ``need`` says so
    (a free broadcast zero stands in for the others; the gates' and c's are by-products)."""
    acts = rest[-1]
    d_gates, dc = _cell_backward(gh, gc, c, acts)
    n = c.shape[-1]
    d2 = d_gates.reshape(-1, 4 * n)
    dh = (d2 @ w_hh).reshape(h.shape) if need[1] else zeros_view(h.shape, c.dtype)
    dw = d2.T @ h.reshape(-1, h.shape[-1]) if need[3] else zeros_view(w_hh.shape, c.dtype)
    db = column_sum(d2) if need[4] else zeros_view((4 * n,), c.dtype)
    return d_gates, dh, dc, dw, db


def _infer_lstm_backward(gh, gc, xg, h, c, w_hh, *rest, need):
    return tuple(ShapedType(shape, c.dtype) for shape in
                 (tuple(xg.shape), tuple(h.shape), tuple(c.shape), tuple(w_hh.shape),
                  (tuple(w_hh.shape)[0],)))


def _lstm_composite(xg, h, c, w_hh, b_hh=None):
    """The same step from linear and elementwise ops, ``(h', c', activated gates)`` as the
    kernel: what the double backward differentiates."""
    from .linalg import linear
    gates = xg + linear(h, w_hh, b_hh)
    i, f, g, o = shape_ops.chunk(gates, 4, -1)
    i, f, g, o = ew.sigmoid(i), ew.sigmoid(f), ew.tanh(g), ew.sigmoid(o)
    c_new = f * c + i * g
    return o * ew.tanh(c_new), c_new, shape_ops.cat([i, f, g, o], -1)


def _zeros_for(g, like):
    from .creation import zeros_like
    return zeros_like(like) if g is None else g


def _lstm_vjp(g, out, xg, h, c, w_hh, *b_hh):
    need = tuple(needs_grad(t) for t in (xg, h, c, w_hh)) + (bool(b_hh) and
                                                              needs_grad(b_hh[0]),)
    gh, gc = _zeros_for(g[0], out[0]), _zeros_for(g[1], out[1])
    grads = apply(LSTM_CELL_BACKWARD, gh, gc, xg, h, c, w_hh, *b_hh, out[2], need=need)
    return tuple(gi if n else None for gi, n in zip(grads, need))[:4 + len(b_hh)]


def _lstm_backward_decomposition(gh, gc, xg, h, c, w_hh, *rest, need):
    """:func:`_cell_backward` from elementwise ops on the saved activated gates (the last
    input), then the hidden projection's gradients (zeros where ``need`` leaves them out,
    as the kernel)."""
    from .creation import zeros_like
    i, f, g, o = shape_ops.chunk(rest[-1], 4, -1)
    tc = ew.tanh(f * c + i * g)
    dc_new = gc + gh * o * (1 - tc * tc)
    d_gates = shape_ops.cat([dc_new * g * i * (1 - i), dc_new * c * f * (1 - f),
                             dc_new * i * (1 - g * g), gh * tc * o * (1 - o)], -1)
    d2 = shape_ops.reshape(d_gates, (-1, d_gates.shape[-1]))
    dh = shape_ops.reshape(d2 @ w_hh, tuple(h.shape))
    dw = d2.t() @ shape_ops.reshape(h, (-1, h.shape[-1]))
    db = d2.sum(0)
    return (d_gates, dh if need[1] else zeros_like(dh), dc_new * f,
            dw if need[3] else zeros_like(dw), db if need[4] else zeros_like(db))


def _second_derivatives(composite, cotangents, inputs, gg, need):
    """A fused cell backward's VJP: autodiff of the first derivatives of ``composite``
    (the cell written with linear and elementwise ops; its first outputs are the ones the
    ``cotangents`` are for) at ``inputs``; ``gg`` are the cotangents of the backward's
    outputs, ``need`` which of them it computed. The saved activations (the backward's last
    input) are a cache, so they get no gradient of their own."""
    from ..autograd.engine import grad
    from ..autograd.tape import enable_grad
    with enable_grad():
        cots = [t.detach().requires_grad_() for t in cotangents]
        ins = [t.detach().requires_grad_() for t in inputs]
        outs = composite(*ins)[:len(cots)]
        firsts = grad(list(outs), ins, cots, create_graph=True, allow_unused=True)
        pairs = [(f, cot) for f, cot, n in zip(firsts, gg, need)
                 if n and cot is not None and f is not None]
        if not pairs:
            return (None,) * (len(cots) + len(ins) + 1)
        seconds = grad([f for f, _ in pairs], cots + ins, [cot for _, cot in pairs],
                       create_graph=True, allow_unused=True)
    return tuple(seconds) + (None,)


def _lstm_backward_vjp(gg, out, gh, gc, xg, h, c, w_hh, *rest, need):
    """Second derivatives: autodiff of the first derivatives of :func:`_lstm_composite`."""
    return _second_derivatives(_lstm_composite, (gh, gc), (xg, h, c, w_hh, *rest[:-1]), gg,
                               need)


def _onnx_lstm_cell(e, node):
    """One LSTM step from its input gates ``xg``: gates = xg + h W_hh^T + b, split as
    torch orders them (input, forget, cell, output). The third output, the activated
    gates the backward reads, has no use in an inference model."""
    h, c = e.input(1), e.input(2)
    gates = e.op("Add", [e.input(0), e.op("MatMul", [h, e.op("Transpose", [e.input(3)])])])
    if len(node.inputs) > 4 and node.inputs[4] is not None:
        gates = e.op("Add", [gates, e.input(4)])
    i, f, g, o = e.op("Split", [gates], outputs=4, axis=-1,   # (num_outputs: opset 18)
                      num_outputs=4 if e.opset >= 18 else None)
    c_new = e.op("Add", [e.op("Mul", [e.op("Sigmoid", [f]), c]),
                         e.op("Mul", [e.op("Sigmoid", [i]), e.op("Tanh", [g])])])
    h_new = e.op("Mul", [e.op("Sigmoid", [o]), e.op("Tanh", [c_new])])
    return [h_new, c_new, None]


LSTM_CELL = defop("lstm_cell", _half_in_float32(_lstm_kernel), _infer_lstm, vjp=_lstm_vjp,
                  num_outputs=3, decomposition=_lstm_composite,
                  differentiable_outputs=(0, 1), saves="io",
                  onnx=_onnx_lstm_cell,
                  autocast="lower")


def _cell_backward_op(name, kernel, infer, decomposition, vjp, num_outputs):
    """A fused cell's backward op: compiler-only (the cell's VJP makes it), its ``need``
    attr the gradients to compute, run in float32 for half-precision operands."""
    return defop(name, _half_in_float32(kernel), infer, compiler_only=True,
                 decomposition=decomposition, vjp=vjp, attrs=("need",),
                 num_outputs=num_outputs, saves="i", onnx=None)


LSTM_CELL_BACKWARD = _cell_backward_op("lstm_cell_backward", _lstm_backward_kernel,
                                       _infer_lstm_backward, _lstm_backward_decomposition,
                                       _lstm_backward_vjp, 5)


def lstm_cell(xg, h, c, w_hh, b_hh=None):
    """``(h', c')`` of an LSTM step (torch's gate order i, f, g, o) from the input's gate
    pre-activations ``xg = W_ih x + b_ih``, the state ``(h, c)`` and the hidden-to-hidden
    weight and bias: the hidden projection runs inside the op, so a step is one node."""
    h_new, c_new, _ = apply(LSTM_CELL, xg, h, c, w_hh, *(() if b_hh is None else (b_hh,)))
    return h_new, c_new


# -- the GRU step (torch's gate order r, z, n), as the LSTM's: one node each way ------------
def _gru_gates(xg, hg, h, h_out, acts_out):
    """One GRU step's gate arithmetic on rows (B, 3n) of the input gates and the hidden
    projection (its bias included) and the state ``h`` (B, n): ``h'`` into ``h_out`` and
    the activations [r | z | new | hn] into ``acts_out`` (the layer op's steps run it too)."""
    n = h.shape[-1]
    if kernels.enabled(xg, h, min_elements=1):   # (NumPy's form: a dozen calls, as the LSTM's)
        kernels.activations.gru_cell(xg, hg, h, h_out, acts_out)
        return
    rz = _sigmoid(xg[:, :2 * n] + hg[:, :2 * n])
    r, z, hn = rz[:, :n], rz[:, n:], hg[:, 2 * n:]
    new = np.tanh(xg[:, 2 * n:] + r * hn)
    acts_out[:] = np.concatenate([rz, new, hn], axis=-1)
    h_out[:] = new + z * (h - new)


def _gru_kernel(xg, h, w_hh, *b_hh):
    """``(h', activations [r | z | n | hn])``: hn is the hidden projection's n block (the
    reset gate multiplies it, bias included, as torch does); the second output is kept
    for the backward only."""
    _infer_gru(xg, h, w_hh, *b_hh)   # (its dtype and shape checks, as a graph's)
    n = h.shape[-1]
    hg = np.matmul(h.reshape(-1, n), w_hh.T)
    if b_hh:
        hg += b_hh[0]
    h2 = kernels.rows(h, n)
    out, acts = np.empty_like(h2), np.empty((len(h2), 4 * n), h.dtype)
    _gru_gates(kernels.rows(xg, 3 * n), hg, h2, out, acts)
    return out.reshape(h.shape), acts.reshape(h.shape[:-1] + (4 * n,))


def _infer_gru(xg, h, w_hh, *b_hh):
    xs, hs, ws = tuple(xg.shape), tuple(h.shape), tuple(w_hh.shape)
    if xs[:-1] != hs[:-1] or xs[-1] != 3 * hs[-1] or ws != (3 * hs[-1], hs[-1]) or (
            b_hh and tuple(b_hh[0].shape) != (3 * hs[-1],)):
        raise ShapeError(f"gru_cell: input gates of shape {xs}, hidden state {hs}, "
                         f"weight_hh {ws} (and bias_hh) don't fit: the state must be "
                         "(..., n), the gates (..., 3n) with the same leading dims, the "
                         "weight (3n, n) and the bias (3n,)")
    dts = {t.dtype for t in (xg, h, w_hh, *b_hh)}
    if len(dts) != 1 or not is_float(xg.dtype):
        raise TypeError(f"gru_cell: gates, state and weights must be of one float dtype, "
                        f"got {sorted(str(d) for d in dts)}")
    return ShapedType(hs, h.dtype), ShapedType(hs[:-1] + (4 * hs[-1],), h.dtype)


def _gru_gates_backward(gh, h, acts, d_xg_out, d_hg_out, dh_out):
    """From rows of the gradient of ``h'``, the state ``h`` and the saved activations:
    the gradients of the input gates and of the hidden projection (r, z, n blocks) and
    ``h``'s direct part ``gh * z`` (the projection's share is the caller's product)."""
    n = h.shape[-1]
    if kernels.enabled(acts, gh, h, min_elements=1):
        kernels.activations.gru_cell_backward(gh, h, acts, d_xg_out, d_hg_out, dh_out)
        return
    r, z, new, hn = (acts[:, k * n:(k + 1) * n] for k in range(4))
    d_new = gh * (1 - z) * (1 - new * new)
    d_r = d_new * hn * r * (1 - r)
    d_z = gh * (h - new) * z * (1 - z)
    d_xg_out[:] = np.concatenate([d_r, d_z, d_new], axis=-1)
    d_hg_out[:] = np.concatenate([d_r, d_z, d_new * r], axis=-1)
    dh_out[:] = gh * z


def _gru_backward_kernel(gh, xg, h, w_hh, *rest, need):
    """Gradients of (input gates, h, weight_hh, bias_hh), each only if ``need`` says so (a
    free broadcast zero stands in for the others; the gates' is a by-product)."""
    n = h.shape[-1]
    h2 = kernels.rows(h, n)
    d_xg, d2 = (np.empty((len(h2), 3 * n), h.dtype) for _ in range(2))
    dh = np.empty_like(h2)
    _gru_gates_backward(kernels.rows(gh, n), h2, kernels.rows(rest[-1], 4 * n), d_xg, d2, dh)
    dh = dh.reshape(h.shape) + (d2 @ w_hh).reshape(h.shape) if need[1] else zeros_view(
        h.shape, h.dtype)
    dw = d2.T @ h2 if need[2] else zeros_view(w_hh.shape, h.dtype)
    db = column_sum(d2) if need[3] else zeros_view((3 * n,), h.dtype)
    return d_xg.reshape(xg.shape), dh, dw, db


def _infer_gru_backward(gh, xg, h, w_hh, *rest, need):
    return tuple(ShapedType(shape, h.dtype) for shape in
                 (tuple(xg.shape), tuple(h.shape), tuple(w_hh.shape), (tuple(w_hh.shape)[0],)))


def _gru_composite(xg, h, w_hh, b_hh=None):
    """The same step from linear and elementwise ops, ``(h', activations)`` as the kernel:
    what the double backward differentiates."""
    from .linalg import linear
    x_r, x_z, x_n = shape_ops.chunk(xg, 3, -1)
    h_r, h_z, h_n = shape_ops.chunk(linear(h, w_hh, b_hh), 3, -1)
    r, z = ew.sigmoid(x_r + h_r), ew.sigmoid(x_z + h_z)
    new = ew.tanh(x_n + r * h_n)
    return new + z * (h - new), shape_ops.cat([r, z, new, h_n], -1)


def _gru_vjp(g, out, xg, h, w_hh, *b_hh):
    need = tuple(needs_grad(t) for t in (xg, h, w_hh)) + (bool(b_hh) and needs_grad(b_hh[0]),)
    grads = apply(GRU_CELL_BACKWARD, _zeros_for(g[0], out[0]), xg, h, w_hh, *b_hh, out[1],
                  need=need)
    return tuple(gi if n else None for gi, n in zip(grads, need))[:3 + len(b_hh)]


def _gru_backward_decomposition(gh, xg, h, w_hh, *rest, need):
    """:func:`_gru_backward_kernel` from elementwise and matrix ops on the saved
    activations (zeros where ``need`` leaves a gradient out, as the kernel)."""
    from .creation import zeros_like
    r, z, new, hn = shape_ops.chunk(rest[-1], 4, -1)
    d_new = gh * (1 - z) * (1 - new * new)
    d_r, d_z = d_new * hn * r * (1 - r), gh * (h - new) * z * (1 - z)
    d2 = shape_ops.cat([d_r, d_z, d_new * r], -1)
    d2 = shape_ops.reshape(d2, (-1, d2.shape[-1]))
    dh = gh * z + shape_ops.reshape(d2 @ w_hh, tuple(h.shape))
    dw = d2.t() @ shape_ops.reshape(h, (-1, h.shape[-1]))
    db = d2.sum(0)
    return (shape_ops.cat([d_r, d_z, d_new], -1), dh if need[1] else zeros_like(dh),
            dw if need[2] else zeros_like(dw), db if need[3] else zeros_like(db))


def _gru_backward_vjp(gg, out, gh, xg, h, w_hh, *rest, need):
    """Second derivatives: autodiff of the first derivatives of :func:`_gru_composite`."""
    return _second_derivatives(_gru_composite, (gh,), (xg, h, w_hh, *rest[:-1]), gg, need)


def _onnx_gru_cell(e, node):
    """One GRU step from its input gates ``xg``: the hidden projection (bias included)
    split as torch orders the gates (reset, update, new); the second output, the
    activations the backward reads, has no use in an inference model."""
    h = e.input(1)
    hg = e.op("MatMul", [h, e.op("Transpose", [e.input(2)])])
    if len(node.inputs) > 3 and node.inputs[3] is not None:
        hg = e.op("Add", [hg, e.input(3)])
    split = {"outputs": 3, "axis": -1, "num_outputs": 3 if e.opset >= 18 else None}
    x_r, x_z, x_n = e.op("Split", [e.input(0)], **split)
    h_r, h_z, h_n = e.op("Split", [hg], **split)
    r = e.op("Sigmoid", [e.op("Add", [x_r, h_r])])
    z = e.op("Sigmoid", [e.op("Add", [x_z, h_z])])
    new = e.op("Tanh", [e.op("Add", [x_n, e.op("Mul", [r, h_n])])])
    return [e.op("Add", [new, e.op("Mul", [z, e.op("Sub", [h, new])])]), None]


GRU_CELL = defop("gru_cell", _half_in_float32(_gru_kernel), _infer_gru, vjp=_gru_vjp,
                 num_outputs=2, decomposition=_gru_composite, differentiable_outputs=(0,),
                 saves="io",
                 onnx=_onnx_gru_cell,
                 autocast="lower")
GRU_CELL_BACKWARD = _cell_backward_op("gru_cell_backward", _gru_backward_kernel,
                                      _infer_gru_backward, _gru_backward_decomposition,
                                      _gru_backward_vjp, 4)


def gru_cell(xg, h, w_hh, b_hh=None):
    """``h'`` of a GRU step (torch's gate order r, z, n) from the input's gate
    pre-activations ``xg = W_ih x + b_ih``, the state ``h`` and the hidden-to-hidden weight
    and bias: one node a step, as :func:`lstm_cell`."""
    h_new, _ = apply(GRU_CELL, xg, h, w_hh, *(() if b_hh is None else (b_hh,)))
    return h_new


METHODS: dict = {}


# -- a whole recurrent layer as one op (what the ONNX export writes as LSTM, GRU or RNN) -----
# The layers in nn/rnn.py run step by step (a node per step once traced); while exporting to
# ONNX they run each layer as one ``rnn_sequence`` node instead, which ONNX's LSTM/GRU/RNN op
# computes exactly. Its operands follow ONNX's layout: x (T, B, F); per direction stacked
# w (D, G*H, F), r (D, G*H, H), b (D, 2*G*H) (input then hidden biases), gates in ONNX's
# order (LSTM i, o, f, c; GRU z, r, h; the layer reorders torch's); h0 and, for LSTM, c0
# (D, B, H), zeros where left out. Outputs y (T, D, B, H), h_n and c_n (D, B, H; for GRU and
# RNN c_n is h_n).
# Direction 1 of two runs backwards in time. GRU applies its hidden weights before the
# reset gate (ONNX's linear_before_reset=1), as torch does.
_SEQ_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def _sigmoid(x):
    return 0.5 * (1 + np.tanh(0.5 * x))


def _sequence_kernel(x, w, r, b, *states, mode):
    _infer_sequence(x, w, r, b, *states, mode=mode)   # (its checks, as a graph's)
    directions, hidden = r.shape[0], r.shape[-1]
    gh = _SEQ_GATES[mode] * hidden
    if not states:
        zeros = np.zeros((directions, x.shape[1], hidden), x.dtype)
        states = (zeros, zeros) if mode == "LSTM" else (zeros,)
    h0, c0 = states[0], states[1:]
    y = np.empty((x.shape[0], directions) + h0.shape[1:], x.dtype)
    h_n, c_n = np.empty_like(h0), np.empty_like(h0)
    for d in range(directions):
        xs = x @ w[d].T + b[d, :gh]
        h, c = h0[d], (c0[0][d] if c0 else None)
        for t in (range(x.shape[0] - 1, -1, -1) if d == 1 else range(x.shape[0])):
            hg = h @ r[d].T + b[d, gh:]
            if mode == "LSTM":
                i, o, f, g = np.split(xs[t] + hg, 4, -1)
                c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
                h = _sigmoid(o) * np.tanh(c)
            elif mode == "GRU":
                (xz, xr, xn), (hz, hr, hn) = np.split(xs[t], 3, -1), np.split(hg, 3, -1)
                z, n = _sigmoid(xz + hz), np.tanh(xn + _sigmoid(xr + hr) * hn)
                h = (1 - z) * n + z * h
            else:
                h = xs[t] + hg
                h = np.tanh(h) if mode == "RNN_TANH" else np.maximum(h, 0)
            y[t, d] = h
        h_n[d] = h
        c_n[d] = h if c is None else c
    return y, h_n, c_n


def _infer_sequence(x, w, r, b, *states, mode):
    if mode not in _SEQ_GATES:
        raise ValueError(f"rnn_sequence: mode must be one of {sorted(_SEQ_GATES)}, got {mode}")
    if states and len(states) != (2 if mode == "LSTM" else 1):
        raise ShapeError("rnn_sequence: an LSTM takes h0 and c0, the others h0 only")
    directions, hidden = (r.shape[0], r.shape[-1]) if r.ndim == 3 else (0, 0)
    gh = _SEQ_GATES[mode] * hidden
    shape = (directions, x.shape[1] if x.ndim == 3 else 0, hidden)
    want = {"x": (x, ("T", "B", "F")), "w": (w, (directions, gh, x.shape[-1])),
            "r": (r, (directions, gh, hidden)), "b": (b, (directions, 2 * gh))}
    want.update({f"state {k}": (s, shape) for k, s in enumerate(states)})
    for name, (t, dims) in want.items():
        if (t.ndim != len(dims) or t.dtype != x.dtype or directions not in (1, 2)
                or any(isinstance(d, int) and d != n for d, n in zip(dims, t.shape))):
            raise ShapeError(f"rnn_sequence ({mode}): {name} has shape {tuple(t.shape)} and "
                             f"dtype {t.dtype}; it must be {dims} of {x.dtype} (x "
                             f"{tuple(x.shape)}, r {tuple(r.shape)}, 1 or 2 directions, "
                             f"hidden size {hidden} > 0)")
    if hidden == 0:
        raise ShapeError(f"rnn_sequence ({mode}): the hidden size (r {tuple(r.shape)}) is 0")
    state = ShapedType(shape, x.dtype)
    return ShapedType((x.shape[0],) + shape, x.dtype), state, state


def _onnx_sequence(e, node):
    mode = node.attrs["mode"]
    directions, _, hidden = node.inputs[2].shape
    attrs = dict(hidden_size=int(hidden),
                 direction="bidirectional" if directions == 2 else "forward")
    inputs = [e.input(k) for k in range(len(node.inputs))]
    inputs[4:4] = [""]   # (no sequence_lens: every sequence is T long)
    if mode == "LSTM":
        op_type = "LSTM"
    elif mode == "GRU":
        op_type, attrs["linear_before_reset"] = "GRU", 1
    else:
        op_type = "RNN"
        attrs["activations"] = ["Tanh" if mode == "RNN_TANH" else "Relu"] * directions
    outs = e.outputs(op_type, inputs, 3 if mode == "LSTM" else 2, **attrs)
    return outs if mode == "LSTM" else outs + [e.same(outs[1])]   # (c_n is h_n)


RNN_SEQUENCE = defop("rnn_sequence", _sequence_kernel, _infer_sequence, attrs=("mode",),
                     num_outputs=3, onnx=_onnx_sequence)


def rnn_sequence(x, w, r, b, h0=None, c0=None, mode: str = "LSTM"):
    """One recurrent layer over the whole sequence as one op, in ONNX's layout (see above):
    ``(y (T, D, B, H), h_n, c_n)``.

    >>> import dualgraph as dg
    >>> y, h, c = rnn_sequence(dg.ones(5, 2, 3), dg.zeros(1, 8, 3), dg.zeros(1, 8, 2),
    ...                        dg.zeros(1, 16), dg.zeros(1, 2, 2), dg.zeros(1, 2, 2))
    >>> tuple(y.shape), tuple(h.shape)
    ((5, 1, 2, 2), (1, 2, 2))
    """
    args = (x, w, r, b) + tuple(s for s in (h0, c0) if s is not None)
    return apply(RNN_SEQUENCE, *args, mode=mode)
