"""Depthwise convolution of channels-last activations (``(N, H, W, C)``, float32), forward
with the epilogue: the kernel of ``depthwise_nhwc``, which the layout pass
(``passes/layout.py``) puts where a chain of depthwise and 1x1 convolutions runs in that
layout.

The loop is ``conv_lanes``' (a work item is an image's block of eight channels, summed on a
zero-padded *interleaved* plane, eight floats a position, eight output positions of a row at
a time by ``conv_lanes._row``), but in channels-last a position's eight channels are already
side by side: the block's plane is filled with one vector copy a position, and the sums go
back the same way, where ``conv_lanes`` transposes eight planes 8x8 in and out (most of a
small layer's time). The weight is ``(kh, kw, cp)`` (``pack``: tap-major, the channels
rounded up to eight, the spare lanes zero); each block's taps are copied into eight-float
runs as it starts. The epilogue (``conv_lanes.finish``) runs on the interleaved sums, a
residual gathered beside them first. A last block of fewer than eight channels moves
element by element.

Items are shared among threads (``threads.run_rows``); each output is summed by one thread
in tap order, so the bits do not depend on the thread count.
"""
from __future__ import annotations

import numpy as np

from . import helper, loop
from .conv_lanes import _row, finish
from .simd import LANES, load, store
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
def _gather(dst, at, src, base, stride, positions, lanes):
    """Eight channels of ``positions`` positions of ``src`` (position ``q`` at ``base + q *
    stride``) into the interleaved ``dst`` from ``at`` (eight floats a position): one
    vector each, or ``lanes`` floats where the block is a last partial one (a vector
    would read past the channels, at the last position past the array)."""
    for q in range(positions):
        if lanes == LANES:
            store(dst, at + q * LANES, load(src, base + q * stride))
        else:
            for c in range(lanes):
                dst[at + q * LANES + c] = src[base + q * stride + c]


@helper(inline="always")
def _scatter(dst, src, base, stride, positions, lanes):
    """The interleaved ``src`` back into ``dst`` (position ``q`` at ``base + q * stride``)."""
    for q in range(positions):
        if lanes == LANES:
            store(dst, base + q * stride, load(src, q * LANES))
        else:
            for c in range(lanes):
                dst[base + q * stride + c] = src[q * LANES + c]


@loop(fastmath={"contract"})
def _depthwise(start, stop, x, wt, bias, out, residual, scratch, stages, acc, wblocks, act, lo,
               hi, where, geometry):
    """Slots ``start:stop`` of ``acc.shape[0]``: the items (image, block of eight channels)
    of the flat ``x (N, H, W, C)`` convolved with the flat ``wt (kh, kw, cp)`` and ``bias
    (cp,)`` into the flat ``out (N, Ho, Wo, C)``, with ``conv_lanes.finish``'s epilogue
    (``residual`` flat like ``out``); ``geometry`` holds the sizes (``conv``)."""
    (channels, cp, height, width, ho, wo, kh, kw, sh, sw, dh, dw, top, left, wp, rows,
     cols) = (geometry[0], geometry[1], geometry[2], geometry[3], geometry[4], geometry[5],
              geometry[6], geometry[7], geometry[8], geometry[9], geometry[10], geometry[11],
              geometry[12], geometry[13], geometry[14], geometry[15], geometry[16])
    blocks, size, taps = cp // LANES, ho * wo, kh * kw
    items = out.size // (channels * size) * blocks
    for t in range(start, stop):
        packed, stage, sums, wb = scratch[t], stages[t], acc[t], wblocks[t]
        packed[:] = 0    # (the padding: every item writes the same inside positions)
        first, last = t * items // acc.shape[0], (t + 1) * items // acc.shape[0]
        for item in range(first, last):
            n, b = item // blocks, item % blocks    # (image-major: the blocks of an
            lanes = min(LANES, channels - b * LANES)   # image share its cache lines)
            for k in range(taps):
                store(wb, k * LANES, load(wt, k * cp + b * LANES))
            for y in range(rows):
                _gather(packed, ((y + top) * wp + left) * LANES, x,
                        (n * height + y) * width * channels + b * LANES, channels, cols, lanes)
            start_sum = load(bias, b * LANES)
            for r in range(ho):
                _row(sums, packed, wb, start_sum, r, wo, kh, kw, sh, sw, dh, dw, wp)
            base = n * size * channels + b * LANES
            if where != 0:
                _gather(stage, 0, residual, base, channels, size, lanes)
            finish(sums[:size * LANES], stage[:size * LANES], where, act, lo, hi)
            _scatter(out, sums, base, channels, size, lanes)


# Up to this many output positions a plane the loop measured as fast as ``conv_lanes`` or
# faster, which it then spares its transposes (0.76-0.96x on 7x7 and 14x14 outputs, 3x3
# and 5x5 kernels, batch 1 and 16); on 28x28 and larger planes 1.1-1.3x slower: each
# block's plane is gathered from positions of ``C`` floats, half a cache line each.
MAX_POSITIONS = 14 * 14


def wanted(x_shape, w_shape, out_hw, padding, groups, dtype) -> bool:
    """Whether a conv of NCHW shapes ``x_shape``, ``w_shape`` runs here in channels-last:
    float32 depthwise (one input and one output channel per group), no negative padding,
    an output plane of at most ``MAX_POSITIONS``."""
    return (dtype == np.float32 and len(x_shape) == 4 and groups == x_shape[1] == w_shape[0]
            and w_shape[1] == 1 and min(min(p) for p in padding) >= 0
            and out_hw[0] * out_hw[1] <= MAX_POSITIONS)


def fitted(x_shape, wt_shape, stride, padding, dilation, residual=False, where=0, act=0,
           lo=-np.inf, hi=np.inf):
    """``run(x, wt, bias, residual=None)``: :func:`conv` fitted to these shapes, its sizes,
    thread count and compiled entry worked out once (a call on a 7x7 plane is a few
    microseconds of loop: the Python around it counts)."""
    n, h, wd, c = x_shape
    kh, kw, cp = wt_shape
    ho = (h + sum(padding[0]) - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd + sum(padding[1]) - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    hp = (ho - 1) * stride[0] + (kh - 1) * dilation[0] + 1   # (the padded rows and
    wp = (wo - 1) * stride[1] + (kw - 1) * dilation[1] + 1   # columns the outputs read)
    workers = max(1, min(n * (cp // LANES), threads_for(n * ho * wo * c * kh * kw) or cores()))
    rows = min(h, hp - padding[0][0])    # (the input rows and columns the outputs read)
    cols = min(wd, wp - padding[1][0])
    geometry = np.array([c, cp, h, wd, ho, wo, kh, kw, *stride, *dilation, padding[0][0],
                         padding[1][0], wp, rows, cols], np.int64)
    sizes = dict(scratch=(workers, hp * wp * LANES), acc=(workers, ho * wo * LANES),
                 stages=(workers, ho * wo * LANES if residual else 1),
                 wblocks=(workers, kh * kw * LANES))
    codes = (act, F(lo), F(hi), where)

    def run(x, wt, bias, residual=None, out=None):
        out = np.empty((n, ho, wo, c), F) if out is None else out
        if bias.shape[0] != cp:
            bias = np.concatenate([bias, np.zeros(cp - bias.shape[0], F)])
        res = _NO_RESIDUAL if residual is None else residual.reshape(-1)
        buffers = [np.empty(sizes[k], F) for k in ("scratch", "stages", "acc", "wblocks")]
        run_rows(_depthwise, workers, np.ascontiguousarray(x).reshape(-1), wt.reshape(-1),
                 bias, out.reshape(-1), res, *buffers, *codes, geometry, threads=workers)
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
