"""Max pooling's values (float32, inference) of windows at most three columns wide at column
stride 1 or 2 without column dilation (the 3x3 and 2x2 pools of CNNs), separably: each
chunk of eight (sixteen) input columns of an output row is reduced down the window's rows
once (:func:`_down`), and the windows' maxima across the row are taken from those chunks
with lane shuffles shared by neighbouring windows.

``pooling.max_pool_values`` computes every tap of a vector of outputs from the input rows
again: a 3x3/2 window's third tap reloads and re-reduces the rows the first tap read, two
columns on (12 loads and 12 maxima per eight outputs), each load a masked blend with -inf
(``vblendmps``, a load and a vector op) and each tap's maxima started from -inf: about 50
vector ops per eight outputs, against about 17 here (6 plain loads, 4 maxima down, the
even/odd deinterleave, a shift across, the NaN sum's adds): 0.7x the time on 111x111
planes.

Along a row the chunks go in order and the last chunk a vector reads (its windows' third
column) is the next vector's first, carried over, so every column is reduced down once;
the chunks that reach outside the row (padding, ceil mode's last windows) are masked loads
whose outside lanes are -inf, the others plain loads. A window's rows outside the plane are
its first inside row again (``pooling.window_rows``: the same maximum).

Plain maxima (``vmaxps``) and the loads summed (every column the row's windows hold, once):
a plane whose sum is NaN (a NaN in it, or infinities of both signs) is pooled again keeping
NaN (``llvm.maximum``), as ``pooling.max_pool_values`` does."""
from __future__ import annotations

import numpy as np

from . import helper, loop
from .pooling import max_pool_values, window_rows
from .simd import (WIDE, add, broadcast, broadcast_wide, even_lanes, lanes_of, load_inside,
                   load_like, maximum, maximum_nan, next_lane, next_two_lanes, odd_lanes,
                   store, store_first)

F = np.float32


def takes(kw: int, sw: int, dw: int) -> bool:
    """Whether :func:`max_pool_separable` takes windows ``kw`` columns wide at column
    stride ``sw`` and column dilation ``dw``: at most three columns (a window's last
    column at most one chunk on), stride 1 or 2, no column dilation."""
    return kw <= 3 and sw <= 2 and dw == 1


@helper(inline="always")
def _max(a, b, keep_nan):
    """The lane-wise maximum, NaN winning where ``keep_nan`` (a constant)."""
    return maximum_nan(a, b) if keep_nan else maximum(b, a)


@helper(inline="always")
def _down(plane, rows, kh, c, keep_nan, like):
    """``(maxima, sum)`` of the chunk of ``like``'s lanes of columns ``c:c + n``, inside
    the row, over the window's ``kh`` rows (flat offsets ``rows``). (No branch in here,
    nor in :func:`_down_edge`: an array-taking helper inlined with one in a loop keeps
    Numba's reference counting calls, 5x the pool's time.)"""
    m = load_like(plane, rows[0] + c, like)
    s = m
    for a in range(1, kh):
        v = load_like(plane, rows[a] + c, like)
        m, s = _max(m, v, keep_nan), add(s, v)
    return m, s


@helper(inline="always")
def _down_edge(plane, rows, kh, c, width, keep_nan, like):
    """:func:`_down` of a chunk reaching outside the row ``0:width``: masked loads, the
    outside columns -inf."""
    m = load_inside(plane, rows[0] + c, c, width, like)
    s = m
    for a in range(1, kh):
        v = load_inside(plane, rows[a] + c, c, width, like)
        m, s = _max(m, v, keep_nan), add(s, v)
    return m, s


@helper(inline="always")
def _row(plane, out, o, rows, width, wo, kh, kw, sw, left, keep_nan, like, zero):
    """One output row into ``out[o:o + wo]``, a vector of ``like``'s ``n`` lanes of
    outputs ``j:j + n`` at a time; returns the sum of every chunk's loads. Stride 1: chunk
    ``a`` (columns ``j - left`` on) and the next, ``following``, give the window's columns
    0, 1, 2 as ``a`` and ``a`` shifted one and two lanes on with ``following``'s first.
    Stride 2: ``a`` and ``high`` hold the windows' first two columns as their even and
    odd lanes, the third is the even lanes shifted one lane on with ``following``'s
    first. ``following`` is the next vector's ``a``; where no stored output and no next
    vector reads it, it is not loaded. (The chunks inside the row take :func:`_down`,
    the others :func:`_down_edge`: the branch stays out of the helpers.)"""
    n = lanes_of(like)
    total = zero
    if 0 <= -left and -left + n <= width:
        a, s = _down(plane, rows, kh, -left, keep_nan, like)
    else:
        a, s = _down_edge(plane, rows, kh, -left, width, keep_nan, like)
    total = add(total, s)
    high = like
    for j in range(0, wo, n):
        c = j * sw - left
        if sw == 2:
            q = c + n
            if 0 <= q and q + n <= width:
                high, s = _down(plane, rows, kh, q, keep_nan, like)
            else:
                high, s = _down_edge(plane, rows, kh, q, width, keep_nan, like)
            total = add(total, s)
        following, q = like, c + sw * n
        if j + n < wo or (kw > 1 if sw == 1 else kw > 2) and wo - j > n - kw + sw:
            if 0 <= q and q + n <= width:
                following, s = _down(plane, rows, kh, q, keep_nan, like)
            else:
                following, s = _down_edge(plane, rows, kh, q, width, keep_nan, like)
            total = add(total, s)
        if sw == 1:
            b = a
            if kw > 1:
                b = _max(b, next_lane(a, following), keep_nan)
            if kw > 2:
                b = _max(b, next_two_lanes(a, following), keep_nan)
        else:
            even = even_lanes(a, high)
            b = even
            if kw > 1:
                b = _max(b, odd_lanes(a, high), keep_nan)
            if kw > 2:
                b = _max(b, next_lane(even, following), keep_nan)
        if j + n <= wo:
            store(out, o + j, b)
        else:
            store_first(out, o + j, wo - j, b)
        a = following
    return total


@helper(inline="always")
def _plane(plane, out, rows, height, width, ho, wo, kh, kw, sh, sw, dh, top, left, keep_nan,
           like, zero):
    """One plane, NaN-keeping or not (a constant); returns the sum of its rows'
    (:func:`_row`) over the rows (``pooling.window_rows``; a row of windows with none of
    its rows inside is -inf)."""
    total = zero
    for i in range(ho):
        if not window_rows(rows, i * sh - top, kh, dh, height, width):
            out[i * wo:(i + 1) * wo] = -np.inf
            continue
        total = add(total, _row(plane, out, i * wo, rows, width, wo, kh, kw, sw, left,
                                keep_nan, like, zero))
    return total


@helper(inline="always")
def _planes(start, stop, x, best, height, width, ho, wo, kh, kw, sh, sw, dh, top, left,
            like, zero):
    """Planes ``start:stop``, each pooled with plain maxima and, where its sum is NaN,
    again keeping NaN."""
    rows = np.empty(kh, np.int64)
    sums = np.empty(lanes_of(like), F)
    for p in range(start, stop):
        store(sums, 0, _plane(x[p], best[p], rows, height, width, ho, wo, kh, kw, sh, sw, dh,
                              top, left, False, like, zero))
        total = sums.sum()
        if total != total:
            _plane(x[p], best[p], rows, height, width, ho, wo, kh, kw, sh, sw, dh, top, left,
                   True, like, zero)


@helper(inline="always")
def _widths(start, stop, x, best, height, width, ho, wo, kh, kw, sh, sw, dh, top, left,
            lanes):
    """:func:`_planes` with ``lanes`` (``pooling.values_lanes``) lanes."""
    if lanes == WIDE:
        _planes(start, stop, x, best, height, width, ho, wo, kh, kw, sh, sw, dh, top, left,
                broadcast_wide(F(-np.inf)), broadcast_wide(F(0)))
    else:
        _planes(start, stop, x, best, height, width, ho, wo, kh, kw, sh, sw, dh, top, left,
                broadcast(F(-np.inf)), broadcast(F(0)))


@loop
def max_pool_separable(start, stop, x, best, height, width, ho, wo, kh, kw, sh, sw, dh, dw,
                       top, left, lanes):
    """Max pooling's values of planes ``start:stop`` of ``x (P, H*W)`` into ``best (P,
    Ho*Wo)`` (``pooling.max_pool_values``' arguments; windows it :func:`takes`): output
    ``(i, j)``'s window starts at ``(i * sh - top, j * sw - left)``, its rows ``dh``
    apart. The 3x3 windows at column stride 1 or 2 and 2x2 at stride 2 run with their
    sizes as constants (loops unrolled), others as they come."""
    if kh == 3 and kw == 3 and sw == 2 and dh == 1:
        _widths(start, stop, x, best, height, width, ho, wo, 3, 3, sh, 2, 1, top, left, lanes)
    elif kh == 3 and kw == 3 and sw == 1 and dh == 1:
        _widths(start, stop, x, best, height, width, ho, wo, 3, 3, sh, 1, 1, top, left, lanes)
    elif kh == 2 and kw == 2 and sw == 2 and dh == 1:
        _widths(start, stop, x, best, height, width, ho, wo, 2, 2, sh, 2, 1, top, left, lanes)
    else:
        _widths(start, stop, x, best, height, width, ho, wo, kh, kw, sh, sw, dh, top, left,
                lanes)


def values_loop(kw: int, sw: int, dw: int):
    """The max-pool values loop for windows ``kw`` columns wide at column stride ``sw``,
    column dilation ``dw``: :func:`max_pool_separable` where it :func:`takes` them (each
    chunk of a row reduced down the window once, the taps across from shuffles: a third of
    the vector ops on a 3x3/2 window), else ``pooling.max_pool_values``."""
    return max_pool_separable if takes(kw, sw, dw) else max_pool_values
