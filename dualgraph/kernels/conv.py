"""Depthwise convolution (one input and one output channel per group), forward and both
gradients, as direct loops over NCHW planes.

As a grouped GEMM each channel's product is 1 x kh*kw x Ho*Wo: all overhead, and im2col
copies the input kh*kw times for it. Here each output row is accumulated tap by tap in a
row buffer that stays in L1, every tap one contiguous multiply-add along the row that
vectorises. Padding, stride and dilation are index ranges: for tap ``(i, j)`` output row
``r`` reads input row ``r * sh + i * dh - top`` when that is inside the input, and
positions ``v0 <= v < v1`` read column ``v + j * dw - left`` (:func:`_columns`), so
nothing is padded or copied. A column stride ``sw`` > 1 is computed at stride 1 over the
``(Wo - 1) * sw + 1`` positions and every ``sw``-th kept (``sw`` times the multiply-adds,
but vectorised: a strided load runs a scalar loop, ~6x slower here); the gradients expand
the output gradient's rows with zeros in between the same way.

Rows of fewer than ``TILE_WIDTH`` outputs (MobileNet's 7x7 layers) are too short to
vectorise along: there a tile of ``BLOCK`` channels of one image is copied into scratch as
(H, W, BLOCK), channels last, each tap is one vector operation over the tile's channels,
and the result is copied back to NCHW (:func:`_forward_tiles`).

Work is shared among threads (``threads.run_rows``) as worker slots: slot ``t`` of
``workers`` takes a contiguous run of planes, channels or tiles (:func:`_share`) with its
own scratch ``[t]``. Each plane or channel is computed by one slot in one order, so the
bits do not depend on the number of threads.
"""
from __future__ import annotations

import numpy as np

from . import helper, loop
from .threads import run_rows, threads_for
from .tuning import cores

BLOCK = 16          # channels per tile: one AVX-512 vector of float32
TILE_WIDTH = 16     # output rows shorter than this take the channel tiles


@helper(inline="always")
def _columns(j, dw, left, width, positions):
    """``(v0, v1, offset)``: the positions ``v`` whose tap-``j`` input column ``v +
    offset`` (offset ``j * dw - left``) lies inside ``[0, width)``."""
    offset = j * dw - left
    return max(0, -offset), min(positions, width - offset), offset


@helper(inline="always")
def _share(t, workers, items):
    """Slot ``t``'s run ``[first, last)`` of ``items`` shared among ``workers`` slots."""
    return t * items // workers, (t + 1) * items // workers


@helper(inline="always")
def _axpy(dst, a, src):
    """``dst[u] += a * src[u]``: with both 1-D views indexed from 0, Numba has no negative
    index to wrap, and the loop vectorises (an index like ``v + offset`` would not)."""
    for u in range(dst.size):
        dst[u] += a * src[u]


@helper(inline="always")
def _dot(a, b):
    """``sum(a[u] * b[u])`` over ``a``'s length (vectorised with the loop's reassoc)."""
    total = np.float32(0.0)
    for u in range(a.size):
        total += a[u] * b[u]
    return total


@helper(inline="always")
def _spread(acc, row, sw):
    """``acc`` (``(len(row) - 1) * sw + 1`` long) = ``row`` with ``sw - 1`` zeros between
    values; returns it."""
    acc[:] = 0
    for v in range(row.size):
        acc[v * sw] = row[v]
    return acc


@helper(inline="always")
def _row_taps(target, x, p, wc, r, v_lo, v_hi, sh, dh, dw, top, left):
    """``target[v_lo:v_hi] +=`` every tap's contribution to output row ``r`` of plane
    ``p`` at positions ``v_lo:v_hi`` (``wc (kh, kw)``: the plane's taps), one contiguous
    multiply-add per tap."""
    kh, kw = wc.shape
    height, width = x.shape[1], x.shape[2]
    for i in range(kh):
        y = r * sh + i * dh - top
        if y < 0 or y >= height:
            continue
        row = x[p, y]
        for j in range(kw):
            v0, v1, offset = _columns(j, dw, left, width, v_hi)
            v0 = max(v0, v_lo)
            if v1 > v0:
                _axpy(target[v0:v1], wc[i, j], row[v0 + offset:v1 + offset])


@helper(inline="always")
def _point(x, p, wc, r, v, sh, dh, dw, top, left):
    """The sum of every inside tap at output row ``r``, position ``v`` of plane ``p``: the
    few columns by the edges, where a run per tap would cost more than the sums."""
    kh, kw = wc.shape
    height, width = x.shape[1], x.shape[2]
    total = x[p, 0, 0] * 0
    for i in range(kh):
        y = r * sh + i * dh - top
        if 0 <= y < height:
            for j in range(kw):
                col = v + j * dw - left
                if 0 <= col < width:
                    total += wc[i, j] * x[p, y, col]
    return total


@helper(inline="always")
def _row_3x3(target, x, p, wc, y, v0, v1, offset, dh, dw):
    """``target[v0:v1] =`` the nine taps of a 3x3 kernel on input rows ``y, y + dh, y +
    2 dh`` (all inside), columns ``v + offset + j * dw`` (all inside): one pass, nine
    loads and multiply-adds per output, each input row a view indexed from 0."""
    a0, a1, a2 = x[p, y, v0 + offset:], x[p, y + dh, v0 + offset:], x[p, y + 2 * dh, v0 + offset:]
    b0, b1, b2 = a0[dw:], a1[dw:], a2[dw:]
    c0, c1, c2 = a0[2 * dw:], a1[2 * dw:], a2[2 * dw:]
    w00, w01, w02 = wc[0, 0], wc[0, 1], wc[0, 2]
    w10, w11, w12 = wc[1, 0], wc[1, 1], wc[1, 2]
    w20, w21, w22 = wc[2, 0], wc[2, 1], wc[2, 2]
    out = target[v0:v1]
    for u in range(out.size):
        out[u] = (w00 * a0[u] + w01 * b0[u] + w02 * c0[u] + w10 * a1[u] + w11 * b1[u]
                  + w12 * c1[u] + w20 * a2[u] + w21 * b2[u] + w22 * c2[u])


@loop
def _forward(start, stop, x, w, out, acc, sh, sw, dh, dw, top, left):
    """Slots ``start:stop`` of ``acc.shape[0]``: planes of ``out (N*C, Ho, Wo)`` from ``x
    (N*C, H, W)``, ``w (C, kh, kw)``, each row summed in the slot's ``acc`` (stride 1:
    in the output row itself). A 3x3 kernel's rows whose three input rows are inside
    take :func:`_row_3x3` on the columns where all taps are inside."""
    channels, kh, kw = w.shape
    height, width = x.shape[1], x.shape[2]
    out_height, out_width = out.shape[1], out.shape[2]
    positions = (out_width - 1) * sw + 1
    # the positions where every tap's column is inside: [inner0, inner1)
    inner0 = max(0, left)
    inner1 = min(positions, width - (kw - 1) * dw + left)
    for t in range(start, stop):
        row_acc = acc[t, :positions]
        first, last = _share(t, acc.shape[0], x.shape[0])
        for p in range(first, last):
            wc = w[p % channels]
            for r in range(out_height):
                orow = out[p, r]
                target = orow if sw == 1 else row_acc   # (stride 1: straight into out)
                y = r * sh - top
                if (kh == 3 and kw == 3 and y >= 0 and y + 2 * dh < height
                        and inner1 > inner0):
                    _row_3x3(target, x, p, wc, y, inner0, inner1, -left, dh, dw)
                    for v in range(inner0):
                        target[v] = _point(x, p, wc, r, v, sh, dh, dw, top, left)
                    for v in range(inner1, positions):
                        target[v] = _point(x, p, wc, r, v, sh, dh, dw, top, left)
                else:
                    target[:] = 0
                    _row_taps(target, x, p, wc, r, 0, positions, sh, dh, dw, top, left)
                if sw != 1:
                    for v in range(out_width):
                        orow[v] = row_acc[v * sw]


@loop
def _input_grad(start, stop, g, w, out, acc, sh, sw, dh, dw, top, left):
    """Slots ``start:stop``: planes of the input gradient ``out (N*C, H, W)`` from ``g
    (N*C, Ho, Wo)``, the forward's reads as additions (``g``'s rows spread to stride 1
    in ``acc``)."""
    channels, kh, kw = w.shape
    height, width = out.shape[1], out.shape[2]
    out_height, out_width = g.shape[1], g.shape[2]
    positions = (out_width - 1) * sw + 1
    for t in range(start, stop):
        spread = acc[t, :positions]
        first, last = _share(t, acc.shape[0], g.shape[0])
        for p in range(first, last):
            c = p % channels
            out[p] = 0
            for r in range(out_height):
                row_g = g[p, r] if sw == 1 else _spread(spread, g[p, r], sw)
                for i in range(kh):
                    y = r * sh + i * dh - top
                    if y < 0 or y >= height:
                        continue
                    row = out[p, y]
                    for j in range(kw):
                        v0, v1, offset = _columns(j, dw, left, width, positions)
                        if v1 > v0:
                            _axpy(row[v0 + offset:v1 + offset], w[c, i, j], row_g[v0:v1])


@loop(fastmath={"reassoc", "nsz"})
def _weight_grad(start, stop, x, g, out, acc, sh, sw, dh, dw, top, left):
    """Slots ``start:stop``: channels of ``out (C, kh, kw)``, each the sum over images and
    positions of ``g * x`` at each tap (``x (N, C, H, W)``, ``g (N, C, Ho, Wo)``, ``g``'s
    rows spread to stride 1 in ``acc``)."""
    images, channels, height, width = x.shape
    kh, kw = out.shape[1], out.shape[2]
    out_height, out_width = g.shape[2], g.shape[3]
    positions = (out_width - 1) * sw + 1
    for t in range(start, stop):
        spread = acc[t, :positions]
        first, last = _share(t, acc.shape[0], channels)
        for c in range(first, last):
            out[c] = 0
            for n in range(images):
                for r in range(out_height):
                    row_g = g[n, c, r] if sw == 1 else _spread(spread, g[n, c, r], sw)
                    for i in range(kh):
                        y = r * sh + i * dh - top
                        if y < 0 or y >= height:
                            continue
                        row = x[n, c, y]
                        for j in range(kw):
                            v0, v1, offset = _columns(j, dw, left, width, positions)
                            if v1 > v0:
                                out[c, i, j] += _dot(row_g[v0:v1], row[v0 + offset:v1 + offset])


# -- channel tiles: rows too short to vectorise along ------------------------------------------
# A tile's rows are flat, (position, channel) with BLOCK channels per position, so a tap
# on a run of positions is one contiguous multiply-add over ``run * BLOCK`` values, the
# weights repeated along the run (``wrep``). (A loop of BLOCK over the channels alone is
# unrolled by LLVM into scalar operations, ~5x slower.) Strides go through positions as
# in the row loops.
@helper(inline="always")
def _tile_tap(dst, wk, src, count):
    for m in range(count):
        dst[m] += wk[m] * src[m]


@loop
def _forward_tiles(start, stop, x, wrep, out, xt, ot, sh, sw, dh, dw, top, left):
    """Slots ``start:stop`` of ``xt.shape[0]``: tiles (image, channel block) of ``out (N,
    C, Ho, Wo)`` from ``x (N, C, H, W)`` and the repeated channel-blocked weight ``wrep
    (C/BLOCK, kh, kw, positions * BLOCK)``, through the slot's scratch rows ``xt (H, W *
    BLOCK)`` and ``ot (Ho, positions * BLOCK)``."""
    images, channels, height, width = x.shape
    blocks, kh, kw = wrep.shape[0], wrep.shape[1], wrep.shape[2]
    out_height, out_width = out.shape[2], out.shape[3]
    positions = (out_width - 1) * sw + 1
    for t in range(start, stop):
        first, last = _share(t, xt.shape[0], images * blocks)
        for tile in range(first, last):
            n, b = tile // blocks, tile % blocks
            c0 = b * BLOCK
            count = min(BLOCK, channels - c0)
            for y in range(height):
                for v in range(width):
                    for k in range(count):
                        xt[t, y, v * BLOCK + k] = x[n, c0 + k, y, v]
            ot[t] = 0
            for r in range(out_height):
                for i in range(kh):
                    y = r * sh + i * dh - top
                    if y < 0 or y >= height:
                        continue
                    for j in range(kw):
                        v0, v1, offset = _columns(j, dw, left, width, positions)
                        if v1 > v0:
                            _tile_tap(ot[t, r, v0 * BLOCK:], wrep[b, i, j],
                                      xt[t, y, (v0 + offset) * BLOCK:], (v1 - v0) * BLOCK)
            for r in range(out_height):
                for v in range(out_width):
                    for k in range(count):
                        out[n, c0 + k, r, v] = ot[t, r, v * sw * BLOCK + k]


@loop
def _input_grad_tiles(start, stop, g, wrep, out, gt, ot, sh, sw, dh, dw, top, left):
    """Slots ``start:stop``: the input gradient ``out (N, C, H, W)`` from ``g (N, C, Ho,
    Wo)`` by :func:`_forward_tiles`'s tiles, its reads as additions (``g`` spread to
    positions in ``gt (Ho, positions * BLOCK)``, ``ot (H, W * BLOCK)``)."""
    images, channels, height, width = out.shape
    blocks, kh, kw = wrep.shape[0], wrep.shape[1], wrep.shape[2]
    out_height, out_width = g.shape[2], g.shape[3]
    positions = (out_width - 1) * sw + 1
    for t in range(start, stop):
        first, last = _share(t, gt.shape[0], images * blocks)
        for tile in range(first, last):
            n, b = tile // blocks, tile % blocks
            c0 = b * BLOCK
            count = min(BLOCK, channels - c0)
            gt[t] = 0
            for r in range(out_height):
                for v in range(out_width):
                    for k in range(count):
                        gt[t, r, v * sw * BLOCK + k] = g[n, c0 + k, r, v]
            ot[t] = 0
            for r in range(out_height):
                for i in range(kh):
                    y = r * sh + i * dh - top
                    if y < 0 or y >= height:
                        continue
                    for j in range(kw):
                        v0, v1, offset = _columns(j, dw, left, width, positions)
                        if v1 > v0:
                            _tile_tap(ot[t, y, (v0 + offset) * BLOCK:], wrep[b, i, j],
                                      gt[t, r, v0 * BLOCK:], (v1 - v0) * BLOCK)
            for y in range(height):
                for v in range(width):
                    for k in range(count):
                        out[n, c0 + k, y, v] = ot[t, y, v * BLOCK + k]


def _repeated_weight(w, positions):
    """``w (C, 1, kh, kw)`` as ``(ceil(C/BLOCK), kh, kw, positions * BLOCK)``: each
    block's taps repeated along the positions, zero past C."""
    c, _, kh, kw = w.shape
    blocks = -(-c // BLOCK)
    out = np.zeros((blocks * BLOCK, kh, kw), w.dtype)
    out[:c] = w.reshape(c, kh, kw)
    blocked = out.reshape(blocks, BLOCK, kh, kw).transpose(0, 2, 3, 1)[:, :, :, None, :]
    return np.ascontiguousarray(np.broadcast_to(
        blocked, (blocks, kh, kw, positions, BLOCK))).reshape(blocks, kh, kw, -1)


# -- entries ----------------------------------------------------------------------------------
def _geometry(stride, padding, dilation):
    return stride[0], stride[1], dilation[0], dilation[1], padding[0][0], padding[1][0]


def _workers(items: int, size: int) -> int:
    """How many slots to share ``items`` among, for a loop touching ``size`` elements."""
    return max(1, min(items, threads_for(size) or cores()))


def _run(rows_loop, items, a, w, out, out_width, stride, padding, dilation, size):
    """``rows_loop`` over ``items`` shared among worker slots, each with a row buffer."""
    workers = _workers(items, size)
    acc = np.empty((workers, (out_width - 1) * stride[1] + 1), a.dtype)
    run_rows(rows_loop, workers, a, w, out, acc, *_geometry(stride, padding, dilation),
             threads=workers)


def _run_tiles(tiles_loop, a, w, out, in_rows, out_rows, positions, stride, padding,
               dilation):
    """``tiles_loop`` over ``a``'s images and channel blocks, with scratch per slot:
    ``in_rows``/``out_rows`` rows of ``(width, positions)`` by ``BLOCK`` values."""
    n, c = a.shape[:2]
    workers = _workers(n * -(-c // BLOCK), out.size)
    scratch_in = np.empty((workers, in_rows[0], in_rows[1] * BLOCK), a.dtype)
    scratch_out = np.empty((workers, out_rows[0], out_rows[1] * BLOCK), a.dtype)
    run_rows(tiles_loop, workers, np.ascontiguousarray(a), _repeated_weight(w, positions),
             out, scratch_in, scratch_out, *_geometry(stride, padding, dilation),
             threads=workers)


def _planes(a):
    return np.ascontiguousarray(a).reshape(-1, *a.shape[2:])


def _taps(w):
    return np.ascontiguousarray(w).reshape(w.shape[0], *w.shape[2:])


def depthwise(x, w, out, stride, padding, dilation):
    """``out (N, C, Ho, Wo)`` = the depthwise conv of ``x (N, C, H, W)`` with ``w (C, 1,
    kh, kw)`` (attrs as ``conv2d``'s, padding ``((top, bottom), (left, right))``)."""
    if out.shape[3] < TILE_WIDTH:
        positions = (out.shape[3] - 1) * stride[1] + 1
        _run_tiles(_forward_tiles, x, np.ascontiguousarray(w), out, x.shape[2:],
                   (out.shape[2], positions), positions, stride, padding, dilation)
        return
    _run(_forward, x.shape[0] * x.shape[1], _planes(x), _taps(w), _planes(out),
         out.shape[3], stride, padding, dilation, out.size)


def depthwise_input_grad(g, w, out, stride, padding, dilation):
    """``out (N, C, H, W)``: the input gradient of :func:`depthwise` for output gradient
    ``g (N, C, Ho, Wo)``. At stride 1 that is the forward conv of ``g`` with the kernel
    turned 180 degrees and the padding the dilated kernel's span less the forward's (less
    than 0 where the forward's is wider: the index ranges take that too)."""
    if stride == (1, 1):
        span = [dilation[a] * (w.shape[2 + a] - 1) for a in range(2)]
        depthwise(g, w[:, :, ::-1, ::-1], out, stride,
                  tuple((span[a] - padding[a][0], span[a] - padding[a][1]) for a in range(2)),
                  dilation)
        return
    if g.shape[3] < TILE_WIDTH:
        positions = (g.shape[3] - 1) * stride[1] + 1
        _run_tiles(_input_grad_tiles, g, w, out, (g.shape[2], positions), out.shape[2:],
                   positions, stride, padding, dilation)
        return
    _run(_input_grad, g.shape[0] * g.shape[1], _planes(g), _taps(w), _planes(out),
         g.shape[3], stride, padding, dilation, out.size)


def depthwise_weight_grad(x, g, out, stride, padding, dilation):
    """``out (C, 1, kh, kw)``: the weight gradient of :func:`depthwise`."""
    c = x.shape[1]
    _run(_weight_grad, c, np.ascontiguousarray(x), np.ascontiguousarray(g),
         out.reshape(c, *out.shape[2:]), g.shape[3], stride, padding, dilation, x.size)
