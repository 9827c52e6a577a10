"""Depthwise convolution (one input and one output channel per group, float32) with eight
channels in the lanes of a vector (``simd.py``), forward, with the epilogue.

``conv_direct``'s loop runs along each plane's rows, which on small planes (7x7, 14x14) or
at stride 2 are short: per tap a few vectors and a scalar remainder. Here a work item is an
image's block of eight channels: its eight planes are transposed 8x8 at a time into one
zero-padded *interleaved* plane (position ``(y, x)`` holds the eight channels' values in
eight consecutive floats, NCHW8c inside the kernel), so that every tap of every output
position is one eight-lane multiply-add, ``sum += w[tap] * plane[position + offset]``, with
nothing special at the edges, for any plane size, stride and dilation. Eight output
positions of a row are summed at a time (each tap's weights loaded once for them), each
block's weights and bias interleaved by the loop itself as it starts the block. The sums
(from the bias) are activated in place and transposed back into the eight output planes;
with a residual, transposed first and the epilogue run on each plane while it is in cache.
A last block of fewer than eight channels uses the same sums with zero weights in the spare
lanes; its planes move element by element.

Items are shared among threads (``threads.run_rows``) as in ``conv_direct``; each output
is summed by one thread in tap order, so the bits do not depend on the thread count.
"""
from __future__ import annotations

import numpy as np

from . import helper, loop
from .epilogue import _activate
from .simd import LANES, fma, lanes_of, load, load_like, store_runs, transpose
from .threads import run_kept, threads_for
from .tuning import cores

F = np.float32
_ZERO = F(0)


@helper(inline="always")
def finish(dst, res, where, act, lo, hi):
    """The epilogue of a conv's output ``dst`` (a plane or row, the bias already in it):
    ``where`` 0 the activation, 1 ``res`` added before it, 2 after it."""
    if where == 1:
        for v in range(dst.size):
            dst[v] = dst[v] + res[v]
    _activate(dst, act, lo, hi)
    if where == 2:
        for v in range(dst.size):
            dst[v] = dst[v] + res[v]


# Floats of a blocked plane's rows whose epilogue runs as one slice (:func:`rows_due`): a
# 7-wide row is 56 floats, whose loop runs three sixteen-lane vectors and a scalar tail;
# as many rows as make 512 (2 kB, in L1 beside the rows' sums) run whole vectors.
EPILOGUE_RUN = 512


@helper(inline="always")
def rows_due(r, rows, line):
    """How many output rows ending at row ``r`` (of ``rows``, ``line`` floats each) to
    :func:`finish` now: the rows since the last flush once they make ``EPILOGUE_RUN``
    floats or ``r`` is the last row, else 0. Short rows are finished a few at a time, long
    rows one at a time while in cache."""
    batch = max(1, EPILOGUE_RUN // line)
    return (r % batch) + 1 if (r + 1) % batch == 0 or r == rows - 1 else 0


@helper(inline="always")
def _pack(x, base, plane, lanes, rows, cols, width, stage, packed, wp, top, left):
    """Planes ``base + c * plane`` (``c < lanes``) of the flat input ``x``, their first
    ``rows`` rows and ``cols`` columns (of ``width``), into the interleaved ``packed``
    at row ``top`` and column ``left``. Rows of eight columns or more go 8x8 at a time,
    the last eight columns of a row transposed once more (rewriting some positions with
    the same values) instead of a scalar remainder; narrower rows as one run of positions
    transposed into ``stage``, then each row's ``cols`` positions copied into place."""
    if lanes == LANES and cols >= LANES:
        for y in range(rows):
            src, dst = base + y * width, ((y + top) * wp + left) * LANES
            for v in range(0, cols, LANES):
                v = min(v, cols - LANES)
                transpose(x, src + v, plane, packed, dst + v * LANES, LANES)
        return
    _interleave(x, base, plane, lanes, stage, rows * width, True)
    for y in range(rows):
        dst = packed[((y + top) * wp + left) * LANES:((y + top) * wp + left + cols) * LANES]
        src = stage[y * width * LANES:]
        for u in range(dst.size):
            dst[u] = src[u]


@helper(inline="always")
def _interleave(planar, base, plane, lanes, interleaved, size, to_interleaved):
    """The first ``size`` positions of the planes ``base + c * plane`` (``c < lanes``)
    of the flat ``planar`` and the same positions of the flat ``interleaved`` (eight
    floats a position, spare lanes not touched): copied from the first to the second if
    ``to_interleaved``, else back; 8x8 transposes and a scalar remainder."""
    full = size - size % LANES if lanes == LANES else 0
    for q in range(0, full, LANES):
        if to_interleaved:
            transpose(planar, base + q, plane, interleaved, q * LANES, LANES)
        else:
            transpose(interleaved, q * LANES, LANES, planar, base + q, plane)
    for q in range(full, size):
        for c in range(lanes):
            if to_interleaved:
                interleaved[q * LANES + c] = planar[base + c * plane + q]
            else:
                planar[base + c * plane + q] = interleaved[q * LANES + c]


@helper(inline="always")
def row_out(stage, at, out, base, size, wo, lanes):
    """A row of ``wo`` positions of ``lanes`` channels, interleaved at ``stage[at:]``
    (eight floats a position), into the planes ``base + c * size`` of the flat ``out``:
    8x8 transposes, the last eight positions ending at the row's end (rewriting some with
    the same values); rows narrower than eight and partial blocks element by element."""
    if lanes == LANES and wo >= LANES:
        for v in range(0, wo, LANES):
            v = min(v, wo - LANES)
            transpose(stage, at + v * LANES, LANES, out, base + v, size)
        return
    for v in range(wo):
        for c in range(lanes):
            out[base + c * size + v] = stage[at + v * LANES + c]


@helper(inline="always")
def run_taps(sums, src, wt, wbase, bias, q, o, i0, i1, kw, rstep, tstep, wstep, step, ostep,
             gap, eight):
    """Eight output positions (four unless ``eight``: rows of four to seven) into ``sums``
    at ``q``, ``ostep`` floats apart: kernel rows ``i0:i1``, tap ``(i, j)`` of the first
    position read from ``src`` at ``o + i * rstep + j * tstep``, the next positions
    ``step`` floats on, its weights from ``wt`` at ``wbase + (i * kw + j) * wstep``. As many
    vector sums, each tap's weights loaded once for them, so that the multiply-adds'
    latency is hidden (with four, each waits for its last one). The strides say the
    layout: the interleaved plane here, channels-last activations in ``conv_nhwc``. The
    vectors have ``bias``'s lanes, eight or sixteen (two blocks of eight channels, each
    sum stored as two runs ``gap`` floats apart: ``simd.store_runs``). (One body: LLVM
    makes a loop for each value of ``eight``.)"""
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = bias
    for i in range(i0, i1):
        for j in range(kw):
            w = load_like(wt, wbase + (i * kw + j) * wstep, bias)
            p = o + i * rstep + j * tstep
            a0 = fma(w, load_like(src, p, bias), a0)
            a1 = fma(w, load_like(src, p + step, bias), a1)
            a2 = fma(w, load_like(src, p + 2 * step, bias), a2)
            a3 = fma(w, load_like(src, p + 3 * step, bias), a3)
            if eight:
                a4 = fma(w, load_like(src, p + 4 * step, bias), a4)
                a5 = fma(w, load_like(src, p + 5 * step, bias), a5)
                a6 = fma(w, load_like(src, p + 6 * step, bias), a6)
                a7 = fma(w, load_like(src, p + 7 * step, bias), a7)
    store_runs(sums, q, gap, a0)
    store_runs(sums, q + ostep, gap, a1)
    store_runs(sums, q + 2 * ostep, gap, a2)
    store_runs(sums, q + 3 * ostep, gap, a3)
    if eight:
        store_runs(sums, q + 4 * ostep, gap, a4)
        store_runs(sums, q + 5 * ostep, gap, a5)
        store_runs(sums, q + 6 * ostep, gap, a6)
        store_runs(sums, q + 7 * ostep, gap, a7)


@helper(inline="always")
def run_wide(sums, src, wt, wbase, bias, q, o, i0, i1, kw, rstep, wstep, step, ostep, gap,
             n):
    """:func:`run_taps`' eight positions (``n`` 7: seven, the eighth's sum, loads and
    store left out, for rows of exactly seven positions, which took two overlapping runs
    of four, each latency-bound) for a 3- or 5-wide kernel (``kw``) at column
    stride and dilation 1 (the taps of a row ``step`` apart, as the positions): per kernel
    row the ``kw`` weights are held in registers and the ten (twelve) input vectors the
    eight windows span are loaded once, each multiplied into the sums of up to three
    (five) positions: 13 loads for 24 multiply-adds instead of 27 (17 for 40 instead of
    45). Each sum still takes its taps in order, so the bits are :func:`run_taps`'. (One
    body: LLVM makes a loop for each width.)"""
    five = kw == 5
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = bias
    for i in range(i0, i1):
        t, p = wbase + i * kw * wstep, o + i * rstep
        w0, w1, w2 = load_like(wt, t, bias), load_like(wt, t + wstep, bias), load_like(wt, t + 2 * wstep, bias)
        w3 = w4 = w0
        if five:
            w3, w4 = load_like(wt, t + 3 * wstep, bias), load_like(wt, t + 4 * wstep, bias)
        x = load_like(src, p, bias)
        a0 = fma(w0, x, a0)
        x = load_like(src, p + step, bias)
        a0, a1 = fma(w1, x, a0), fma(w0, x, a1)
        x = load_like(src, p + 2 * step, bias)
        a0, a1, a2 = fma(w2, x, a0), fma(w1, x, a1), fma(w0, x, a2)
        x = load_like(src, p + 3 * step, bias)
        if five:
            a0 = fma(w3, x, a0)
        a1, a2, a3 = fma(w2, x, a1), fma(w1, x, a2), fma(w0, x, a3)
        x = load_like(src, p + 4 * step, bias)
        if five:
            a0, a1 = fma(w4, x, a0), fma(w3, x, a1)
        a2, a3, a4 = fma(w2, x, a2), fma(w1, x, a3), fma(w0, x, a4)
        x = load_like(src, p + 5 * step, bias)
        if five:
            a1, a2 = fma(w4, x, a1), fma(w3, x, a2)
        a3, a4, a5 = fma(w2, x, a3), fma(w1, x, a4), fma(w0, x, a5)
        x = load_like(src, p + 6 * step, bias)
        if five:
            a2, a3 = fma(w4, x, a2), fma(w3, x, a3)
        a4, a5, a6 = fma(w2, x, a4), fma(w1, x, a5), fma(w0, x, a6)
        x = load_like(src, p + 7 * step, bias)
        if five:
            a3, a4 = fma(w4, x, a3), fma(w3, x, a4)
        a5, a6, a7 = fma(w2, x, a5), fma(w1, x, a6), fma(w0, x, a7)
        x = load_like(src, p + 8 * step, bias)
        if five:
            a4, a5 = fma(w4, x, a4), fma(w3, x, a5)
        a6, a7 = fma(w2, x, a6), fma(w1, x, a7)
        if five or n > 7:
            x = load_like(src, p + 9 * step, bias)
            if five:
                a5, a6 = fma(w4, x, a5), fma(w3, x, a6)
            a7 = fma(w2, x, a7)
        if five:
            x = load_like(src, p + 10 * step, bias)
            a6, a7 = fma(w4, x, a6), fma(w3, x, a7)
            if n > 7:
                a7 = fma(w4, load_like(src, p + 11 * step, bias), a7)
    store_runs(sums, q, gap, a0)
    store_runs(sums, q + ostep, gap, a1)
    store_runs(sums, q + 2 * ostep, gap, a2)
    store_runs(sums, q + 3 * ostep, gap, a3)
    store_runs(sums, q + 4 * ostep, gap, a4)
    store_runs(sums, q + 5 * ostep, gap, a5)
    store_runs(sums, q + 6 * ostep, gap, a6)
    if n > 7:
        store_runs(sums, q + 7 * ostep, gap, a7)


@helper(inline="always")
def _line(sums, src, o, q, n, wt, bias, step, ostep, kh, kw, rstep, tstep, reuse, gap):
    """``n`` output positions of a row of a block into ``sums`` from ``q``, ``ostep``
    floats apart (a sixteen-lane sum's two halves ``gap`` apart), the first's tap ``(0,
    0)`` at ``src[o]``, the next positions ``step`` floats on, kernel rows ``rstep`` and
    columns ``tstep`` apart. Eight positions at a time (seven on rows of seven,
    :func:`run_wide`, where ``reuse``: a 3- or 5-wide kernel whose taps are ``step`` apart;
    four on other rows of four to seven), each tap one multiply-add a position. The block
    is as wide as ``bias``: ``src`` and ``wt`` hold that many floats a position and tap.
    The last run ends at the ``n``-th position, recomputing a few positions (the same bits)
    instead of a remainder one position at a time, which ran at a fifth of the rate."""
    width, v = lanes_of(bias), 0
    while v < n:
        run = 8 if n >= 8 else (7 if n == 7 and reuse else (4 if n >= 4 else 1))
        v = min(v, n - run)
        p, at = o + v * step, q + v * ostep
        if run == 8 and reuse:
            run_wide(sums, src, wt, 0, bias, at, p, 0, kh, kw, rstep, width, step, ostep, gap,
                     8)
        elif run == 7:
            run_wide(sums, src, wt, 0, bias, at, p, 0, kh, kw, rstep, width, step, ostep, gap,
                     7)
        elif run > 1:
            run_taps(sums, src, wt, 0, bias, at, p, 0, kh, kw, rstep, tstep, width, step,
                     ostep, gap, run == 8)
        else:
            a0 = bias
            for i in range(kh):
                for j in range(kw):
                    a0 = fma(load_like(wt, (i * kw + j) * width, bias),
                             load_like(src, p + i * rstep + j * tstep, bias), a0)
            store_runs(sums, at, gap, a0)
        v += run


@helper(inline="always")
def _row(sums, packed, wt, bias, r, wo, kh, kw, sh, sw, dh, dw, wp, ostride, gap):
    """Output row ``r`` (``wo`` positions) of a block into ``sums`` (``ostride`` floats a
    position, a sixteen-lane sum's two halves ``gap`` apart) from its zero-padded plane
    ``packed`` (``wp`` positions a row): :func:`_line` along it."""
    width = lanes_of(bias)
    _line(sums, packed, r * sh * wp * width, r * wo * ostride, wo, wt, bias, sw * width,
          ostride, kh, kw, dh * wp * width, dw * width, reusable(kw, sw, dw), gap)


@helper(inline="always")
def reusable(kw, sw, dw):
    """Whether :func:`run_wide` sums a row: a 3- or 5-wide kernel at column stride and
    dilation 1."""
    return (kw == 3 or kw == 5) and sw == 1 and dw == 1


@helper(inline="always")
def _weights(w, bias, first, lanes, width, taps, wblock):
    """Channels ``first:first + lanes``' weights from the flat ``w (C, taps)`` into
    ``wblock`` as ``(taps, width)``, then their bias in the last ``width`` floats; the
    spare lanes of a last partial block 0 (this packing, done per call in NumPy before,
    took as long as a small plane's conv)."""
    for t in range(taps):
        for c in range(width):
            wblock[t * width + c] = w[(first + c) * taps + t] if c < lanes else _ZERO
    for c in range(width):
        wblock[taps * width + c] = bias[first + c] if c < lanes else _ZERO


@helper(inline="always")
def _flush(sums, q, count, out, base, size, lanes, residual, where, act, lo, hi):
    """Positions ``q:q + count`` of a block's interleaved ``sums`` (a row of eight or more,
    or the whole plane), their epilogue applied, into the planes ``base + c * size`` of
    ``out`` while they are in cache (the plane's sums, then a pass for each, left the
    cache on large planes)."""
    if where == 0:
        _activate(sums[q * LANES:(q + count) * LANES], act, lo, hi)
    if count >= LANES:
        row_out(sums, q * LANES, out, base, size, count, lanes)
    else:
        _interleave(out, base, size, lanes, sums[q * LANES:], count, False)
    if where != 0:
        for c in range(lanes):
            p = base + c * size
            finish(out[p:p + count], residual[p:p + count], where, act, lo, hi)


@loop(fastmath={"contract"})
def _depthwise(start, stop, x, w, bias, out, residual, scratch, stages, acc, wblocks, act, lo,
               hi, where, channels, height, width, ho, wo, kh, kw, sh, sw, dh, dw, top, left,
               wp):
    """Slots ``start:stop`` of ``acc.shape[0]``: the items (image, block of eight channels)
    of the flat ``x (N, C, H, W)`` convolved with the flat ``w (C, kh*kw)`` and ``bias
    (C,)`` into the flat ``out (N, C, Ho, Wo)``, with :func:`finish`'s epilogue
    (``residual`` flat like ``out``)."""
    blocks, images = -(-channels // LANES), out.size // (channels * ho * wo)
    items = images * blocks
    plane, size, taps = height * width, ho * wo, kh * kw
    rows = min(height, scratch.shape[1] // (LANES * wp) - top)
    cols = min(width, wp - left)
    for t in range(start, stop):
        packed, stage, sums, wt = scratch[t], stages[t], acc[t], wblocks[t]
        packed[:] = 0    # (the padding: every item writes the same inside positions)
        first, last = t * items // acc.shape[0], (t + 1) * items // acc.shape[0]
        for item in range(first, last):
            b, n = item // images, item % images    # (block-major: a block's weights
            lanes = min(LANES, channels - b * LANES)
            _pack(x, (n * channels + b * LANES) * plane, plane, lanes, rows, cols, width,
                  stage, packed, wp, top, left)
            if item == first or n == 0:    # serve all its images)
                _weights(w, bias, b * LANES, lanes, LANES, taps, wt)
            start_sum = load(wt, taps * LANES)
            base = (n * channels + b * LANES) * size
            for r in range(ho):
                _row(sums, packed, wt, start_sum, r, wo, kh, kw, sh, sw, dh, dw, wp, LANES,
                     LANES)
                if wo >= LANES:
                    _flush(sums, r * wo, wo, out, base + r * wo, size, lanes, residual, where,
                           act, lo, hi)
            if wo < LANES:
                _flush(sums, 0, size, out, base, size, lanes, residual, where, act, lo, hi)


# Up to this many output positions a plane the eight-lane loop measured faster than
# ``conv_direct``'s rows (0.3-0.86x its time on 7x7 to 56x56 outputs, stride 1 and 2, 3x3
# to 7x7 kernels); on a 112x112 output 1.5x slower (the interleaved plane leaves L2).
MAX_POSITIONS = 56 * 56


def wanted(x_shape, w_shape, out_hw, padding, groups, dtype) -> bool:
    """Whether a conv runs here: float32 depthwise (one input and one output channel per
    group), no negative padding, and an output plane of at most ``MAX_POSITIONS``."""
    return (dtype == np.float32 and groups == x_shape[1] == w_shape[0] and w_shape[1] == 1
            and min(min(p) for p in padding) >= 0 and out_hw[0] * out_hw[1] <= MAX_POSITIONS)


def conv(x, w, out, stride, padding, dilation, bias, residual=None, where=0, act=0,
         lo=-np.inf, hi=np.inf):
    """``out (N, C, Ho, Wo)`` = the depthwise conv of ``x (N, C, H, W)`` with ``w (C, 1,
    kh, kw)`` and ``bias (C,)`` (float32, :func:`wanted`), with ``conv_direct.conv``'s
    epilogue arguments."""
    x = np.ascontiguousarray(x, F)
    run = fitted(x.shape, w.shape[2:], out.shape[2:], stride, padding, dilation, where, act,
                 lo, hi)
    return run(x, w, bias, out, residual)


def fitted(x_shape, kernel, out_hw, stride, padding, dilation, where=0, act=0, lo=-np.inf,
           hi=np.inf):
    """``run(x, w, bias, out, residual=None)``: :func:`conv` fitted to the shapes, its
    threads, scratch and the loop's compiled entry worked out once (a compiled graph's
    node). A call at a time (the scratch is the closure's)."""
    n, c, h, wd = x_shape
    kh, kw = kernel
    ho, wo = out_hw
    hp = (ho - 1) * stride[0] + (kh - 1) * dilation[0] + 1   # (the padded rows and
    wp = (wo - 1) * stride[1] + (kw - 1) * dilation[1] + 1   # columns the outputs read)
    items = n * -(-c // LANES)
    workers = max(1, min(items, threads_for(n * c * ho * wo * kh * kw) or cores()))
    scratch = np.empty((workers, hp * wp * LANES), F)
    # (``_pack`` stages rows whose read columns, not the whole width, are under eight:
    # a strided conv need not read an input's last columns)
    cols = min(wd, wp - padding[1][0])
    stages = np.empty((workers, h * wd * LANES if cols < LANES or c % LANES else 1), F)
    acc = np.empty((workers, ho * wo * LANES), F)
    wblocks = np.empty((workers, (kh * kw + 1) * LANES), F)
    geometry = (act, F(lo), F(hi), where, c, h, wd, ho, wo, kh, kw, stride[0], stride[1],
                dilation[0], dilation[1], padding[0][0], padding[1][0], wp)
    entry = []

    def run(x, w, bias, out, residual=None):
        res = (_NO_RESIDUAL if residual is None
               else np.ascontiguousarray(residual, F).reshape(-1))
        run_kept(_depthwise, workers, entry, np.ascontiguousarray(x, F).reshape(-1),
                 np.ascontiguousarray(w, F).reshape(-1), np.ascontiguousarray(bias, F),
                 out.reshape(-1), res, scratch, stages, acc, wblocks, *geometry)
        return out
    return run


_NO_RESIDUAL = np.zeros(1, F)
