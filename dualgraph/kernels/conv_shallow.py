"""Convolutions with few input channels (one group, float32: an image's first layer, 3
channels), forward with the epilogue, eight output channels in the lanes of a vector.

As im2col + GEMM such a conv is a GEMM only ``C*kh*kw`` deep (27 for a 3x3 kernel on 3
channels): too shallow for the GEMM to reach its speed, after a column buffer 9-49 times
the input. Here the image is copied once into zero-padded planes (padding, stride and
dilation then index arithmetic, nothing special at the edges), and a work item is an
image's block of eight output channels: for eight output positions of a row at a time,
each tap's eight weights (one per output channel, packed ``(block, C, kh, kw, 8)``) are
one vector, and each position's input value, broadcast, is one multiply-add into that
position's eight sums (eight vectors in registers, started from the bias). The sums are
activated in place and transposed 8x8 into the eight output planes (``simd.transpose``);
with a residual, the epilogue runs on each finished plane (``conv_lanes.finish``). A
row's last eight positions end at its end (recomputing some); a last block of fewer than
eight channels has zero weights in its spare lanes and moves element by element.

Items are shared among threads (``threads.run_rows``); each output is summed by one thread
in tap order, so the bits do not depend on the thread count.
"""
from __future__ import annotations

import numpy as np

from . import helper, loop
from .conv_lanes import finish
from .conv_outlanes import pad_image
from .epilogue import _activate
from .simd import LANES, broadcast_at, fma, load, store, transpose
from .threads import run_rows, threads_for
from .tuning import cores

F = np.float32


@helper(inline="always")
def _pad(x, base, channels, height, width, padded, hp, wp, top, left):
    """The image at ``base`` of the flat ``x`` into ``padded (C * hp * wp)``: zeros, then
    its rows and columns that the outputs read at row ``top`` and column ``left``."""
    padded[:] = 0
    pad_image(x, base, channels, min(height, hp - top), min(width, wp - left), width, height,
              padded, hp, wp, top, left)


@helper(inline="always")
def _eight(padded, wt, wbase, bias, channels, o, kh, kw, sw, dh, dw, hp, wp, sums):
    """The sums of eight output positions side by side (the first's window starts at
    ``o`` in the padded planes) into ``sums (64)``: position ``q``'s eight channels at
    ``sums[8q:8q + 8]``."""
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = bias
    for c in range(channels):
        for i in range(kh):
            p = o + (c * hp + i * dh) * wp
            for j in range(kw):
                w = load(wt, wbase + ((c * kh + i) * kw + j) * LANES)
                q = p + j * dw
                a0 = fma(broadcast_at(padded, q), w, a0)
                a1 = fma(broadcast_at(padded, q + sw), w, a1)
                a2 = fma(broadcast_at(padded, q + 2 * sw), w, a2)
                a3 = fma(broadcast_at(padded, q + 3 * sw), w, a3)
                a4 = fma(broadcast_at(padded, q + 4 * sw), w, a4)
                a5 = fma(broadcast_at(padded, q + 5 * sw), w, a5)
                a6 = fma(broadcast_at(padded, q + 6 * sw), w, a6)
                a7 = fma(broadcast_at(padded, q + 7 * sw), w, a7)
    store(sums, 0, a0)
    store(sums, LANES, a1)
    store(sums, 2 * LANES, a2)
    store(sums, 3 * LANES, a3)
    store(sums, 4 * LANES, a4)
    store(sums, 5 * LANES, a5)
    store(sums, 6 * LANES, a6)
    store(sums, 7 * LANES, a7)


@loop(fastmath={"contract"})
def _shallow(start, stop, x, wt, bias, out, residual, scratch, stages, act, lo, hi, where,
             channels, cout, height, width, ho, wo, kh, kw, sh, sw, dh, dw, top, left, hp,
             wp):
    """Slots ``start:stop`` of ``scratch.shape[0]``: the items (image, block of eight
    output channels) of the flat ``x (N, C, H, W)`` convolved with ``wt (blocks, C, kh,
    kw, 8)`` (flat, spare lanes' weights 0) and ``bias (blocks * 8)`` into the flat ``out
    (N, Cout, Ho, Wo)``, with ``conv_lanes.finish``'s epilogue (``residual`` flat like
    ``out``)."""
    blocks = -(-cout // LANES)
    items = out.size // (cout * ho * wo) * blocks
    size = ho * wo
    for t in range(start, stop):
        padded, sums = scratch[t], stages[t]
        image = -1
        first, last = t * items // scratch.shape[0], (t + 1) * items // scratch.shape[0]
        for item in range(first, last):
            n, b = item // blocks, item % blocks
            if n != image:
                _pad(x, n * channels * height * width, channels, height, width, padded, hp,
                     wp, top, left)
                image = n
            lanes = min(LANES, cout - b * LANES)
            base = (n * cout + b * LANES) * size
            start_sum = load(bias, b * LANES)
            for r in range(ho):
                for v in range(0, wo, LANES):
                    v = min(v, wo - LANES)
                    o, wb = r * sh * wp + v * sw, b * channels * kh * kw * LANES
                    if sw == 1:   # (a constant column stride: the eight positions' loads
                        #            at fixed offsets, not a chain of adds, 2.5x faster)
                        _eight(padded, wt, wb, start_sum, channels, o, kh, kw, 1, dh, dw, hp,
                               wp, sums)
                    elif sw == 2:
                        _eight(padded, wt, wb, start_sum, channels, o, kh, kw, 2, dh, dw, hp,
                               wp, sums)
                    else:
                        _eight(padded, wt, wb, start_sum, channels, o, kh, kw, sw, dh, dw, hp,
                               wp, sums)
                    if where == 0:
                        _activate(sums, act, lo, hi)
                    if lanes == LANES:
                        transpose(sums, 0, LANES, out, base + r * wo + v, size)
                    else:
                        for c in range(lanes):
                            for q in range(LANES):
                                out[base + c * size + r * wo + v + q] = sums[q * LANES + c]
            if where != 0:
                for c in range(lanes):
                    p = base + c * size
                    finish(out[p:p + size], residual[p:p + size], where, act, lo, hi)


MAX_CHANNELS = 4


def wanted(x_shape, w_shape, out_hw, padding, groups, dtype) -> bool:
    """Whether a conv runs here: float32, one group, at most ``MAX_CHANNELS`` input
    channels, rows of at least eight outputs, no negative padding."""
    return (dtype == np.float32 and groups == 1 and x_shape[1] <= MAX_CHANNELS
            and out_hw[1] >= LANES and min(min(p) for p in padding) >= 0)


def conv(x, w, out, stride, padding, dilation, groups, bias, residual=None, where=0, act=0,
         lo=-np.inf, hi=np.inf):
    """``out (N, Cout, Ho, Wo)`` = the conv of ``x (N, C, H, W)`` with ``w (Cout, C, kh,
    kw)`` and ``bias (Cout,)`` (float32, :func:`wanted`), with ``conv_tiles.conv``'s
    epilogue arguments (``groups`` 1, taken for the same signature)."""
    x = np.ascontiguousarray(x, F)
    n, c, h, wd = x.shape
    cout, _, kh, kw = w.shape
    ho, wo = out.shape[2:]
    hp = (ho - 1) * stride[0] + (kh - 1) * dilation[0] + 1   # (the padded rows and
    wp = (wo - 1) * stride[1] + (kw - 1) * dilation[1] + 1   # columns the outputs read)
    blocks = -(-cout // LANES)
    wt = np.zeros((blocks * LANES, c * kh * kw), F)
    wt[:cout] = w.reshape(cout, -1)
    wt = np.ascontiguousarray(wt.reshape(blocks, LANES, -1).transpose(0, 2, 1))
    b = np.zeros(blocks * LANES, F)
    b[:cout] = bias
    items = n * blocks
    workers = max(1, min(items, threads_for(out.size * c * kh * kw) or cores()))
    scratch = np.empty((workers, c * hp * wp), F)
    stages = np.empty((workers, LANES * LANES), F)
    res = (np.zeros(1, F) if residual is None
           else np.ascontiguousarray(residual, F).reshape(-1))
    run_rows(_shallow, workers, x.reshape(-1), wt.reshape(-1), b, out.reshape(-1), res,
             scratch, stages, act, F(lo), F(hi), where, c, cout, h, wd, ho, wo, kh, kw,
             stride[0], stride[1], dilation[0], dilation[1], padding[0][0], padding[1][0], hp,
             wp, threads=workers)
    return out
