"""Row-wise float32 loops: softmax, log-softmax, softmax cross-entropy, the negative
log-likelihood of class indices and layer normalisation, forward and backward, each one pass (or two) over a row instead of several
full-array NumPy passes.

Rows are the last axis (softmax, cross-entropy) or the trailing normalised dims flattened
(LayerNorm) of a C-contiguous array. The formulas are those of the NumPy kernels in
``ops/reduce.py``, ``ops/loss.py`` and ``ops/norm.py``. Row sums run with LLVM's
``reassoc`` flag so they vectorise; that sums in a few interleaved partial sums, like
NumPy's pairwise sums, not strictly left to right (``row_means`` and the normalisations'
statistics sum in NumPy's very order, ``sums.py``: a mean's bits are eager's, and a
fused group's LayerNorm epilogue has the eager loop's).
"""
from __future__ import annotations

import math

import numpy as np

from . import helper, loop
from .fastmath import exp32_nonpositive, max32
from .simd import LANES, add, broadcast, load, store
from .sums import pairwise_sum, pairwise_sum_of_squares

F = np.float32
_ZERO, _ONE = F(0), F(1)
_REDUCE = {"reassoc", "nsz"}


@helper(inline="always")
def _row_max(row):
    """The row's largest element, NaNs skipped (a NaN still makes the row's softmax NaN,
    through its own exp); vectorised, as ``max32`` is."""
    m = row[0]
    for j in range(row.size):   # (from 0: a row of 64 is 8 whole vectors, no scalar tail)
        m = max32(m, row[j])
    return m


@helper(inline="always")
def _exp_into(row, m, out):
    """``out = exp(row - m)``, returning its sum: a softmax's numerators and denominator
    with one exp per element (``m`` is the row's maximum: the arguments are <= 0).

    The sum is a loop of its own that only reads ``out``. A loop that stores into ``out``
    while it reads ``row`` is vectorised behind a run-time check that the two lie far
    enough apart, with a scalar copy of it for when they do not; a sum in that loop would
    round one way or the other depending on where malloc put the arrays (small ones lie
    side by side): the same row, different bits from run to run. A loop without stores
    has no such check."""
    for j in range(row.size):
        out[j] = exp32_nonpositive(row[j] - m)
    total = _ZERO
    for j in range(row.size):
        total += out[j]
    return total


@loop(fastmath=_REDUCE)
def softmax(start, stop, x, out):
    """``out[r] = exp(x[r] - max x[r]) / sum(...)`` for rows ``start:stop`` (this loop and
    the other row loops here take a range of rows: ``threads.run_rows`` shares them)."""
    for r in range(start, stop):
        row, o = x[r], out[r]
        total = _exp_into(row, _row_max(row), o)
        for j in range(row.size):
            o[j] = o[j] / total


@loop
def row_means(start, stop, x, out):
    """``out[r] = sum(x[r]) / len(x[r])`` for rows ``start:stop``: a mean over an array's
    trailing dims (global average pooling's), summed as NumPy's ``mean`` sums (no
    reassociation: the same bits as the eager kernel), eight lanes at a time."""
    n = x.shape[1]
    flat, width = x.reshape(-1), F(n)
    for r in range(start, stop):   # (0 + the sum, as np.add.reduce: a -0.0 sum is 0.0)
        out[r] = (_ZERO + pairwise_sum(flat, r * n, n)) / width


@loop
def middle_means(start, stop, x, out):
    """``out[a] = x[a].mean(0)`` for rows ``a`` in ``start:stop`` of ``x (A, P, B)``: a
    mean over an array's middle dims (global average pooling of a channel-blocked value).
    With eight columns, four running vector sums of every fourth ``p`` (then added
    pairwise), else one running sum a column."""
    width, inner = x.shape[1], x.shape[2]
    scale = F(width)
    for a in range(start, stop):
        acc = out[a]
        if inner == LANES:
            flat, base = x[a].reshape(-1), 0
            s0 = s1 = s2 = s3 = broadcast(_ZERO)
            for p in range(0, width - 3, 4):
                base = p * LANES
                s0 = add(s0, load(flat, base))
                s1 = add(s1, load(flat, base + LANES))
                s2 = add(s2, load(flat, base + 2 * LANES))
                s3 = add(s3, load(flat, base + 3 * LANES))
            for p in range(width - width % 4, width):
                s0 = add(s0, load(flat, p * LANES))
            store(acc, 0, add(add(s0, s1), add(s2, s3)))
        else:
            acc[:] = 0
            for p in range(width):
                row = x[a, p]
                for j in range(inner):
                    acc[j] += row[j]
        for j in range(inner):
            acc[j] = acc[j] / scale


@helper(inline="always")
def _row_exp_sum(row, m):
    """``sum(exp(row - m))``: the softmax denominator of a row whose maximum is ``m``."""
    total = _ZERO
    for j in range(row.size):
        total += exp32_nonpositive(row[j] - m)
    return total


@loop(fastmath=_REDUCE)
def log_softmax(start, stop, x, out):
    """``out[r] = x[r] - max x[r] - log(sum(exp(x[r] - max x[r])))`` for rows
    ``start:stop``."""
    for r in range(start, stop):
        row, o = x[r], out[r]
        m = _row_max(row)
        # x - max stored first, as NumPy's form does: max + log(sum) as one shift (which
        # ``reassoc`` may also make of (x - max) - log(sum) in registers) would round away
        # the low bits of a small result where the row's values are large; summed in a
        # loop without stores, as in _exp_into (the same bits wherever ``out`` lies)
        for j in range(row.size):
            o[j] = row[j] - m
        total = _row_exp_sum(o, _ZERO)
        lse = F(math.log(total))
        for j in range(row.size):
            o[j] = o[j] - lse


@helper(inline="always")
def _target_status(target, ignore_index, classes):
    """The targets that are not ``ignore_index``, and the first row whose target is not a
    class index either (else -1)."""
    counted, first_bad = 0, -1
    for r in range(target.size):
        t = target[r]
        if t != ignore_index:
            counted += 1
            if (t < 0 or t >= classes) and first_bad < 0:
                first_bad = r
    return counted, first_bad


@loop
def target_status(target, ignore_index, classes, status):
    """``status[:] = _target_status(...)``: the check ``cross_entropy_with_grad``'s caller
    makes before the rows."""
    status[0], status[1] = _target_status(target, ignore_index, classes)


@loop(fastmath=_REDUCE)
def cross_entropy(x, target, ignore_index, losses, status):
    """``losses[r] = logsumexp(x[r]) - x[r, target[r]]``, the log-softmax of row r at its
    target class negated (the same arithmetic as ``log_softmax``), 0 where the target is
    ``ignore_index``; ``status`` as :func:`target_status` (nothing is computed if a target
    is not a class index)."""
    status[0], status[1] = _target_status(target, ignore_index, x.shape[1])
    if status[1] >= 0:
        return
    for r in range(x.shape[0]):
        t = target[r]
        if t == ignore_index:
            losses[r] = _ZERO
            continue
        row = x[r]
        m = _row_max(row)
        losses[r] = (m + F(math.log(_row_exp_sum(row, m)))) - row[t]


@loop
def nll(logp, target, ignore_index, losses, status):
    """``losses[r] = -logp[r, target[r]]``, 0 where the target is ``ignore_index``;
    ``status`` as :func:`target_status` (nothing is computed if a target is not a class
    index)."""
    status[0], status[1] = _target_status(target, ignore_index, logp.shape[1])
    if status[1] >= 0:
        return
    for r in range(logp.shape[0]):
        t = target[r]
        losses[r] = _ZERO if t == ignore_index else -logp[r, t]


@loop
def nll_backward(target, ignore_index, scale, out):
    """``out[r] = -onehot(target[r]) * scale[r]``: the gradient of ``nll``'s row r, whose
    loss was scaled by ``scale[r]``; zero rows where the target is ignored (or not a class
    index)."""
    for r in range(out.shape[0]):
        t, o = target[r], out[r]
        o[:] = _ZERO
        if t != ignore_index and t >= 0 and t < out.shape[1]:
            o[t] = -scale[r]


@loop(fastmath=_REDUCE)
def cross_entropy_backward(start, stop, x, target, ignore_index, scale, out):
    """``out[r] = (softmax(x[r]) - onehot(target[r])) * scale[r]`` for rows ``start:stop``:
    the gradient of ``cross_entropy``'s row r, whose loss was scaled by ``scale[r]``; zero
    rows where the target is ignored (or not a class index)."""
    for r in range(start, stop):
        t, o = target[r], out[r]
        if t == ignore_index or t < 0 or t >= x.shape[1]:
            o[:] = _ZERO
            continue
        row = x[r]
        weight = scale[r] / _exp_into(row, _row_max(row), o)
        for j in range(row.size):
            o[j] = o[j] * weight
        o[t] -= scale[r]


@loop(fastmath=_REDUCE)
def cross_entropy_with_grad(start, stop, x, target, ignore_index, scale, losses, out):
    """``cross_entropy``'s row losses and ``cross_entropy_backward``'s rows at once, for
    rows ``start:stop``: one maximum and one pass of exponentials serve both (the same
    arithmetic as the two loops). The caller has checked that every target is a class
    index or ``ignore_index``."""
    for r in range(start, stop):
        t, o = target[r], out[r]
        if t == ignore_index:
            losses[r] = _ZERO
            o[:] = _ZERO
            continue
        row = x[r]
        m = _row_max(row)
        total = _exp_into(row, m, o)
        losses[r] = (m + F(math.log(total))) - row[t]
        weight = scale[r] / total
        for j in range(row.size):
            o[j] = o[j] * weight
        o[t] -= scale[r]


@helper(inline="always")
def normalise_row(row, weight, bias, eps, out):
    """One row to zero mean and unit variance, then ``* weight + bias`` (full rows: a
    broadcast index into a one-element array would stop vectorisation); returns the
    mean and 1/std. The mean and the variance are NumPy's ``mean`` of the row and of the
    squared centred row, summed in NumPy's order (``sums.py``) so that every loop that
    inlines this (the eager kernel, a fused group's epilogue) has the same bits: a
    reassociated sum is vectorised as each loop's context lets LLVM, differently.
    ``out`` may be ``row``."""
    n = row.size
    mean = (_ZERO + pairwise_sum(row, 0, n)) / F(n)
    var = (_ZERO + pairwise_sum_of_squares(row, 0, n, mean)) / F(n)
    rstd = _ONE / F(math.sqrt(var + eps))
    for j in range(n):
        out[j] = (row[j] - mean) * rstd * weight[j] + bias[j]
    return mean, rstd


@loop
def layer_norm(start, stop, x, weight, bias, eps, out, mean_out, rstd_out):
    """:func:`normalise_row` for rows ``start:stop`` of ``x``."""
    for r in range(start, stop):
        mean_out[r], rstd_out[r] = normalise_row(x[r], weight, bias, eps, out[r])


@helper(inline="always")
def rms_row(row, weight, eps, out):
    """One row divided by its root mean square, ``row / sqrt(mean(row**2) + eps)``, then
    ``* weight`` (RMSNorm, T5's LayerNorm); returns 1/rms. The mean square is summed as
    NumPy's ``mean(x * x)``, as the composite RMSNorm computes it eagerly (``sums.py``).
    ``out`` may be ``row``."""
    ms = (_ZERO + pairwise_sum_of_squares(row, 0, row.size, _ZERO)) / F(row.size)
    rstd = _ONE / F(math.sqrt(ms + eps))
    for j in range(row.size):
        out[j] = row[j] * rstd * weight[j]
    return rstd


@loop
def rms_norm(start, stop, x, weight, eps, out, rstd_out):
    """:func:`rms_row` for rows ``start:stop`` of ``x``."""
    for r in range(start, stop):
        rstd_out[r] = rms_row(x[r], weight, eps, out[r])


@loop(fastmath=_REDUCE)
def layer_norm_backward(g, x, weight, mean, rstd, dx_out, dw_out, db_out):
    """Gradients of :func:`layer_norm` for input, weight and bias (``dw_out``/``db_out``
    are zeroed here and summed over the rows). The row sums and the stores are separate
    loops: together they do not vectorise."""
    n = x.shape[1]
    dw_out[:] = _ZERO
    db_out[:] = _ZERO
    for r in range(x.shape[0]):
        gr, xr, dxr = g[r], x[r], dx_out[r]
        m, s = mean[r], rstd[r]
        sum_gw = _ZERO
        sum_gw_xhat = _ZERO
        for j in range(n):
            gw = gr[j] * weight[j]
            sum_gw += gw
            sum_gw_xhat += gw * (xr[j] - m) * s
        mean_gw, mean_gw_xhat = sum_gw / F(n), sum_gw_xhat / F(n)
        for j in range(n):
            xhat = (xr[j] - m) * s
            dxr[j] = (gr[j] * weight[j] - mean_gw - xhat * mean_gw_xhat) * s
            dw_out[j] += gr[j] * xhat
            db_out[j] += gr[j]


@loop(fastmath=_REDUCE)
def softmax_backward(start, stop, g, y, out):
    """``out[r] = y[r] * (g[r] - sum(g[r] * y[r]))`` for rows ``start:stop``: the gradient
    through softmax rows."""
    for r in range(start, stop):
        gr, yr, o = g[r], y[r], out[r]
        total = _ZERO
        for j in range(yr.size):
            total += gr[j] * yr[j]
        for j in range(yr.size):
            o[j] = yr[j] * (gr[j] - total)


@loop(fastmath=_REDUCE)
def log_softmax_backward(start, stop, g, y, out):
    """``out[r] = g[r] - exp(y[r]) * sum(g[r])`` for rows ``start:stop``: the gradient
    through log-softmax rows."""
    for r in range(start, stop):
        gr, yr, o = g[r], y[r], out[r]
        total = _ZERO
        for j in range(yr.size):
            total += gr[j]
        for j in range(yr.size):
            o[j] = gr[j] - exp32_nonpositive(yr[j]) * total   # (log-probabilities: <= 0)
