"""2-D max pooling (float32): the common 2x2 / stride 2 window's maximum and where it was
in one pass, any other window likewise, the values alone (inference) straight from the
input rows (down each tap's rows, then across the taps; masked loads at the edges), and
the backward's scatter of gradients to those places. NumPy needs a pass
per kernel position plus masks and index arithmetic for the same result. Average pooling
and its gradient (any float dtype), separably too. Small planes are pooled eight at a time
in ``pool_lanes.py``; the values of windows up to three columns wide in ``pool_separable.py``."""
from __future__ import annotations

import numpy as np

from . import helper, isa, loop
from .simd import (LANES, WIDE, add, broadcast, broadcast_wide, divide, even_lanes, lanes_of,
                   load, load_even, load_inside, maximum, maximum_nan, odd_lanes,
                   store, store_first, where_greater)

F = np.float32


@loop
def max_pool_2x2(x, best, index):
    """2x2 windows at stride 2 of the planes ``x (P, H, W)`` (no NaN in them: the caller
    checks): ``best (P, H // 2, W // 2)`` gets each maximum and ``index`` its flat position
    in the plane; the first maximum wins, as in torch. Written out for the four positions:
    loops over the window, or NaN tests in the comparisons, make it 10-20x slower."""
    width = x.shape[2]
    for p in range(best.shape[0]):
        for i in range(best.shape[1]):
            r = 2 * i
            for j in range(best.shape[2]):
                c = 2 * j
                b, k = x[p, r, c], 0
                a = x[p, r, c + 1]
                if a > b:
                    b, k = a, 1
                a = x[p, r + 1, c]
                if a > b:
                    b, k = a, width
                a = x[p, r + 1, c + 1]
                if a > b:
                    b, k = a, width + 1
                best[p, i, j] = b
                index[p, i, j] = r * width + c + k


@loop
def max_pool_backward(g, index, out):
    """``out[p, index[p, k]] += g[p, k]``: gradients back to the maxima (``out`` zeroed,
    shape (P, H * W); windows that share a maximum add up)."""
    for p in range(g.shape[0]):
        target, grads, where = out[p], g[p], index[p]
        for k in range(grads.size):
            target[where[k]] += grads[k]


@helper(inline="always")
def _scalar_max(plane, height, width, y0, x0, kh, kw, dh, dw):
    """The maximum of one window (positions outside the plane skipped) and its flat
    position in the plane: the first maximum in window order, or the first NaN (NaN wins),
    as in torch."""
    b, k = F(-np.inf), -1
    for a in range(kh):
        y = y0 + a * dh
        if 0 <= y < height:
            for c in range(kw):
                col = x0 + c * dw
                if 0 <= col < width:
                    v = plane[y * width + col]
                    if k < 0 or not v <= b:    # (greater, or NaN)
                        b, k = v, y * width + col
                        if b != b:
                            return b, k
    return b, k


@helper(inline="always")
def _tap(plane, o, sw):
    """Eight windows' values at one tap: columns ``o``, ``o + sw``, ... (``sw`` 1 or 2)."""
    return load(plane, o) if sw == 1 else load_even(plane, o)


@helper(inline="always")
def taps_inside(start, taps, step, size):
    """``(first, stop)``: the taps ``t`` of ``start + t * step`` (``t < taps``) that fall
    inside ``0:size``; without a division where ``step`` is 1 (an integer division per
    row took a third of a pool's time)."""
    if step == 1:
        return max(0, -start), min(taps, size - start)
    return max(0, -(start // step)), min(taps, -((start - size) // step))


@helper(inline="always")
def _edge_max(plane, width, y0, a0, a1, x0, kw, dh, dw):
    """The maximum of one window whose rows ``a0:a1`` are inside the plane, its columns
    outside the row skipped (NaN wins)."""
    b = F(-np.inf)
    c0, c1 = taps_inside(x0, kw, dw, width)
    for a in range(a0, a1):
        o = (y0 + a * dh) * width + x0
        for c in range(c0, c1):
            v = plane[o + c * dw]
            b = v if (v > b) | (v != v) else b    # (a select: a branch mispredicts)
    return b


@helper(inline="always")
def _vector_argmax(plane, width, y0, a0, a1, x0, kw, sw, dh, dw, steps):
    """:func:`_vector_max` (no NaN in the windows) with each maximum's flat position in
    the plane, as floats (exact below 2^24): the first maximum in window order wins, the
    position vector taking the tap's where its value is greater."""
    o = (y0 + a0 * dh) * width + x0
    b, k = _tap(plane, o, sw), add(broadcast(F(o)), steps)
    for a in range(a0, a1):
        o = (y0 + a * dh) * width + x0
        for c in range(1 if a == a0 else 0, kw):
            v = _tap(plane, o + c * dw, sw)
            k = where_greater(v, b, add(broadcast(F(o + c * dw)), steps), k)
            b = maximum(v, b)
    return b, k


@helper(inline="always")
def inside_columns(width, wo, kw, sw, dw, left):
    """``(first, last)``: the outputs of a row whose windows' columns are all inside it."""
    return -(-left // sw), min(wo - 1, (width - 1 - (kw - 1) * dw + left) // sw)


def vectorised(width: int, sw: int) -> bool:
    """Whether :func:`max_pool_values` takes input rows of ``width`` at column stride
    ``sw``: rows of eight at least (narrower planes go faster with the planes in the lanes,
    ``pool_lanes``), stride 1 or 2 (else it is slower than NumPy's running maximum)."""
    return sw <= 2 and width >= LANES


@loop
def max_pool(start, stop, x, best, index, height, width, ho, wo, kh, kw, sh, sw, dh, dw, top,
             left):
    """Planes ``start:stop`` of the flat planes ``x (P, H*W)`` max-pooled into ``best (P,
    Ho*Wo)`` and each maximum's flat position in its plane into ``index (P, Ho*Wo)``
    (int64; no NaN in ``x``: the caller checks). The window of output ``(i, j)`` starts at
    ``(i * sh - top, j * sw - left)`` with dilation ``(dh, dw)``; positions outside the
    plane are skipped (padding, ceil mode). At column stride 1 or 2 the outputs whose
    windows lie inside the row go eight at a time (:func:`_vector_argmax`; the row's last
    eight end at its last such output, recomputing some), the others one by one. NumPy's
    running maximum took five passes over the output per tap. Inference, which reads no
    positions, runs :func:`max_pool_values`."""
    first, last = inside_columns(width, wo, kw, sw, dw, left)
    if not (sw <= 2 and last + 1 - first >= LANES):
        first, last = wo, wo - 1      # (all one by one)
    steps = load(np.arange(LANES).astype(F) * F(sw), 0)   # (lane l: column l * sw)
    places = np.empty(wo + LANES, F)   # (a row's positions as floats)
    for p in range(start, stop):
        plane, where = x[p], index[p]
        for i in range(ho):
            y0 = i * sh - top
            a0, a1 = taps_inside(y0, kh, dh, height)
            row = best[p, i * wo:(i + 1) * wo]
            for j in range(first, last + 1, LANES):
                j = min(j, last + 1 - LANES)
                b, k = _vector_argmax(plane, width, y0, a0, a1, j * sw - left, kw, sw, dh, dw,
                                      steps)
                store(places, j, k)
                store(row, j, b)
            for j in range(wo):
                if first <= j <= last:
                    where[i * wo + j] = np.int64(places[j])
                else:
                    row[j], where[i * wo + j] = _scalar_max(plane, height, width, y0,
                                                             j * sw - left, kh, kw, dh, dw)


@helper(inline="always")
def _values_row(plane, out, o, rows, width, wo, kh, kw, sw, dw, left, keep_nan, lowest, zero):
    """One output row of :func:`max_pool_values` into ``out[o:o + wo]``, ``n`` outputs a
    vector (``lowest``'s lanes, -inf; the last ``n`` end at ``wo``, or a row of fewer
    is one vector, its first ``wo`` lanes stored): for each tap the
    maxima down the window's ``kh`` rows (flat offsets ``rows``) of masked loads (the
    columns outside the row -inf), at stride 2 the even lanes of two such (and the next
    tap's, without dilation, their odd lanes). Returns the sum of what the first taps of
    each vector and every tap of the last (with dilation: of every vector) read, which
    together read every column a window holds: NaN where a NaN was (or infinities of both
    signs)."""
    n = lanes_of(lowest)
    pairs = sw == 2 and dw == 1
    total = zero
    for j in range(0, wo, n):
        j = max(min(j, wo - n), 0)
        every = j == max(wo - n, 0) or dw > 1
        b = lowest
        for c in range(0, kw, 2 if pairs else 1):
            col = j * sw - left + c * dw
            low, high, s = lowest, lowest, zero
            for a in range(kh):
                v = load_inside(plane, rows[a] + col, col, width, lowest)
                low = maximum_nan(low, v) if keep_nan else maximum(v, low)
                s = add(s, v)
                if sw == 2:
                    v = load_inside(plane, rows[a] + col + n, col + n, width, lowest)
                    high = maximum_nan(high, v) if keep_nan else maximum(v, high)
                    s = add(s, v)
            if c == 0 or every:
                total = add(total, s)
            if sw == 2:
                v = even_lanes(low, high)
                if pairs and c + 1 < kw:
                    odd = odd_lanes(low, high)
                    v = maximum_nan(v, odd) if keep_nan else maximum(odd, v)
                low = v
            b = maximum_nan(b, low) if keep_nan else maximum(low, b)
        if wo < n:
            store_first(out, o, wo, b)
        else:
            store(out, o + j, b)
    return total


@helper(inline="always")
def window_rows(rows, y0, kh, dh, height, width):
    """``rows[a]``: the flat offset of row ``y0 + a * dh`` of a window of ``kh`` rows, or
    where that row lies outside the plane, of the window's first inside row (the same
    maximum), so that every window has ``kh`` rows. False where none is inside (dilation
    past a one-row plane)."""
    a0, a1 = taps_inside(y0, kh, dh, height)
    for a in range(kh):
        rows[a] = (y0 + (a if a0 <= a < a1 else a0) * dh) * width
    return a0 < a1


@helper(inline="always")
def _values_plane(plane, out, rows, height, width, ho, wo, kh, kw, sh, sw, dh, dw, top, left,
                  keep_nan, lowest, zero):
    """One plane of :func:`max_pool_values`, NaN-keeping or not (a constant); returns the
    sum :func:`_values_row` returns, over the rows (:func:`window_rows`; a row of windows
    with none of its rows inside is -inf)."""
    total = zero
    for i in range(ho):
        if not window_rows(rows, i * sh - top, kh, dh, height, width):
            out[i * wo:(i + 1) * wo] = -np.inf
            continue
        total = add(total, _values_row(plane, out, i * wo, rows, width, wo, kh, kw, sw, dw,
                                       left, keep_nan, lowest, zero))
    return total


@helper(inline="always")
def _values_planes(start, stop, x, best, height, width, ho, wo, kh, kw, sh, sw, dh, dw, top,
                   left, lowest, zero):
    """:func:`max_pool_values` with ``lowest``'s lanes."""
    n = lanes_of(lowest)
    rows = np.empty(kh, np.int64)
    sums = np.empty(n, F)
    for p in range(start, stop):
        store(sums, 0, _values_plane(x[p], best[p], rows, height, width, ho, wo, kh, kw, sh,
                                     sw, dh, dw, top, left, False, lowest, zero))
        total = sums.sum()
        if total != total:
            _values_plane(x[p], best[p], rows, height, width, ho, wo, kh, kw, sh, sw, dh, dw,
                          top, left, True, lowest, zero)


def values_lanes(wo: int) -> int:
    """The lanes of :func:`max_pool_values`' vectors: sixteen outputs where the loops run
    AVX-512 at full width (``isa.full_width``) and output rows hold more than eight (rows
    of fewer than sixteen: one vector, its last lanes not stored), else eight."""
    return WIDE if isa.full_width() and wo > LANES else LANES


@helper(inline="always")
def _values_widths(start, stop, x, best, height, width, ho, wo, kh, kw, sh, sw, dh, dw, top,
                   left, lanes):
    """:func:`_values_planes` with ``lanes`` (:func:`values_lanes`) lanes."""
    if lanes == WIDE:
        _values_planes(start, stop, x, best, height, width, ho, wo, kh, kw, sh, sw, dh, dw,
                       top, left, broadcast_wide(F(-np.inf)), broadcast_wide(F(0)))
    else:
        _values_planes(start, stop, x, best, height, width, ho, wo, kh, kw, sh, sw, dh, dw,
                       top, left, broadcast(F(-np.inf)), broadcast(F(0)))


@loop
def max_pool_values(start, stop, x, best, height, width, ho, wo, kh, kw, sh, sw, dh, dw, top,
                    left, lanes):
    """:func:`max_pool`'s values alone (inference) of planes ``start:stop``, ``lanes``
    (:func:`values_lanes`) outputs of a row a vector, straight from the input rows
    (:func:`_values_row`): per tap the maxima down the window's rows, then across the
    taps (at stride 2 the even and odd lanes of the same loads, two taps for two loads a
    row). Masked loads give the columns outside a row -inf and a window's rows outside
    the plane are its first inside row again, so padding and ceil mode's last windows
    take the same vectors. Plain maxima (``vmaxps``), and a plane whose read values
    summed to NaN is pooled again NaN-keeping (``llvm.maximum`` costs 2.5x; NaN wins, as
    in torch). Only where :func:`vectorised` (input rows of eight at least, column
    stride 1 or 2); the common windows take ``pool_separable``
    (``pool_separable.values_loop``)."""
    _values_widths(start, stop, x, best, height, width, ho, wo, kh, kw, sh, sw, dh, dw, top,
                   left, lanes)


# -- separable loops on rows of any width, any float dtype ---------------------------------------
# Average pooling (forward and backward) and max pooling's values where the loops above do
# not fit: for each output row, the sums (maxima) down its window's rows for every input
# column into a row padded on both sides with the reduction's identity, then across that
# row's taps for every output, eight columns (outputs) a vector, so that padding and ceil
# mode's last window need no case of their own. Written with the eight-lane intrinsics:
# rows this short are a vector or two, and LLVM's loop vectoriser, with its scalar
# remainder and alias checks per row, ran them as slowly as scalar code. NumPy's form took
# a pass over the output per kernel position.

@helper(inline="always")
def padded_length(width, wo, kw, sw, dw, left):
    """The padded row's length: the input row at ``left``, every output vector's last tap
    (:func:`_tap` reads 15 past its first), and more."""
    return left + width + (-(-wo // LANES) * LANES) * sw + kw * dw + 2 * LANES


@helper(inline="always")
def _combine(b, v, is_max):
    """``b + v`` or (``is_max``) their maximum, NaN winning, of two scalars."""
    if is_max:
        return v if (v > b) | (v != v) else b
    return b + v


@helper(inline="always")
def _combine_vectors(b, v, is_max):
    """:func:`_combine` lane-wise."""
    return maximum_nan(b, v) if is_max else add(b, v)


@helper(inline="always")
def _down(plane, width, y0, a0, a1, dh, padded, left, is_max):
    """``padded[left + q]``: the sum (``is_max``: the maximum, NaN wins) of column ``q``
    of the plane over the window's rows ``y0 + a * dh`` for ``a`` in ``a0:a1``: eight
    columns a vector (the last eight end at the row's end), one by one in rows of fewer."""
    if a0 >= a1:
        for q in range(width):
            padded[left + q] = -np.inf if is_max else 0
    elif width < LANES:
        for q in range(width):
            b = plane[(y0 + a0 * dh) * width + q]
            for a in range(a0 + 1, a1):
                b = _combine(b, plane[(y0 + a * dh) * width + q], is_max)
            padded[left + q] = b
    else:
        for q in range(0, width, LANES):
            q = min(q, width - LANES)
            b = load(plane, (y0 + a0 * dh) * width + q)
            for a in range(a0 + 1, a1):
                b = _combine_vectors(b, load(plane, (y0 + a * dh) * width + q), is_max)
            store(padded, left + q, b)


@helper(inline="always")
def _across(padded, row, wo, kw, sw, dw, is_max):
    """``row[j]``: the sum (maximum, NaN wins) of ``padded[j * sw + c * dw]`` over the
    ``kw`` taps ``c``, for ``j < wo`` (``row`` holds ``wo`` rounded up to eight): eight
    outputs a vector at ``sw`` 1 or 2, else one by one."""
    if sw <= 2:
        for j in range(0, wo, LANES):
            b = _tap(padded, j * sw, sw)
            for c in range(1, kw):
                b = _combine_vectors(b, _tap(padded, j * sw + c * dw, sw), is_max)
            store(row, j, b)
    else:
        for j in range(wo):
            b = padded[j * sw]
            for c in range(1, kw):
                b = _combine(b, padded[j * sw + c * dw], is_max)
            row[j] = b


@helper(inline="always")
def _pool_planes(start, stop, x, out, div, padded, height, width, ho, wo, kh, kw, sh, sw, dh,
                 dw, top, left, is_max):
    """Planes ``start:stop`` of ``x`` pooled into ``out`` row by row (:func:`_down`, then
    :func:`_across` into a row of whole vectors): sums over the divisors ``div`` (``Ho``
    rows of ``Wo`` rounded up to eight), or maxima. Whole vectors are stored straight
    into the output, the row's last few outputs one by one."""
    span = -(-wo // LANES) * LANES
    row = np.empty(span, x.dtype)
    for p in range(start, stop):
        plane, dest = x[p], out[p]
        for i in range(ho):
            y0 = i * sh - top
            a0, a1 = taps_inside(y0, kh, dh, height)
            _down(plane, width, y0, a0, a1, dh, padded, left, is_max)
            _across(padded, row, wo, kw, sw, dw, is_max)
            for j in range(0, wo, LANES):
                v = load(row, j)
                if not is_max:
                    v = divide(v, load(div, i * span + j))
                if j + LANES <= wo:
                    store(dest, i * wo + j, v)
                else:
                    store(row, j, v)
                    for t in range(j, wo):
                        dest[i * wo + t] = row[t]


def avg_divisors(div, ho: int, wo: int) -> np.ndarray:
    """The divisors ``div`` (a number, or ``(Ho, Wo)``) as :func:`avg_pool` and
    :func:`avg_pool_backward` read them: ``Ho`` flat rows of ``Wo`` rounded up to eight,
    the rows' ends 1."""
    rows = np.ones((ho, -(-wo // LANES) * LANES), np.float64)
    rows[:, :wo] = div
    return rows.reshape(-1)


@loop
def avg_pool(start, stop, x, out, div, height, width, ho, wo, kh, kw, sh, sw, top, left):
    """Planes ``start:stop`` of the flat planes ``x (P, H*W)`` average-pooled into ``out
    (P, Ho*Wo)``: each window's sum over the positions inside the plane (window ``(i, j)``
    at ``(i * sh - top, j * sw - left)``), divided by its divisor ``div`` (torch's: with or
    without the padding, or the override; ``Ho`` rows of ``Wo`` rounded up to eight, for
    the vectors, and ``Ho*Wo`` at least: :func:`avg_divisors`)."""
    padded = np.zeros(padded_length(width, wo, kw, sw, 1, left), x.dtype)
    _pool_planes(start, stop, x, out, div, padded, height, width, ho, wo, kh, kw, sh, sw, 1, 1,
                 top, left, False)


@loop
def avg_pool_backward(start, stop, g, div, dx, height, width, ho, wo, kh, kw, sh, sw, top,
                      left):
    """:func:`avg_pool`'s transpose on planes ``start:stop``: each output's gradient over
    its divisor, ``g (P, Ho*Wo) / div`` (:func:`avg_divisors`), added to every position of
    its window inside the plane, into ``dx (P, H*W)`` (overwritten): across each output
    row into a padded row, then down the window's rows."""
    padded = np.zeros(padded_length(width, wo, kw, sw, 1, left), g.dtype)
    span = -(-wo // LANES) * LANES
    for p in range(start, stop):
        grads, target = g[p], dx[p]
        target[:] = 0
        for i in range(ho):
            padded[:] = 0
            for j in range(wo):
                share = grads[i * wo + j] / div[i * span + j]
                for c in range(kw):
                    padded[j * sw + c] += share
            y0 = i * sh - top
            a0, a1 = taps_inside(y0, kh, 1, height)
            for a in range(a0, a1):
                o = (y0 + a) * width
                for q in range(width):
                    target[o + q] += padded[left + q]


@loop
def max_pool_rows(start, stop, x, best, height, width, ho, wo, kh, kw, sh, sw, dh, dw, top,
                  left):
    """:func:`max_pool_values`' result (NaN wins) where neither its loop (rows of fewer
    than eight outputs, strides over 2) nor ``pool_lanes``' (fewer than eight planes,
    wide rows) fits, by :func:`_pool_planes`."""
    padded = np.full(padded_length(width, wo, kw, sw, dw, left), -np.inf, x.dtype)
    _pool_planes(start, stop, x, best, padded, padded, height, width, ho, wo, kh, kw, sh, sw,
                 dh, dw, top, left, True)
