"""Dense convolutions (one group, float32) with few weights per output, forward and weight
gradient, with eight *output* channels in the lanes of a vector (``simd.py``): no im2col,
no GEMM call. A stride-1 conv's input gradient is the forward of the output gradient with
the flipped weight (``ops/conv.py``), so it runs here too.

On small convs (a 6 -> 16 5x5 conv on 14x14 planes, a 3-channel 3x3 first layer) the
GEMMs of an im2col or of row-shifted columns are small (16 x 150 x 100 per image), and
their calls, packing and the columns' copies cost as much as the products. Here each
image is copied once into zero-padded planes ``xp (C, Hp, Wp)`` and every output is a sum
over taps ``t = (c, i, j)`` of ``w[t, lanes] * xp[offset(t) + position]``:

- forward (:func:`_forward`): four output positions of a row times two blocks of eight
  output channels are eight vector sums; per tap two weight vectors are loaded and four
  input values broadcast, eight multiply-adds (the bias added to the sums). A row's
  sums, one position's channels in consecutive floats, are activated and transposed 8x8
  back into the output planes (``conv_lanes.row_out``) while in cache, with the epilogue
  (``conv_lanes.finish``); work items are output rows, so one image's rows share the
  threads.
- weight gradient (:func:`_weight_grad`): the output gradient of an image is transposed
  into the same interleaved layout; four taps times two blocks of output channels are
  eight vector sums over the image's positions, per position two gradient vectors loaded
  and four input values broadcast. A worker owns a range of taps and walks every image,
  so each weight is summed over positions and images in one order on any thread count.

Both run at the core's multiply-add rate whatever the shapes, where the GEMMs' calls and
copies dominate small convs; with many weights per output the GEMMs win (``wanted``).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from . import helper, loop, numba_available
from .conv_lanes import _interleave, finish, row_out
from .epilogue import _activate
from .simd import LANES, add, broadcast, broadcast_at, fma, load, store
from .threads import run_rows, threads_for
from .tuning import cores

F = np.float32
# Taps a weight-gradient pass covers at once: eight vector sums of one block, or four taps
# of two blocks twice (fewer sums leave the multiply-adds' latency exposed).
TAPS = 8


@helper(inline="always")
def pad_image(x, base, channels, rows, cols, width, height, xp, hp, wp, top, left):
    """Planes ``base + c * height * width`` of the flat ``x``, their first ``rows`` rows
    and ``cols`` columns, into the zero-bordered planes ``xp (C, hp, wp)`` at ``(top,
    left)`` (the border is never written: it stays zero). Each row is copied between 1-D
    views indexed from 0: with no index that could be negative, Numba checks none and the
    copy vectorises (an index like ``dst + v`` kept a wrap check per element, 2-3x the
    time)."""
    for c in range(channels):
        for y in range(rows):
            src = base + (c * height + y) * width
            dst = (c * hp + y + top) * wp + left
            row, into = x[src:src + cols], xp[dst:dst + cols]
            for v in range(cols):
                into[v] = row[v]


@helper(inline="always")
def _outer(u0, u1, x0, x1, x2, x3, a0, a1, a2, a3, b0, b1, b2, b3):
    """The eight sums ``a_k += u0 * x_k``, ``b_k += u1 * x_k`` (``k < 4``): one step of
    a two-vector by four-value outer product, both loops' inner step."""
    return (fma(u0, x0, a0), fma(u0, x1, a1), fma(u0, x2, a2), fma(u0, x3, a3),
            fma(u1, x0, b0), fma(u1, x1, b1), fma(u1, x2, b2), fma(u1, x3, b3))


@helper(inline="always")
def _sums2(xp, wt, offsets, cpad, b, p, sw):
    """Four positions (``p`` and every ``sw`` after it in ``xp``) of blocks ``b, b + 1``:
    eight vector sums over the taps at ``offsets``."""
    a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = broadcast(F(0))
    t = b * LANES
    for k in range(offsets.size):
        o = p + offsets[k]
        w0 = load(wt, t)
        w1 = load(wt, t + LANES)
        x0 = broadcast_at(xp, o)
        x1 = broadcast_at(xp, o + sw)
        x2 = broadcast_at(xp, o + 2 * sw)
        x3 = broadcast_at(xp, o + 3 * sw)
        a0, a1, a2, a3, b0, b1, b2, b3 = _outer(w0, w1, x0, x1, x2, x3, a0, a1, a2, a3, b0,
                                                b1, b2, b3)
        t += cpad
    return a0, a1, a2, a3, b0, b1, b2, b3


@helper(inline="always")
def _sums1(xp, wt, offsets, cpad, b, p, sw):
    """Eight positions (``p`` and every ``sw`` after it) of block ``b``: eight vector sums
    (as many as :func:`_sums2` keeps, so that the multiply-adds' latency is
    hidden the same way)."""
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = broadcast(F(0))
    t = b * LANES
    for k in range(offsets.size):
        o = p + offsets[k]
        w0 = load(wt, t)
        a0 = fma(w0, broadcast_at(xp, o), a0)
        a1 = fma(w0, broadcast_at(xp, o + sw), a1)
        a2 = fma(w0, broadcast_at(xp, o + 2 * sw), a2)
        a3 = fma(w0, broadcast_at(xp, o + 3 * sw), a3)
        a4 = fma(w0, broadcast_at(xp, o + 4 * sw), a4)
        a5 = fma(w0, broadcast_at(xp, o + 5 * sw), a5)
        a6 = fma(w0, broadcast_at(xp, o + 6 * sw), a6)
        a7 = fma(w0, broadcast_at(xp, o + 7 * sw), a7)
        t += cpad
    return a0, a1, a2, a3, a4, a5, a6, a7


@helper(inline="always")
def _sum(xp, wt, offsets, cpad, b, p):
    """One position of block ``b``."""
    a0 = broadcast(F(0))
    t = b * LANES
    for k in range(offsets.size):
        a0 = fma(load(wt, t), broadcast_at(xp, p + offsets[k]), a0)
        t += cpad
    return a0


@helper(inline="always")
def _store4(sums, q, bias, a0, a1, a2, a3):
    """Four positions' sums plus the bias (added last: the roundings of a conv and then
    its bias, as the GEMMs' kernels give)."""
    store(sums, q, add(a0, bias))
    store(sums, q + LANES, add(a1, bias))
    store(sums, q + 2 * LANES, add(a2, bias))
    store(sums, q + 3 * LANES, add(a3, bias))


@helper(inline="always")
def _row_sums(xp, wt, offsets, bias, stage, blocks, r, wo, sh, sw, wp):
    """Output row ``r`` of one image (padded into ``xp``) into ``stage (blocks, Wo, 8)``
    (flat): runs of four positions for two blocks at a time (of eight for a last single
    block), the last run ending at the row's end (rewriting a few positions with the same
    sums rather than taking a remainder one position at a time, whose one chain of
    multiply-adds runs at a fifth of the rate); rows narrower than a run one position at
    a time."""
    cpad = blocks * LANES
    for b in range(0, blocks, 2):
        two = b + 1 < blocks
        run = 4 if two else 8
        s0 = load(bias, b * LANES)
        s1 = load(bias, (b + 1) * LANES) if two else s0
        row = b * wo * LANES
        if wo < run:
            for v in range(wo):
                p, q = r * sh * wp + v * sw, row + v * LANES
                store(stage, q, add(_sum(xp, wt, offsets, cpad, b, p), s0))
                if two:
                    store(stage, q + wo * LANES, add(_sum(xp, wt, offsets, cpad, b + 1, p), s1))
            continue
        for v in range(0, wo, run):
            v = min(v, wo - run)
            p, q = r * sh * wp + v * sw, row + v * LANES
            if two:
                a0, a1, a2, a3, b0, b1, b2, b3 = _sums2(xp, wt, offsets, cpad, b, p, sw)
                _store4(stage, q, s0, a0, a1, a2, a3)
                _store4(stage, q + wo * LANES, s1, b0, b1, b2, b3)
            else:
                a0, a1, a2, a3, a4, a5, a6, a7 = _sums1(xp, wt, offsets, cpad, b, p, sw)
                _store4(stage, q, s0, a0, a1, a2, a3)
                _store4(stage, q + 4 * LANES, s0, a4, a5, a6, a7)


@loop(fastmath={"contract"})
def _forward(start, stop, x, wt, offsets, bias, out, residual, scratch, acc, act, lo, hi,
             where, channels, height, width, cout, ho, wo, sh, sw, top, left, hp, wp):
    """Rows ``start * R // W : stop * R // W`` (``W = acc.shape[0]`` slots, ``R = N * Ho``
    output rows of every image) of the flat ``out (N, Cout, Ho, Wo)``: the conv of the
    flat ``x (N, C, H, W)`` with ``wt (C*kh*kw, blocks*8)`` (flat, zero past Cout; tap
    ``t`` at ``offsets[t]`` in the padded planes) and ``bias (blocks*8,)``, with
    ``conv_lanes.finish``'s epilogue (``residual`` flat like ``out``). A row's sums are
    activated and transposed into the output planes while they are in cache (the whole
    image's sums, then a pass for each, took as long as the sums on a 3-channel first
    layer)."""
    blocks = -(-cout // LANES)
    size, plane = ho * wo, height * width
    rows_all = out.size // (cout * wo)
    rows, cols = min(height, hp - top), min(width, wp - left)
    for slot in range(start, stop):
        xp, stage = scratch[slot], acc[slot]
        xp[:] = 0
        image = -1
        first = slot * rows_all // acc.shape[0]
        for item in range(first, (slot + 1) * rows_all // acc.shape[0]):
            n, r = item // ho, item % ho
            if n != image:
                pad_image(x, n * channels * plane, channels, rows, cols, width, height, xp,
                          hp, wp, top, left)
                image = n
            _row_sums(xp, wt, offsets, bias, stage, blocks, r, wo, sh, sw, wp)
            if where == 0:
                _activate(stage[:blocks * wo * LANES], act, lo, hi)
            for b in range(blocks):
                lanes = min(LANES, cout - b * LANES)
                base = (n * cout + b * LANES) * size + r * wo
                row_out(stage, b * wo * LANES, out, base, size, wo, lanes)
                if where != 0:
                    for c in range(lanes):
                        p = base + c * size
                        finish(out[p:p + wo], residual[p:p + wo], where, act, lo, hi)


@helper(inline="always")
def _accumulate4(gwt, e, step, t0, first, a0, a1, a2, a3):
    """``gwt[e + k*step:][:8] += a_k`` for the taps ``t0 + k >= first`` (``k < 4``)."""
    if t0 >= first:
        store(gwt, e, add(load(gwt, e), a0))
    if t0 + 1 >= first:
        store(gwt, e + step, add(load(gwt, e + step), a1))
    if t0 + 2 >= first:
        store(gwt, e + 2 * step, add(load(gwt, e + 2 * step), a2))
    if t0 + 3 >= first:
        store(gwt, e + 3 * step, add(load(gwt, e + 3 * step), a3))


@helper(inline="always")
def _grad_pair(xp, gt, gwt, cpad, b, offsets, t0, first, size, ho, wo, sh, sw, wp):
    """``gwt[t, blocks b and b + 1] +=`` the sums over one image's positions of the
    interleaved gradient ``gt (blocks, Ho*Wo, 8)`` times ``xp[offsets[t] + position]``,
    for the four taps ``t0:t0 + 4`` (added from tap ``first`` on): eight vector sums."""
    a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = broadcast(F(0))
    o0, o1, o2, o3 = offsets[t0], offsets[t0 + 1], offsets[t0 + 2], offsets[t0 + 3]
    for r in range(ho):
        q, p = (b * size + r * wo) * LANES, r * sh * wp
        for v in range(wo):
            g0 = load(gt, q)
            g1 = load(gt, q + size * LANES)
            x0 = broadcast_at(xp, p + o0)
            x1 = broadcast_at(xp, p + o1)
            x2 = broadcast_at(xp, p + o2)
            x3 = broadcast_at(xp, p + o3)
            a0, a1, a2, a3, b0, b1, b2, b3 = _outer(g0, g1, x0, x1, x2, x3, a0, a1, a2, a3,
                                                    b0, b1, b2, b3)
            q += LANES
            p += sw
    e = t0 * cpad + b * LANES
    _accumulate4(gwt, e, cpad, t0, first, a0, a1, a2, a3)
    _accumulate4(gwt, e + LANES, cpad, t0, first, b0, b1, b2, b3)


@helper(inline="always")
def _grad_eight(xp, gt, gwt, cpad, b, offsets, t0, first, size, ho, wo, sh, sw, wp):
    """:func:`_grad_pair` for one block ``b`` and the eight taps ``t0:t0 + 8``."""
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = broadcast(F(0))
    o0, o1, o2, o3 = offsets[t0], offsets[t0 + 1], offsets[t0 + 2], offsets[t0 + 3]
    o4, o5, o6, o7 = offsets[t0 + 4], offsets[t0 + 5], offsets[t0 + 6], offsets[t0 + 7]
    for r in range(ho):
        q, p = (b * size + r * wo) * LANES, r * sh * wp
        for v in range(wo):
            g0 = load(gt, q)
            a0 = fma(g0, broadcast_at(xp, p + o0), a0)
            a1 = fma(g0, broadcast_at(xp, p + o1), a1)
            a2 = fma(g0, broadcast_at(xp, p + o2), a2)
            a3 = fma(g0, broadcast_at(xp, p + o3), a3)
            a4 = fma(g0, broadcast_at(xp, p + o4), a4)
            a5 = fma(g0, broadcast_at(xp, p + o5), a5)
            a6 = fma(g0, broadcast_at(xp, p + o6), a6)
            a7 = fma(g0, broadcast_at(xp, p + o7), a7)
            q += LANES
            p += sw
    e = t0 * cpad + b * LANES
    _accumulate4(gwt, e, cpad, t0, first, a0, a1, a2, a3)
    _accumulate4(gwt, e + 4 * cpad, cpad, t0 + 4, first, a4, a5, a6, a7)


@helper(inline="always")
def _grad_one(xp, gt, gwt, cpad, b, offsets, t, size, ho, wo, sh, sw, wp):
    """:func:`_grad_pair` for one block ``b`` and one tap ``t`` (kernels of fewer than
    ``TAPS`` taps)."""
    a0 = broadcast(F(0))
    o0 = offsets[t]
    for r in range(ho):
        q, p = (b * size + r * wo) * LANES, r * sh * wp
        for v in range(wo):
            a0 = fma(load(gt, q), broadcast_at(xp, p + o0), a0)
            q += LANES
            p += sw
    store(gwt, t * cpad + b * LANES, add(load(gwt, t * cpad + b * LANES), a0))


@loop(fastmath={"contract"})
def _weight_grad(start, stop, x, gy, gwt, offsets, scratch, stage, channels, height, width,
                 cout, ho, wo, sh, sw, top, left, hp, wp):
    """Slots ``start:stop`` of ``W = scratch.shape[0]``: slot ``s`` adds into the flat ``gwt
    (C*kh*kw, blocks*8)`` (zeros) the weight gradient, for the tap groups ``s * T // W :
    (s + 1) * T // W`` (``T`` groups of ``TAPS`` taps, the last maybe fewer), of the flat
    ``x (N, C, H, W)`` given the flat output gradient ``gy (N, Cout, Ho, Wo)``;
    ``offsets[t]`` is tap ``t``'s offset in the padded planes."""
    for slot in range(start, stop):
        _grad_slot(slot, x, gy, gwt, offsets, scratch[slot], stage[slot], channels, height,
                   width, cout, ho, wo, sh, sw, top, left, hp, wp, scratch.shape[0])


@helper(inline="always")
def _grad_slot(slot, x, gy, gwt, offsets, xp, gt, channels, height, width, cout, ho, wo, sh,
               sw, top, left, hp, wp, slots):
    """:func:`_weight_grad`'s slot ``slot`` of ``slots``: every image, its taps."""
    blocks = -(-cout // LANES)
    cpad, size, plane = blocks * LANES, ho * wo, height * width
    taps = offsets.size
    images = x.size // (channels * plane)
    rows, cols = min(height, hp - top), min(width, wp - left)
    total = -(-taps // TAPS)
    start, stop = slot * total // slots, (slot + 1) * total // slots
    xp[:] = 0
    gt[:] = 0     # (the spare lanes of a last block stay zero)
    for n in range(images):
        pad_image(x, n * channels * plane, channels, rows, cols, width, height, xp, hp, wp,
                   top, left)
        for b in range(blocks):
            _interleave(gy, (n * cout + b * LANES) * size, size, min(LANES, cout - b * LANES),
                        gt[b * size * LANES:], size, True)
        for group in range(start, stop):
            first = group * TAPS
            if taps < TAPS:
                for t in range(first, taps):
                    for b in range(blocks):
                        _grad_one(xp, gt, gwt, cpad, b, offsets, t, size, ho, wo, sh, sw, wp)
                continue
            # (a last group of fewer taps ends at the last one: the taps before ``first``
            # are summed again and not added)
            t0, b = min(first, taps - TAPS), 0
            while b + 1 < blocks:
                for t in range(t0, t0 + TAPS, 4):
                    _grad_pair(xp, gt, gwt, cpad, b, offsets, t, first, size, ho, wo, sh, sw,
                               wp)
                b += 2
            if b < blocks:
                _grad_eight(xp, gt, gwt, cpad, b, offsets, t0, first, size, ho, wo, sh, sw, wp)


# Where these loops beat the GEMMs (docs/benchmarks.md, "small convolutions"): the forward
# with at most this many weight elements per output position of an image (Cout * C*kh*kw:
# a 6 -> 16 5x5 conv 2400, 0.6x the row-shifted GEMMs' time; 16 -> 16 3x3 2304 the same
# time; 32 -> 32 3x3 9216 1.2x), the weight gradient with at most this many input
# channels (a 16 -> 16 3x3 0.9x, a 20 -> 50 5x5 0.85x; 32 channels 1.0-1.1x).
MAX_FORWARD_WEIGHTS = 2560
MAX_GRAD_CHANNELS = 20


def _fits(x_shape, w_shape, padding, groups, dtype) -> bool:
    cout, cg, kh, kw = w_shape
    return (dtype == np.float32 and groups == 1 and cout >= LANES and kh * kw > 1
            and min(min(p) for p in padding) >= 0 and numba_available())


def wanted(x_shape, w_shape, padding, groups, dtype) -> bool:
    """Whether :func:`conv` takes a conv: float32, one group, a kernel larger than 1x1, no
    negative padding, at least eight output channels (a block of lanes) and at most
    ``MAX_FORWARD_WEIGHTS`` weight elements per output position (1x1 kernels and fewer
    channels ran slower than the GEMMs: short sums, spare lanes)."""
    return (_fits(x_shape, w_shape, padding, groups, dtype)
            and w_shape[0] * w_shape[1] * w_shape[2] * w_shape[3] <= MAX_FORWARD_WEIGHTS)


def grad_wanted(x_shape, w_shape, padding, groups, dtype) -> bool:
    """Whether :func:`weight_grad` takes a conv's weight gradient: as :func:`wanted`, but
    with at most ``MAX_GRAD_CHANNELS`` input channels instead of the weight bound."""
    return (_fits(x_shape, w_shape, padding, groups, dtype)
            and w_shape[1] <= MAX_GRAD_CHANNELS)


def _planes(ho, wo, kernel, stride, dilation):
    """The padded rows and columns the outputs read."""
    return tuple((o - 1) * s + (k - 1) * d + 1
                 for o, k, s, d in zip((ho, wo), kernel, stride, dilation))


def _offsets(c, kernel, dilation, hp, wp):
    """Each tap ``(c, i, j)``'s offset in the padded planes ``(C, hp, wp)``, int64 (shared
    per geometry, never written: worked out at each call it took half a small conv's
    time)."""
    return _tap_offsets(c, tuple(kernel), tuple(dilation), hp, wp)


@lru_cache(maxsize=256)
def _tap_offsets(c, kernel, dilation, hp, wp):
    ci, ii, jj = np.meshgrid(np.arange(c), np.arange(kernel[0]), np.arange(kernel[1]),
                             indexing="ij")
    return ((ci * hp + ii * dilation[0]) * wp + jj * dilation[1]).reshape(-1).astype(np.int64)


def conv(x, w, out, stride, padding, dilation, groups, bias, residual=None, where=0, act=0,
         lo=-np.inf, hi=np.inf):
    """``out (N, Cout, Ho, Wo)`` = the conv of ``x (N, C, H, W)`` with ``w (Cout, C, kh,
    kw)`` and ``bias (Cout,)`` (float32, :func:`wanted`: ``groups`` is 1), with
    ``conv_tiles.conv``'s epilogue arguments; returns ``out``."""
    x = np.ascontiguousarray(x, F)
    n, c, h, wd = x.shape
    cout, _, kh, kw = w.shape
    ho, wo = out.shape[2:]
    hp, wp = _planes(ho, wo, (kh, kw), stride, dilation)
    blocks = -(-cout // LANES)
    wt = np.zeros((c * kh * kw, blocks * LANES), F)
    wt[:, :cout] = w.reshape(cout, -1).T
    b = np.zeros(blocks * LANES, F)
    b[:cout] = bias
    workers = max(1, min(n * ho, threads_for(out.size * c * kh * kw) or cores()))
    scratch = np.empty((workers, c * hp * wp), F)
    acc = np.empty((workers, blocks * wo * LANES), F)
    res = (np.zeros(1, F) if residual is None
           else np.ascontiguousarray(residual, F).reshape(-1))
    run_rows(_forward, workers, x.reshape(-1), wt.reshape(-1),
             _offsets(c, (kh, kw), dilation, hp, wp), b, out.reshape(-1), res, scratch, acc, act,
             F(lo), F(hi), where, c, h, wd, cout, ho, wo, stride[0], stride[1], padding[0][0],
             padding[1][0], hp, wp, threads=workers)
    return out


def weight_grad(x, gy, kernel, stride, padding, dilation):
    """The weight gradient ``(Cout, C, kh, kw)`` of the conv of ``x (N, C, H, W)`` given
    its output gradient ``gy (N, Cout, Ho, Wo)`` (float32, :func:`wanted`)."""
    x, gy = np.ascontiguousarray(x, F), np.ascontiguousarray(gy, F)
    n, c, h, wd = x.shape
    cout, ho, wo = gy.shape[1:]
    kh, kw = kernel
    hp, wp = _planes(ho, wo, kernel, stride, dilation)
    blocks = -(-cout // LANES)
    offsets = _offsets(c, kernel, dilation, hp, wp)
    workers = max(1, min(-(-offsets.size // TAPS), threads_for(gy.size * c * kh * kw)
                         or cores()))
    gwt = np.zeros((c * kh * kw, blocks * LANES), F)
    scratch = np.empty((workers, c * hp * wp), F)
    stage = np.empty((workers, blocks * ho * wo * LANES), F)
    run_rows(_weight_grad, workers, x.reshape(-1), gy.reshape(-1), gwt.reshape(-1),
             offsets, scratch, stage, c, h, wd, cout, ho, wo, stride[0],
             stride[1], padding[0][0], padding[1][0], hp, wp, threads=workers)
    return np.ascontiguousarray(gwt[:, :cout].T).reshape(cout, c, kh, kw)
