"""One-pass float32 loops for erf, the GELUs, sigmoid, SiLU, leaky ReLU, the LSTM cell and ReLU,
forward and backward, ELU's and softplus's gradients, and ``where``'s select.

The formulas are those of the NumPy kernels in ``ops/elementwise.py`` and
``ops/recurrent.py`` (which document them); here each element is read and written once,
with ``fastmath``'s vectorisable ``tanh32``, ``sigmoid32`` (``(1 + tanh(x / 2)) / 2`` as
there), ``gelu_tanh32``, ``erf32`` and ``gelu32`` (which the compiler's fused kernels call
too). The erf and exact-GELU loops run at every float32 size (their ops' kernels call them
for any float32 array): a fused kernel calls their scalar functions at any size too, so
compiled equals eager to the bit. The loops of these functions (and the GRU and LSTM
cells') call ``simd.wide_loops`` first: sixteen lanes where the CPU runs them at full
width, the same bits in less time.
"""
from __future__ import annotations

import numpy as np

from . import helper, loop
from .fastmath import (erf32, gelu32, gelu_backward32, gelu_tanh32, gelu_tanh_backward32,
                       sigmoid32, silu32, silu_backward32, tanh32)
from .simd import wide_loops

F = np.float32
_ZERO, _ONE = F(0), F(1)


@loop
def gelu_tanh(start, stop, x, out):
    """``out = 0.5 x (1 + tanh(K (x + C x^3)))`` over elements ``start:stop`` of flat
    arrays (a range: ``threads.run_rows`` shares it; slices indexed from 0, as an index the
    loop cannot prove >= 0 gets a negative-index check that keeps it from vectorising)."""
    wide_loops()
    xs, outs = x[start:stop], out[start:stop]
    for i in range(xs.size):
        outs[i] = gelu_tanh32(xs[i])


@loop
def gelu_tanh_backward(start, stop, g, x, out):
    """``out = g * d/dx gelu_tanh(x)`` over elements ``start:stop`` of flat arrays (as
    :func:`gelu_tanh`)."""
    wide_loops()
    gs, xs, outs = g[start:stop], x[start:stop], out[start:stop]
    for i in range(xs.size):
        outs[i] = gelu_tanh_backward32(gs[i], xs[i])


@loop
def erf(start, stop, x, out):
    """``out = erf(x)`` over elements ``start:stop`` of flat arrays (as :func:`gelu_tanh`)."""
    wide_loops()
    xs, outs = x[start:stop], out[start:stop]
    for i in range(xs.size):
        outs[i] = erf32(xs[i])


@loop
def power(start, stop, x, out, whole, negative):
    """``out = x ** e`` over elements ``start:stop`` of flat arrays (as :func:`gelu_tanh`),
    ``e = +-whole`` (``whole`` 0: +-0.5, a square root), as ``ops.elementwise.expand_power``
    computes it: products, a square root, one reciprocal; the same bits in one pass."""
    xs, outs = x[start:stop], out[start:stop]
    for i in range(xs.size):
        v = xs[i]
        if whole == 0:
            r = np.sqrt(v)
        elif whole == 1:
            r = v
        else:
            square = v * v
            r = square if whole == 2 else square * (v if whole == 3 else square)
        outs[i] = _ONE / r if negative else r


@loop
def gelu(start, stop, x, out):
    """``out = x Phi(x)`` over elements ``start:stop`` of flat arrays (as
    :func:`gelu_tanh`)."""
    wide_loops()
    xs, outs = x[start:stop], out[start:stop]
    for i in range(xs.size):
        outs[i] = gelu32(xs[i])


@loop
def gelu_backward(start, stop, g, x, out):
    """``out = g * d/dx gelu(x)`` over elements ``start:stop`` of flat arrays."""
    wide_loops()
    gs, xs, outs = g[start:stop], x[start:stop], out[start:stop]
    for i in range(xs.size):
        outs[i] = gelu_backward32(gs[i], xs[i])


@loop
def sigmoid(start, stop, x, out):
    """``out = sigmoid(x)`` over elements ``start:stop`` of flat arrays (``sigmoid32``, as
    the conv and linear epilogues and the fused kernels compute it)."""
    wide_loops()
    xs, outs = x[start:stop], out[start:stop]
    for i in range(xs.size):
        outs[i] = sigmoid32(xs[i])


@loop
def sigmoid_backward(start, stop, g, y, out):
    """``out = g * y * (1 - y)`` (y: sigmoid's output) over elements ``start:stop`` of flat
    arrays, with NumPy's order of the products: the same bits as the three passes."""
    gs, ys, outs = g[start:stop], y[start:stop], out[start:stop]
    for i in range(ys.size):
        y_ = ys[i]
        outs[i] = gs[i] * y_ * (_ONE - y_)


@loop
def tanh_backward(start, stop, g, y, out):
    """``out = g * (1 - y * y)`` (y: tanh's output) over elements ``start:stop`` of flat
    arrays, in NumPy's order: the same bits as the three passes."""
    gs, ys, outs = g[start:stop], y[start:stop], out[start:stop]
    for i in range(ys.size):
        y_ = ys[i]
        outs[i] = gs[i] * (_ONE - y_ * y_)


@loop
def silu(start, stop, x, out):
    """``out = x * sigmoid(x)`` over elements ``start:stop`` of flat arrays."""
    wide_loops()
    xs, outs = x[start:stop], out[start:stop]
    for i in range(xs.size):
        outs[i] = silu32(xs[i])


@loop
def silu_backward(start, stop, g, x, out):
    """``out = g * d/dx silu(x)`` over elements ``start:stop`` of flat arrays."""
    wide_loops()
    gs, xs, outs = g[start:stop], x[start:stop], out[start:stop]
    for i in range(xs.size):
        outs[i] = silu_backward32(gs[i], xs[i])


@loop
def leaky_relu(start, stop, x, out, slope):
    """``out = x where x > 0, else x * slope`` over elements ``start:stop`` of flat arrays
    (``slope`` a float32: the product NumPy's ``x * slope`` makes)."""
    xs, outs = x[start:stop], out[start:stop]
    for i in range(xs.size):
        v = xs[i]
        outs[i] = v if v > _ZERO else v * slope


@loop
def leaky_relu_backward(start, stop, g, x, out, slope):
    """``out = g where x > 0, else g * slope`` over elements ``start:stop`` of flat
    arrays."""
    gs, xs, outs = g[start:stop], x[start:stop], out[start:stop]
    for i in range(xs.size):
        v = gs[i]
        outs[i] = v if xs[i] > _ZERO else v * slope


@helper(inline="always")
def _blocks(row, n):
    """The four gate blocks of one row as separate views: with one array per block (not
    offsets into one row) LLVM can prove the stores independent and vectorises the loop."""
    return row[:n], row[n:2 * n], row[2 * n:3 * n], row[3 * n:]


@loop
def lstm_cell(hg, xg, bias, c, h_out, c_out, acts_out):
    """:func:`lstm_cell_rows` as a loop of its own."""
    lstm_cell_rows(hg, xg, bias, c, h_out, c_out, acts_out)


@helper(inline="always")
def lstm_cell_rows(hg, xg, bias, c, h_out, c_out, acts_out):
    """Rows of the gate pre-activations ``(hg + xg) + bias`` (the hidden projection, the
    input's, the hidden bias, each in i, f, g, o blocks of width n: added here, not by
    two passes before) and ``c`` -> ``h'``, ``c'`` and the activated gates (kept for the
    backward)."""
    wide_loops()
    n = c.shape[1]
    bi, bf, bg, bo = _blocks(bias, n)
    for b in range(c.shape[0]):
        hi, hf, hgg, ho = _blocks(hg[b], n)
        xi, xf, xgg, xo = _blocks(xg[b], n)
        ai, af, ag, ao = _blocks(acts_out[b], n)
        cb, hb, cnb = c[b], h_out[b], c_out[b]
        for j in range(n):
            i, f = sigmoid32(hi[j] + xi[j] + bi[j]), sigmoid32(hf[j] + xf[j] + bf[j])
            g, o = tanh32(hgg[j] + xgg[j] + bg[j]), sigmoid32(ho[j] + xo[j] + bo[j])
            cn = f * cb[j] + i * g
            cnb[j] = cn
            hb[j] = o * tanh32(cn)
            ai[j], af[j], ag[j], ao[j] = i, f, g, o


@loop
def lstm_cell_backward(gh, gc, c, acts, d_gates_out, dc_out):
    """:func:`lstm_cell_backward_rows` as a loop of its own."""
    lstm_cell_backward_rows(gh, gc, c, acts, d_gates_out, dc_out)


@helper(inline="always")
def lstm_cell_backward_rows(gh, gc, c, acts, d_gates_out, dc_out):
    """The gradients of the gate pre-activations and of the previous cell state, from
    those of ``h'`` and ``c'`` and the saved activated gates."""
    n = c.shape[1]
    for b in range(c.shape[0]):
        ai, af, ag, ao = _blocks(acts[b], n)
        di, df, dg, do = _blocks(d_gates_out[b], n)
        cb, ghb, gcb, dcb = c[b], gh[b], gc[b], dc_out[b]
        for j in range(n):
            i, f, g, o, cp = ai[j], af[j], ag[j], ao[j], cb[j]
            tc = tanh32(f * cp + i * g)
            dcn = gcb[j] + ghb[j] * o * (_ONE - tc * tc)
            di[j] = dcn * g * i * (_ONE - i)
            df[j] = dcn * cp * f * (_ONE - f)
            dg[j] = dcn * i * (_ONE - g * g)
            do[j] = ghb[j] * tc * o * (_ONE - o)
            dcb[j] = dcn * f


@helper(inline="always")
def _thirds(row, n):
    """The three gate blocks (r, z, n) of one GRU row as separate views (as :func:`_blocks`)."""
    return row[:n], row[n:2 * n], row[2 * n:]


@loop
def gru_cell(xg, hg, h, h_out, acts_out):
    """Rows of the input gates ``xg`` and the hidden projection ``hg`` (r, z, n blocks of
    width n, its bias included) and ``h`` -> ``h'`` and the activations [r | z | new | hn]
    (kept for the backward)."""
    wide_loops()
    n = h.shape[1]
    for b in range(h.shape[0]):
        xr, xz, xn = _thirds(xg[b], n)
        hr, hz, hn = _thirds(hg[b], n)
        ar, az, an, ahn = _blocks(acts_out[b], n)
        hb, ob = h[b], h_out[b]
        for j in range(n):
            r, z = sigmoid32(xr[j] + hr[j]), sigmoid32(xz[j] + hz[j])
            new = tanh32(xn[j] + r * hn[j])
            ob[j] = new + z * (hb[j] - new)
            ar[j], az[j], an[j], ahn[j] = r, z, new, hn[j]


@loop
def gru_cell_backward(gh, h, acts, d_xg_out, d_hg_out, dh_out):
    """From the gradient of ``h'`` and the saved activations: the gradients of the input
    gates and of the hidden projection (r, z, n blocks), and ``h``'s direct part
    (``gh * z``; the projection's share is the caller's product)."""
    n = h.shape[1]
    for b in range(h.shape[0]):
        ar, az, an, ahn = _blocks(acts[b], n)
        dxr, dxz, dxn = _thirds(d_xg_out[b], n)
        dhr, dhz, dhn = _thirds(d_hg_out[b], n)
        ghb, hb, dhb = gh[b], h[b], dh_out[b]
        for j in range(n):
            g, r, z, new = ghb[j], ar[j], az[j], an[j]
            d_new = g * (_ONE - z) * (_ONE - new * new)
            d_r = d_new * ahn[j] * r * (_ONE - r)
            d_z = g * (hb[j] - new) * z * (_ONE - z)
            dxr[j], dxz[j], dxn[j] = d_r, d_z, d_new
            dhr[j], dhz[j], dhn[j] = d_r, d_z, d_new * r
            dhb[j] = g * z


@loop
def relu_backward(g, y, out):
    """``out = g where y > 0, else 0`` over flat arrays (y: relu's output)."""
    for i in range(y.size):
        out[i] = g[i] if y[i] > _ZERO else _ZERO


@loop
def select(start, stop, cond, a, b, out):
    """``out = a where cond else b`` over elements ``start:stop`` of flat arrays: a
    branch-free select (NumPy's ``where`` branches per element here: ~5x slower on a
    random mask)."""
    cs, as_, bs, outs = cond[start:stop], a[start:stop], b[start:stop], out[start:stop]
    for i in range(cs.size):
        outs[i] = as_[i] if cs[i] else bs[i]


@loop
def select_value(start, stop, cond, value, other, out, when):
    """``out = value where cond == when else other``: :func:`select` with one side a
    number (ReLU6's and clamp's bounds, a gradient's zero), which vectorises fully
    (~30x NumPy's ``where``)."""
    cs, others, outs = cond[start:stop], other[start:stop], out[start:stop]
    for i in range(cs.size):
        outs[i] = value if cs[i] == when else others[i]


@loop
def relu_backward_in_place(g, y):
    """:func:`relu_backward` writing ``g`` itself. Passing ``g`` as that loop's output too
    would be correct but ~15x slower: LLVM then finds the output overlapping an input at
    run time and takes its scalar loop, whose branch on the sign mispredicts."""
    for i in range(y.size):
        g[i] = g[i] if y[i] > _ZERO else _ZERO


@loop
def add_bias_relu(y, b):
    """``y[r] = relu(y[r] + b)`` in place for each row r: a linear layer's bias and ReLU
    in one pass over its product, with the same additions as ``y += b`` and the same
    results as ``np.maximum(y, 0)`` (NaN and -0.0 stay)."""
    for r in range(y.shape[0]):
        row = y[r]
        for j in range(row.size):
            v = row[j] + b[j]
            row[j] = _ZERO if v < _ZERO else v


@loop
def elu_backward(start, stop, g, out, x, result, alpha):
    """``result = g where x > 0, else g * (out + alpha)`` (``out``: elu's output) over
    elements ``start:stop`` of flat arrays."""
    gs, ys, xs, rs = g[start:stop], out[start:stop], x[start:stop], result[start:stop]
    for i in range(xs.size):
        v = gs[i]
        rs[i] = v if xs[i] > _ZERO else v * (ys[i] + alpha)


@loop
def softplus_backward(start, stop, g, x, out, beta, threshold):
    """``out = g * sigmoid(beta x)``, ``g`` where ``beta x > threshold``, over elements
    ``start:stop`` of flat arrays."""
    gs, xs, outs = g[start:stop], x[start:stop], out[start:stop]
    for i in range(xs.size):
        z = xs[i] * beta
        v = gs[i]
        outs[i] = v if z > threshold else v * sigmoid32(z)
