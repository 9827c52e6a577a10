"""Depthwise convolution (one input and one output channel per group), forward and both
gradients, as direct loops over NCHW planes.

As a grouped GEMM each channel's product is 1 x kh*kw x Ho*Wo: all overhead, and im2col
copies the input kh*kw times for it. Here each output plane is accumulated tap by tap
(``kh * kw`` passes over a plane that stays in L1), the inner loop running along a row so
that it vectorises. Padding, stride and dilation are index ranges: for tap ``(i, j)``
output row ``r`` reads input row ``r * sh + i * dh - top`` when that is inside the input,
and output columns ``v0 <= v < v1`` read ``v * sw + j * dw - left`` (:func:`_columns`), so
nothing is padded or copied. Planes (forward and input gradient) or channels (weight
gradient) are shared among threads (``threads.run_rows``); each is computed by one thread
in one order, so the bits do not depend on the split.
"""
from __future__ import annotations

import numpy as np

from . import helper, loop
from .threads import run_rows, threads_for


@helper(inline="always")
def _columns(j, sw, dw, left, width, out_width):
    """``(v0, v1, offset)``: the output columns whose tap-``j`` input column
    ``v * sw + offset`` (offset ``j * dw - left``) lies inside ``[0, width)``."""
    offset = j * dw - left
    v0 = max(0, (sw - 1 - offset) // sw)
    v1 = min(out_width, (width - 1 - offset) // sw + 1)
    return v0, v1, offset


@loop
def _forward(start, stop, x, w, out, sh, sw, dh, dw, top, left):
    """Planes ``start:stop`` of ``out (N*C, Ho, Wo)`` from ``x (N*C, H, W)``, ``w (C, kh,
    kw)``."""
    channels, kh, kw = w.shape
    height, width = x.shape[1], x.shape[2]
    out_height, out_width = out.shape[1], out.shape[2]
    for p in range(start, stop):
        c, xp, op = p % channels, x[p], out[p]
        op[:, :] = 0
        for i in range(kh):
            for j in range(kw):
                wv = w[c, i, j]
                v0, v1, offset = _columns(j, sw, dw, left, width, out_width)
                for r in range(out_height):
                    y = r * sh + i * dh - top
                    if 0 <= y < height:
                        row, orow = xp[y], op[r]
                        for v in range(v0, v1):
                            orow[v] += wv * row[v * sw + offset]


@loop
def _input_grad(start, stop, g, w, out, sh, sw, dh, dw, top, left):
    """Planes ``start:stop`` of the input gradient ``out (N*C, H, W)`` from ``g (N*C, Ho,
    Wo)``: the forward's reads as additions."""
    channels, kh, kw = w.shape
    height, width = out.shape[1], out.shape[2]
    out_height, out_width = g.shape[1], g.shape[2]
    for p in range(start, stop):
        c, gp, op = p % channels, g[p], out[p]
        op[:, :] = 0
        for i in range(kh):
            for j in range(kw):
                wv = w[c, i, j]
                v0, v1, offset = _columns(j, sw, dw, left, width, out_width)
                for r in range(out_height):
                    y = r * sh + i * dh - top
                    if 0 <= y < height:
                        row, grow = op[y], gp[r]
                        for v in range(v0, v1):
                            row[v * sw + offset] += wv * grow[v]


@loop(fastmath={"reassoc", "nsz"})
def _weight_grad(start, stop, x, g, out, sh, sw, dh, dw, top, left):
    """Channels ``start:stop`` of ``out (C, kh, kw)``, each the sum over images and
    positions of ``g * x`` at each tap (``x (N, C, H, W)``, ``g (N, C, Ho, Wo)``)."""
    images, channels, height, width = x.shape
    kh, kw = out.shape[1], out.shape[2]
    out_height, out_width = g.shape[2], g.shape[3]
    for c in range(start, stop):
        for i in range(kh):
            for j in range(kw):
                v0, v1, offset = _columns(j, sw, dw, left, width, out_width)
                total = 0.0
                for n in range(images):
                    for r in range(out_height):
                        y = r * sh + i * dh - top
                        if 0 <= y < height:
                            row, grow = x[n, c, y], g[n, c, r]
                            for v in range(v0, v1):
                                total += grow[v] * row[v * sw + offset]
                out[c, i, j] = total


def _geometry(stride, padding, dilation):
    return stride[0], stride[1], dilation[0], dilation[1], padding[0][0], padding[1][0]


def depthwise(x, w, out, stride, padding, dilation):
    """``out (N, C, Ho, Wo)`` = the depthwise conv of ``x (N, C, H, W)`` with ``w (C, 1,
    kh, kw)`` (attrs as ``conv2d``'s, padding ``((top, bottom), (left, right))``)."""
    n, c = x.shape[:2]
    run_rows(_forward, n * c, np.ascontiguousarray(x).reshape(n * c, *x.shape[2:]),
             np.ascontiguousarray(w).reshape(c, *w.shape[2:]), out.reshape(n * c, *out.shape[2:]),
             *_geometry(stride, padding, dilation), threads=threads_for(out.size))


def depthwise_input_grad(g, w, out, stride, padding, dilation):
    """``out (N, C, H, W)``: the input gradient of :func:`depthwise` for output gradient
    ``g (N, C, Ho, Wo)``."""
    n, c = g.shape[:2]
    run_rows(_input_grad, n * c, np.ascontiguousarray(g).reshape(n * c, *g.shape[2:]),
             np.ascontiguousarray(w).reshape(c, *w.shape[2:]), out.reshape(n * c, *out.shape[2:]),
             *_geometry(stride, padding, dilation), threads=threads_for(out.size))


def depthwise_weight_grad(x, g, out, stride, padding, dilation):
    """``out (C, 1, kh, kw)``: the weight gradient of :func:`depthwise`."""
    c = x.shape[1]
    run_rows(_weight_grad, c, np.ascontiguousarray(x), np.ascontiguousarray(g),
             out.reshape(c, *out.shape[2:]), *_geometry(stride, padding, dilation),
             threads=threads_for(x.size))
