"""2-D average pooling of float32 planes straight from the input rows, as
``pooling.max_pool_values`` takes its maxima: each vector of sixteen outputs of a row
(eight without full-width AVX-512, or on rows of at most eight) sums, per tap, the window's
rows inside the plane, then the taps (at column stride 2 the even lanes of two such
vectors and, the next tap, their odd lanes), and divides by the windows' divisors. The
columns outside a row come from masked loads (zeros: the padding's, adding nothing), so
padding and ceil mode's last windows take the same vectors as the inside.

``pooling.avg_pool`` sums each output row's columns into a padded scratch row, then across
it; here nothing goes through memory between the loads and the output's store. Sums are
down the window's rows first, then across (torch adds the window row by row): equal up to
rounding."""
from __future__ import annotations

import numpy as np

from . import helper, loop
from .pooling import taps_inside
from .simd import (LANES, WIDE, add, broadcast, broadcast_wide, divide, even_lanes, lanes_of,
                   load_inside, load_like, odd_lanes, store, store_first)

F = np.float32


@helper(inline="always")
def _row(plane, out, o, div, d, y0, a0, a1, width, wo, kw, sw, left, zero):
    """Output row ``o // wo`` into ``out[o:o + wo]``: ``n`` (``zero``'s lanes) outputs a
    vector, the last ``n`` ending at ``wo`` (a row of fewer: one vector, its first ``wo``
    lanes stored), each its window's sum over rows ``y0 + a`` (``a0 <= a < a1``) of the
    plane over the divisors ``div[d:]``."""
    n = lanes_of(zero)
    pairs = sw == 2
    for j in range(0, wo, n):
        j = max(min(j, wo - n), 0)
        b = zero
        for c in range(0, kw, 2 if pairs else 1):
            col = j * sw - left + c
            low, high = zero, zero
            for a in range(a0, a1):
                r = (y0 + a) * width + col
                low = add(low, load_inside(plane, r, col, width, zero))
                if pairs:
                    high = add(high, load_inside(plane, r + n, col + n, width, zero))
            if pairs:
                v = even_lanes(low, high)
                if c + 1 < kw:
                    v = add(v, odd_lanes(low, high))
                low = v
            b = add(b, low)
        b = divide(b, load_like(div, d + j, zero))
        if wo < n:
            store_first(out, o, wo, b)
        else:
            store(out, o + j, b)


@helper(inline="always")
def _planes(start, stop, x, out, div, height, width, ho, wo, kh, kw, sh, sw, top, left, zero):
    """:func:`avg_pool_rows` with ``zero``'s lanes."""
    span = -(-wo // LANES) * LANES
    for p in range(start, stop):
        plane, dest = x[p], out[p]
        for i in range(ho):
            y0 = i * sh - top
            a0, a1 = taps_inside(y0, kh, 1, height)
            _row(plane, dest, i * wo, div, i * span, y0, a0, a1, width, wo, kw, sw, left,
                 zero)


@helper(inline="always")
def _widths(start, stop, x, out, div, height, width, ho, wo, kh, kw, sh, sw, top, left,
            lanes):
    """:func:`_planes` with ``lanes`` (``pooling.values_lanes``) lanes."""
    if lanes == WIDE:
        _planes(start, stop, x, out, div, height, width, ho, wo, kh, kw, sh, sw, top, left,
                broadcast_wide(F(0)))
    else:
        _planes(start, stop, x, out, div, height, width, ho, wo, kh, kw, sh, sw, top, left,
                broadcast(F(0)))


@loop
def avg_pool_rows(start, stop, x, out, div, height, width, ho, wo, kh, kw, sh, sw, top, left,
                  lanes):
    """Planes ``start:stop`` of the flat float32 planes ``x (P, H*W)`` average-pooled into
    ``out (P, Ho*Wo)`` (``pooling.avg_pool``'s arguments: window ``(i, j)`` at ``(i * sh -
    top, j * sw - left)``, ``div`` from ``pooling.avg_divisors``), ``lanes``
    (``pooling.values_lanes``) outputs a vector. Only where ``pooling.vectorised`` (input
    rows of eight at least, column stride 1 or 2); the common windows take
    :func:`avg_pool_rows_unrolled`."""
    _widths(start, stop, x, out, div, height, width, ho, wo, kh, kw, sh, sw, top, left, lanes)


@loop
def avg_pool_rows_unrolled(start, stop, x, out, div, height, width, ho, wo, kh, kw, sh, sw,
                           top, left, lanes):
    """:func:`avg_pool_rows` of the common windows (``UNROLLED``: 2x2 at column stride 2,
    3x3 at stride 2 or 1) with their widths as constants, the taps' loop unrolled."""
    if kw == 2:
        _widths(start, stop, x, out, div, height, width, ho, wo, kh, 2, sh, 2, top, left,
                lanes)
    elif sw == 2:
        _widths(start, stop, x, out, div, height, width, ho, wo, kh, 3, sh, 2, top, left,
                lanes)
    else:
        _widths(start, stop, x, out, div, height, width, ho, wo, kh, 3, sh, 1, top, left,
                lanes)


UNROLLED = {(2, 2), (3, 2), (3, 1)}   # (kw, sw)


def rows_loop(kw: int, sw: int):
    """The loop for windows ``kw`` wide at column stride ``sw``: :func:`avg_pool_rows_unrolled`
    for the common ones, else :func:`avg_pool_rows`."""
    return avg_pool_rows_unrolled if (kw, sw) in UNROLLED else avg_pool_rows


def beats_lanes(width: int) -> bool:
    """Whether these loops beat ``pool_lanes``' (where that ``fits``) on input rows of
    ``width``: from 24 columns, where its transposes cost more than the rows' vectors
    (2x2/2 on 28x28 planes: 0.64-0.69x its time; on 14x14 0.95-1.07x, 3x3/1 on 12x12
    1.3x, on 9x9 1.8x)."""
    return width >= 3 * LANES
