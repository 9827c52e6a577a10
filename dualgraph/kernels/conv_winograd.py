"""Dense 3x3 stride-1 convolutions (one group, float32) by Winograd's minimal filtering
F(2x2, 3x3): each 2x2 block of outputs from a 4x4 tile of the input in 16 multiplies per
input channel instead of 36, the 16 products of all channels as 16 GEMMs.

With ``B^T``, ``G`` and ``A^T`` the transforms of F(2, 3) (Lavin and Gray, "Fast
Algorithms for Convolutional Neural Networks", 2015), an output tile is ``A^T [sum_c
(G w_c G^T) * (B^T d_c B)] A``: the weight transform ``U = G w G^T`` (a ``(16, Cout, C)``
array, one ``(Cout, C)`` matrix per point of the 4x4 tile) is made once from a constant
weight (:func:`transform_weight`, the lowering rule ``conv_winograd``), each input tile
``d`` is transformed with additions only (:func:`_input_tiles`), the sum over channels at
each of the 16 points is a GEMM ``U[p] @ V[p]`` (``(Cout, C) @ (C, tiles)``, OpenBLAS
through NumPy), and the inverse transform (additions only) writes the 2x2 outputs with the
bias and the epilogue (``conv_lanes.finish``: residual, activation) while a row is in cache
(:func:`_output_tiles`). The transformed input and the products are made for a block of
tile rows at a time (:func:`plan`), small enough to stay in cache between the three steps.

Both transforms work on a vector of tiles of a tile row at a time (``simd.py``): the row
pass of ``B^T d`` (or ``A^T M``) lane-wise on loaded vectors, the column pass on their
even and odd lanes (deinterleaved, or interleaved into the output row), the same
operations in the same order as tile by tile (the same bits at any width). The vectors
have sixteen lanes where the loops are compiled with AVX-512 and a tile row has more than
eight tiles (:func:`lanes`), else eight. The GEMMs are OpenBLAS's, whose kernel on such a
CPU (SkylakeX) is sixteen lanes wide already.

F(2x2, 3x3) and not F(4x4, 3x3): the larger tile's transforms have entries up to 8 and
1/24, and its float32 error on unit-scale data measured 4e-6 to 1.2e-5 of the output's
largest value (64 to 256 channels), above a direct conv's; F(2x2, 3x3)'s entries are 0,
+-1 and 1/2 and its error measured below the direct conv's (docs/benchmarks.md).
"""
from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import helper, loop, numba_available, out_images
from .conv_lanes import finish
from .conv_packed import wide
from .simd import (LANES, WIDE, add, broadcast, broadcast_wide, even_lanes, load_like,
                   odd_lanes, store, subtract, zip_high, zip_low)
from .threads import run_rows, threads_for
from .tuning import cores

F = np.float32
POINTS = 16           # the 4x4 points of a tile at which the products are taken
BLOCK_TILES = 512
# Workspace bytes a thread keeps between calls (:func:`workspace`): a block's transformed
# input and products (``BLOCK_TILES`` tiles or a row more, at any batch): 4.5 MB for 64
# channels on 56x56 planes, 8.7 MB for 128 on 28x28
KEPT_BYTES = 16 << 20

# G of F(2, 3): the weight transform, in float64 (the result rounded once to float32)
_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
_H = np.array([[1, 0, 0, 0], [0, 1, -1, 0], [0, 0, 0, 1]])   # H G = I


def transform_weight(w: np.ndarray) -> np.ndarray:
    """The weight ``(Cout, C, 3, 3)`` as ``U (16, Cout, C)`` float32: ``U[4i + j] = (G w
    G^T)[:, :, i, j]``, worked out in float64.

    >>> transform_weight(np.ones((2, 3, 3, 3), np.float32)).shape
    (16, 2, 3)
    """
    u = np.einsum("ia,kcab,jb->ijkc", _G, w.astype(np.float64), _G)
    return np.ascontiguousarray(u.reshape(POINTS, *w.shape[:2]), F)


def untransform(u: np.ndarray) -> np.ndarray:
    """:func:`transform_weight`'s inverse, ``(Cout, C, 3, 3)`` (``H U H^T`` with ``H G =
    I``: rows 0, 1 - 2 and 3 of the 4x4 points), up to ``U``'s rounding."""
    u4 = u.reshape(4, 4, *u.shape[1:]).astype(np.float64)
    w = np.einsum("ai,ijkc,bj->kcab", _H, u4, _H)
    return np.ascontiguousarray(w, u.dtype)


@helper(inline="always")
def _fill_rows(x, base, height, width, y0, left, count, rows, wr):
    """``rows`` (flat, rows ``wr`` apart) = input rows ``y0 .. y0 + count - 1`` of the plane
    at ``x[base:]`` from column ``-left`` on, zero outside the plane (the conv's padding):
    plain loops over flat indices (a slice assignment per row cost more than the
    transform)."""
    cols = min(width, wr - left)
    for i in range(count):
        y, at = y0 + i, i * wr
        if 0 <= y < height:
            src = base + y * width
            for u in range(left):
                rows[at + u] = 0
            for u in range(cols):
                rows[at + left + u] = x[src + u]
            for u in range(left + cols, wr):
                rows[at + u] = 0
        else:
            for u in range(wr):
                rows[at + u] = 0


@helper(inline="always")
def _row_pass(rows, width, u, zero):
    """``B^T d`` on the four rows of ``rows`` (flat, ``width`` apart), columns ``u ..`` as
    vectors of ``zero``'s lanes: rows ``d0 - d2, d1 + d2, d2 - d1, d1 - d3``."""
    d0, d1 = load_like(rows, u, zero), load_like(rows, width + u, zero)
    d2, d3 = load_like(rows, 2 * width + u, zero), load_like(rows, 3 * width + u, zero)
    return subtract(d0, d2), add(d1, d2), subtract(d2, d1), subtract(d1, d3)


@helper(inline="always")
def _column_pass(v, at, step, low, high, low2, high2):
    """``(B^T d) B`` of one row of ``B^T d`` of a vector's worth of tiles: their columns
    ``2 tj .. 2 tj + 3`` deinterleaved from ``low, high`` (the row from ``2 tj``) and
    ``low2, high2`` (from ``2 tj + 2``), the four points stored ``step`` apart in ``v``."""
    a, b = even_lanes(low, high), odd_lanes(low, high)
    e, f = even_lanes(low2, high2), odd_lanes(low2, high2)
    store(v, at, subtract(a, e))
    store(v, at + step, add(b, e))
    store(v, at + 2 * step, subtract(e, b))
    store(v, at + 3 * step, subtract(b, f))


@helper(inline="always")
def _input_rows(start, stop, x, v, channels, height, width, top, left, th, tw, r0, r1,
                span, step, zero, lanes):
    """:func:`_input_tiles` on vectors of ``lanes`` (``zero``'s): ``lanes`` tiles of a
    tile row at a time, the row pass on the loaded rows, the column pass on their even and
    odd lanes (the same operations in the same order as tile by tile: the same bits)."""
    chunks = -(-tw // lanes)
    wr = 2 * chunks * lanes + 2
    rows = np.empty((2 * min(r1 - r0, th) + 2) * wr, F)
    plane = height * width
    for c in range(start, stop):
        r = r0
        while r < r1:            # an image's tile rows of the block: its input rows once
            n, first = r // th, r % th
            last = min(th, r1 - n * th)
            _fill_rows(x, (n * channels + c) * plane, height, width, 2 * first - top, left,
                       2 * (last - first) + 2, rows, wr)
            for ti in range(first, last):
                at = c * span + (r - r0) * tw
                for k in range(chunks):
                    u = 2 * (ti - first) * wr + 2 * k * lanes
                    a0, a1, a2, a3 = _row_pass(rows, wr, u, zero)
                    b0, b1, b2, b3 = _row_pass(rows, wr, u + lanes, zero)
                    c0, c1, c2, c3 = _row_pass(rows, wr, u + 2, zero)
                    e0, e1, e2, e3 = _row_pass(rows, wr, u + lanes + 2, zero)
                    o = at + k * lanes
                    _column_pass(v, o, step, a0, b0, c0, e0)
                    _column_pass(v, o + 4 * step, step, a1, b1, c1, e1)
                    _column_pass(v, o + 8 * step, step, a2, b2, c2, e2)
                    _column_pass(v, o + 12 * step, step, a3, b3, c3, e3)
                r += 1


@loop
def _input_tiles(start, stop, x, v, channels, height, width, top, left, th, tw, r0, r1,
                 span, step, wide):
    """Channels ``start:stop`` of the transformed input ``v (16, C, span)`` (flat, points
    ``step = C * span`` apart; tile ``t`` of a block at ``t``, ``span >= T +
    WIDE``: a tile row's last vector may run ``WIDE - 1`` past it) of tile rows ``r0:r1`` (flat over ``(image, tile row)``, ``tw``
    tiles each, ``T = (r1 - r0) * tw``) of ``x (N, C, H, W)`` (flat): ``V = B^T d B`` of
    each 4x4 tile ``d`` (rows ``2 ti - top ..``, columns ``2 tj - left ..``), the rows of
    ``B^T d`` (rows ``d0 - d2, d1 + d2, d2 - d1, d1 - d3``) then its columns, on vectors of
    sixteen lanes where ``wide`` (:func:`lanes`), else eight."""
    if wide:
        _input_rows(start, stop, x, v, channels, height, width, top, left, th, tw, r0, r1,
                    span, step, broadcast_wide(F(0)), WIDE)
    else:
        _input_rows(start, stop, x, v, channels, height, width, top, left, th, tw, r0, r1,
                    span, step, broadcast(F(0)), LANES)


@helper(inline="always")
def _products_column(m, o, step, zero):
    """Column ``j`` of ``A^T M`` for a vector of tiles, whose points ``j, 4 + j, 8 + j, 12 +
    j`` lie from ``o`` (at point ``j``) ``4 step`` apart in ``m``: its rows ``m0 + m1 +
    m2`` and ``m1 - m2 - m3``."""
    m0, m1 = load_like(m, o, zero), load_like(m, o + 4 * step, zero)
    m2, m3 = load_like(m, o + 8 * step, zero), load_like(m, o + 12 * step, zero)
    return add(add(m0, m1), m2), subtract(subtract(m1, m2), m3)


@helper(inline="always")
def _output_row(outs, at, lanes, c0, c1, c2, c3, b):
    """One output row of a vector of tiles from its row of ``A^T M`` (``c0 .. c3``): ``(A^T
    M) A`` plus the bias ``b``, columns ``c0 + c1 + c2`` and ``c1 - c2 - c3`` interleaved
    into ``outs[at:at + 2 lanes]``."""
    even = add(add(add(c0, c1), c2), b)
    odd = add(subtract(subtract(c1, c2), c3), b)
    store(outs, at, zip_low(even, odd))
    store(outs, at + lanes, zip_high(even, odd))


@helper(inline="always")
def _output_rows(start, stop, m, biases, out, residual, cout, ho, wo, th, tw, r0, r1, span,
                 step, where, act, lo, hi, ostride, zero, lanes):
    """:func:`_output_tiles` on vectors of ``lanes`` (``zero``'s): ``lanes`` tiles at a
    time, their two output rows' even and odd columns interleaved into ``outs``."""
    chunks = -(-tw // lanes)
    ow = 2 * chunks * lanes
    outs = np.empty(2 * ow, F)
    size = ho * wo
    for k in range(start, stop):
        b = load_like(biases, k * WIDE, zero)
        r = r0
        while r < r1:            # an image's tile rows of the block, its epilogue once
            n, first = r // th, r % th
            last = min(th, r1 - n * th)
            plane, at = n * ostride + k * size, (n * cout + k) * size
            for ti in range(first, last):
                for q in range(chunks):
                    o = k * span + (r - r0) * tw + q * lanes
                    c0, e0 = _products_column(m, o, step, zero)
                    c1, e1 = _products_column(m, o + step, step, zero)
                    c2, e2 = _products_column(m, o + 2 * step, step, zero)
                    c3, e3 = _products_column(m, o + 3 * step, step, zero)
                    _output_row(outs, 2 * q * lanes, lanes, c0, c1, c2, c3, b)
                    _output_row(outs, ow + 2 * q * lanes, lanes, e0, e1, e2, e3, b)
                for dy in range(min(2, ho - 2 * ti)):
                    y = plane + (2 * ti + dy) * wo
                    for u in range(wo):
                        out[y + u] = outs[dy * ow + u]
                r += 1
            # (on the run's rows at once: views cost two reference counts each)
            y0, y1 = 2 * first * wo, min(2 * last, ho) * wo
            finish(out[plane + y0:plane + y1], residual[at + y0:at + y1], where, act, lo, hi)


@loop
def _output_tiles(start, stop, m, biases, out, residual, cout, ho, wo, th, tw, r0, r1,
                  span, step, where, act, lo, hi, ostride, wide):
    """Output channels ``start:stop`` of tile rows ``r0:r1`` (as :func:`_input_tiles`'):
    ``A^T M A`` of each tile's 16 products ``m (16, Cout, span)`` (as ``v`` in
    :func:`_input_tiles`: points ``step`` apart), plus the bias (``biases``: each
    channel's ``WIDE`` times), into
    ``out (N, Cout, Ho, Wo)`` (flat, image ``n`` from ``n * ostride``:
    ``kernels.out_images``), two rows at a time (a partial tile's extra outputs dropped),
    with ``conv_lanes.finish``'s epilogue on each image's rows (``residual`` flat like
    ``out``):
    ``A^T M`` (rows ``m0 + m1 + m2`` and ``m1 - m2 - m3`` of each of the tile's four
    columns), then by ``A`` (the same along the columns), on vectors of sixteen lanes where
    ``wide``, else eight."""
    if wide:
        _output_rows(start, stop, m, biases, out, residual, cout, ho, wo, th, tw, r0, r1,
                     span, step, where, act, lo, hi, ostride, broadcast_wide(F(0)), WIDE)
    else:
        _output_rows(start, stop, m, biases, out, residual, cout, ho, wo, th, tw, r0, r1,
                     span, step, where, act, lo, hi, ostride, broadcast(F(0)), LANES)


class Plan(NamedTuple):
    """What a conv of one geometry needs besides its arrays, worked out once."""
    th: int                 # tile rows and columns of an image
    tw: int
    block: int              # tile rows transformed and multiplied at once


def plan(x_shape, out_hw) -> Plan:
    """The :class:`Plan` of a conv of ``x_shape`` to ``out_hw``: blocks of whole tile rows,
    ``BLOCK_TILES`` tiles or more (the GEMMs' columns: fewer ran them slower)."""
    th, tw = -(-out_hw[0] // 2), -(-out_hw[1] // 2)
    return Plan(th, tw, max(1, min(x_shape[0] * th, -(-BLOCK_TILES // tw))))


def wanted(x_shape, w_shape, stride, padding, dilation, groups, dtype) -> bool:
    """Whether :func:`conv` can take the conv: float32, one group, a 3x3 kernel at stride
    1 and dilation 1, no negative padding (which conv the compiler gives it: the cost rule
    ``faster``)."""
    return (np.dtype(dtype) == np.float32 and groups == 1 and tuple(w_shape[2:]) == (3, 3)
            and tuple(stride) == (1, 1) and tuple(dilation) == (1, 1)
            and min(min(p) for p in padding) >= 0 and numba_available())


# The cost rule's bounds (``faster``): where Winograd measured faster than the packed loop
MIN_CHANNELS = 10     # C*Cout / (2 C + Cout) on wide planes: the per-tile share ~ 1/Cout + 2/C
# ... where the packed loop sums two pairs of sixteen channels an item (``conv_packed``'s
# ``WIDE_PAIRS``, AVX-512 at full width), 1.2-1.4x faster (with sixteen outputs or fewer,
# one pair, C*Cout / (2 C + Cout) < Cout / 2 is below either bound)
MIN_CHANNELS_PAIRS = 17
ROW_TILES = 8         # tiles of a row: narrower planes need proportionally more channels
MIN_TILES = 32        # tiles of the batch: the GEMMs' columns


def faster(x_shape, w_shape, out_hw) -> bool:
    """The cost rule: whether :func:`conv` runs a conv that :func:`wanted` takes faster than
    ``conv_packed``'s loop (both on sixteen-lane vectors on AVX-512). The GEMMs do 16/36
    of the direct conv's multiplies, less the outputs of partial tiles that are dropped (an
    odd plane: a 13x13 one computes 14x14); the transforms and the GEMMs add work per tile
    proportional to ``2 C + Cout`` (the input side counted twice: its transform reads and
    pads each input row twice, the tile rows overlapping by two, and a GEMM with few
    outputs, ``(Cout, C) @ (C, tiles)``, runs below the BLAS's speed) and a cost per row of
    tiles (``tw`` tiles; a row of eight or fewer fills one eight-lane vector, four of them
    half of one), so they pay where ``C*Cout * kept / (2 C + Cout) >= MIN_CHANNELS * (1 +
    ROW_TILES / tw)`` (two 64-channel layers from 16x16 planes on; 48 -> 192 on 13x13; 128
    from 7x7 at batch 16; not 64 on 8x8, 1.1-1.3x the packed loop's time, nor 128 -> 32 on
    28x28, 1.2x), and the GEMMs run near the BLAS's speed with ``MIN_TILES`` columns or
    more (a 7x7 plane at batch 1 has 16: its weight, 16/9 the direct conv's, is read for
    too few columns; 256 channels there took 1.8x). Measured on 3x3 layers of 16 to 512
    channels, 7x7 to 64x64 planes, batch 1 and 16 (docs/benchmarks.md, "Winograd"). Only
    where dualgraph runs on one core (``tuning.cores()``, as when the graph is compiled): on
    two, a block hands work to the other core 18 times (two loops, 16 threaded GEMMs) where
    the packed loop does once, and it has not been measured to pay there. Against the
    packed loop's two pairs an item the bound is ``MIN_CHANNELS_PAIRS`` (64 channels on
    56x56, 128 -> 64 on 28x28 and 128 -> 32 on 56x56 then ran 0.7-0.95x Winograd's time at
    batch 1 and 16; 96 on 20x20 and 128 on 28x28 1.05-1.13x)."""
    c, cout = x_shape[1], w_shape[0]
    th, tw = -(-out_hw[0] // 2), -(-out_hw[1] // 2)
    kept = out_hw[0] * out_hw[1] / (4 * th * tw)
    bound = MIN_CHANNELS_PAIRS if wide() else MIN_CHANNELS
    return (c * cout * tw * kept >= bound * (2 * c + cout) * (tw + ROW_TILES)
            and x_shape[0] * th * tw >= MIN_TILES and cores() == 1)


def conv(x, u, out, padding, bias, plan_=None, residual=None, where=0, act=0, lo=-np.inf,
         hi=np.inf):
    """``out (N, Cout, Ho, Wo)`` = the 3x3 stride-1 conv of ``x (N, C, H, W)`` with the
    weight transformed by :func:`transform_weight` ``u (16, Cout, C)`` and ``bias (Cout,)``,
    with ``conv_tiles.conv``'s epilogue arguments (``out`` may be a concatenation's block
    of channels: ``kernels.out_images``); ``plan_`` the geometry's :func:`plan` where the
    caller keeps it. Returns ``out``."""
    x = np.ascontiguousarray(x, F)
    n, c, h, wd = x.shape
    cout, ho, wo = out.shape[1:]
    p = plan_ or plan(x.shape, (ho, wo))
    rows = n * p.th
    span = p.block * p.tw + WIDE
    vstep, mstep = c * span, cout * span
    scratch = workspace(POINTS * (vstep + mstep))
    v, m = scratch[:POINTS * vstep], scratch[POINTS * vstep:]
    res = (np.zeros(1, F) if residual is None
           else np.ascontiguousarray(residual, F).reshape(-1))
    flat_x, (flat_out, ostride) = x.reshape(-1), out_images(out)
    biases = np.repeat(np.ascontiguousarray(bias, F), WIDE)
    threads = threads_for(p.block * p.tw * POINTS * max(c, cout))
    wide_ = lanes(p.tw) == WIDE
    for r0 in range(0, rows, p.block):
        r1 = min(r0 + p.block, rows)
        t = (r1 - r0) * p.tw
        vb = as_strided(v, (POINTS, c, t), (4 * vstep, 4 * span, 4))
        mb = as_strided(m, (POINTS, cout, t), (4 * mstep, 4 * span, 4))
        run_rows(_input_tiles, c, flat_x, v, c, h, wd, padding[0][0], padding[1][0],
                 p.th, p.tw, r0, r1, span, vstep, wide_, threads=threads)
        np.matmul(u, vb, out=mb)
        run_rows(_output_tiles, cout, m, biases, flat_out, res, cout, ho, wo, p.th, p.tw,
                 r0, r1, span, mstep, where, act, F(lo), F(hi), ostride, wide_,
                 threads=threads)
    return out


_kept = threading.local()    # (one conv at a time runs on a thread: its own workspace)


def workspace(size: int) -> np.ndarray:
    """A float32 array of ``size`` elements for :func:`conv`'s transformed input and
    products, kept by the calling thread from one call to the next up to ``KEPT_BYTES``:
    a block's arrays are megabytes, which glibc's allocator maps afresh (or trims from
    the heap) at each call, page-faulting them in again, a fault every 4 KiB (about a
    third of a 64-channel 56x56 conv's time at batch 1). Larger ones are made at each call,
    where the GEMMs' work on each element (``2 Cout`` multiply-adds) dwarfs its fault.

    >>> workspace(10).shape
    (10,)
    """
    if 4 * size > KEPT_BYTES:
        return np.empty(size, F)
    kept = getattr(_kept, "array", None)
    if kept is None or kept.size < size:
        kept = _kept.array = np.empty(size, F)
    return kept[:size]


def lanes(tw: int) -> int:
    """The lanes of the transforms' vectors for tile rows of ``tw`` tiles: ``WIDE`` where
    the loops are compiled with AVX-512 (``conv_packed.wide``) and a row fills more than
    an eight-lane vector, else ``LANES`` (a narrower row would leave most of a wide
    vector's lanes idle)."""
    return WIDE if wide() and tw > LANES else LANES
