"""A whole LSTM layer (one direction) over a sequence as one op, forward and backward.

``nn.LSTM`` used to run one ``lstm_cell`` op per time step: each step paid the op's fixed
cost (dispatch, the tape or a graph node, checks, fresh arrays) on top of its product of
a few rows, and the backward one ``lstm_cell_backward`` per step plus an ``add`` of the
output's gradient into the hidden state's. ``lstm_layer(xg, h0, c0, w_hh, b_hh)`` runs the
recurrence in one kernel instead, as torch's ``at::lstm`` and cuDNN do: the weight laid
out once per call for every step's product, each step's gates computed by the cell's
fused loop straight into the layer's stacked outputs. Its VJP, ``lstm_layer_backward``,
walks the steps back the same way, writing each step's gate gradients into one stacked
array, so the recurrent weight's gradient is one GEMM over all steps (two: the first step
reads ``h0``) and the input projection's gradients are the ordinary ``linear`` VJP of
``xg = linear(x, W_ih, b_ih)`` over the whole sequence. Where the product is the packed
loop on one thread, all the steps run in one compiled loop each way
(``kernels/recurrence.py``: no Python between the steps, the same bits).

``xg`` (T, B, 4H) holds the input's gate pre-activations in torch's order (i, f, g, o);
``h0``, ``c0`` (B, H); ``reverse`` runs the steps from the last to the first (a
bidirectional layer's second direction). The outputs are ``y`` (T, B, H), ``h_n``, ``c_n``
and, for the backward only, the activated gates (T, B, 4H) and the cell states (T, B, H).
Each step computes what ``lstm_cell`` computes with the same loops; only the hidden
product's summation order may differ (a weight laid out once rather than read transposed),
so the layer equals the loop of cells, its decomposition, to float rounding.
"""
from __future__ import annotations

import numpy as np

from .. import kernels
from ..dispatch import apply
from ..shapes import ShapedType, ShapeError
from . import shape as shape_ops
from ._util import column_sum, empty_into, is_float, needs_grad, out_part
from .opdef import defop
from .recurrent import (LSTM_CELL, _cell, _cell_backward, _half_in_float32,
                        _lstm_backward_decomposition, _second_derivatives, _zeros_for)

__all__: list = []


def _steps(length: int, reverse: bool):
    """The time steps in the order the recurrence visits them."""
    return range(length - 1, -1, -1) if reverse else range(length)


def _previous(t: int, reverse: bool) -> int:
    """The step whose state step ``t`` reads (-1 or T: the initial state)."""
    return t + 1 if reverse else t - 1


class _Products:
    """``rows @ m`` for one matrix ``m (K, N)`` over many calls of a few C-contiguous rows
    (``rows`` of them): laid out once (panels for the packed loop where it takes the shape,
    its call worked out once too, else ``m`` row-major, the NN product OpenBLAS runs faster
    than the NT one on a few rows), into ``out``."""

    def __init__(self, m: np.ndarray, rows: int):
        from ..kernels import linear_packed   # (kernels load their loops lazily)
        k, n = m.shape
        self.packed = (linear_packed.Product(m, rows) if m.dtype == np.float32
                       and linear_packed.wanted(rows, k, n) else None)
        self.m = None if self.packed is not None else np.ascontiguousarray(m)

    def __call__(self, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        if self.packed is not None:
            return self.packed(x, out)
        return np.matmul(x, self.m, out=out)

    def one_thread(self):
        """The packed product where it runs on one thread (a loop over the steps can then
        run its panels itself: ``kernels/recurrence.py``), else None."""
        return self.packed if self.packed is not None and self.packed.threads == 1 else None


class _Kept:
    """A loop called once a step with C-contiguous arrays of one kind (a recurrence's gate
    arithmetic): its compiled entry worked out at the first call and kept, so that a
    step's call skips working out the argument types (2 us of a 17 us cell step)."""

    def __init__(self, loop):
        self.loop, self.entry = loop, None

    def __call__(self, *args):
        if self.entry is None:
            self.entry = self.loop.entry(*args)
        return self.entry(*args)


def _initial_or(stacked, t: int, reverse: bool, initial):
    """The state step ``t`` reads: ``stacked[previous step]``, or ``initial`` at the first."""
    prev = _previous(t, reverse)
    return initial if prev in (-1, len(stacked)) else stacked[prev]


def recur(h0, w_hh, length: int, reverse: bool, step, product=None):
    """The forward recurrence every layer op shares: per step the hidden product
    ``hg = h @ W_hhᵀ`` into one buffer (the weight laid out once, or ``product``), then
    ``step(t, hg, h)`` does the cell's gate arithmetic and returns the new ``h`` (a view
    into the stacked output). Returns the last ``h``."""
    product = product or _Products(w_hh.T, h0.shape[0])
    hg = np.empty((h0.shape[0], w_hh.shape[0]), h0.dtype)
    h = np.ascontiguousarray(h0)
    for t in _steps(length, reverse):
        product(h, hg)
        h = step(t, hg, h)
    return h


def recur_back(gy, gh_n, w_hh, reverse: bool, step, product=None):
    """The backward recurrence every layer op shares, the steps walked back: per step
    ``g = gy[t] + dh`` (the gradient of that step's ``h``), ``step(t, g)`` returns the
    hidden product's gradient rows and ``h``'s direct part (or None), and the previous
    ``h``'s gradient is ``rows @ W_hh`` (``product``, else laid out here) plus that part.
    Returns the initial ``h``'s."""
    dh = np.array(gh_n, gy.dtype)
    g = np.empty_like(dh)
    product = product or _Products(w_hh, dh.shape[0])
    for t in _steps(gy.shape[0], not reverse):
        np.add(gy[t], dh, out=g)
        rows, direct = step(t, g)
        product(rows, dh)
        if direct is not None:
            dh += direct
    return dh


def hidden_weight_grads(d_hg, h0, y, w_hh, need_w: bool, need_b: bool, reverse: bool):
    """The hidden weight's and bias's gradients from every step's hidden-product gradient
    rows ``d_hg`` (T, B, G) and the states they multiplied (``h0`` at the first step, the
    stacked outputs ``y`` after): one GEMM over all steps but the first (zeros where not
    needed)."""
    length, _, gates = d_hg.shape
    if need_w and length:   # (the rest's product plus the first step's: one array, no zeros)
        first = length - 1 if reverse else 0
        rest_d = d_hg[:-1] if reverse else d_hg[1:]
        rest_h = y[1:] if reverse else y[:-1]
        dw = np.matmul(rest_d.reshape(-1, gates).T, rest_h.reshape(-1, h0.shape[-1]))
        dw += d_hg[first].T @ h0
    else:
        dw = np.zeros(w_hh.shape, d_hg.dtype)
    db = column_sum(d_hg.reshape(-1, gates)) if need_b else np.zeros(gates, d_hg.dtype)
    return dw, db


def _layer_kernel(xg, h0, c0, w_hh, *b_hh, reverse, out=None):
    """(``out``: ``fills_out``, the stacked results written into the arrays given.)"""
    _infer_layer(xg, h0, c0, w_hh, *b_hh, reverse=reverse)   # (its checks, as a graph's)
    length, batch, gates = xg.shape
    n = gates // 4
    dt = xg.dtype
    y, acts, cs = (empty_into(out_part(out, i), shape, dt) for i, shape in
                   ((0, (length, batch, n)), (3, xg.shape), (4, (length, batch, n))))
    if length == 0:
        return y, np.array(h0), np.array(c0), acts, cs
    fused = kernels.enabled(xg, min_elements=0)
    cell = _Kept(kernels.activations.lstm_cell) if fused else None
    bias = np.ascontiguousarray(b_hh[0]) if b_hh else np.zeros(gates, dt)
    xg, c0 = np.ascontiguousarray(xg), np.ascontiguousarray(c0)

    def step(t, hg, h):
        c = _initial_or(cs, t, reverse, c0)
        if fused:
            cell(hg, xg[t], bias, c, y[t], cs[t], acts[t])
        else:   # (NumPy's form of the same formulas: float64, or no Numba)
            hg += xg[t]
            hg += bias
            y[t], cs[t], acts[t] = _cell(hg, c)
        return y[t]
    product = _Products(w_hh.T, batch)
    whole = product.one_thread() if fused else None
    last = 0 if reverse else length - 1
    if whole is None:
        recur(h0, w_hh, length, reverse, step, product)
    else:   # (the same steps in one compiled loop)
        kernels.recurrence.lstm_forward(xg, np.ascontiguousarray(h0), c0, whole.packed,
                                        whole.bias, bias, whole.band,
                                        np.empty((batch, gates), dt), y, cs, acts, reverse)
    return y, y[last].copy(), cs[last].copy(), acts, cs


def _infer_layer(xg, h0, c0, w_hh, *b_hh, reverse):
    xs, hs, cs, ws = (tuple(t.shape) for t in (xg, h0, c0, w_hh))
    if (len(xs) != 3 or len(hs) != 2 or hs != cs or xs[1] != hs[0]
            or xs[2] != 4 * hs[1] or ws != (4 * hs[1], hs[1])
            or (b_hh and tuple(b_hh[0].shape) != (4 * hs[1],))):
        raise ShapeError(f"lstm_layer: input gates of shape {xs}, states {hs} and {cs}, "
                         f"weight_hh {ws}" + (f", bias_hh {tuple(b_hh[0].shape)}" if b_hh
                                              else "") + " don't fit: expected gates (T, B, "
                         "4H), states (B, H), weight_hh (4H, H) and bias_hh (4H,)")
    dts = {t.dtype for t in (xg, h0, c0, w_hh, *b_hh)}
    if len(dts) != 1 or not is_float(xg.dtype):
        raise TypeError(f"lstm_layer: gates, states and weights must be of one float dtype, "
                        f"got {sorted(str(d) for d in dts)}")
    dt = xg.dtype
    return (ShapedType(xs[:2] + hs[1:], dt), ShapedType(hs, dt), ShapedType(hs, dt),
            ShapedType(xs, dt), ShapedType(xs[:2] + hs[1:], dt))


def _layer_decomposition(xg, h0, c0, w_hh, *b_hh, reverse):
    """The loop of ``lstm_cell`` ops the layer stands for (the op tests compare the two;
    the backward's VJP differentiates it)."""
    steps = shape_ops.unbind(xg, 0)
    y, cs, acts = [None] * len(steps), [None] * len(steps), [None] * len(steps)
    h, c = h0, c0
    for t in _steps(len(steps), reverse):
        h, c, a = apply(LSTM_CELL, steps[t], h, c, w_hh, *b_hh)
        y[t], cs[t], acts[t] = h, c, a
    if not steps:
        from .creation import zeros
        empty = zeros(0, *h0.shape, dtype=xg.dtype)
        return empty, h0, c0, xg, empty
    return (shape_ops.stack(y, 0), h, c, shape_ops.stack(acts, 0), shape_ops.stack(cs, 0))


def _layer_vjp(g, out, xg, h0, c0, w_hh, *b_hh, reverse):
    need = tuple(needs_grad(t) for t in (xg, h0, c0, w_hh)) + (bool(b_hh) and
                                                              needs_grad(b_hh[0]),)
    gy, gh, gc = (_zeros_for(g[k], out[k]) for k in range(3))
    grads = apply(LSTM_LAYER_BACKWARD, gy, gh, gc, xg, h0, c0, w_hh, *b_hh, out[0], out[4],
                  out[3], need=need, reverse=reverse)
    return tuple(gi if n else None for gi, n in zip(grads, need))[:4 + len(b_hh)]


LSTM_LAYER = defop("lstm_layer", _half_in_float32(_layer_kernel), _infer_layer,
                   vjp=_layer_vjp, attrs=("reverse",), num_outputs=5,
                   decomposition=_layer_decomposition, differentiable_outputs=(0, 1, 2),
                   saves="io", saved_outputs=(0, 3, 4), autocast="lower", fills_out=True)


# -- the backward: the steps walked back, gate gradients stacked -----------------------------
def _layer_backward_kernel(gy, gh_n, gc_n, xg, h0, c0, w_hh, *rest, need, reverse, out=None):
    """Gradients of (xg, h0, c0, w_hh, b_hh) from those of (y, h_n, c_n); ``rest`` ends
    with the forward's saved y, cell states and activated gates. Zeros where ``need``
    leaves a gradient out (the gate gradients and the states' are by-products). (``out``:
    ``fills_out``, the gate gradients written into the first array given.)"""
    y, cs, acts = (np.ascontiguousarray(a) for a in rest[-3:])
    dt = acts.dtype
    d_gates = empty_into(out_part(out, 0), acts.shape, dt)
    dc, dc_next = np.array(gc_n, dt), np.empty(gc_n.shape, dt)
    fused = kernels.enabled(acts, min_elements=0)
    cell = _Kept(kernels.activations.lstm_cell_backward) if fused else None
    c0 = np.ascontiguousarray(c0)

    def step(t, gh):
        nonlocal dc, dc_next
        c_prev = _initial_or(cs, t, reverse, c0)
        if fused:
            cell(gh, dc, c_prev, acts[t], d_gates[t], dc_next)
            dc, dc_next = dc_next, dc
        else:
            d_gates[t], dc = _cell_backward(gh, dc, c_prev, acts[t])
        return d_gates[t], None
    product = _Products(w_hh, gh_n.shape[0])
    whole = product.one_thread() if fused else None
    if whole is None:
        dh = recur_back(gy, gh_n, w_hh, reverse, step, product)
    else:   # (the same steps in one compiled loop)
        dh = np.array(gh_n, gy.dtype)
        kernels.recurrence.lstm_backward(np.ascontiguousarray(gy), dh, dc, dc_next,
                                         np.empty_like(dh), c0, cs, acts, whole.packed,
                                         whole.bias, whole.band, d_gates, reverse)
    dw, db = hidden_weight_grads(d_gates, h0, y, w_hh, need[3], need[4], reverse)
    return d_gates, dh, np.array(dc, dt), dw, db


def _infer_layer_backward(gy, gh_n, gc_n, xg, h0, c0, w_hh, *rest, need, reverse):
    dt = xg.dtype
    return tuple(ShapedType(tuple(t.shape), dt) for t in (xg, h0, c0, w_hh)) + (
        ShapedType((tuple(w_hh.shape)[0],), dt),)


def _layer_backward_decomposition(gy, gh_n, gc_n, xg, h0, c0, w_hh, *rest, need, reverse):
    """Step by step with the cell backward's decomposition (ordinary ops): the gate
    gradients stacked, the weight's and bias's summed over the steps."""
    from .creation import zeros_like
    y, cs, acts = rest[-3:]
    b_hh = rest[:-3]
    length = xg.shape[0]
    d_gates, dw, db = [None] * length, zeros_like(w_hh), None
    dh, dc = gh_n, gc_n
    for t in _steps(length, not reverse):
        prev = _previous(t, reverse)
        first = prev in (-1, length)
        h_prev, c_prev = (h0, c0) if first else (y[prev], cs[prev])
        d_gates[t], dh, dc, dw_t, db_t = _lstm_backward_decomposition(
            gy[t] + dh, dc, xg[t], h_prev, c_prev, w_hh, *b_hh, acts[t],
            need=(True,) * 5)
        dw, db = dw + dw_t, db_t if db is None else db + db_t
    stacked = shape_ops.stack(d_gates, 0) if length else zeros_like(xg)
    db = zeros_like(w_hh[:, 0]) if db is None or not need[4] else db
    return stacked, dh, dc, dw if need[3] else zeros_like(w_hh), db


def _layer_backward_vjp(gg, out, gy, gh_n, gc_n, xg, h0, c0, w_hh, *rest, need, reverse):
    """Second derivatives: autodiff of the first derivatives of the loop of cells."""
    def layer(*inputs):
        return _layer_decomposition(*inputs, reverse=reverse)[:3]
    seconds = _second_derivatives(layer, (gy, gh_n, gc_n), (xg, h0, c0, w_hh, *rest[:-3]),
                                  gg, need)
    return seconds[:-1] + (None,) * 3    # (the saved y, cell states and gates: a cache)


LSTM_LAYER_BACKWARD = defop("lstm_layer_backward", _half_in_float32(_layer_backward_kernel),
                            _infer_layer_backward, compiler_only=True,
                            decomposition=_layer_backward_decomposition,
                            vjp=_layer_backward_vjp, attrs=("need", "reverse"),
                            num_outputs=5, saves="i", onnx=None, fills_out=True)


def lstm_layer(xg, h0, c0, w_hh, b_hh=None, reverse: bool = False):
    """``(y, h_n, c_n)`` of an LSTM layer's direction over the whole sequence from the
    input's gate pre-activations ``xg = W_ih x + b_ih`` (T, B, 4H), the initial state
    ``h0``, ``c0`` (B, H) and the hidden weight and bias (torch's gate order i, f, g, o).

    >>> import dualgraph as dg
    >>> y, h, c = lstm_layer(dg.zeros(5, 2, 8), dg.zeros(2, 2), dg.zeros(2, 2), dg.zeros(8, 2))
    >>> tuple(y.shape), tuple(h.shape)
    ((5, 2, 2), (2, 2))
    """
    y, h_n, c_n, _, _ = apply(LSTM_LAYER, xg, h0, c0, w_hh,
                              *(() if b_hh is None else (b_hh,)), reverse=reverse)
    return y, h_n, c_n
