"""Depthwise convolution (one input and one output channel per group, float32) with eight
channels in the lanes of a vector (``simd.py``), forward, with the epilogue.

``conv_direct``'s loop runs along each plane's rows, which on small planes (7x7, 14x14) or
at stride 2 are short: per tap a few vectors and a scalar remainder. Here a work item is an
image's block of eight channels: its eight planes are transposed 8x8 at a time into one
zero-padded *interleaved* plane (position ``(y, x)`` holds the eight channels' values in
eight consecutive floats, NCHW8c inside the kernel), so that every tap of every output
position is one eight-lane multiply-add, ``sum += w[tap] * plane[position + offset]``, with
nothing special at the edges, for any plane size, stride and dilation. Four output
positions of a row are summed at a time (each tap's weights loaded once for them). The sums
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
from .simd import LANES, fma, load, store, transpose
from .threads import run_rows, threads_for
from .tuning import cores

F = np.float32


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
def _row(sums, packed, wt, wbase, bias, r, wo, kh, kw, sh, sw, dh, dw, wp):
    """Output row ``r`` (``wo`` positions) of a block into ``sums``: four positions at a
    time, each tap one multiply-add per position."""
    step, v = sw * LANES, 0
    while v + 4 <= wo:
        a0 = a1 = a2 = a3 = bias
        for i in range(kh):
            o = ((r * sh + i * dh) * wp + v * sw) * LANES
            for j in range(kw):
                w = load(wt, wbase + (i * kw + j) * LANES)
                p = o + j * dw * LANES
                a0 = fma(w, load(packed, p), a0)
                a1 = fma(w, load(packed, p + step), a1)
                a2 = fma(w, load(packed, p + 2 * step), a2)
                a3 = fma(w, load(packed, p + 3 * step), a3)
        q = (r * wo + v) * LANES
        store(sums, q, a0)
        store(sums, q + LANES, a1)
        store(sums, q + 2 * LANES, a2)
        store(sums, q + 3 * LANES, a3)
        v += 4
    while v < wo:
        a0 = bias
        for i in range(kh):
            o = ((r * sh + i * dh) * wp + v * sw) * LANES
            for j in range(kw):
                a0 = fma(load(wt, wbase + (i * kw + j) * LANES),
                         load(packed, o + j * dw * LANES), a0)
        store(sums, (r * wo + v) * LANES, a0)
        v += 1


@loop(fastmath={"contract"})
def _depthwise(start, stop, x, wt, bias, out, residual, scratch, stages, acc, act, lo, hi, where,
               channels, height, width, ho, wo, kh, kw, sh, sw, dh, dw, top, left, wp):
    """Slots ``start:stop`` of ``acc.shape[0]``: the items (image, block of eight channels)
    of the flat ``x (N, C, H, W)`` convolved with ``wt (blocks, kh*kw, 8)`` (flat, the
    spare lanes' weights 0) and ``bias (blocks, 8)`` into the flat ``out (N, C, Ho, Wo)``,
    with :func:`finish`'s epilogue (``residual`` flat like ``out``)."""
    blocks = -(-channels // LANES)
    items = out.size // (channels * ho * wo) * blocks
    plane, size = height * width, ho * wo
    rows = min(height, scratch.shape[1] // (LANES * wp) - top)
    cols = min(width, wp - left)
    for t in range(start, stop):
        packed, stage, sums = scratch[t], stages[t], acc[t]
        packed[:] = 0    # (the padding: every item writes the same inside positions)
        first, last = t * items // acc.shape[0], (t + 1) * items // acc.shape[0]
        for item in range(first, last):
            n, b = item // blocks, item % blocks
            lanes = min(LANES, channels - b * LANES)
            _pack(x, (n * channels + b * LANES) * plane, plane, lanes, rows, cols, width,
                  stage, packed, wp, top, left)
            start_sum = load(bias, b * LANES)
            for r in range(ho):
                _row(sums, packed, wt, b * kh * kw * LANES, start_sum, r, wo, kh, kw, sh, sw,
                     dh, dw, wp)
            if where == 0:
                _activate(sums[:size * LANES], act, lo, hi)
            base = (n * channels + b * LANES) * size
            _interleave(out, base, size, lanes, sums, size, False)
            if where != 0:
                for c in range(lanes):
                    p = base + c * size
                    finish(out[p:p + size], residual[p:p + size], where, act, lo, hi)


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
    n, c, h, wd = x.shape
    kh, kw = w.shape[2:]
    ho, wo = out.shape[2:]
    hp = (ho - 1) * stride[0] + (kh - 1) * dilation[0] + 1   # (the padded rows and
    wp = (wo - 1) * stride[1] + (kw - 1) * dilation[1] + 1   # columns the outputs read)
    blocks = -(-c // LANES)
    wt = np.zeros((blocks * LANES, kh * kw), F)
    wt[:c] = w.reshape(c, kh * kw)
    wt = np.ascontiguousarray(wt.reshape(blocks, LANES, kh * kw).transpose(0, 2, 1))
    b = np.zeros(blocks * LANES, F)
    b[:c] = bias
    items = n * blocks
    workers = max(1, min(items, threads_for(out.size * kh * kw) or cores()))
    scratch = np.empty((workers, hp * wp * LANES), F)
    stages = np.empty((workers, h * wd * LANES if wd < LANES or c % LANES else 1), F)
    acc = np.empty((workers, ho * wo * LANES), F)
    res = (np.zeros(1, F) if residual is None
           else np.ascontiguousarray(residual, F).reshape(-1))
    run_rows(_depthwise, workers, x.reshape(-1), wt.reshape(-1), b, out.reshape(-1), res,
             scratch, stages, acc, act, F(lo), F(hi), where, c, h, wd, ho, wo, kh, kw, stride[0],
             stride[1], dilation[0], dilation[1], padding[0][0], padding[1][0], wp,
             threads=workers)
    return out
