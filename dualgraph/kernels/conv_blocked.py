"""Depthwise and 1x1 convolutions on channel-blocked activations ``(N, C/8, H, W, 8)``
(NCHW8c: each block of eight channels one plane whose positions hold the eight channels'
values side by side), float32, forward with the epilogue: the kernels of
``depthwise_blocked`` and ``pointwise_blocked``, which the layout pass
(``passes/layout.py``, rule ``blocked_channels``) puts where chains of depthwise and 1x1
convolutions run in that layout (onnxruntime's NCHWc).

In NCHW, ``conv_lanes`` transposes each block of eight planes 8x8 into this interleaved
form and its output back, about half of a mobile CNN's depthwise layer; kept blocked from
conv to conv, neither is needed.

Depthwise (``depthwise``): a work item is an image's block; its plane is copied row by row
(no transposes) into a zero-padded plane, and ``conv_lanes._row`` sums each output row
(every tap one eight-lane multiply-add a position, from the bias) straight into the
output, where the epilogue (``conv_lanes.finish``) runs on the row while it is in cache.
On large planes (:func:`interior`) the runs of positions whose taps lie inside the input
read it where it is, and only the border is copied.

1x1 (``pointwise``): ``out[o // 8, p, o % 8] = bias[o] + sum_k x[k // 8, p, k % 8] *
w[o, k]`` with the output channels in the lanes: the register block is three output
blocks (24 channels) by eight positions, 24 vector sums; per input channel ``k`` the
three weight vectors are loaded from the packed ``(groups, C, 24)`` weight (``pack``) and
each position's ``x`` broadcast from memory, 24 multiply-adds. A work item is an image's
chunk of ``CHUNK`` positions; after its last group the epilogue runs on each output
block's run of the chunk. Each output is one chain of multiply-adds over ``k = 0 .. C-1``
in order from the bias, whatever the chunk or thread: the bits do not depend on them.

Where the loops run AVX-512 at full width (:func:`wide`: ``isa.full_width``, two 512-bit
multiply-adds a cycle) both sum sixteen lanes, the same loop bodies on vectors of twice
the width (``simd.load_like``), and the depthwise loop wherever AVX-512's registers are
(:func:`paired`, Zen 4's half-width units too on planes that fit L1: more sums in flight
on short rows): a depthwise item is a pair of blocks, copied side by side into a plane of
sixteen floats a position (a last odd block alone, as eight); a 1x1 group is 48 output
channels (:func:`pack` then packs ``(groups, C, 48)`` where ``Cout`` is a multiple of
sixteen; the loop reads the width off the packed weight), each sum stored as two runs of
eight, one to each of its blocks (``simd.store_runs``). Each output is the
same chain of multiply-adds in the same order as with eight lanes: the same bits.
"""
from __future__ import annotations

import math

import numpy as np

from . import helper, isa, loop, numba_available
from .conv_lanes import _interleave, _line, _row, _weights, finish, reusable, rows_due
from .simd import (LANES, WIDE, broadcast_at_like, fma, lanes_of, load, load_like, load_wide,
                   multiply, store, store_runs, wide_loops)
from .threads import run_kept, run_rows, threads_for
from .tuning import cores

F = np.float32
GROUP = 3 * LANES     # output channels of the 1x1 register block
WIDE_GROUP = 3 * WIDE   # ... where its vectors have sixteen lanes
CHUNK = 96            # positions of a 1x1 work item
SMALL = 4096          # elements below which NumPy's transposing copy is quicker to call
PAIRED_BYTES = 32 << 10   # a paired depthwise plane's bytes up to which half-width units
#                           sum pairs (:func:`paired`): an L1 data cache
IN_PLACE_BYTES = 256 << 10   # a padded depthwise plane's bytes from which its interior is
#                              read from the input (:func:`interior`): a quarter of Zen 4's
#                              L2, where the copy's writes push the input and output out of
#                              it (112x112 planes: 13-29% less time); smaller planes measured
#                              from 10% less to 10% more time, L1-sized ones 5-16% more
IN_PLACE_INPUT = 2 << 20   # ... and an input's bytes up to which it is: a larger one (96
#                            channels of 112x112, 4.8 MB) took 10-15% longer read in place
#                            than streamed once through the copy; 0.8 and 1.6 MB ones gained


def block(x: np.ndarray) -> np.ndarray:
    """``x (N, C, H, W)`` (C a multiple of eight) as ``(N, C/8, H, W, 8)``."""
    n, c, h, w = x.shape
    if x.size < SMALL or x.dtype != F:
        return np.ascontiguousarray(x.reshape(n, c // LANES, LANES, h, w).transpose(
            0, 1, 3, 4, 2))
    out = np.empty((n, c // LANES, h, w, LANES), F)
    run_rows(_relayout, n * c // LANES, np.ascontiguousarray(x, F).reshape(-1),
             out.reshape(-1), h * w, True, threads=threads_for(x.size) or cores())
    return out


def unblock(x: np.ndarray) -> np.ndarray:
    """:func:`block`'s inverse: ``(N, C/8, H, W, 8)`` as ``(N, C, H, W)``."""
    n, cb, h, w, _ = x.shape
    if x.size < SMALL or x.dtype != F:
        return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3)).reshape(n, cb * LANES, h, w)
    out = np.empty((n, cb * LANES, h, w), F)
    run_rows(_relayout, n * cb, out.reshape(-1), np.ascontiguousarray(x, F).reshape(-1),
             h * w, False, threads=threads_for(x.size) or cores())
    return out


def fitted_relayout(x_shape, to_blocked: bool):
    """``run(x, out=None)``: :func:`block` (``to_blocked``) or :func:`unblock` of a float32
    ``x`` of the static ``x_shape``, its output shape, threads and the loop's compiled entry
    worked out once, written into ``out`` (a compiled graph's planned buffer, contiguous)
    where given: a fresh output of a 224x224 image's channels is megabytes, whose pages a
    call faulted in again. None where those run NumPy's copy (small)."""
    if math.prod(x_shape) < SMALL:
        return None
    if to_blocked:
        n, c, h, w = x_shape
        shape, items = (n, c // LANES, h, w, LANES), n * c // LANES
    else:
        n, cb, h, w, _ = x_shape
        shape, items = (n, cb * LANES, h, w), n * cb
    workers, entry = min(items, threads_for(math.prod(x_shape)) or cores()), []

    def run(x, out=None):
        out = np.empty(shape, F) if out is None else out
        x, flat = np.ascontiguousarray(x).reshape(-1), out.reshape(-1)
        run_kept(_relayout, workers, entry, *((x, flat) if to_blocked else (flat, x)), h * w,
                 to_blocked, rows=items)
        return out
    return run


@loop
def _relayout(start, stop, planar, blocked, size, to_blocked):
    """Items (image, block) ``start:stop``: the block's eight planes of the flat NCHW
    ``planar`` and its interleaved plane of the flat blocked ``blocked`` (``size``
    positions), copied one way (``to_blocked``) or back, 8x8 transposes (NumPy's strided
    copy ran at a third of their rate)."""
    for item in range(start, stop):
        at = item * size * LANES
        _interleave(planar, at, size, LANES, blocked[at:], size, to_blocked)


def blockable(x_shape, w_shape, groups) -> str | None:
    """``"depthwise"`` or ``"pointwise"`` for a conv these kernels run on the blocked
    layout (input and output channels multiples of eight, the depthwise one channel per
    group, the 1x1 stride 1 unpadded in one group: checked by the caller), else None."""
    c, cout = x_shape[1], w_shape[0]
    if c % LANES or cout % LANES or not numba_available():
        return None
    if groups == c == cout and w_shape[1] == 1:
        return "depthwise"
    if groups == 1 and tuple(w_shape[2:]) == (1, 1):
        return "pointwise"
    return None


@helper(inline="always")
def _position(x, s, plane, packed, d, lanes, u):
    """Input column ``u`` of a row (its first block's at ``x[s]``, the next ``plane`` on)
    into the padded ``packed`` at ``d``, the blocks side by side."""
    for k in range(0, lanes, LANES):
        store(packed, d + u * lanes + k, load(x, s + (k // LANES) * plane + u * LANES))


@helper(inline="always")
def _copy(x, src, plane, packed, lanes, rows, cols, width, top, left, wp, y0, y1, x0, x1):
    """The first ``rows`` rows and ``cols`` columns of as many blocks as ``lanes`` holds
    (the first's plane of the flat blocked ``x`` at ``src``, the next ``plane`` on) into
    the zero-padded ``packed`` at row ``top`` and column ``left``, a position's blocks side
    by side; of rows ``y0:y1`` only the columns before ``x0`` and from ``x1``."""
    for y in range(rows):
        d, s = ((y + top) * wp + left) * lanes, src + y * width * LANES
        skip0, skip1 = (x0, x1) if y0 <= y < y1 else (cols, cols)   # (columns not copied)
        for u in range(skip0):
            _position(x, s, plane, packed, d, lanes, u)
        for u in range(skip1, cols):
            _position(x, s, plane, packed, d, lanes, u)


@helper(inline="always")
def _finish_rows(out, residual, base, size, r, ho, blocks, where, act, lo, hi):
    """The epilogue (``conv_lanes.finish``) on the output rows due after row ``r``
    (``conv_lanes.rows_due``) of ``blocks`` planes of the flat blocked ``out`` from
    ``base``, ``size`` floats apart."""
    row = size // ho
    done = rows_due(r, ho, row)
    for k in range(blocks if done else 0):
        q, e = base + k * size + (r + 1 - done) * row, base + k * size + (r + 1) * row
        finish(out[q:e], residual[q:e] if where else residual[0:1], where, act, lo, hi)


@helper(inline="always")
def _item(x, out, residual, packed, wt, start_sum, src, base, plane, size, act, lo, hi, where,
          width, ho, wo, kh, kw, sh, sw, dh, dw, top, left, wp, rows, cols):
    """One work item, as many blocks of one image as ``start_sum`` has lanes for (one or
    two): their planes of the flat blocked ``x`` from ``src`` (``plane`` floats apart)
    copied row by row into the zero-padded ``packed``, a position's blocks side by side;
    each output row summed (``conv_lanes._row``, weights ``wt``) into their planes of the
    flat blocked ``out`` from ``base`` (``size`` apart), where the epilogue runs on it."""
    lanes = lanes_of(start_sum)
    for y in range(rows):
        d, s = ((y + top) * wp + left) * lanes, src + y * width * LANES
        for u in range(cols):
            _position(x, s, plane, packed, d, lanes, u)
    dst = out[base:base + lanes // LANES * size]
    for r in range(ho):
        _row(dst, packed, wt, start_sum, r, wo, kh, kw, sh, sw, dh, dw, wp, LANES, size)
        _finish_rows(out, residual, base, size, r, ho, lanes // LANES, where, act, lo, hi)


@helper(inline="always")
def _item_in_place(x, out, residual, packed, wt, start_sum, src, base, plane, size, act, lo,
                   hi, where, width, ho, wo, kh, kw, sh, sw, dh, dw, top, left, wp, rows, cols,
                   inner):
    """:func:`_item` for one block (eight lanes) with an interior ``inner``
    (:func:`interior`): in its rows ``inner[0]:inner[1]`` the runs of positions
    ``inner[2]:inner[3]``, whose taps lie inside the input, read ``x`` where it is (a
    ``conv_lanes._line``), the runs before and after them the padded plane (two more);
    and only what the padded plane is read for is copied into it: the input rows before
    ``inner[4]`` and from ``inner[5]`` whole, of the others the columns before
    ``inner[6]`` and from ``inner[7]``. (A separate loop: the split rows in :func:`_item`
    took 5-10% longer on planes without an interior.)"""
    r0, r1, v0, v1 = inner[0], inner[1], inner[2], inner[3]
    _copy(x, src, plane, packed, LANES, rows, cols, width, top, left, wp, inner[4], inner[5],
          inner[6], inner[7])
    dst = out[base:base + size]
    reuse, step = reusable(kw, sw, dw), sw * LANES
    right = min(v1, wo - LANES) if v1 < wo else wo   # (the runs after v1: a row's last)
    for r in range(ho):
        if r0 <= r < r1:
            o, q = r * sh * wp * LANES, r * wo * LANES
            _line(dst, x, src + ((r * sh - top) * width + v0 * sw - left) * LANES,
                  q + v0 * LANES, v1 - v0, wt, start_sum, step, LANES, kh, kw,
                  dh * width * LANES, dw * LANES, reuse, size)
            _line(dst, packed, o, q, v0, wt, start_sum, step, LANES, kh, kw,
                  dh * wp * LANES, dw * LANES, reuse, size)
            _line(dst, packed, o + right * step, q + right * LANES, wo - right, wt,
                  start_sum, step, LANES, kh, kw, dh * wp * LANES, dw * LANES, reuse, size)
        else:
            _row(dst, packed, wt, start_sum, r, wo, kh, kw, sh, sw, dh, dw, wp, LANES, size)
        _finish_rows(out, residual, base, size, r, ho, 1, where, act, lo, hi)


@loop(fastmath={"contract"})
def _depthwise(start, stop, x, w, bias, out, residual, scratch, narrow, wblocks, inner, act,
               lo, hi, where, channels, height, width, ho, wo, kh, kw, sh, sw, dh, dw, top,
               left, wp, span):
    """Slots ``start:stop`` of ``scratch.shape[0]``: the items (group of ``span`` blocks,
    image) of the flat blocked ``x`` convolved with the flat ``w (C, kh*kw)`` and ``bias
    (C,)`` into the flat blocked ``out``, with ``conv_lanes.finish``'s epilogue
    (``residual`` flat like ``out``) on each output row. Pairs of blocks (``span`` 2) are
    summed as sixteen lanes in ``scratch``, a last odd block as eight in ``narrow``; with
    ``span`` 1 every block is (``narrow`` then is ``scratch``). Both are zero-padded planes
    whose padding is zero from the start: every item writes the same positions inside
    them (``inner``: :func:`_item`). The epilogue's loops run sixteen lanes where the CPU
    has them (``simd.wide_loops``: SiLU's a fifth quicker)."""
    wide_loops()
    blocks, taps = channels // LANES, kh * kw
    groups = -(-blocks // span)
    images = out.size // (channels * ho * wo)
    items = images * groups
    plane, size = height * width * LANES, ho * wo * LANES
    rows = min(height, scratch.shape[1] // (span * LANES * wp) - top)
    cols = min(width, wp - left)
    for t in range(start, stop):
        wt = wblocks[t]
        first, last = t * items // scratch.shape[0], (t + 1) * items // scratch.shape[0]
        for item in range(first, last):
            g, n = item // images, item % images    # (group-major: a group's weights
            b = g * span
            lanes = min(span, blocks - b) * LANES
            if item == first or n == 0:    # serve all its images)
                _weights(w, bias, b * LANES, lanes, lanes, taps, wt)
            src, base = (n * blocks + b) * plane, (n * blocks + b) * size
            if lanes == WIDE:
                _item(x, out, residual, scratch[t], wt, load_wide(wt, taps * WIDE), src, base,
                      plane, size, act, lo, hi, where, width, ho, wo, kh, kw, sh, sw, dh, dw,
                      top, left, wp, rows, cols)
            elif inner[1] > inner[0]:
                _item_in_place(x, out, residual, narrow[t], wt, load(wt, taps * LANES), src,
                               base, plane, size, act, lo, hi, where, width, ho, wo, kh, kw, sh,
                               sw, dh, dw, top, left, wp, rows, cols, inner)
            else:
                _item(x, out, residual, narrow[t], wt, load(wt, taps * LANES), src, base,
                      plane, size, act, lo, hi, where, width, ho, wo, kh, kw, sh, sw, dh, dw,
                      top, left, wp, rows, cols)


def wide() -> bool:
    """Whether the 1x1 loop's groups are sixteen-lane vectors (:func:`group_width`):
    where the loops are compiled for AVX-512 executed at full width (``isa.full_width``)."""
    return isa.full_width()


def paired(positions: int) -> bool:
    """Whether the depthwise loop sums pairs of blocks as sixteen lanes, its zero-padded
    plane of ``positions`` positions: at full width (:func:`wide`) always; where AVX-512's
    32 registers run a sixteen-lane multiply-add as two halves (Zen 4) while the pair's
    plane stays in L1 (``PAIRED_BYTES``). There the pair still halves the loads and loop
    steps a channel and puts twice as many independent sums in flight: a row of seven
    positions (7x7 planes) is seven chains of 9 or 25 dependent multiply-adds, too few to
    hide their latency (docs/benchmarks.md, 2026-12-06 "depthwise convs on small
    planes": 5-13% less time on 7x7 and 14x14 planes; on 28x28 planes, whose paired plane
    is 54 kB, from 7% less to 6% more). With 16 registers the pair's sums and weights
    would spill."""
    return wide() or (isa.vector_registers() >= 32
                      and positions * WIDE * F().itemsize <= PAIRED_BYTES)


def _inside(size, out, before, stride, dilation, k):
    """Output positions ``[a, b)`` along one axis whose ``k`` taps all lie inside an input
    of ``size`` (``before`` padding), of ``out``; ``a == b`` where none do."""
    a = min(-(-before // stride), out)
    b = min((size - 1 - (k - 1) * dilation + before) // stride + 1, out)
    return a, max(a, b)


def interior(size, out, kernel, stride, dilation, before, read, span,
             input_bytes=0) -> np.ndarray:
    """The depthwise loop's split of an output plane (``_item``'s ``inner``): the interior
    rows ``r0:r1`` (whose taps lie inside the input's rows) and of their runs of eight
    positions (``conv_lanes._line``'s: from 0 on, the last ending at the row's end) those
    whose taps lie inside the input, ``v0:v1``, read from the blocked input itself; then
    the input rows copied whole into the padded plane (before ``y0`` and from ``y1``:
    those the other output rows read) and of the other rows the columns before ``x0`` and
    from ``x1`` (those the runs before ``v0`` and after ``v1`` read). An interior only
    where the items are one block (``span`` 1: a pair's plane holds its blocks side by
    side, the input does not), a run lies inside, the padded plane is large
    (``IN_PLACE_BYTES``) and the whole input of ``input_bytes`` is not
    (``IN_PLACE_INPUT``); else every row is copied whole (all 0). ``size``, ``out``,
    ``kernel``, ``stride``, ``dilation``, ``before`` (padding) are (rows, columns);
    ``read`` the padded plane's rows and columns."""
    (r0, r1), (a, b) = (_inside(size[i], out[i], before[i], stride[i], dilation[i],
                                kernel[i]) for i in (0, 1))
    wo = out[1]
    runs = [v for v in range(0, wo - LANES + 1, LANES)]
    runs += [wo - LANES] if wo % LANES and wo > LANES else []
    inside = [v for v in runs if a <= v and v + LANES <= b]
    padded = read[0] * read[1] * LANES * F().itemsize
    if (span > 1 or r1 == r0 or not inside or padded <= IN_PLACE_BYTES
            or input_bytes > IN_PLACE_INPUT):
        return np.zeros(8, np.int64)
    (sh, sw), (dh, dw), (kh, kw) = stride, dilation, kernel
    v0, v1 = inside[0], inside[-1] + LANES
    right = min(v1, wo - LANES) if v1 < wo else wo
    cols = min(size[1], read[1] - before[1])
    x0 = (v0 - 1) * sw - before[1] + (kw - 1) * dw + 1 if v0 else 0
    x1 = right * sw - before[1] if v1 < wo else cols
    y0 = (r0 - 1) * sh - before[0] + (kh - 1) * dh + 1 if r0 else 0
    y1 = r1 * sh - before[0] if r1 < out[0] else size[0]
    return np.array([r0, r1, v0, v1, y0, y1, min(max(x0, 0), cols), min(max(x1, 0), cols)],
                    np.int64)


def fitted_depthwise(x_shape, w_shape, stride, padding, dilation, residual=False, where=0,
                     act=0, lo=-np.inf, hi=np.inf):
    """``run(x, w, bias, *residual, out=None)``: the depthwise conv of a blocked ``x``
    (``x_shape (N, C/8, H, W, 8)``) with ``w (C, 1, kh, kw)`` and ``bias (C,)`` (float32)
    into the blocked output, with ``conv_direct.conv``'s epilogue codes (``residual``
    blocked like the output); scratch, threads and the compiled entry worked out once."""
    n, cb, h, wd, _ = x_shape
    kh, kw = w_shape[2:]
    ho = (h + sum(padding[0]) - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd + sum(padding[1]) - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    hp = (ho - 1) * stride[0] + (kh - 1) * dilation[0] + 1   # (the padded rows and
    wp = (wo - 1) * stride[1] + (kw - 1) * dilation[1] + 1   # columns the outputs read)
    shape = (n, cb, ho, wo, LANES)
    span = 2 if cb > 1 and paired(hp * wp) else 1
    groups = -(-cb // span)
    workers = max(1, min(n * groups, threads_for(n * cb * LANES * ho * wo * kh * kw)
                         or cores()))
    scratch = np.zeros((workers, hp * wp * LANES * span), F)
    narrow = scratch if span == 1 else np.zeros((workers, hp * wp * LANES if cb % 2 else 0), F)
    wblocks = np.empty((workers, (kh * kw + 1) * LANES * span), F)
    inner = interior((h, wd), (ho, wo), kernel=(kh, kw), stride=stride, dilation=dilation,
                     before=(padding[0][0], padding[1][0]), read=(hp, wp), span=span,
                     input_bytes=math.prod(x_shape) * F().itemsize)
    geometry = (cb * LANES, h, wd, ho, wo, kh, kw, stride[0], stride[1], dilation[0],
                dilation[1], padding[0][0], padding[1][0], wp, span)
    lo, hi = F(lo), F(hi)
    where = where if residual else 0
    entry = []

    def run(x, w, b, *r, out=None):
        out = np.empty(shape, F) if out is None else out
        run_kept(_depthwise, workers, entry, np.ascontiguousarray(x, F).reshape(-1),
              np.ascontiguousarray(w, F).reshape(-1), np.ascontiguousarray(b, F),
              out.reshape(-1), np.ascontiguousarray(r[0], F).reshape(-1) if r else
              _NO_RESIDUAL, scratch, narrow, wblocks, inner, act, lo, hi, where, *geometry)
        return out
    return run


def group_width(cout: int) -> int:
    """Output channels of :func:`pack`'s groups: ``WIDE_GROUP`` (three sixteen-lane
    vectors) where the loops run sixteen lanes (:func:`wide`) and ``cout`` is a multiple
    of sixteen, else ``GROUP``."""
    return WIDE_GROUP if wide() and cout % WIDE == 0 else GROUP


def pack(w: np.ndarray) -> np.ndarray:
    """The ``(Cout, C, 1, 1)`` weight as ``(groups, C, width)`` (``width`` of
    :func:`group_width`): each group's output channels side by side for every input
    channel, past ``Cout`` zero."""
    cout, c = w.shape[:2]
    width = group_width(cout)
    groups = -(-cout // width)
    padded = np.zeros((groups * width, c), F)
    padded[:cout] = w.reshape(cout, c)
    return np.ascontiguousarray(padded.reshape(groups, width, c).transpose(0, 2, 1))


@helper(inline="always")
def _fma3(x, at, w0, w1, w2, a0, a1, a2, n):
    """One position's input ``x[at]``, broadcast, times the first ``n`` of three weight
    vectors, into its sums (``n`` a constant where inlined: the others cost nothing)."""
    u = broadcast_at_like(x, at, w0)
    return (fma(w0, u, a0), fma(w1, u, a1) if n > 1 else a1,
            fma(w2, u, a2) if n > 2 else a2)


@helper(inline="always")
def _put3(out, at, gap, span, n, a0, a1, a2):
    """A position's three sums to ``out`` from ``at``, ``span`` floats apart, each stored
    as runs of eight ``gap`` apart (``simd.store_runs``: a sixteen-lane sum into two
    blocks' planes), where they exist (``n`` sums)."""
    store_runs(out, at, gap, a0)
    if n > 1:
        store_runs(out, at + span, gap, a1)
    if n > 2:
        store_runs(out, at + 2 * span, gap, a2)


@helper(inline="always")
def _tile(x, xo, xstep, blocks, wp, wo, b0, b1, b2, out, oo, ostride, gap, span, n, eight):
    """Eight positions (one unless ``eight``) from ``x[xo]`` (input block ``k // 8`` at
    ``xo + (k // 8) * xstep``) by the group of three bias vectors' lanes (``b0, b1,
    b2``: 24 or 48 output channels) whose packed weights start at ``wp[wo]``, into
    ``out[oo]`` (positions ``ostride`` floats apart, the sums stored by :func:`_put3`
    with ``gap`` and ``span``; ``n`` of the three vectors exist)."""
    lanes = lanes_of(b0)
    width = 3 * lanes
    a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32 = (
        b0, b1, b2, b0, b1, b2, b0, b1, b2, b0, b1, b2)
    a40, a41, a42, a50, a51, a52, a60, a61, a62, a70, a71, a72 = (
        b0, b1, b2, b0, b1, b2, b0, b1, b2, b0, b1, b2)
    for kb in range(blocks):
        xb, wb = xo + kb * xstep, wo + kb * LANES * width
        for j in range(LANES):
            t = wb + j * width
            w0 = load_like(wp, t, b0)
            w1 = load_like(wp, t + lanes, b0) if n > 1 else w0
            w2 = load_like(wp, t + 2 * lanes, b0) if n > 2 else w0
            a00, a01, a02 = _fma3(x, xb + j, w0, w1, w2, a00, a01, a02, n)
            if eight:
                a10, a11, a12 = _fma3(x, xb + 8 + j, w0, w1, w2, a10, a11, a12, n)
                a20, a21, a22 = _fma3(x, xb + 16 + j, w0, w1, w2, a20, a21, a22, n)
                a30, a31, a32 = _fma3(x, xb + 24 + j, w0, w1, w2, a30, a31, a32, n)
                a40, a41, a42 = _fma3(x, xb + 32 + j, w0, w1, w2, a40, a41, a42, n)
                a50, a51, a52 = _fma3(x, xb + 40 + j, w0, w1, w2, a50, a51, a52, n)
                a60, a61, a62 = _fma3(x, xb + 48 + j, w0, w1, w2, a60, a61, a62, n)
                a70, a71, a72 = _fma3(x, xb + 56 + j, w0, w1, w2, a70, a71, a72, n)
    _put3(out, oo, gap, span, n, a00, a01, a02)
    if eight:
        _put3(out, oo + ostride, gap, span, n, a10, a11, a12)
        _put3(out, oo + 2 * ostride, gap, span, n, a20, a21, a22)
        _put3(out, oo + 3 * ostride, gap, span, n, a30, a31, a32)
        _put3(out, oo + 4 * ostride, gap, span, n, a40, a41, a42)
        _put3(out, oo + 5 * ostride, gap, span, n, a50, a51, a52)
        _put3(out, oo + 6 * ostride, gap, span, n, a60, a61, a62)
        _put3(out, oo + 7 * ostride, gap, span, n, a70, a71, a72)


@helper(inline="always")
def _run(x, xo, q0, q1, step, blocks, wp, wo, b0, b1, b2, out, ob, ostride, gap, span, n):
    """Positions ``q0:q1`` of a group of ``n`` output vectors (input position ``q`` at
    ``xo + 8 * q``, its output at ``ob + ostride * q``): :func:`_tile` on eight at a
    time, then one at a time."""
    q = q0
    while q + LANES <= q1:
        _tile(x, xo + q * LANES, step, blocks, wp, wo, b0, b1, b2, out, ob + q * ostride,
              ostride, gap, span, n, True)
        q += LANES
    while q < q1:
        _tile(x, xo + q * LANES, step, blocks, wp, wo, b0, b1, b2, out, ob + q * ostride,
              ostride, gap, span, n, False)
        q += 1


@helper(inline="always")
def group(x, xo, q0, q1, step, blocks, wp, wo, b0, b1, b2, out, ob, ostride, gap, span, left):
    """:func:`_run` for a group whose last ``left`` vectors of output channels exist
    (three or more: all), ``n`` a constant in each inlined copy, so that a group of one
    or two computes only theirs. The output's layout is the caller's: blocked, positions
    eight floats apart and a vector's two halves ``step`` apart (``_pointwise``), or a
    vector's lanes side by side (``conv_expand``)."""
    if left >= 3:
        _run(x, xo, q0, q1, step, blocks, wp, wo, b0, b1, b2, out, ob, ostride, gap, span, 3)
    elif left == 2:
        _run(x, xo, q0, q1, step, blocks, wp, wo, b0, b1, b2, out, ob, ostride, gap, span, 2)
    else:
        _run(x, xo, q0, q1, step, blocks, wp, wo, b0, b1, b2, out, ob, ostride, gap, span, 1)


@loop(fastmath={"contract"})
def _pointwise(start, stop, x, wp, bias, out, residual, act, lo, hi, where, channels, size,
               cout, slots, wimage, width):
    """Work items ``start * T // slots : stop * T // slots`` (``T``: each image's chunks of
    ``CHUNK`` positions) of the flat blocked ``out (N, Cout/8, size, 8)`` = the 1x1 conv of
    the flat blocked ``x (N, C/8, size, 8)`` with the packed ``wp`` (groups of ``width``
    channels: ``GROUP``, eight-lane sums, or ``WIDE_GROUP``, sixteen) and the padded
    ``bias``, then ``conv_lanes.finish``'s epilogue (``residual`` flat like ``out``).
    Image ``n``'s packed weight starts at ``n * wimage`` (0: one for all; else each image
    its own, as squeeze-and-excitation's gated weights are). The epilogue's loops run
    sixteen lanes where the CPU has them (``simd.wide_loops``)."""
    wide_loops()
    chunks = -(-size // CHUNK)
    images = out.size // (cout * size)
    total, groups, blocks = images * chunks, -(-cout // width), channels // LANES
    step = size * LANES
    for item in range(start * total // slots, stop * total // slots):
        img, q0 = item // chunks, (item % chunks) * CHUNK
        q1 = min(size, q0 + CHUNK)
        xo, oo = img * channels * size, img * cout * size
        for g in range(groups):
            wo, at = img * wimage + g * channels * width, g * width
            ob = oo + g * (width // LANES) * step
            if width == GROUP:
                group(x, xo, q0, q1, step, blocks, wp, wo, load(bias, at),
                      load(bias, at + LANES), load(bias, at + 2 * LANES), out, ob, LANES,
                      step, step, cout // LANES - 3 * g)
            else:
                group(x, xo, q0, q1, step, blocks, wp, wo, load_wide(bias, at),
                      load_wide(bias, at + WIDE), load_wide(bias, at + 2 * WIDE), out, ob,
                      LANES, step, 2 * step, cout // WIDE - 3 * g)
        for b in range(cout // LANES):
            at, end = oo + b * step + q0 * LANES, oo + b * step + q1 * LANES
            finish(out[at:end], residual[at:end] if where else residual[0:1], where, act,
                   lo, hi)


def pointwise(x_shape, cout: int, residual: bool, where=0, act=0, lo=-np.inf, hi=np.inf,
              per_image=False):
    """``run(x, packed, bias, *residual, out=None)``: the 1x1 conv of a blocked ``x``
    (``x_shape (N, C/8, H, W, 8)``) into ``cout`` channels, blocked, with the epilogue's
    codes (as ``conv_tiles.conv``'s), the packed weight from :func:`pack` (``per_image``:
    one for each image, ``(N, groups, C, width)``; its groups' width read off its shape, so
    that a weight packed for either width runs); threads and the compiled entry worked out
    once (a call on a 7x7 plane is tens of microseconds)."""
    n, cb, h, w, _ = x_shape
    size = h * w
    shape = (n, cout // LANES, h, w, LANES)
    items = n * -(-size // CHUNK)
    workers = max(1, min(items, threads_for(n * cout * size * cb * LANES) or cores()))
    lo, hi = F(lo), F(hi)
    where = where if residual else 0
    padded, entry = np.zeros(cout + WIDE_GROUP, F), []

    def run(x, packed, b, *r, out=None):
        out = np.empty(shape, F) if out is None else out
        padded[:cout] = b
        width = packed.shape[-1]
        args = (np.ascontiguousarray(x, F).reshape(-1), packed.reshape(-1), padded,
                out.reshape(-1), np.ascontiguousarray(r[0], F).reshape(-1) if r else
                _NO_RESIDUAL, act, lo, hi, where, cb * LANES, size, cout, workers,
                -(-cout // width) * width * cb * LANES if per_image else 0, width)
        run_kept(_pointwise, workers, entry, *args)
        return out
    return run


@loop
def scale_blocks(start, stop, x, gate, out):
    """``out[a, p] = x[a, p] * gate[a]`` for rows ``a`` in ``start:stop`` of ``x (A, P, 8)``
    and ``gate (A, 8)`` (flat): squeeze-and-excitation's per-channel gate on a blocked
    value (``mul``'s ``specialise``); NumPy's broadcast loops run eight floats at a time."""
    positions = x.size // gate.size
    for a in range(start, stop):
        g = load(gate, a * LANES)
        for q in range(a * positions * LANES, (a + 1) * positions * LANES, LANES):
            store(out, q, multiply(load(x, q), g))


_NO_RESIDUAL = np.zeros(1, F)
