"""A stride-1 convolution whose output rows are as wide as its input's (a "same" conv:
3x3 with padding 1) as GEMMs on *row-shifted* columns, over the whole batch in one
compiled call that calls OpenBLAS's ``sgemm`` by address (``batched.sgemm_add``).

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

Each image's columns are written by :func:`conv_columns.same_columns` (one tap's rows as
one run of the input plane) and used while they are in cache; no Python call per image.
Against an im2col a block of images at a time and one GEMM on it from Python (a 3x3
16-channel conv on 32x32 planes at batch 64: the forward 7.0 -> 5.0 ms, its weight
gradient 6.4 -> 5.8 ms; 64 channels on 8x8: 5.4 -> 4.0 and 4.9 -> 3.8 ms) the GEMMs are
a third as deep and run as fast (16 x 48 x 1024 at the speed of 16 x 144 x 1024).

Bits: each output element is summed by the kernel rows' sgemm calls in one order, the
weight gradient over images in image order, on any thread count (the loop runs on the
calling thread; OpenBLAS splits each sgemm by rows and columns, never along its depth).
"""
from __future__ import annotations

import numpy as np

from . import blas_threads, helper, loop, native, numba_available
from .batched import NO_TRANS, TRANS, sgemm_add
from .conv_columns import same_columns

# One image's columns at most (bytes): the columns and the image's output stay in L2 or
# the last-level cache while the kernel rows' GEMMs read them.
MAX_COLUMN_BYTES = 4 << 20
# Each kernel row's GEMM is C*kw deep and reads and writes the whole output: shallower than
# this, those passes cost more than an im2col's one GEMM (a 1-channel 3x3 conv: 2x slower).
MIN_DEPTH = 4


@helper(inline="always")
def _rows(i, dh, top, ho, height):
    """``(y0, ra, rb)``: kernel row ``i`` of output row ``r`` reads input row ``r + y0``,
    inside the image for the output rows ``ra:rb`` (empty where ``rb <= ra``)."""
    y0 = i * dh - top
    return y0, max(0, -y0), min(ho, height - y0)


@loop
def _forward(start, stop, x, wr, out, cols, tile, sgemm, height, ho, kh, kw, dh, dw, top,
             left, first):
    """Images ``start:stop`` of ``out (N, Cout, Ho*Wo)`` = the conv of ``x (N, C, H*W)``
    (``height`` = H) with ``wr (kh, G, Cout/G, Cg*kw)`` (the weight, kernel rows first),
    the columns of each image in ``cols (C*kw, H*W)``; kernel row ``first`` (one whose
    input rows are all inside the image, or -1: the output is zeroed first) writes, the
    others add. Output rows narrower than the input's (Wo < W) are computed W wide into
    ``tile (Cout, Ho*W)`` (the last W - Wo of each row read past the row: dropped)."""
    groups, cog, kg = wr.shape[1:]
    width, wo = x.shape[2] // height, out.shape[2] // ho
    cout, plane, positions = groups * cog, height * width, ho * width
    for n in range(start, stop):
        same_columns(0, cols.shape[0], x, cols, 1, kw, dh, dw, 0, left, n, 0, height, height)
        target = tile if wo < width else out[n]
        if first < 0:
            target[:] = 0
        for t in range(kh):
            i = (first + t) % kh if first >= 0 else t
            y0, ra, rb = _rows(i, dh, top, ho, height)
            if rb <= ra:
                continue
            for g in range(groups):
                sgemm_add(sgemm, NO_TRANS, NO_TRANS, cog, (rb - ra) * width, kg,
                          wr.ctypes.data + 4 * (i * groups + g) * cog * kg, kg,
                          cols.ctypes.data + 4 * (g * kg * plane + (ra + y0) * width), plane,
                          target.ctypes.data + 4 * (g * cog * positions + ra * width),
                          positions, 0 if t == 0 and first >= 0 else 1)
        if wo < width:
            for c in range(cout):
                for r in range(ho):
                    out[n, c, r * wo:(r + 1) * wo] = tile[c, r * width:r * width + wo]


@loop
def _weight_grad(start, stop, x, gy, gwt, cols, tile, sgemm, height, ho, kh, kw, dh, dw, top,
                 left):
    """``gwt (kh, G, Cg*kw, Cout/G)`` (zeros) += the weight gradient, transposed and
    kernel rows first, of images ``start:stop`` of ``x (N, C, H*W)`` given the output
    gradient ``gy (N, Cout, Ho*Wo)``, each image's columns in ``cols (C*kw, H*W)``. Output
    rows narrower than the input's are first laid out W wide in ``tile (Cout, Ho*W)``,
    zero past Wo."""
    groups, kg, cog = gwt.shape[1:]
    width, wo = x.shape[2] // height, gy.shape[2] // ho
    cout, plane, positions = groups * cog, height * width, ho * width
    for n in range(start, stop):
        same_columns(0, cols.shape[0], x, cols, 1, kw, dh, dw, 0, left, n, 0, height, height)
        source = gy[n]
        if wo < width:
            for c in range(cout):
                for r in range(ho):
                    row = tile[c, r * width:(r + 1) * width]
                    row[:wo] = gy[n, c, r * wo:(r + 1) * wo]
                    row[wo:] = 0
            source = tile
        for i in range(kh):
            y0, ra, rb = _rows(i, dh, top, ho, height)
            if rb <= ra:
                continue
            for g in range(groups):
                sgemm_add(sgemm, NO_TRANS, TRANS, kg, cog, (rb - ra) * width,
                          cols.ctypes.data + 4 * (g * kg * plane + (ra + y0) * width), plane,
                          source.ctypes.data + 4 * (g * cog * positions + ra * width),
                          positions, gwt.ctypes.data + 4 * (i * groups + g) * kg * cog, cog, 1)


def wanted(x_shape, w_shape, stride, padding, dilation, dtype) -> bool:
    """Whether :func:`conv` and :func:`weight_grad` take a conv of a ``dtype`` input of
    ``x_shape`` with a weight of ``w_shape``: float32, strides 1, output rows at most as
    wide as the input's (the left and right padding within the kernel's span), one
    image's columns within ``MAX_COLUMN_BYTES``, Numba's native entries and OpenBLAS's
    64-bit ``sgemm`` at hand, and GEMMs at least ``MIN_DEPTH`` deep."""
    c, h, wd = x_shape[1:]
    kh, kw = w_shape[2:]
    ho = h + padding[0][0] + padding[0][1] - dilation[0] * (kh - 1)
    wo = wd + padding[1][0] + padding[1][1] - dilation[1] * (kw - 1)
    return (dtype == np.float32 and tuple(stride) == (1, 1) and ho > 0 and 0 < wo <= wd
            and MIN_DEPTH <= c * kw and 4 * c * kw * h * wd <= MAX_COLUMN_BYTES
            and numba_available()
            and native.enabled() and blas_threads.sgemm_address() is not None)


def conv(x, w, out, padding, dilation, groups):
    """``out (N, Cout, Ho, Wo)`` = the conv (stride 1, no bias) of ``x (N, C, H, W)`` with
    ``w (Cout, C/G, kh, kw)``, as :func:`wanted` accepts; returns ``out``."""
    x = np.ascontiguousarray(x)
    n, c, h, wd = x.shape
    cout, cg, kh, kw = w.shape
    ho = out.shape[2]
    wr = np.ascontiguousarray(w.reshape(groups, cout // groups, cg, kh, kw).transpose(
        3, 0, 1, 2, 4)).reshape(kh, groups, cout // groups, cg * kw)
    first = -1
    for i in range(kh):   # (a kernel row whose input rows are all inside the image)
        top = i * dilation[0] - padding[0][0]
        if top >= 0 and ho <= h - top:
            first = i
            break
    _forward(0, n, x.reshape(n, c, h * wd), wr, out.reshape(n, cout, -1),
             np.empty((c * kw, h * wd), np.float32), np.empty((cout, ho * wd), np.float32),
             blas_threads.sgemm_address(), h, ho, kh, kw, *dilation, padding[0][0],
             padding[1][0], first)
    return out


def weight_grad(x, gy, kernel, padding, dilation, groups):
    """The weight gradient ``(Cout, C/G, kh, kw)`` of the conv (stride 1) of ``x (N, C, H,
    W)`` given its output gradient ``gy (N, Cout, Ho, Wo)``, as :func:`wanted` accepts."""
    x, gy = np.ascontiguousarray(x), np.ascontiguousarray(gy, np.float32)
    n, c, h, wd = x.shape
    cout, ho = gy.shape[1:3]
    (kh, kw), cg, cog = kernel, c // groups, cout // groups
    gwt = np.zeros((kh, groups, cg * kw, cog), np.float32)
    _weight_grad(0, n, x.reshape(n, c, h * wd), gy.reshape(n, cout, -1), gwt,
                 np.empty((c * kw, h * wd), np.float32), np.empty((cout, ho * wd), np.float32),
                 blas_threads.sgemm_address(), h, ho, kh, kw, *dilation, padding[0][0],
                 padding[1][0])
    return np.ascontiguousarray(gwt.reshape(kh, groups, cg, kw, cog).transpose(
        1, 4, 2, 0, 3)).reshape(cout, cg, kh, kw)
