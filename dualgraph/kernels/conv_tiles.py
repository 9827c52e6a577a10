"""Convolution as GEMMs on cache-sized tiles of im2col columns, with the epilogue (bias,
activation, residual add) applied to each tile's result while it is in cache.

A tile is a run of output rows counted over the whole batch (row ``q`` is image ``q //
Ho``, row ``q % Ho``), so small images at a large batch make one wide GEMM and a large
image several; its columns ``cols (C*kh*kw, rows*Wo)`` are written by :func:`columns`
straight from the unpadded input (padding as zeros written where a tap falls outside,
stride and dilation as index arithmetic: no padded copy, no strided NumPy view), the GEMM
``(G, Cout/G, Cg*kh*kw) @ (G, Cg*kh*kw, rows*Wo)`` writes a tile buffer, and
:func:`scatter` moves the tile to the output planes adding the bias (and a residual) and
applying the activation on the way, one pass while the tile is in cache instead of
another pass over the whole output. A stride-1 conv with enough channels needs no
columns at all (:func:`shifted`).

The column rows (and the scatter's channels) are shared among threads (``run_rows``);
the GEMMs take OpenBLAS's threads. Each element is summed by one GEMM call (the shifted
form: ``kh*kw`` calls in tap order), so the bits do not depend on the number of threads.
"""
from __future__ import annotations

import numpy as np

from . import blas_threads, helper, loop
from .batched import NO_TRANS, ROW_MAJOR
from .epilogue import _activate, _add_activate
from .threads import run_rows, threads_for

# A tile's columns: a few times L2, so that the GEMM's panels are wide (OpenBLAS repacks
# them anyway) while the columns written are still in the last-level cache when the GEMM
# reads them (1 to 8 MB measured alike on 3x3 stride-1 layers of 64-512 channels).
TILE_BYTES = 2 << 20
# The shifted GEMMs (:func:`shifted`) copy the weight into tap-major order at each call, a
# pass over it that pays from a few hundred output positions per weight element on.
SHIFT_MIN_POSITIONS = 512
# Each tap's GEMM is as deep as the input has channels; shallower, its output's nine
# read-modify-write passes cost more than the im2col they save.
SHIFT_MIN_CHANNELS = 64


@helper(inline="always")
def _inside(offset, step, width, positions):
    """``(v0, v1)``: the positions ``v < positions`` whose input column ``v * step +
    offset`` lies inside ``[0, width)``."""
    v0 = min(positions, 0 if offset >= 0 else (step - 1 - offset) // step)
    v1 = min(positions, (width - offset + step - 1) // step) if width > offset else 0
    return v0, max(v0, v1)


@loop
def columns(start, stop, x, cols, q0, ho, wo, kh, kw, sh, sw, dh, dw, top, left):
    """:func:`tap_columns` as a loop of its own (``run_rows`` shares its rows)."""
    tap_columns(start, stop, x, cols, q0, ho, wo, kh, kw, sh, sw, dh, dw, top, left)


@helper
def tap_columns(start, stop, x, cols, q0, ho, wo, kh, kw, sh, sw, dh, dw, top, left):
    """Rows ``start:stop`` of ``cols (C*kh*kw, T)``: row ``(c, i, j)`` holds tap ``(i,
    j)`` of channel ``c`` for the ``T / wo`` output rows from batch row ``q0`` of ``x (N,
    C, H, W)``, zero where the tap falls in the padding. Per tap, the output rows are
    taken a run of rows of one image at a time, their rows inside the input found once
    (:func:`_inside`); where input and output rows have one width (stride 1 and "same"
    padding across, or a 1x1 kernel) the run is one contiguous copy of the input plane,
    whose columns that fall in the padding are then zeroed (else a copy per row: the
    runs of a few elements of small planes cost more in their set-up than in copying)."""
    channels, height, width = x.shape[1], x.shape[2], x.shape[3]
    src = x.reshape(-1)
    rows = cols.shape[1] // wo
    whole = sh == 1 and sw == 1 and width == wo
    for k in range(start, stop):
        c, i, j = k // (kh * kw), (k // kw) % kh, k % kw
        offset = j * dw - left
        v0, v1 = _inside(offset, sw, width, wo)
        dst = cols[k]
        n, r, t = q0 // ho, q0 % ho, 0
        while t < rows:
            m = min(rows - t, ho - r)
            oy = r * sh + i * dh - top            # the input row of the run's first row
            u0, u1 = _inside(oy, sh, height, m)   # its rows inside the input
            base, plane = t * wo, (n * channels + c) * height * width
            _zero(dst, base, base + u0 * wo)
            _zero(dst, base + u1 * wo, base + m * wo)
            if whole and u1 > u0 and v1 > v0:
                a, b = base + u0 * wo + v0, base + (u1 - 1) * wo + v1
                part, run = dst[a:b], src[a + plane + oy * width + offset - base:]
                for u in range(part.size):
                    part[u] = run[u]
                for u in range(u0, u1):
                    _zero(dst, base + u * wo, base + u * wo + v0)
                    _zero(dst, base + u * wo + v1, base + (u + 1) * wo)
            else:
                for u in range(u0, u1):
                    d = base + u * wo
                    _zero(dst, d, d + v0)
                    _zero(dst, d + v1, d + wo)
                    part = dst[d + v0:d + v1]
                    run = src[plane + (oy + u * sh) * width + v0 * sw + offset:]
                    if sw == 1:
                        for v in range(part.size):
                            part[v] = run[v]
                    elif sw == 2:   # (a constant stride: LLVM vectorises the deinterleaving)
                        for v in range(part.size):
                            part[v] = run[2 * v]
                    else:
                        for v in range(part.size):
                            part[v] = run[v * sw]
            t, n, r = t + m, n + 1, 0


@helper(inline="always")
def _zero(a, start, stop):
    """``a[start:stop] = 0``."""
    for p in range(start, stop):
        a[p] = 0


@loop
def scatter(start, stop, tile, out, q0, ho, pitch, bias, residual, act, lo, hi, where):
    """Channels ``start:stop`` of ``tile (Cout, rows*pitch)``, the GEMM's result for the
    batch's output rows ``q0:q0+rows`` (row ``q`` is image ``q // ho``), each of whose
    ``pitch`` columns the first ``Wo`` are kept, into the planes ``out (N*Cout, ho*Wo)`` as
    ``act(tile + bias[c] (+ r))`` (``where`` 1: ``r = residual`` (shaped as ``out``) added
    before the activation, 2: after it, 0: none), ``epilogue.planes``'s arithmetic. (2-D
    arrays: a run of a row of one is contiguous to Numba, and its loops vectorise.)"""
    wo, cout = out.shape[1] // ho, bias.shape[0]
    rows = tile.shape[1] // pitch
    for c in range(start, stop):
        b = bias[c]
        t = 0
        while t < rows:   # runs of rows of one image, contiguous in both when pitch == wo
            n, r = (q0 + t) // ho, (q0 + t) % ho
            m = min(rows - t, ho - r) if pitch == wo else 1
            size, a = m * wo, r * wo
            src, dst = tile[c, t * pitch:t * pitch + size], out[n * cout + c, a:a + size]
            if where == 1:
                res = residual[n * cout + c, a:a + size]
                for u in range(size):
                    dst[u] = src[u] + b + res[u]
                _activate(dst, act, lo, hi)
            else:
                _add_activate(dst, src, b, act, lo, hi)
            if where == 2:
                res = residual[n * cout + c, a:a + size]
                for u in range(size):
                    dst[u] = dst[u] + res[u]
            t += m


def tile_rows(batch_rows: int, row_bytes: int) -> int:
    """Output rows per tile: as many as fit in ``TILE_BYTES`` of columns (at least one),
    evened out over the tiles so the last is not a sliver."""
    rows = max(1, min(batch_rows, TILE_BYTES // max(1, row_bytes)))
    tiles = -(-batch_rows // rows)
    return -(-batch_rows // tiles)


def conv(x, w, out, stride, padding, dilation, groups, bias, residual=None, where=0,
         act=0, lo=-np.inf, hi=np.inf):
    """``out (N, Cout, Ho, Wo)`` = the float32 conv of ``x (N, C, H, W)`` with ``w (Cout,
    C/G, kh, kw)`` and ``bias (Cout,)``, with the epilogue of :func:`scatter` (``act`` a
    code of ``epilogue.ACTIVATIONS`` between ``lo`` and ``hi``; ``residual`` shaped as
    ``out``, added before (``where`` 1) or after (2) it): by :func:`shifted` GEMMs where
    they apply, else on tiles of im2col columns."""
    x = np.ascontiguousarray(x)
    out2 = out.reshape(out.shape[0] * out.shape[1], -1)
    epilogue = (bias, _rows(residual, out2.shape), act, np.float32(lo), np.float32(hi), where)
    if shifted(x.shape, w.shape, stride, padding, dilation, groups):
        return _shifted(x, w, out, padding, dilation, epilogue)
    n, c = x.shape[:2]
    cout, cg, kh, kw = w.shape
    ho, wo = out.shape[2:]
    wm = np.ascontiguousarray(w).reshape(groups, cout // groups, cg * kh * kw)
    depth = c * kh * kw
    rows = tile_rows(n * ho, depth * wo * x.itemsize)
    buf = np.empty(depth * rows * wo, x.dtype)
    result = np.empty(cout * rows * wo, x.dtype)
    geometry = (kh, kw, stride[0], stride[1], dilation[0], dilation[1], padding[0][0],
                padding[1][0])
    for q0 in range(0, n * ho, rows):
        size = (min(q0 + rows, n * ho) - q0) * wo
        cols = buf[:depth * size].reshape(depth, size)
        run_rows(columns, depth, x, cols, q0, ho, wo, *geometry, threads=threads_for(cols.size))
        tile = result[:cout * size].reshape(cout, size)
        np.matmul(wm, cols.reshape(groups, -1, size), out=tile.reshape(groups, -1, size))
        run_rows(scatter, cout, tile, out2, q0, ho, wo, *epilogue,
                 threads=threads_for(tile.size))
    return out


_sgemm = blas_threads.sgemm_function


def shifted(x_shape, w_shape, stride, padding, dilation, groups) -> bool:
    """Whether a conv runs as shifted GEMMs (:func:`_shifted`): stride 1, one group, a
    kernel wider than 1x1, at most an eighth of the computed columns wasted on the padding
    (``Wp - Wo <= Wo / 8``), enough channels for a GEMM's depth and enough output
    positions to pay for the weight's copy, with OpenBLAS's ``cblas_sgemm`` at hand."""
    n, c, h, wd = x_shape
    kh, kw = w_shape[2:]
    wp = wd + padding[1][0] + padding[1][1]
    wo = wp - dilation[1] * (kw - 1)
    ho = h + padding[0][0] + padding[0][1] - dilation[0] * (kh - 1)
    return (stride == (1, 1) and groups == 1 and kh * kw > 1 and c >= SHIFT_MIN_CHANNELS
            and 8 * (wp - wo) <= wo and n * ho * wo >= SHIFT_MIN_POSITIONS
            and _sgemm() is not None)


def _shifted(x, w, out, padding, dilation, epilogue):
    """A stride-1 conv with no im2col: on an image padded into rows of the padded width
    ``Wp``, tap ``(i, j)``'s input for every output position is the padded planes shifted
    by ``i*dh*Wp + j*dw``, a ``(C, Ho*Wp)`` matrix that BLAS reads in place (leading
    dimension ``Hp*Wp``). So each image's output, on rows of width ``Wp`` (the last ``Wp -
    Wo`` columns of each row wrap around and are dropped), is ``kh*kw`` GEMMs ``w[:, :, i,
    j] @ shifted`` accumulated by ``sgemm``'s beta, then :func:`scatter`."""
    n, c, h, wd = x.shape
    cout, _, kh, kw = w.shape
    (top, bottom), (left, right) = padding
    hp, wp, ho = h + top + bottom, wd + left + right, out.shape[2]
    plane, size = hp * wp, ho * wp
    taps = np.ascontiguousarray(w.transpose(2, 3, 0, 1))         # kh kw Cout C
    padded = np.zeros(c * plane + dilation[1] * (kw - 1), x.dtype)   # (the last shift's tail)
    inside = padded[:c * plane].reshape(c, hp, wp)[:, top:top + h, left:left + wd]
    tile = np.empty((cout, size), x.dtype)
    sgemm, out2 = _sgemm(), out.reshape(n * cout, -1)
    for i in range(n):
        inside[...] = x[i]
        for a in range(kh):
            for b in range(kw):
                shift = (a * dilation[0] * wp + b * dilation[1]) * x.itemsize
                sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, cout, size, c, 1.0, taps[a, b].ctypes.data,
                      c, padded.ctypes.data + shift, plane, 0.0 if a == b == 0 else 1.0,
                      tile.ctypes.data, size)
        run_rows(scatter, cout, tile, out2, i * ho, ho, wp, *epilogue,
                 threads=threads_for(tile.size))
    return out


def _rows(residual, shape):
    """The residual as ``(N*Cout, Ho*Wo)`` rows, contiguous (the loops' native entries
    take contiguous arrays); a zero placeholder of ``shape``'s rank without one."""
    if residual is None:
        return np.zeros((1,) * len(shape), np.float32)
    return np.ascontiguousarray(residual, np.float32).reshape(shape)
