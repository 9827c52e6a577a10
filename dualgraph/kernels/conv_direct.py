"""Depthwise and grouped convolutions (few input channels per output) as direct loops over
NCHW planes, forward, with the epilogue (bias, activation, residual) applied while each
band of the output is in L1.

A group's product is ``Cout/G x (C/G)*kh*kw x Ho*Wo``: with one or a few channels per
group that GEMM is all overhead, and im2col copies the input ``kh*kw`` times for it. Here
each work item (image, group) first copies its input planes into zero-padded *phase
planes* in a scratch buffer that stays in cache: for strides ``(sh, sw)`` the padded plane
is split into ``sh*sw`` phases, phase ``(a, b)`` holding padded rows ``y*sh + a`` and
columns ``x*sw + b``, each of ``Wq`` columns. Tap ``(i, j)`` of output position ``(r, v)``
then reads phase ``(i*dh % sh, j*dw % sw)`` at ``(r + i*dh // sh, v + j*dw // sw)``, so
over the output laid out on rows of ``Wq`` (the last ``Wq - Wo`` columns of each row are
junk, never written out) every tap is one *contiguous* multiply-add along the whole band,
``acc[q] += w * phase[q + offset]``: one vectorised loop per three taps, no per-row or
per-tap edge cases, padding, stride, dilation and groups all folded into ``offset``
(:func:`_taps`). Rows are taken in bands of ``BAND_BYTES`` of ``acc``, so that the sums
stay in L1 over the taps. The epilogue (``epilogue.planes``'s arithmetic) runs on the band
and copies its ``Wo`` columns per row into the output.

Items are shared among threads (``threads.run_rows``), slot ``t`` taking a contiguous run
with its own scratch; each output is summed by one thread in tap order, so the bits do not
depend on the number of threads.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from . import conv_lanes, helper, loop
from .conv_lanes import finish
from .conv_tiles import _inside
from .epilogue import _activate
from .threads import run_kept, threads_for
from .tuning import cores

BAND_BYTES = 8 << 10   # a band of sums: a quarter of L1
VECTOR = 32            # band lengths are multiples of this (8 lanes, unrolled 4 by LLVM),
#                        so no band ends in a scalar remainder loop
TAPS = 9               # taps per pass over a band (a 3x3 kernel's)
# From this input width on, a column stride of 2 fills both column phases of a row in one
# pass over it (``_fill_pair``); on narrower rows its edge loops cost more than it saves.
PAIR_MIN_WIDTH = 28


@helper(inline="always")
def _pass(acc, src, o, w, k, bias):
    """``acc (= bias +|+=) sum(w[k + m] * src[o[k + m]:])`` for ``m < TAPS`` over
    ``acc``'s length: nine taps summed in registers, one load and store of ``acc`` (views
    indexed from 0, so that the loop vectorises)."""
    a0, a1, a2, a3, a4 = src[o[k]:], src[o[k + 1]:], src[o[k + 2]:], src[o[k + 3]:], \
        src[o[k + 4]:]
    a5, a6, a7, a8 = src[o[k + 5]:], src[o[k + 6]:], src[o[k + 7]:], src[o[k + 8]:]
    w0, w1, w2, w3, w4, w5, w6, w7, w8 = w[k], w[k + 1], w[k + 2], w[k + 3], w[k + 4], \
        w[k + 5], w[k + 6], w[k + 7], w[k + 8]
    for u in range(acc.size):
        total = (w0 * a0[u] + w1 * a1[u] + w2 * a2[u] + w3 * a3[u] + w4 * a4[u]
                 + w5 * a5[u] + w6 * a6[u] + w7 * a7[u] + w8 * a8[u])
        acc[u] = (bias if k == 0 else acc[u]) + total


@helper(inline="always")
def _fill(dst, src, v0, v1, step, start):
    """``dst[v] = src[v * step + start]`` for ``v0 <= v < v1`` (one input row into one
    phase row; a constant step of 1 or 2 so that LLVM vectorises the copy)."""
    d, s = dst[v0:v1], src[v0 * step + start:]
    if step == 1:
        for u in range(d.size):
            d[u] = s[u]
    elif step == 2:
        for u in range(d.size):
            d[u] = s[2 * u]
    else:
        for u in range(d.size):
            d[u] = s[u * step]


@helper(inline="always")
def _fill_pair(even, odd, src, left, wq):
    """``even[v] = src[2v - left]``, ``odd[v] = src[2v + 1 - left]`` where those columns
    are inside ``src`` and ``v < wq``: one input row into its two column phases (stride
    2), the positions both phases take in one loop that reads the row once."""
    e0, e1 = _inside(-left, 2, src.size, wq)
    o0, o1 = _inside(1 - left, 2, src.size, wq)
    lo, hi = max(e0, o0), max(max(e0, o0), min(e1, o1))
    de, do, s = even[lo:hi], odd[lo:hi], src[2 * lo - left:]
    for u in range(de.size):
        de[u] = s[2 * u]
        do[u] = s[2 * u + 1]
    for v in range(e0, min(lo, e1)):     # (at most a position at either end)
        even[v] = src[2 * v - left]
    for v in range(max(hi, e0), e1):
        even[v] = src[2 * v - left]
    for v in range(o0, min(lo, o1)):
        odd[v] = src[2 * v + 1 - left]
    for v in range(max(hi, o0), o1):
        odd[v] = src[2 * v + 1 - left]


@loop(fastmath={"contract"})
def _direct(start, stop, x, wt, offsets, out, scratch, acc, bias, residual, act, lo, hi,
            where, cg, ho, wo, hq, wq, band, sh, sw, top, left):
    """Slots ``start:stop`` of ``acc.shape[0]``: the items (image, group) of ``x (N, C, H,
    W)`` (``cg`` channels a group) convolved with ``wt (Cout, T)`` (each output's taps in
    the order of ``offsets (T,)``, a multiple of ``TAPS`` long, zero weights past the
    kernel's) into ``out (N*Cout, Ho*Wo)``, with the epilogue (``epilogue.planes``'s:
    ``where`` 1 adds ``residual`` before the activation, 2 after it); ``band`` output
    rows at a time."""
    images, channels, height, width = x.shape
    cout, taps = wt.shape
    groups = channels // cg
    cog = cout // groups
    phase = scratch.shape[1] // (cg * sh * sw)
    items = images * groups
    pair = sw == 2 and width >= PAIR_MIN_WIDTH
    for t in range(start, stop):
        buf, sums = scratch[t], acc[t]
        buf[:] = 0    # (the padding: every item writes the same inside positions)
        first, last = t * items // acc.shape[0], (t + 1) * items // acc.shape[0]
        for item in range(first, last):
            n, g = item // groups, item % groups
            for c in range(cg):
                for a in range(sh):
                    for b in range(0 if pair else sw):
                        v0, v1 = _inside(b - left, sw, width, wq)
                        base = ((c * sh + a) * sw + b) * phase
                        for y in range(hq + 1):
                            row = y * sh + a - top
                            if 0 <= row < height and v1 > v0:
                                _fill(buf[base + y * wq:], x[n, g * cg + c, row], v0, v1, sw,
                                      b - left)
                    if pair:   # (both column phases of a row in one pass over it)
                        base = (c * sh + a) * 2 * phase
                        for y in range(hq + 1):
                            row = y * sh + a - top
                            if 0 <= row < height:
                                _fill_pair(buf[base + y * wq:], buf[base + phase + y * wq:],
                                           x[n, g * cg + c, row], left, wq)
            for o in range(g * cog, (g + 1) * cog):
                p, bo = n * cout + o, bias[o]
                for r0 in range(0, ho, band):
                    r1 = min(ho, r0 + band)
                    size = -(-(r1 - r0) * wq // VECTOR) * VECTOR
                    s, src = sums[:size], buf[r0 * wq:]
                    for k in range(0, taps, TAPS):
                        _pass(s, src, offsets, wt[o], k, bo)
                    if where == 0:
                        _activate(s, act, lo, hi)
                    for r in range(r0, r1):
                        dst, row = out[p, r * wo:(r + 1) * wo], s[(r - r0) * wq:]
                        for v in range(wo):
                            dst[v] = row[v]
                        if where != 0:
                            finish(dst, residual[p, r * wo:(r + 1) * wo], where, act, lo, hi)


# Up to this ``Cin/G * Cout/G`` a group's GEMM (Cout/G x Cin/G*kh*kw) is too small to pay
# for its im2col columns (the direct loop measured 0.25-0.8x the GEMMs' time from 16 to
# 1024, 0.9-1.2x from 2304 on).
DIRECT_MAX_PRODUCT = 1024


def wanted(w_shape, groups) -> bool:
    """Whether a grouped conv with weight ``w_shape`` runs here rather than as im2col +
    GEMMs: one input channel per group (depthwise, any channel multiplier), or
    ``Cin/G * Cout/G`` up to ``DIRECT_MAX_PRODUCT``."""
    cout, cg = w_shape[:2]
    return groups > 1 and (cg == 1 or cg * (cout // groups) <= DIRECT_MAX_PRODUCT)


@lru_cache(maxsize=256)
def _layout(cg, kh, kw, ho, wo, stride, dilation, itemsize):
    """``(hq, wq, phase, band, offsets)`` of a conv's phase planes (module docstring):
    rows and row width of a phase plane, its size in the scratch, output rows a band,
    and each tap's offset (``TAPS`` a pass, the padding taps' 0; shared, never
    written). Computed once per geometry: on a batch-1 layer of small planes this Python
    loop was a fifth of the call."""
    (sh, sw), (dh, dw) = stride, dilation
    hq, wq = ho + (kh - 1) * dh // sh, wo + (kw - 1) * dw // sw
    phase = (hq + 1) * wq + VECTOR        # (a band's last pass reads up to VECTOR past it)
    offsets = np.zeros(-(-cg * kh * kw // TAPS) * TAPS, np.int64)
    for k in range(cg * kh * kw):
        ch, i, j = k // (kh * kw), k // kw % kh, k % kw
        which = (ch * sh + i * dh % sh) * sw + j * dw % sw
        offsets[k] = which * phase + i * dh // sh * wq + j * dw // sw
    band = max(1, min(ho, BAND_BYTES // (itemsize * wq)))
    return hq, wq, phase, band, offsets


def conv(x, w, out, stride, padding, dilation, groups, bias, residual=None, where=0, act=0,
         lo=-np.inf, hi=np.inf):
    """``out (N, Cout, Ho, Wo)`` = the conv of ``x (N, C, H, W)`` with ``w (Cout, C/G, kh,
    kw)`` and ``bias (Cout,)`` (one float dtype), with the epilogue of ``conv_tiles.conv``
    (same arguments; padding may be negative: the input is cropped). Depthwise convs
    with small output planes run ``conv_lanes``' loop instead (``conv_lanes.wanted``)."""
    x = np.ascontiguousarray(x)
    run = fitted(x.shape, w.shape, out.shape, stride, padding, dilation, groups, x.dtype,
                 residual is not None, where, act, lo, hi)
    return run(x, w, bias, out, residual)


def fitted(x_shape, w_shape, out_shape, stride, padding, dilation, groups, dtype,
           residual=False, where=0, act=0, lo=-np.inf, hi=np.inf):
    """``run(x, w, bias, out, residual=None)``: :func:`conv` fitted to the shapes and
    dtype, what depends on them alone (the layout, threads, scratch, the padded weight's
    buffer, the loop's compiled entry) worked out once, for a compiled graph's node. A
    call at a time (the scratch and the weight's buffer are the closure's)."""
    dt = np.dtype(dtype)
    if conv_lanes.wanted(x_shape, w_shape, out_shape[2:], padding, groups, dt):
        return conv_lanes.fitted(x_shape, w_shape[2:], out_shape[2:], stride, padding,
                                 dilation, where, act, lo, hi)
    n = x_shape[0]
    cout, cg, kh, kw = w_shape
    ho, wo = out_shape[2:]
    hq, wq, phase, band, offsets = _layout(cg, kh, kw, ho, wo, tuple(stride),
                                           tuple(dilation), dt.itemsize)
    wt = np.zeros((cout, offsets.size), dt)
    workers = max(1, min(n * groups, threads_for(n * cout * ho * wo * cg * kh * kw)
                         or cores()))
    scratch = np.empty((workers, cg * stride[0] * stride[1] * phase), dt)
    acc = np.empty((workers, -(-band * wq // VECTOR) * VECTOR), dt)
    geometry = (act, dt.type(lo), dt.type(hi), where, cg, ho, wo, hq, wq, band, stride[0],
                stride[1], padding[0][0], padding[1][0])
    no_residual, entry = np.zeros((1, 1), dt), []

    def run(x, w, bias, out, residual=None):
        wt[:, :cg * kh * kw] = w.reshape(cout, -1)
        out2 = out.reshape(n * cout, ho * wo)
        res = (no_residual if residual is None
               else np.ascontiguousarray(residual, dt).reshape(out2.shape))
        run_kept(_direct, workers, entry, np.ascontiguousarray(x, dt), wt, offsets, out2,
                 scratch, acc, np.ascontiguousarray(bias, dt), res, fixed=geometry)
        return out
    return run
