"""Convolutions with few input channels (one group, float32: an image's first layer, 3
channels), forward with the epilogue, output positions in the lanes of a vector.

As im2col + GEMM such a conv is a GEMM only ``C*kh*kw`` deep (27 for a 3x3 kernel on 3
channels): too shallow for the GEMM to reach its speed, after a column buffer 9-49 times
the input. With output channels in the lanes instead (the packed loops), every tap of every
output position is one broadcast of an input value for one multiply-add, and the sums are
transposed into the output planes at the end. Here the lanes hold ``W`` neighbouring
outputs of one row (``W`` = 16 where the loops run AVX-512 at full width and the row has
sixteen, else 8), so that a tap's inputs for them are one plain load: the image is copied
once into zero-padded planes split by column phase (``sw`` phases, column ``x`` of a
padded row at phase ``x % sw``, place ``x // sw``), where the inputs of ``W`` outputs at
column stride ``sw`` lie side by side, and padding, stride and dilation are index
arithmetic, nothing special at the edges. The register block is ``ROWS`` output rows by
``CHANNELS`` output channels (24 vector sums, started from the bias): per tap ``ROWS``
input loads and ``CHANNELS`` weight broadcasts feed 24 multiply-adds, so the loop issues
multiply-adds rather than loads. The sums go straight to the output planes (no transpose),
activated in registers where the epilogue is a piecewise-linear activation alone
(``epilogue.activate_vector``: ReLU, clamp, hard-swish; a pass over the rows took a fifth
of a 3x3 stem's time); other epilogues (``conv_lanes.finish``) run on each finished row
while it is in cache.

Written channel-blocked instead (``fitted(blocked=True)``: the layout of the blocked
region that reads a first layer's output, ``ops/layout.py``'s ``shallow_blocked``), a
register block's eight channels are one block: each row's eight vectors are staged and
transposed 8x8 into place (``_unstage``), no ``block_channels`` pass after the conv.

A work item is an image's band of ``ROWS`` output rows for a block of ``CHANNELS`` output
channels. A row's last ``W`` outputs end at its end and the last band at the last row
(:func:`wanted`: ``ROWS`` rows and ``LANES`` columns at least), recomputing some outputs,
of which the last band stores only its own rows (the band before may be another
thread's, its epilogue done); a last block's slots past ``Cout`` repeat the last channel
(the same values, stored twice, finished once), so every vector is whole. Items are
shared among threads (``threads.run_rows``); each output is the bias plus its taps in
``(c, i, j)`` order, one chain of multiply-adds, so the bits depend neither on the thread
count nor on ``W``.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from . import helper, isa, loop
from .conv_lanes import finish
from .epilogue import activate_vector, in_registers, vector_constants
from .simd import (LANES, WIDE, broadcast, broadcast_at_like, broadcast_wide, even_lanes, fma,
                   lanes_of, load, load_like, odd_lanes, store, transpose, wide_loops)
from .threads import run_kept, threads_for
from .tuning import cores

F = np.float32
ROWS = 3        # output rows of the register block
CHANNELS = 8    # output channels of the register block: one block of the blocked layout's


@helper(inline="always")
def _phases(x, base, channels, height, width, xp, hp, wq, sw, top, left):
    """The image at ``base`` of the flat ``x (C, H, W)`` into ``xp (C, hp, sw, wq)``:
    padded row ``y`` (input row ``y - top``), column ``p`` (input column ``p - left``) at
    phase ``p % sw``, place ``p // sw``; zero outside the input. At ``sw`` 1 eight input
    columns are one load and store, at ``sw`` 2 sixteen are split into their even and odd
    ones by two shuffles, the rest one by one. Only the input's places are written: the
    rest of ``xp`` (the padding) is zero from the start, and stays so (zeroing all of it
    at each image, Numba's slice fill, took a quarter of a 3x3 stem's time)."""
    rows, cols = min(height, hp - top), min(width, sw * wq - left)
    for c in range(channels):
        for y in range(rows):
            src, dst = base + (c * height + y) * width, (c * hp + y + top) * sw * wq
            done = 0
            if sw == 1:
                done = cols - cols % LANES
                for m in range(0, done, LANES):
                    store(xp, dst + left + m, load(x, src + m))
            elif sw == 2:     # (input column 2m at place m + left // 2 of phase left % 2)
                even = dst + left % 2 * wq + left // 2
                odd = dst + (left + 1) % 2 * wq + (left + 1) // 2
                done = cols - cols % (2 * LANES)
                for m in range(0, done, 2 * LANES):
                    a, b = load(x, src + m), load(x, src + m + LANES)
                    store(xp, even + m // 2, even_lanes(a, b))
                    store(xp, odd + m // 2, odd_lanes(a, b))
            for col in range(done, cols):
                p = col + left
                xp[dst + p % sw * wq + p // sw] = x[src + col]


@helper(inline="always")
def _rows(xp, at, step, w, a0, a1, a2, like):
    """``a_r += w * xp[at + r * step:][:W]`` for the ``ROWS`` rows ``r``."""
    return (fma(load_like(xp, at, like), w, a0),
            fma(load_like(xp, at + step, like), w, a1),
            fma(load_like(xp, at + 2 * step, like), w, a2))


@helper(inline="always")
def _put(out, at, wo, skip, act, consts, a0, a1, a2):
    """The ``ROWS`` rows' sums, activated (``epilogue.activate_vector``), into ``out`` at
    ``at``, ``at + wo``, ...: those from row ``skip`` on (the rows before are the band
    before's)."""
    a0, a1 = activate_vector(a0, act, consts), activate_vector(a1, act, consts)
    a2 = activate_vector(a2, act, consts)
    if skip < 1:
        store(out, at, a0)
    if skip < 2:
        store(out, at + wo, a1)
    store(out, at + 2 * wo, a2)


@helper(inline="always")
def _unstage(stage, out, plane, first, skip, v, wo, n):
    """Rows ``skip:ROWS`` of a band's staged sums (channel ``k``'s row ``r`` at ``(k * ROWS
    + r) * n`` of ``stage``, ``n`` positions from column ``v``) into the channel-blocked
    ``out`` at the block's ``plane`` (eight channels a position): 8x8 transposes."""
    for r in range(skip, ROWS):
        for h in range(0, n, LANES):
            transpose(stage, r * n + h, ROWS * n, out,
                      plane + ((first + r) * wo + v + h) * LANES, LANES)


@helper(inline="always")
def _band(xp, offsets, wt, bias, out, wbase, bbase, d, first, skip, wo, step, act, consts,
          stage, plane, like):
    """Output rows ``first .. first + ROWS - 1`` (those from ``skip`` on stored) of the
    ``CHANNELS`` planes at ``d[k]`` of ``out``, ``W`` (``like``'s lanes) outputs at a time
    from the padded phases ``xp`` (tap ``t`` of an output at ``offsets[t]`` from its
    first; ``step`` elements between two output rows' inputs), the weights at
    ``wt[wbase:]`` (tap-major, ``CHANNELS`` a tap) and biases at ``bias[bbase:]``, the
    activation ``act`` (``epilogue.VECTOR_ACTS``, 0 for none) applied in registers. With
    a ``plane`` (>= 0) ``out`` is channel-blocked: the sums go to ``stage`` (``d[k]``
    channel ``k``'s place there), then into the block's plane (:func:`_unstage`)."""
    n = lanes_of(like)
    for v in range(0, wo, n):
        v = min(v, wo - n)
        a00 = a01 = a02 = broadcast_at_like(bias, bbase, like)
        a10 = a11 = a12 = broadcast_at_like(bias, bbase + 1, like)
        a20 = a21 = a22 = broadcast_at_like(bias, bbase + 2, like)
        a30 = a31 = a32 = broadcast_at_like(bias, bbase + 3, like)
        a40 = a41 = a42 = broadcast_at_like(bias, bbase + 4, like)
        a50 = a51 = a52 = broadcast_at_like(bias, bbase + 5, like)
        a60 = a61 = a62 = broadcast_at_like(bias, bbase + 6, like)
        a70 = a71 = a72 = broadcast_at_like(bias, bbase + 7, like)
        base = first * step + v
        for tap in range(offsets.size):
            at, t = base + offsets[tap], wbase + tap * CHANNELS
            w = broadcast_at_like(wt, t, like)
            a00, a01, a02 = _rows(xp, at, step, w, a00, a01, a02, like)
            w = broadcast_at_like(wt, t + 1, like)
            a10, a11, a12 = _rows(xp, at, step, w, a10, a11, a12, like)
            w = broadcast_at_like(wt, t + 2, like)
            a20, a21, a22 = _rows(xp, at, step, w, a20, a21, a22, like)
            w = broadcast_at_like(wt, t + 3, like)
            a30, a31, a32 = _rows(xp, at, step, w, a30, a31, a32, like)
            w = broadcast_at_like(wt, t + 4, like)
            a40, a41, a42 = _rows(xp, at, step, w, a40, a41, a42, like)
            w = broadcast_at_like(wt, t + 5, like)
            a50, a51, a52 = _rows(xp, at, step, w, a50, a51, a52, like)
            w = broadcast_at_like(wt, t + 6, like)
            a60, a61, a62 = _rows(xp, at, step, w, a60, a61, a62, like)
            w = broadcast_at_like(wt, t + 7, like)
            a70, a71, a72 = _rows(xp, at, step, w, a70, a71, a72, like)
        blocked = plane >= 0
        into, o = (stage, 0) if blocked else (out, first * wo + v)
        gap, keep = (n, 0) if blocked else (wo, skip)
        _put(into, d[0] + o, gap, keep, act, consts, a00, a01, a02)
        _put(into, d[1] + o, gap, keep, act, consts, a10, a11, a12)
        _put(into, d[2] + o, gap, keep, act, consts, a20, a21, a22)
        _put(into, d[3] + o, gap, keep, act, consts, a30, a31, a32)
        _put(into, d[4] + o, gap, keep, act, consts, a40, a41, a42)
        _put(into, d[5] + o, gap, keep, act, consts, a50, a51, a52)
        _put(into, d[6] + o, gap, keep, act, consts, a60, a61, a62)
        _put(into, d[7] + o, gap, keep, act, consts, a70, a71, a72)
        if blocked:
            _unstage(stage, out, plane, first, skip, v, wo, n)


@loop(fastmath={"contract"})
def _shallow(start, stop, x, offsets, wt, bias, out, residual, scratch, places, stages, act,
             lo, hi, consts, where, blocked, channels, cout, height, width, ho, wo, sh, sw, top,
             left, hp, wq, lanes):
    """Slots ``start:stop`` of ``scratch.shape[0]``: the items (image, band of ``ROWS``
    output rows, block of ``CHANNELS`` output channels) of the flat ``x (N, C, H, W)``
    convolved with ``wt (blocks, C*kh*kw, CHANNELS)`` (flat, its taps' inputs at
    ``offsets``: :func:`_offsets`; a last block's spare slots repeat the last channel) and
    ``bias (blocks * CHANNELS)`` into the flat ``out (N, Cout, Ho, Wo)``, ``lanes`` outputs
    a vector, with ``conv_lanes.finish``'s epilogue (``residual`` flat like ``out``): in
    registers where ``epilogue.in_registers`` (``consts``: ``epilogue.vector_constants``),
    else a pass over each finished row. ``blocked``: ``out`` and ``residual`` are
    channel-blocked ``(N, Cout/8, Ho, Wo, 8)`` (``Cout`` a multiple of eight), the sums
    staged in ``stages[t]`` and transposed into place."""
    wide_loops()
    blocks, bands = -(-cout // CHANNELS), -(-ho // ROWS)
    size, per_image = ho * wo, bands * blocks
    items = out.size // (cout * size) * per_image
    for t in range(start, stop):
        xp, d, stage = scratch[t], places[t], stages[t]
        image = -1
        for item in range(t * items // scratch.shape[0], (t + 1) * items // scratch.shape[0]):
            n, band, b = item // per_image, item % per_image // blocks, item % blocks
            if n != image:
                _phases(x, n * channels * height * width, channels, height, width, xp, hp, wq,
                        sw, top, left)
                image = n
            first = min(band * ROWS, ho - ROWS)      # (the last band ends at the last row)
            plane = (n * blocks + b) * size * LANES if blocked else -1
            for k in range(CHANNELS):
                d[k] = (k * ROWS * lanes if blocked
                        else (n * cout + min(b * CHANNELS + k, cout - 1)) * size)
            wbase, bbase = b * offsets.size * CHANNELS, b * CHANNELS
            skip, step = band * ROWS - first, sh * sw * wq
            inner = act if in_registers(act, where) else 0
            if lanes == WIDE:
                _band(xp, offsets, wt, bias, out, wbase, bbase, d, first, skip, wo, step,
                      inner, consts, stage, plane, broadcast_wide(F(0)))
            else:
                _band(xp, offsets, wt, bias, out, wbase, bbase, d, first, skip, wo, step,
                      inner, consts, stage, plane, broadcast(F(0)))
            if not in_registers(act, where) and blocked:
                for r in range(band * ROWS, first + ROWS):
                    p = plane + r * wo * LANES
                    finish(out[p:p + wo * LANES], residual[p:p + wo * LANES], where, act, lo,
                           hi)
            elif not in_registers(act, where):
                for k in range(min(CHANNELS, cout - b * CHANNELS)):
                    for r in range(band * ROWS, first + ROWS):
                        p = d[k] + r * wo
                        finish(out[p:p + wo], residual[p:p + wo], where, act, lo, hi)

MAX_CHANNELS = 4


def wanted(x_shape, w_shape, out_hw, padding, groups, dtype) -> bool:
    """Whether a conv runs here: float32, one group, at most ``MAX_CHANNELS`` input
    channels, at least ``ROWS`` rows of eight outputs, no negative padding."""
    return (dtype == np.float32 and groups == 1 and x_shape[1] <= MAX_CHANNELS
            and out_hw[0] >= ROWS and out_hw[1] >= LANES and min(min(p) for p in padding) >= 0)


def wins(x_shape, w_shape, out_hw, stride, padding, groups, dtype) -> bool:
    """Whether this loop, rather than ``conv_outlanes``' or the packed weight's
    (``conv_packed``), runs a conv it takes (:func:`wanted`): a column stride of at most 2
    (at stride 4 a band's padded rows outgrow L1, and an 11x11 stem took 1.15x the packed
    loop's time; at strides 1 and 2 0.7-1.0x the best other loop's on 3x3, 5x5 and 7x7
    stems, 1.05-1.1x the packed loop's on a one-channel 7x7 stride-1 layer:
    docs/benchmarks.md, 2026-12-05 "stems with output positions in the lanes")."""
    return wanted(x_shape, w_shape, out_hw, padding, groups, dtype) and stride[1] <= 2


def lanes(wo: int) -> int:
    """Outputs a vector: sixteen where the loops run AVX-512 at full width
    (``isa.full_width``) and a row has sixteen, else eight."""
    return WIDE if isa.full_width() and wo >= WIDE else LANES


@lru_cache(maxsize=64)
def packing(w_shape) -> tuple[np.ndarray, np.ndarray]:
    """How the loop reads ``w (Cout, C, kh, kw)`` and ``bias (Cout,)``: the flat weight's
    element at each place of the flat ``(blocks, C*kh*kw, CHANNELS)`` packed weight and
    the output channel of each of the ``blocks * CHANNELS`` bias slots, block ``b``'s slot
    ``k`` channel ``b * CHANNELS + k``, the last channel where that is past ``Cout`` (the
    loop computes it twice)."""
    cout, taps = w_shape[0], math.prod(w_shape[1:])
    blocks = -(-cout // CHANNELS)
    which = np.minimum(np.arange(blocks * CHANNELS), cout - 1)
    gather = which.reshape(blocks, 1, CHANNELS) * taps + np.arange(taps).reshape(1, taps, 1)
    return gather.reshape(-1), which


@lru_cache(maxsize=64)
def _offsets(channels, kernel, dilation, hp, sw, wq) -> np.ndarray:
    """Tap ``(c, i, j)``'s input of an output, from the input of that output's first tap,
    in the padded phases ``(C, hp, sw, wq)``: row ``i * dh`` of plane ``c``, column ``j *
    dw`` at phase ``j * dw % sw``, place ``j * dw // sw`` (once per geometry: NumPy took
    tens of microseconds for it)."""
    c, i, j = np.meshgrid(np.arange(channels), np.arange(kernel[0]), np.arange(kernel[1]),
                          indexing="ij")
    col = j * dilation[1]
    return (((c * hp + i * dilation[0]) * sw + col % sw) * wq + col // sw).reshape(-1)


def conv(x, w, out, stride, padding, dilation, groups, bias, residual=None, where=0, act=0,
         lo=-np.inf, hi=np.inf):
    """``out (N, Cout, Ho, Wo)`` = the conv of ``x (N, C, H, W)`` with ``w (Cout, C, kh,
    kw)`` and ``bias (Cout,)`` (float32, :func:`wanted`), with ``conv_tiles.conv``'s
    epilogue arguments (``groups`` 1, taken for the same signature)."""
    run = fitted(x.shape, w.shape, out.shape, stride, padding, dilation, groups, F,
                 residual is not None, where, act, lo, hi)
    return run(x, w, bias, out, residual)


def fitted(x_shape, w_shape, out_shape, stride, padding, dilation, groups=1, dtype=F,
           residual=False, where=0, act=0, lo=-np.inf, hi=np.inf, blocked=False):
    """``run(x, w, bias, out, residual=None)``: :func:`conv` fitted to the shapes (float32,
    one group: ``groups`` and ``dtype`` taken for ``conv_direct.fitted``'s signature), what
    depends on them alone worked out once for a compiled graph's node: the layout and tap
    offsets, threads, the padded phases' scratch (hundreds of kilobytes on a 224x224
    image: allocated afresh, its pages were faulted in again at each call), the packed
    weight's and bias's buffers (each call packs the weight it is given into them: one
    gather) and the loop's entry. A call at a time (the buffers are the closure's).
    ``blocked``: ``out`` (and ``residual``) channel-blocked ``(N, Cout/8, Ho, Wo, 8)``
    (``Cout`` a multiple of eight), ``out_shape`` still ``(N, Cout, Ho, Wo)``."""
    n, c, h, wd = x_shape
    cout, _, kh, kw = w_shape
    ho, wo = out_shape[2:]
    sh, sw = stride
    hp = (ho - 1) * sh + (kh - 1) * dilation[0] + 1   # (the padded rows and columns that
    wp = (wo - 1) * sw + (kw - 1) * dilation[1] + 1   # the outputs read)
    wq = -(-wp // sw)                                 # (a phase's columns)
    gather, which = packing(tuple(w_shape))
    wt, b = np.empty(gather.size, F), np.empty(which.size, F)
    offsets = _offsets(c, (kh, kw), tuple(dilation), hp, sw, wq)
    items = n * -(-ho // ROWS) * (which.size // CHANNELS)
    workers = max(1, min(items, threads_for(math.prod(out_shape) * c * kh * kw) or cores()))
    scratch = np.zeros((workers, c * hp * sw * wq), F)   # (the padding, never written)
    places = np.empty((workers, CHANNELS), np.int64)
    stages = np.empty((workers, CHANNELS * ROWS * WIDE if blocked else 1), F)
    no_residual, entry = np.zeros(1, F), []
    geometry = (act, F(lo), F(hi), vector_constants(lo, hi), where, blocked, c, cout, h, wd,
                ho, wo, sh, sw, padding[0][0], padding[1][0], hp, wq, lanes(wo))

    def run(x, w, bias, out, residual=None):
        np.take(np.ascontiguousarray(w, F).reshape(-1), gather, out=wt, mode="clip")
        np.take(np.asarray(bias, F), which, out=b, mode="clip")
        res = (no_residual if residual is None
               else np.ascontiguousarray(residual, F).reshape(-1))
        run_kept(_shallow, workers, entry, np.ascontiguousarray(x, F).reshape(-1), offsets,
                 wt, b, out.reshape(-1), res, scratch, places, stages, fixed=geometry)
        return out
    return run
