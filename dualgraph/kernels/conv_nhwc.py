"""Depthwise convolution of channels-last activations (``(N, H, W, C)``, float32), forward
with the epilogue: the kernel of ``depthwise_nhwc``, which the layout pass
(``passes/layout.py``) puts where a chain of depthwise and 1x1 convolutions runs in that
layout.

In channels-last a position's channels are side by side, so eight of them are the lanes of
a vector as they lie in memory: the loop reads the input and writes the output where they
are, with no padded copy and no transposes (``conv_lanes`` transposes each NCHW plane 8x8
into an interleaved one and back, most of a small layer's time). A work item is an output
row of an image. Its positions are taken in runs of eight (four on narrow rows) whose taps
all lie inside the input row, and per run the channels in blocks of eight: as many vector
sums, each tap's weights loaded once for them (``conv_lanes.run_taps`` / ``run_wide`` with
channels-last strides), so that a run's window (``kh`` rows of a dozen positions) stays in
the first-level cache while its blocks pass. Kernel rows above and below the input are
left out of the sums (the tap range clipped, not padded); positions whose window crosses
the left or right edge are summed one at a time with the columns clipped too, four blocks
at a time so that the multiply-adds' latency is hidden. Channels past the last whole
block of eight are summed element by element. Where AVX-512 runs at full width
(``isa.full_width``) the blocks are sixteen channels (a last one of eight after them): a
position's sixteen channels lie side by side as eight do, so the same loops run on vectors
of twice the width, each output the same chain of multiply-adds: the same bits. The weight
is ``(kh, kw, cp)`` (``pack``:
tap-major, the channels rounded up to eight, the spare lanes zero). The epilogue
(``conv_lanes.finish``) runs on each output row as it is done, in cache.

Rows are shared among threads (``threads.run_rows``); each output is summed by one thread
in tap order, so the bits do not depend on the thread count.

A 1x1 convolution (stride 1, no padding, one group) in channels-last is the GEMM ``x (N*H*W,
C) @ wt (C, Cout)`` on a weight stored transposed once (``pointwise``): one OpenBLAS
``sgemm`` per block of positions whose input and output rows fit ``BLOCK_BYTES``, then the
epilogue (``epilogue._row_tail``: bias, activation, residual) on each row of the block
while it is in cache, all in one compiled loop (a generic ``linear_epilogue`` call ran the
GEMM over the whole batch, then its pass, with Python between them).
"""
from __future__ import annotations

import numpy as np

from . import blas_threads, helper, isa, loop
from .batched import NO_TRANS, sgemm_add
from .conv_lanes import finish, run_taps, run_wide
from .epilogue import _row_tail
from .simd import (LANES, WIDE, fma, lanes_of, load, load_like, load_wide, prefetch,
                   store_runs)
from .threads import run_rows, threads_for
from .tuning import cores

F = np.float32


def padded_channels(c: int) -> int:
    """``c`` rounded up to whole eight-lane blocks."""
    return -(-c // LANES) * LANES


def pack(w: np.ndarray) -> np.ndarray:
    """The ``(C, 1, kh, kw)`` depthwise weight as ``(kh, kw, cp)``, the spare lanes zero."""
    c, _, kh, kw = w.shape
    out = np.zeros((kh, kw, padded_channels(c)), F)
    out[:, :, :c] = np.transpose(w[:, 0], (1, 2, 0))
    return out


@helper(inline="always")
def _inside(start, width, left, sw, kw, dw):
    """The first output column at or after ``start`` whose taps all lie inside a row of
    ``width`` (``left`` columns of padding), and the end of the run of such columns (the
    caller clips it to the output width)."""
    first = max(start, -(-left // sw))
    last = (width - 1 + left - (kw - 1) * dw) // sw + 1
    return first, max(first, last)


@helper(inline="always")
def _clip(at, size, k, d):
    """The taps ``k0:k1`` of ``k`` (``d`` apart, from input index ``at``) inside ``0:size``."""
    k0 = 0 if at >= 0 else (-at + d - 1) // d
    k1 = min(k, (size - at + d - 1) // d) if size > at else 0
    return k0, max(k0, k1)


@helper(inline="always")
def _edge_blocks(out, x, wt, bias, q, o, i0, i1, j0, j1, kw, rstep, tstep, cp, b, full, zero):
    """:func:`_edge`'s sums for the channels from ``b`` in blocks as wide as ``zero`` (eight
    or sixteen lanes) up to ``full``: four blocks at a time (four sums in flight), then one
    at a time. Returns the first channel left."""
    width = lanes_of(zero)
    while b + 4 * width <= full:
        a0, a1 = load_like(bias, b, zero), load_like(bias, b + width, zero)
        a2, a3 = load_like(bias, b + 2 * width, zero), load_like(bias, b + 3 * width, zero)
        for i in range(i0, i1):
            for j in range(j0, j1):
                t, p = (i * kw + j) * cp + b, o + i * rstep + j * tstep + b
                a0 = fma(load_like(wt, t, zero), load_like(x, p, zero), a0)
                a1 = fma(load_like(wt, t + width, zero), load_like(x, p + width, zero), a1)
                a2 = fma(load_like(wt, t + 2 * width, zero), load_like(x, p + 2 * width, zero),
                         a2)
                a3 = fma(load_like(wt, t + 3 * width, zero), load_like(x, p + 3 * width, zero),
                         a3)
        store_runs(out, q + b, LANES, a0)
        store_runs(out, q + b + width, LANES, a1)
        store_runs(out, q + b + 2 * width, LANES, a2)
        store_runs(out, q + b + 3 * width, LANES, a3)
        b += 4 * width
    while b + width <= full:
        a0 = load_like(bias, b, zero)
        for i in range(i0, i1):
            for j in range(j0, j1):
                a0 = fma(load_like(wt, (i * kw + j) * cp + b, zero),
                         load_like(x, o + i * rstep + j * tstep + b, zero), a0)
        store_runs(out, q + b, LANES, a0)
        b += width
    return b


@helper(inline="always")
def _edge(out, x, wt, bias, q, o, i0, i1, j0, j1, kw, rstep, tstep, cp, full, wide):
    """One output position at ``out[q:]`` whose window is clipped to kernel rows
    ``i0:i1`` and columns ``j0:j1``: tap ``(i, j)`` of channel block ``b`` read at ``o + i *
    rstep + j * tstep + b``; the whole blocks below ``full``, sixteen lanes at a time where
    ``wide``, then eight (:func:`_edge_blocks`)."""
    b = 0
    if wide and full >= WIDE:    # (the bias vectors say the width; their values unused)
        b = _edge_blocks(out, x, wt, bias, q, o, i0, i1, j0, j1, kw, rstep, tstep, cp, b, full,
                         load_wide(bias, 0))
    if b < full:
        _edge_blocks(out, x, wt, bias, q, o, i0, i1, j0, j1, kw, rstep, tstep, cp, b, full,
                     load(bias, 0))


@helper(inline="always")
def _run(out, x, wt, b, bias, q, o, i0, i1, kw, rstep, tstep, cp, step, channels, run,
         reuse):
    """A run of ``run`` (eight or four) positions of the channel block from ``b``, as wide
    as ``bias``: ``conv_lanes.run_wide`` (the taps of a kernel row reused across the
    positions) where ``reuse``, else ``run_taps``."""
    if reuse:
        run_wide(out, x, wt, b, bias, q + b, o + b, i0, i1, kw, rstep, cp, step, channels,
                 LANES, 8)
    else:
        run_taps(out, x, wt, b, bias, q + b, o + b, i0, i1, kw, rstep, tstep, cp, step,
                 channels, LANES, run == 8)


@helper(inline="always")
def _ahead(x, row, ho, height, width, channels, sh, top, kh, dh, i1):
    """Prefetch the input rows output row ``row`` (of ``N * Ho``) reads that the row before
    it did not (``i1``: that row's end of kernel rows), a line at a time, so that they come
    from memory while this row is summed (read where a run's multiply-adds want them, a
    row's misses stalled the loop: 2.4x the time on planes that were not in cache)."""
    if row >= x.size // (height * width * channels) * ho:
        return
    n, r = row // ho, row % ho
    y = r * sh - top
    j0, j1 = _clip(y, height, kh, dh)
    line = width * channels
    for i in range(j0, j1):
        if r == 0 or y + i * dh >= (r - 1) * sh - top + i1 * dh:
            base = (n * height + y + i * dh) * line
            for e in range(0, line, 16):
                prefetch(x, base + e)


@loop(fastmath={"contract"})
def _depthwise(start, stop, x, wt, bias, out, residual, act, lo, hi, where, geometry):
    """Output rows ``start:stop`` (of ``N * Ho``) of the flat ``x (N, H, W, C)`` convolved
    with the flat ``wt (kh, kw, cp)`` and ``bias (C,)`` into the flat ``out (N, Ho, Wo,
    C)``, with ``conv_lanes.finish``'s epilogue (``residual`` flat like ``out``);
    ``geometry`` holds the sizes (``fitted``)."""
    (channels, cp, height, width, ho, wo, kh, kw, sh, sw, dh, dw, top, left) = (
        geometry[0], geometry[1], geometry[2], geometry[3], geometry[4], geometry[5],
        geometry[6], geometry[7], geometry[8], geometry[9], geometry[10], geometry[11],
        geometry[12], geometry[13])
    full = channels - channels % LANES
    rstep, tstep, step = dh * width * channels, dw * channels, sw * channels
    first, last = _inside(0, width, left, sw, kw, dw)
    last = min(last, wo)
    run = 8 if last - first >= 8 else (4 if last - first >= 4 else 0)
    reuse = run == 8 and (kw == 3 or kw == 5) and sw == 1 and dw == 1
    sixteen = geometry[14] == WIDE
    for row in range(start, stop):
        n, r = row // ho, row % ho
        y = r * sh - top
        i0, i1 = _clip(y, height, kh, dh)
        orow, xrow = row * wo * channels, (n * height + y) * width * channels
        _ahead(x, row + 1, ho, height, width, channels, sh, top, kh, dh, i1)
        v = first
        while run and v < last:
            v = min(v, last - run)
            q, o = orow + v * channels, xrow + (v * sw - left) * channels
            b = 0
            while sixteen and b + WIDE <= full:
                _run(out, x, wt, b, load_wide(bias, b), q, o, i0, i1, kw, rstep, tstep, cp,
                     step, channels, run, reuse)
                b += WIDE
            while b < full:
                _run(out, x, wt, b, load(bias, b), q, o, i0, i1, kw, rstep, tstep, cp, step,
                     channels, run, reuse)
                b += LANES
            v += run
        for v in range(wo):
            xc = v * sw - left
            j0, j1 = _clip(xc, width, kw, dw)
            if not (run and first <= v < last):    # (else summed in a run)
                _edge(out, x, wt, bias, orow + v * channels, xrow + xc * channels, i0, i1,
                      j0, j1, kw, rstep, tstep, cp, full, sixteen)
            if full < channels:
                for c in range(full, channels):
                    s = bias[c]
                    for i in range(i0, i1):
                        for j in range(j0, j1):
                            s += wt[(i * kw + j) * cp + c] * x[xrow + i * rstep
                                                               + (xc + j * dw) * channels + c]
                    out[orow + v * channels + c] = s
        size = wo * channels
        finish(out[orow:orow + size], residual[orow:orow + size] if where != 0 else
               residual[:0], where, act, lo, hi)


def wanted(x_shape, w_shape, out_hw, padding, groups, dtype) -> bool:
    """Whether a conv of NCHW shapes ``x_shape``, ``w_shape`` runs here in channels-last:
    float32 depthwise (one input and one output channel per group), no negative
    padding."""
    return (dtype == np.float32 and len(x_shape) == 4 and groups == x_shape[1] == w_shape[0]
            and w_shape[1] == 1 and min(min(p) for p in padding) >= 0)


def fitted(x_shape, wt_shape, stride, padding, dilation, residual=False, where=0, act=0,
           lo=-np.inf, hi=np.inf):
    """``run(x, wt, bias, residual=None)``: :func:`conv` fitted to these shapes, its sizes,
    thread count and compiled entry worked out once (a call on a 7x7 plane is a few
    microseconds of loop: the Python around it counts)."""
    n, h, wd, c = x_shape
    kh, kw, cp = wt_shape
    ho = (h + sum(padding[0]) - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd + sum(padding[1]) - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    workers = max(1, min(n * ho, threads_for(n * ho * wo * c * kh * kw) or cores()))
    geometry = np.array([c, cp, h, wd, ho, wo, kh, kw, *stride, *dilation, padding[0][0],
                         padding[1][0], WIDE if isa.full_width() else LANES], np.int64)
    codes = (act, F(lo), F(hi), where)

    def run(x, wt, bias, residual=None, out=None):
        out = np.empty((n, ho, wo, c), F) if out is None else out
        res = _NO_RESIDUAL if residual is None else residual.reshape(-1)
        run_rows(_depthwise, n * ho, np.ascontiguousarray(x).reshape(-1), wt.reshape(-1),
                 bias, out.reshape(-1), res, *codes, geometry, threads=workers)
        return out
    return run


def conv(x, wt, out, stride, padding, dilation, bias, residual=None, where=0, act=0,
         lo=-np.inf, hi=np.inf):
    """``out (N, Ho, Wo, C)`` = the depthwise conv of ``x (N, H, W, C)`` with the packed
    ``wt (kh, kw, cp)`` (:func:`pack`) and ``bias (C,)`` (float32), with ``conv_direct.conv``'s
    epilogue arguments (``where`` 0 none, 1 residual before the activation, 2 after)."""
    run = fitted(x.shape, wt.shape, stride, padding, dilation, residual is not None, where,
                 act, lo, hi)
    return run(x, np.ascontiguousarray(wt, F), np.ascontiguousarray(bias, F),
               None if residual is None else np.ascontiguousarray(residual, F), out)


_NO_RESIDUAL = np.zeros(1, F)

# A block's input and output rows (bytes): within this CPU's 512 kB L2 beside the packed
# weight panel OpenBLAS keeps (``conv_pointwise``'s figure); at least ``MIN_ROWS`` rows.
BLOCK_BYTES = 256 << 10
MIN_ROWS = 64


@loop
def _pointwise(start, stop, x, wt, out, bias, residual, sgemm, rows, act, lo, hi, where):
    """Blocks ``start:stop`` of ``rows`` rows of ``out (M, Cout)`` = ``act(x (M, C) @ wt
    (C, Cout) + bias (+ r))``, each block one ``sgemm``, then its rows' epilogue in cache
    (``residual (M, Cout)`` where ``where`` is not 0, else one row)."""
    m, c = x.shape
    cout = out.shape[1]
    for item in range(start, stop):
        p0 = item * rows
        count = min(rows, m - p0)
        sgemm_add(sgemm, NO_TRANS, NO_TRANS, count, cout, c, x.ctypes.data + 4 * p0 * c, c,
                  wt.ctypes.data, cout, out.ctypes.data + 4 * p0 * cout, cout, 0)
        for p in range(p0, p0 + count):
            _row_tail(out[p], bias, residual[p if where else 0], act, lo, hi, where)


def pointwise_available() -> bool:
    """Numba and OpenBLAS's 64-bit ``sgemm`` at hand (else the op's NumPy kernel)."""
    from . import native, numba_available
    return numba_available() and native.enabled() and blas_threads.sgemm_address() is not None


def pointwise(x_shape, cout: int, act=0, lo=-np.inf, hi=np.inf, where=0):
    """``run(x, wt, bias, residual=None, out=None)``: the 1x1 conv of channels-last ``x``
    of the static ``x_shape (N, H, W, C)`` with ``wt (C, Cout)`` (float32), its epilogue
    as :func:`conv`'s, fitted to these shapes once: block size, compiled entry."""
    *lead, c = x_shape
    m = int(np.prod(lead))
    rows = max(MIN_ROWS, BLOCK_BYTES // (4 * (c + cout)))
    items = -(-m // rows) if m else 0
    codes = (act, F(lo), F(hi), where)
    no_residual = np.zeros((1, cout), F)
    entry = []

    def run(x, wt, bias, residual=None, out=None):
        out = np.empty((*lead, cout), F) if out is None else out
        res = no_residual if residual is None else residual.reshape(m, cout)
        args = (np.ascontiguousarray(x).reshape(m, c), wt, out.reshape(m, cout), bias, res,
                blas_threads.sgemm_address(), rows, *codes)
        if not entry:
            entry.append(_pointwise.entry(0, items, *args))
        entry[0](0, items, *args)
        return out
    return run
