"""A convolution as GEMMs on *row-shifted* columns, over the whole batch in one compiled
call that calls OpenBLAS's ``sgemm`` by address (``batched.sgemm_add``): stride 1 with
output rows at most as wide as the input's (a "same" 3x3 conv, a valid conv), and strides
above 1 through the input's row phases.

An im2col copies each input ``kh*kw`` times. Here the columns hold only the kernel's
``kw`` horizontal taps, for every input row: ``cols[(c, j), y*W + v] = x[c, y, v + j*dw -
left]`` (zero past the left and right edges), ``C*kw`` rows of ``H*W``, a third of an
im2col's for a 3x3 kernel. Because output rows are as wide as input rows, kernel row
``i`` of output row ``r`` reads input row ``r + i*dh - top``: the same columns shifted by
whole rows, so each kernel row is one GEMM on the columns as they are (the leading
dimension ``H*W`` of BLAS's operand), over the output rows whose input row is inside the
image (the vertical padding costs nothing):

- :func:`conv` (the forward, and the flipped-weight conv that is a stride-1 input
  gradient): ``out[n, rows] (+)= w[:, :, i, :] @ cols[:, rows shifted by i]`` for each
  kernel row ``i`` (``Cout x C*kw x rows*W``), the first that covers every output row
  writing, the others adding (sgemm's beta);
- :func:`weight_grad`: ``gw[:, :, i, :]ᵀ += cols[:, rows shifted by i] @ g[n, rows]ᵀ``
  for each image and kernel row, the gradient kept transposed (``C*kw x Cout``: the GEMM's
  long side is its rows, which OpenBLAS runs faster).

With strides ``(sh, sw)`` above 1 kernel row ``i`` of output row ``r`` reads input row
``r*sh + i*dh - top``, which is row ``r + y0`` of *row phase* ``a`` (the input rows ``a,
a + sh, ...``; ``a`` and ``y0`` from ``i*dh - top`` divided by ``sh``). So the columns
are kept per phase, each row ``Wo`` wide (the horizontal taps at stride ``sw``):
``cols[a, (c, j), y*Wo + v] = x[c, y*sh + a, v*sw + j*dw - left]``, and each kernel row
is again one GEMM, on its phase's columns shifted by ``y0`` rows. A 3x3 stride-2 layer's
columns are 1.5 times its input (an im2col's 2.25 times), written by a compiled loop, not
NumPy's strided copy (a CIFAR-size layer's forward and weight gradient: 1.1-1.3x faster).

Each image's columns are written by :func:`conv_tiles.tap_columns` (for stride 1, one
tap's rows as one run of the input plane) and used while they are in cache; no Python
call per image. Against an im2col a block of images at a time and one GEMM on it from
Python (a 3x3 16-channel conv on 32x32 planes at batch 64: the forward 7.0 -> 5.0 ms,
its weight gradient 6.4 -> 5.8 ms; 64 channels on 8x8: 5.4 -> 4.0 and 4.9 -> 3.8 ms) the
GEMMs are a third as deep and run as fast (16 x 48 x 1024 at the speed of 16 x 144 x
1024).

Bits: each output element is summed by the kernel rows' sgemm calls in one order, the
weight gradient over images in image order, on any thread count (the loop runs on the
calling thread; OpenBLAS splits each sgemm by rows and columns, never along its depth).
"""
from __future__ import annotations

import math

import numpy as np

from . import blas_threads, helper, loop, native, numba_available
from .batched import NO_TRANS, TRANS, sgemm_add
from .conv_tiles import tap_columns

# One image's columns at most (bytes): the columns and the image's output stay in L2 or
# the last-level cache while the kernel rows' GEMMs read them.
MAX_COLUMN_BYTES = 4 << 20
# Each kernel row's GEMM is C*kw deep and reads and writes the whole output: shallower than
# this, those passes cost more than an im2col's one GEMM (a 1-channel 3x3 conv: 2x slower).
MIN_DEPTH = 4
# The weight gradient's GEMMs are C*kw x Cout x rows*R: shallower than this (a 1-, 3- or
# 6-channel first layer) the transposed sum and its copy back cost more than the blocked
# im2col's one GEMM (a 1 -> 32 5x5 layer at batch 64: 3.9 ms against 2.3).
GRAD_MIN_DEPTH = 32
# Each image's GEMMs pack the weight again (kh of them, Cout x C*kw each): with more weight
# elements per output position of the batch than this, that costs more than the blocked
# im2col's GEMMs (a 256 -> 256 3x3 on 7x7 at batch 1, 12k a position: 1.9 ms against 0.9;
# 144 a position measured 6% faster, 1505 8% slower).
MAX_WEIGHTS_PER_POSITION = 256


@helper(inline="always")
def _rows(i, dh, top, sh, ho, height):
    """``(a, y0, ra, rb)``: kernel row ``i`` of output row ``r`` reads row ``r + y0`` of
    phase ``a`` (the input rows ``a, a + sh, ...``), inside the image for the output rows
    ``ra:rb`` (empty where ``rb <= ra``)."""
    t = i * dh - top
    a = t % sh
    y0 = (t - a) // sh
    return a, y0, max(0, -y0), min(ho, (height - a + sh - 1) // sh - y0)


@helper(inline="always")
def _fill(x, cols, n, kh, kw, sh, sw, dh, dw, top, left, ho):
    """Image ``n``'s columns ``cols (sh, C*kw, Hq*R)`` of ``x (N, C, H, W)``: row ``y``
    of phase ``a`` holds the ``kw`` horizontal taps of input row ``y*sh + a`` for the
    ``R`` output columns (``conv_tiles.tap_columns`` with one kernel row); the phases no
    kernel row reads are skipped."""
    height, rows = x.shape[2], (x.shape[2] + sh - 1) // sh
    width = cols.shape[2] // rows
    for a in range(sh):
        for i in range(kh):
            b, y0, ra, rb = _rows(i, dh, top, sh, ho, height)
            if b == a and rb > ra:
                tap_columns(0, cols.shape[1], x, cols[a], n * rows, rows, width, 1, kw, sh,
                            sw, dh, dw, -a, left)
                break


@helper(inline="always")
def _first(kh, dh, top, sh, ho, height):
    """A kernel row whose input rows are all inside the image (it writes the output, the
    others add), or -1 (the output is zeroed first)."""
    for i in range(kh):
        a, y0, ra, rb = _rows(i, dh, top, sh, ho, height)
        if ra == 0 and rb == ho:
            return i
    return -1


@loop
def _forward(start, stop, x, wr, out, cols, tile, sgemm, ho, kw, sh, sw, dh, dw, top, left):
    """Images ``start:stop`` of ``out (N, Cout, Ho*Wo)`` = the conv of ``x (N, C, H, W)``
    with ``wr (kh, G, Cout/G, Cg*kw)`` (the weight, kernel rows first), the columns of
    each image in ``cols (sh, C*kw, Hq*R)``. Output rows narrower than the columns' (Wo <
    R: stride 1) are computed R wide into ``tile (Cout, Ho*R)`` (the last R - Wo of each
    row read past the row: dropped)."""
    kh, groups, cog, kg = wr.shape
    height, wo, rows = x.shape[2], out.shape[2] // ho, (x.shape[2] + sh - 1) // sh
    width = cols.shape[2] // rows
    cout, plane, positions = groups * cog, cols.shape[2], ho * width
    first = _first(kh, dh, top, sh, ho, height)
    for n in range(start, stop):
        _fill(x, cols, n, kh, kw, sh, sw, dh, dw, top, left, ho)
        target = tile if wo < width else out[n]
        if first < 0:
            target[:] = 0
        for t in range(kh):
            i = (first + t) % kh if first >= 0 else t
            a, y0, ra, rb = _rows(i, dh, top, sh, ho, height)
            if rb <= ra:
                continue
            for g in range(groups):
                sgemm_add(sgemm, NO_TRANS, NO_TRANS, cog, (rb - ra) * width, kg,
                          wr.ctypes.data + 4 * (i * groups + g) * cog * kg, kg,
                          cols.ctypes.data + 4 * ((a * groups + g) * kg * plane
                                                  + (ra + y0) * width), plane,
                          target.ctypes.data + 4 * (g * cog * positions + ra * width),
                          positions, 0 if t == 0 and first >= 0 else 1)
        if wo < width:
            for c in range(cout):
                for r in range(ho):
                    out[n, c, r * wo:(r + 1) * wo] = tile[c, r * width:r * width + wo]


@loop
def _weight_grad(start, stop, x, gy, gwt, cols, tile, sgemm, ho, kw, sh, sw, dh, dw, top,
                 left):
    """``gwt (kh, G, Cg*kw, Cout/G)`` (zeros) += the weight gradient, transposed and
    kernel rows first, of images ``start:stop`` of ``x (N, C, H, W)`` given the output
    gradient ``gy (N, Cout, Ho*Wo)``, each image's columns in ``cols (sh, C*kw, Hq*R)``.
    Output rows narrower than the columns' are first laid out R wide in ``tile (Cout,
    Ho*R)``, zero past Wo."""
    kh, groups, kg, cog = gwt.shape
    height, wo, rows = x.shape[2], gy.shape[2] // ho, (x.shape[2] + sh - 1) // sh
    width = cols.shape[2] // rows
    cout, plane, positions = groups * cog, cols.shape[2], ho * width
    for n in range(start, stop):
        _fill(x, cols, n, kh, kw, sh, sw, dh, dw, top, left, ho)
        source = gy[n]
        if wo < width:
            for c in range(cout):
                for r in range(ho):
                    row = tile[c, r * width:(r + 1) * width]
                    row[:wo] = gy[n, c, r * wo:(r + 1) * wo]
                    row[wo:] = 0
            source = tile
        for i in range(kh):
            a, y0, ra, rb = _rows(i, dh, top, sh, ho, height)
            if rb <= ra:
                continue
            for g in range(groups):
                sgemm_add(sgemm, NO_TRANS, TRANS, kg, cog, (rb - ra) * width,
                          cols.ctypes.data + 4 * ((a * groups + g) * kg * plane
                                                  + (ra + y0) * width), plane,
                          source.ctypes.data + 4 * (g * cog * positions + ra * width),
                          positions, gwt.ctypes.data + 4 * (i * groups + g) * kg * cog, cog, 1)


def _geometry(x_shape, kernel, stride, padding, dilation):
    """``(ho, wo, rows, width)``: the output's size and the columns' phase rows ``Hq`` and
    row width ``R`` (the input's width for strides 1, else the output's)."""
    h, wd = x_shape[2:]
    ho, wo = ((size + lo + hi - d * (k - 1) - 1) // s + 1 for size, k, s, (lo, hi), d in
              zip((h, wd), kernel, stride, padding, dilation))
    return ho, wo, -(-h // stride[0]), wd if tuple(stride) == (1, 1) else wo


def wanted(x_shape, w_shape, stride, padding, dilation, dtype) -> bool:
    """Whether :func:`conv` and :func:`weight_grad` take a conv of a ``dtype`` input of
    ``x_shape`` with a weight of ``w_shape``: float32, output rows at most as wide as the
    input's where the strides are 1 (the left and right padding within the kernel's
    span), one image's columns within ``MAX_COLUMN_BYTES``, Numba's native entries and
    OpenBLAS's 64-bit ``sgemm`` at hand, GEMMs at least ``MIN_DEPTH`` deep, and at most
    ``MAX_WEIGHTS_PER_POSITION`` weight elements per output position of the batch."""
    n, c, wd = x_shape[0], x_shape[1], x_shape[3]
    kw = w_shape[3]
    ho, wo, rows, width = _geometry(x_shape, w_shape[2:], stride, padding, dilation)
    return (dtype == np.float32 and ho > 0 and 0 < wo <= width <= wd
            and MIN_DEPTH <= c * kw and 4 * stride[0] * c * kw * rows * width <= MAX_COLUMN_BYTES
            and math.prod(w_shape) <= MAX_WEIGHTS_PER_POSITION * n * ho * wo
            and numba_available()
            and native.enabled() and blas_threads.sgemm_address() is not None)


def _buffers(x, kernel, stride, padding, dilation, cout):
    """The columns ``(sh, C*kw, Hq*R)`` and the tile ``(Cout, Ho*R)`` of one image, and
    the loops' geometry arguments after the arrays."""
    ho, _, rows, width = _geometry(x.shape, kernel, stride, padding, dilation)
    cols = np.empty((stride[0], x.shape[1] * kernel[1], rows * width), np.float32)
    return (cols, np.empty((cout, ho * width), np.float32), blas_threads.sgemm_address(), ho,
            kernel[1], *stride, *dilation, padding[0][0], padding[1][0])


def conv(x, w, out, stride, padding, dilation, groups):
    """``out (N, Cout, Ho, Wo)`` = the conv (no bias) of ``x (N, C, H, W)`` with ``w (Cout,
    C/G, kh, kw)``, as :func:`wanted` accepts; returns ``out``."""
    x = np.ascontiguousarray(x)
    cout, cg, kh, kw = w.shape
    wr = np.ascontiguousarray(w.reshape(groups, cout // groups, cg, kh, kw).transpose(
        3, 0, 1, 2, 4)).reshape(kh, groups, cout // groups, cg * kw)
    _forward(0, x.shape[0], x, wr, out.reshape(x.shape[0], cout, -1),
             *_buffers(x, (kh, kw), stride, padding, dilation, cout))
    return out


def weight_grad(x, gy, kernel, stride, padding, dilation, groups):
    """The weight gradient ``(Cout, C/G, kh, kw)`` of the conv of ``x (N, C, H, W)`` given
    its output gradient ``gy (N, Cout, Ho, Wo)``, as :func:`wanted` accepts."""
    x, gy = np.ascontiguousarray(x), np.ascontiguousarray(gy, np.float32)
    n, c = x.shape[:2]
    cout = gy.shape[1]
    (kh, kw), cg, cog = kernel, c // groups, cout // groups
    gwt = np.zeros((kh, groups, cg * kw, cog), np.float32)
    _weight_grad(0, n, x, gy.reshape(n, cout, -1), gwt,
                 *_buffers(x, kernel, stride, padding, dilation, cout))
    return np.ascontiguousarray(gwt.reshape(kh, groups, cg, kw, cog).transpose(
        1, 4, 2, 0, 3)).reshape(cout, cg, kh, kw)
