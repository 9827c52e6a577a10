"""Depthwise convolution's gradients (one input and one output channel per group) as
direct loops over NCHW planes; its forward (and the stride-1 input gradient, which is a
forward conv) is ``conv_direct``'s loop.

As a grouped GEMM each channel's product is 1 x kh*kw x Ho*Wo: all overhead, and im2col
copies the input kh*kw times for it. Here each row of the result is accumulated tap by
tap in a row buffer that stays in L1, every tap one contiguous multiply-add along the row
that vectorises. Padding, stride and dilation are index ranges: for tap ``(i, j)`` output row
``r`` reads input row ``r * sh + i * dh - top`` when that is inside the input, and
positions ``v0 <= v < v1`` read column ``v + j * dw - left`` (:func:`_columns`), so
nothing is padded or copied. A column stride ``sw`` > 1 is computed at stride 1 over the
``(Wo - 1) * sw + 1`` positions and every ``sw``-th kept (``sw`` times the multiply-adds,
but vectorised: a strided load runs a scalar loop, ~6x slower here); the gradients expand
the output gradient's rows with zeros in between the same way.

Rows of fewer than ``TILE_WIDTH`` outputs (MobileNet's 7x7 and 14x14 layers) are too short
to vectorise along: there the tensors go to a blocked layout, ``BLOCK`` channels last
within each block (NCHW16c: :func:`to_blocks`, :func:`from_blocks`), and each tap on a run
of positions is one contiguous multiply-add over the run's channels (:func:`_blocks`).

Work is shared among threads (``threads.run_rows``): the row loops as worker slots, slot
``t`` of ``workers`` taking a contiguous run of planes or channels (:func:`_share`) with
its own row buffer ``acc[t]``; the blocked loops as tiles (image, channel block). Each
plane, channel or tile is computed by one thread in one order, so the bits do not depend
on the number of threads.
"""
from __future__ import annotations

import numpy as np

from . import conv_direct, helper, loop
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


# -- channel blocks: rows too short to vectorise along ----------------------------------------
# The tensors go to a blocked layout first, (N, C/BLOCK, H, W * BLOCK) with BLOCK channels
# per position (NCHW16c; two NumPy transposes, a small share here: these are the small
# planes), so a tap on a run of positions is one contiguous multiply-add over ``run *
# BLOCK`` values, the weights repeated along the run (``wrep``). (A loop of BLOCK over the
# channels alone is unrolled by LLVM into scalar operations, ~5x slower.) Strides go
# through positions as in the row loops: the input gradient's ``g`` is spread first.
@helper(inline="always")
def _block_tap(dst, wk, src, count):
    for m in range(count):
        dst[m] += wk[m] * src[m]


@loop
def _blocks(start, stop, gb, wrep, ob, sh, dh, dw, top, left):
    """Tiles ``start:stop`` (image, channel block) of the blocked input gradient at stride 1
    along the positions, with ``wrep (C/BLOCK, kh, kw, positions * BLOCK)``: ``ob (N,
    C/BLOCK, H, W * BLOCK)`` from the spread output gradient ``gb (N, C/BLOCK, Ho,
    positions * BLOCK)``, the forward's reads as additions."""
    blocks, kh, kw = wrep.shape[0], wrep.shape[1], wrep.shape[2]
    height, width = ob.shape[2], ob.shape[3] // BLOCK
    out_height, positions = gb.shape[2], gb.shape[3] // BLOCK
    for tile in range(start, stop):
        n, b = tile // blocks, tile % blocks
        ob[n, b] = 0
        for r in range(out_height):
            for i in range(kh):
                y = r * sh + i * dh - top
                if y < 0 or y >= height:
                    continue
                for j in range(kw):
                    v0, v1, offset = _columns(j, dw, left, width, positions)
                    if v1 > v0:
                        _block_tap(ob[n, b, y, (v0 + offset) * BLOCK:], wrep[b, i, j],
                                   gb[n, b, r, v0 * BLOCK:], (v1 - v0) * BLOCK)


@loop
def _weight_grad_blocks(start, stop, xb, gb, acc, sh, dh, dw, top, left):
    """Channel blocks ``start:stop`` of the weight gradient, before its sum over positions:
    ``acc (C/BLOCK, kh, kw, positions * BLOCK)`` += ``x * g`` at each tap, over every image
    and row, from ``xb (N, C/BLOCK, H, W * BLOCK)`` and the spread ``gb (N, C/BLOCK, Ho,
    positions * BLOCK)`` (one block's images in one order: the bits do not depend on
    threads)."""
    images, kh, kw = xb.shape[0], acc.shape[1], acc.shape[2]
    height, width = xb.shape[2], xb.shape[3] // BLOCK
    out_height, positions = gb.shape[2], gb.shape[3] // BLOCK
    for b in range(start, stop):
        acc[b] = 0
        for n in range(images):
            for r in range(out_height):
                for i in range(kh):
                    y = r * sh + i * dh - top
                    if y < 0 or y >= height:
                        continue
                    for j in range(kw):
                        v0, v1, offset = _columns(j, dw, left, width, positions)
                        if v1 > v0:
                            dst = acc[b, i, j, v0 * BLOCK:]
                            run = xb[n, b, y, (v0 + offset) * BLOCK:]
                            at = gb[n, b, r, v0 * BLOCK:]
                            for m in range((v1 - v0) * BLOCK):
                                dst[m] += run[m] * at[m]


@loop
def _blocks_in(start, stop, src, dst, spread):
    """Tiles ``start:stop``: ``dst[t, y, (v * spread) * BLOCK + k] = src[t, k, y, v]`` (``src
    (T, BLOCK, H, W)``, ``dst (T, H, P * BLOCK)``, zero first where ``spread`` > 1): a
    transpose NumPy runs ~7x slower (2.5 ns an element)."""
    height, width = src.shape[2], src.shape[3]
    for t in range(start, stop):
        if spread > 1:
            dst[t] = 0
        for y in range(height):
            for v in range(width):
                at = v * spread * BLOCK
                for k in range(BLOCK):
                    dst[t, y, at + k] = src[t, k, y, v]


@loop
def _blocks_out(start, stop, src, dst, step):
    """Tiles ``start:stop``: ``dst[t, k, y, v] = src[t, y, (v * step) * BLOCK + k]``."""
    height, width = dst.shape[2], dst.shape[3]
    for t in range(start, stop):
        for y in range(height):
            for v in range(width):
                at = v * step * BLOCK
                for k in range(BLOCK):
                    dst[t, k, y, v] = src[t, y, at + k]


def _padded_channels(a):
    """``a (N, C, H, W)`` with zero channels up to a multiple of BLOCK (``a`` itself when
    it is one)."""
    n, c, h, w = a.shape
    extra = -c % BLOCK
    if not extra:
        return np.ascontiguousarray(a)
    return np.concatenate([a, np.zeros((n, extra, h, w), a.dtype)], axis=1)


def to_blocks(a, spread=1):
    """``a (N, C, H, W)`` in the blocked layout ``(N, ceil(C/BLOCK), H, P * BLOCK)``, zero
    past C; with ``spread`` > 1 the columns spread to ``P = (W - 1) * spread + 1``
    positions, zeros between."""
    a = _padded_channels(a)
    n, c, h, w = a.shape
    out = np.empty((n, c // BLOCK, h, ((w - 1) * spread + 1) * BLOCK), a.dtype)
    tiles = n * c // BLOCK
    run_rows(_blocks_in, tiles, a.reshape(tiles, BLOCK, h, w),
             out.reshape(tiles, h, -1), spread, threads=threads_for(out.size))
    return out


def from_blocks(ab, out, step=1):
    """``out (N, C, H, W)`` = the blocked ``ab (N, C/BLOCK, H, P * BLOCK)``, keeping every
    ``step``-th position."""
    n, blocks, h = ab.shape[:3]
    c, w = out.shape[1], out.shape[3]
    whole = (out if c == blocks * BLOCK and out.flags.c_contiguous
             else np.empty((n, blocks * BLOCK, h, w), out.dtype))
    tiles = n * blocks
    run_rows(_blocks_out, tiles, ab.reshape(tiles, h, -1),
             whole.reshape(tiles, BLOCK, h, w), step, threads=threads_for(out.size))
    if whole is not out:
        out[...] = whole[:, :c]


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


def _run_blocks(gb, w, ob, stride, padding, dilation):
    """:func:`_blocks` over the tiles (image, channel block) of ``gb`` into ``ob``."""
    tiles = gb.shape[0] * gb.shape[1]
    sh, _, dh, dw, top, left = _geometry(stride, padding, dilation)
    run_rows(_blocks, tiles, gb, _repeated_weight(w, gb.shape[3] // BLOCK), ob, sh, dh, dw,
             top, left, threads=threads_for(ob.size))


def _planes(a):
    return np.ascontiguousarray(a).reshape(-1, *a.shape[2:])


def _taps(w):
    return np.ascontiguousarray(w).reshape(w.shape[0], *w.shape[2:])


def depthwise(x, w, out, stride, padding, dilation):
    """``out (N, C, Ho, Wo)`` = the depthwise conv of ``x (N, C, H, W)`` with ``w (C, 1,
    kh, kw)`` (attrs as ``conv2d``'s, padding ``((top, bottom), (left, right))``, which may
    be negative): ``conv_direct``'s loop."""
    conv_direct.conv(x, w, out, stride, padding, dilation, x.shape[1],
                     np.zeros(x.shape[1], x.dtype))


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
        n, c, h, wd = out.shape
        ob = np.empty((n, -(-c // BLOCK), h, wd * BLOCK), g.dtype)
        _run_blocks(to_blocks(g, stride[1]), w, ob, stride, padding, dilation)
        from_blocks(ob, out)
        return
    _run(_input_grad, g.shape[0] * g.shape[1], _planes(g), _taps(w), _planes(out),
         g.shape[3], stride, padding, dilation, out.size)


def depthwise_weight_grad(x, g, out, stride, padding, dilation):
    """``out (C, 1, kh, kw)``: the weight gradient of :func:`depthwise` (rows under
    ``TILE_WIDTH``: in the blocked layout, summed over positions at the end)."""
    c = x.shape[1]
    if g.shape[3] < TILE_WIDTH:
        xb, gb = to_blocks(x), to_blocks(g, stride[1])
        blocks, kh, kw = xb.shape[1], out.shape[2], out.shape[3]
        acc = np.empty((blocks, kh, kw, gb.shape[3]), x.dtype)
        sh, _, dh, dw, top, left = _geometry(stride, padding, dilation)
        run_rows(_weight_grad_blocks, blocks, xb, gb, acc, sh, dh, dw, top, left,
                 threads=threads_for(x.size))
        sums = acc.reshape(blocks, kh, kw, -1, BLOCK).sum(axis=3)       # blocks kh kw BLOCK
        out[...] = sums.transpose(0, 3, 1, 2).reshape(-1, 1, kh, kw)[:c]
        return
    _run(_weight_grad, c, np.ascontiguousarray(x), np.ascontiguousarray(g),
         out.reshape(c, *out.shape[2:]), g.shape[3], stride, padding, dilation, x.size)
