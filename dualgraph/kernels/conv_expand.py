"""A 1x1 convolution into a depthwise one on channel-blocked activations ``(N, C/8, H, W,
8)``, float32, forward, each with its epilogue, without the 1x1's output ever written whole:
the kernel of ``expand_depthwise_blocked``, which the rule ``expand_into_depthwise``
(``passes/layout.py``) puts where the 1x1 "expand" of an inverted-residual block (C to
``t * C`` channels, ``t`` up to six) feeds only a depthwise conv and its output would not
stay in L2 between them.

Run as two ops, the expand writes its ``t``-times-wider output to memory and the
depthwise conv reads it back and copies each pair of blocks into a zero-padded plane
(``conv_blocked``): three passes over the largest tensor of the block. Here a work item is
a band of an image's output rows; the input rows the band's windows read are computed by
the 1x1 loop (``conv_blocked.group``: 24 or 48 output channels by eight positions in
registers) straight into that zero-padded form, as small as :data:`BAND_BYTES`, and the
depthwise rows (``conv_lanes._row``) are summed from it while it is in cache. The bands'
edge rows (``(kh - 1) * dh + 1 - sh`` of them) are computed by both bands that read them:
a few per cent more 1x1 work for bands that are independent (and spread over threads).

The padded band holds a vector's lanes side by side, a position ``L`` floats (``L`` the
width of the 1x1's packed groups' vectors: sixteen where ``conv_blocked.wide``, else
eight), ``(t*C/L, rows, wp, L)``: the 1x1's sum for a position is one store, and the
depthwise loop reads it as its pair-interleaved plane. Each output is the chain of
multiply-adds ``conv_blocked``'s loops make, in the same order: the same bits as the two
ops.
"""
from __future__ import annotations

import numpy as np

from . import helper, loop
from .conv_blocked import WIDE_GROUP, group
from .conv_lanes import _row, _weights, finish, rows_due
from .simd import LANES, WIDE, lanes_of, load, load_like, load_wide, wide_loops
from .threads import run_kept, threads_for
from .tuning import cores

F = np.float32
# A band's padded rows of the expanded channels (bytes): within L2 beside the band's input
# rows and output (about a fifth of this at stride 1, a twentieth at stride 2).
BAND_BYTES = 1 << 20


@helper(inline="always")
def _expand_rows(x, packed, bias, band, first, rows, xo, blocks, height, width, cout, wp, top,
                 left, cols, act, lo, hi, zero):
    """Padded rows ``first:first + rows`` of the image from ``x[xo]`` (``blocks`` input
    blocks) into ``band`` (``(cout/L, rows, wp, L)``, ``L`` the lanes of ``zero``): each
    inside row the 1x1 of its ``cols`` positions with the packed ``packed`` and ``bias``,
    activated, its padding columns zero; rows of the padding all zero."""
    lanes = lanes_of(zero)
    vectors, plane = cout // lanes, rows * wp * lanes
    step = height * width * LANES
    for i in range(rows):
        y = first + i - top
        for v in range(vectors):
            at = v * plane + i * wp * lanes
            if y < 0 or y >= height:
                band[at:at + wp * lanes] = 0
            else:
                band[at:at + left * lanes] = 0
                band[at + (left + cols) * lanes:at + wp * lanes] = 0
        if y < 0 or y >= height:
            continue
        # (a row's last eight positions end at its end, some summed twice to the same bits,
        # where one at a time ran at a fraction of the rate)
        tail = cols % LANES if cols > LANES else 0
        for g in range(-(-vectors // 3)):
            w0, b0 = g * blocks * LANES * 3 * lanes, g * 3 * lanes
            b1, b2 = load_like(bias, b0 + lanes, zero), load_like(bias, b0 + 2 * lanes, zero)
            at = 3 * g * plane + (i * wp + left) * lanes
            group(x, xo + y * width * LANES, 0, cols - tail, step, blocks, packed, w0,
                  load_like(bias, b0, zero), b1, b2, band, at, lanes, LANES, plane,
                  vectors - 3 * g)
            if tail:
                group(x, xo + y * width * LANES, cols - LANES, cols, step, blocks, packed, w0,
                      load_like(bias, b0, zero), b1, b2, band, at, lanes, LANES, plane,
                      vectors - 3 * g)
        for v in range(vectors):
            at = v * plane + (i * wp + left) * lanes
            finish(band[at:at + cols * lanes], band[0:1], 0, act, lo, hi)


@helper(inline="always")
def _band(x, packed, bias, w, dbias, out, residual, band, wt, n, r0, r1, g, lo, hi, dlo,
          dhi, zero):
    """Output rows ``r0:r1`` of image ``n``: the padded input rows they read expanded into
    ``band`` (:func:`_expand_rows`), then each vector's depthwise rows (``conv_lanes._row``)
    into the flat blocked ``out``, its epilogue run on each row."""
    (blocks, cout, height, width, ho, wo, kh, kw, sh, sw, dh, dw, top, left, wp, cols, act,
     dact, where) = (g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10],
                     g[11], g[12], g[13], g[14], g[15], g[16], g[17], g[18])
    lanes = lanes_of(zero)
    rows = (r1 - r0 - 1) * sh + (kh - 1) * dh + 1
    _expand_rows(x, packed, bias, band, r0 * sh, rows, n * blocks * height * width * LANES,
                 blocks, height, width, cout, wp, top, left, cols, act, lo, hi, zero)
    taps, size, line = kh * kw, ho * wo * LANES, wo * LANES
    for v in range(cout // lanes):
        _weights(w, dbias, v * lanes, lanes, lanes, taps, wt)
        start_sum = load_like(wt, taps * lanes, zero)
        base = (n * cout // LANES + v * lanes // LANES) * size + r0 * line
        plane = band[v * rows * wp * lanes:]
        for r in range(r1 - r0):
            _row(out[base:], plane, wt, start_sum, r, wo, kh, kw, sh, sw, dh, dw, wp, LANES,
                 size)
            done = rows_due(r, r1 - r0, line)
            for k in range(lanes // LANES if done else 0):
                q, e = base + k * size + (r + 1 - done) * line, base + k * size + (r + 1) * line
                finish(out[q:e], residual[q:e] if where else residual[0:1], where, dact, dlo,
                       dhi)


@loop(fastmath={"contract"})
def _expand_depthwise(start, stop, x, packed, bias, w, dbias, out, residual, bands, wblocks,
                      per_band, width, g, lo, hi, dlo, dhi):
    """Slots ``start:stop`` of ``bands.shape[0]``: their share of the items (image, band of
    ``per_band`` output rows) of the 1x1 conv of the flat blocked ``x`` with the flat
    ``packed`` (``conv_blocked.pack``'s, groups of ``width`` 24 or 48 channels) and the
    padded ``bias``, then the depthwise conv with the flat ``w (C, kh*kw)`` and ``dbias``,
    into the flat blocked ``out``; ``g`` the geometry and activation codes (``fitted``),
    ``lo, hi`` and ``dlo, dhi`` the bounds of each epilogue. The epilogues' loops run
    sixteen lanes where the CPU has them (``simd.wide_loops``)."""
    wide_loops()
    ho, cout = g[4], g[1]
    per_image = -(-ho // per_band)
    items = out.size // (cout * ho * g[5]) * per_image
    for t in range(start, stop):
        first, last = t * items // bands.shape[0], (t + 1) * items // bands.shape[0]
        for item in range(first, last):
            n, r0 = item // per_image, (item % per_image) * per_band
            r1 = min(ho, r0 + per_band)
            if width == WIDE_GROUP:
                _band(x, packed, bias, w, dbias, out, residual, bands[t], wblocks[t], n, r0,
                      r1, g, lo, hi, dlo, dhi, load_wide(bias, 0))
            else:
                _band(x, packed, bias, w, dbias, out, residual, bands[t], wblocks[t], n, r0,
                      r1, g, lo, hi, dlo, dhi, load(bias, 0))


def fitted(x_shape, cout, w_shape, stride, padding, dilation, expand, depthwise):
    """``run(x, packed, bias, w, dbias, *residual, out=None)``: the 1x1 conv of a blocked
    ``x`` (``x_shape (N, C/8, H, W, 8)``) into ``cout`` channels with ``packed`` (from
    ``conv_blocked.pack``) and ``bias``, then the depthwise conv with ``w (cout, 1, kh,
    kw)`` and ``dbias`` (``stride``, ``padding``, ``dilation``), the blocked output;
    ``expand`` and ``depthwise`` the epilogue codes of each (``act``, ``lo``, ``hi``; the
    depthwise one also ``residual`` and ``where``, the residual blocked like the output).
    Bands, scratch, threads and the compiled entry worked out once."""
    n, cb, h, wd, _ = x_shape
    kh, kw = w_shape[2:]
    ho = (h + sum(padding[0]) - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd + sum(padding[1]) - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    wp = (wo - 1) * stride[1] + (kw - 1) * dilation[1] + 1   # (the padded columns read)
    row_bytes = cout * wp * 4
    reach = (kh - 1) * dilation[0] + 1       # (rows a band reads beyond its strided ones)
    most = max(1, (BAND_BYTES // row_bytes - reach) // stride[0] + 1)
    per_band = -(-ho // -(-ho // most))      # (bands of even height)
    rows = (per_band - 1) * stride[0] + reach
    items = n * -(-ho // per_band)
    workers = max(1, min(items, threads_for(n * cout * (h * wd * cb * LANES + ho * wo * kh * kw))
                         or cores()))
    bands = np.empty((workers, cout * rows * wp), F)
    wblocks = np.empty((workers, (kh * kw + 1) * WIDE), F)
    where = depthwise["where"] if depthwise["residual"] else 0
    geometry = np.array([cb, cout, h, wd, ho, wo, kh, kw, stride[0], stride[1], dilation[0],
                         dilation[1], padding[0][0], padding[1][0], wp,
                         min(wd, wp - padding[1][0]), expand["act"], depthwise["act"], where],
                        np.int64)
    bounds = (F(expand["lo"]), F(expand["hi"]), F(depthwise["lo"]), F(depthwise["hi"]))
    shape = (n, cout // LANES, ho, wo, LANES)
    padded, entry = np.zeros(cout + WIDE_GROUP, F), []

    def run(x, packed, b, w, db, *r, out=None):
        out = np.empty(shape, F) if out is None else out
        padded[:cout] = b
        run_kept(_expand_depthwise, workers, entry, np.ascontiguousarray(x, F).reshape(-1),
                 packed.reshape(-1), padded, np.ascontiguousarray(w, F).reshape(-1),
                 np.ascontiguousarray(db, F), out.reshape(-1),
                 np.ascontiguousarray(r[0], F).reshape(-1) if r else _NO_RESIDUAL, bands,
                 wblocks, per_band, packed.shape[-1], geometry, *bounds)
        return out
    return run


_NO_RESIDUAL = np.zeros(1, F)
