"""2-D pooling of float32 planes with eight (sixteen, where the loops run AVX-512 at full
width: :func:`lanes`) planes in the lanes of a vector, as onnxruntime pools its NCHWc
blocks: the planes transposed into an array of positions whose lanes are the planes,
copied into a buffer whose border holds the reduction's identity (-inf, or 0 for sums),
each output then every tap of its window one full vector load apiece with no test of
where the window lies (padding and ceil mode's last window read the border), and the
results transposed back. Along a row of planes a vector is mostly idle or a scalar
remainder where the rows are short, and every row pays its edge cases; here every lane
works and the loop over a window's taps has the same trip counts everywhere.

Sums add the taps in torch's window order (the border's zeros add nothing: the same
bits as skipping them). Maxima are plain ``vmaxps``; a group of planes whose inputs summed
to NaN (a NaN, or infinities of both signs) is pooled again NaN-keeping (NaN wins, as in
torch), ``llvm.maximum`` costing about twice as much a tap."""
from __future__ import annotations

import numpy as np

from . import helper, isa, loop
from .simd import (LANES, WIDE, add, broadcast, broadcast_at_like, broadcast_wide, divide,
                   lanes_of, load_like, maximum, maximum_nan, store, transpose)

F = np.float32


@helper(inline="always")
def _to_lanes(x, offset, size, lanes, zero):
    """``lanes[q * W + l]`` = element ``q`` of plane ``l`` of the ``W`` (``zero``'s lanes)
    planes of ``size`` elements at ``x[offset:]``: 8x8 transposes, the last ``size % 8``
    one by one."""
    width = lanes_of(zero)
    whole = size - size % LANES
    for half in range(0, width, LANES):
        for q in range(0, whole, LANES):
            transpose(x, offset + half * size + q, size, lanes, q * width + half, width)
    for q in range(whole, size):
        for lane in range(width):
            lanes[q * width + lane] = x[offset + lane * size + q]


@helper(inline="always")
def _from_lanes(lanes, size, out, offset, zero):
    """:func:`_to_lanes` undone: element ``q`` of plane ``l`` at ``out[offset:]`` =
    ``lanes[q * W + l]``."""
    width = lanes_of(zero)
    whole = size - size % LANES
    for half in range(0, width, LANES):
        for q in range(0, whole, LANES):
            transpose(lanes, q * width + half, width, out, offset + half * size + q, size)
    for q in range(whole, size):
        for lane in range(width):
            out[offset + lane * size + q] = lanes[q * width + lane]


@helper(inline="always")
def _into_border(staging, height, width, bordered, wb, top, left, zero):
    """The positions of ``staging (H*W, lanes)`` into ``bordered`` (rows of ``wb``
    positions) at row ``top`` and column ``left``; returns their sum (NaN where a NaN
    was, or infinities of both signs)."""
    n = lanes_of(zero)
    total = zero
    for y in range(height):
        src, dst = y * width * n, ((y + top) * wb + left) * n
        for q in range(width):
            v = load_like(staging, src + q * n, zero)
            total = add(total, v)
            store(bordered, dst + q * n, v)
    return total


@helper(inline="always")
def _windows(bordered, wb, results, div, ho, wo, kh, kw, sh, sw, dh, dw, is_max, keep_nan,
             identity):
    """Each output's window over ``bordered`` (rows of ``wb`` positions, the window of
    output ``(i, j)`` at row ``i * sh``, column ``j * sw``) into ``results (Ho*Wo,
    lanes)``: its taps' maximum (``keep_nan``: NaN wins), or their sum over ``div`` (``Ho``
    rows of ``Wo`` rounded up to eight), from ``identity`` (-inf or 0, of the lanes)."""
    n = lanes_of(identity)
    span = -(-wo // LANES) * LANES
    for i in range(ho):
        for j in range(wo):
            o = (i * sh * wb + j * sw) * n
            b = identity
            for a in range(kh):
                for c in range(kw):
                    v = load_like(bordered, o + (a * dh * wb + c * dw) * n, identity)
                    if not is_max:
                        b = add(b, v)
                    elif keep_nan:
                        b = maximum_nan(b, v)
                    else:
                        b = maximum(v, b)
            if not is_max:
                b = divide(b, broadcast_at_like(div, i * span + j, identity))
            store(results, (i * wo + j) * n, b)


@helper(inline="always")
def _pool_groups(start, stop, x, out, div, planes, height, width, ho, wo, kh, kw, sh, sw, dh,
                 dw, top, left, is_max, identity):
    """Groups ``start:stop`` of ``identity``'s lanes' count of planes (the last group the
    last planes, some pooled twice: the same values) of the flat ``x (P * H * W)`` pooled
    into the flat ``out (P * Ho * Wo)`` (:func:`_windows`)."""
    n = lanes_of(identity)
    size, outputs = height * width, ho * wo
    hb = max((ho - 1) * sh + (kh - 1) * dh + 1, top + height)
    wb = max((wo - 1) * sw + (kw - 1) * dw + 1, left + width)
    staging = np.empty(size * n, x.dtype)
    results = np.empty(outputs * n, x.dtype)
    bordered = np.empty(hb * wb * n, x.dtype)
    for q in range(hb * wb):
        store(bordered, q * n, identity)
    sums = np.empty(n, x.dtype)
    for group in range(start, stop):
        first = min(group * n, planes - n)
        _to_lanes(x, first * size, size, staging, identity)
        total = _into_border(staging, height, width, bordered, wb, top, left, identity)
        _windows(bordered, wb, results, div, ho, wo, kh, kw, sh, sw, dh, dw, is_max, False,
                 identity)
        if is_max:
            store(sums, 0, total)
            total_sum = sums.sum()
            if total_sum != total_sum:
                _windows(bordered, wb, results, div, ho, wo, kh, kw, sh, sw, dh, dw, True, True,
                         identity)
        _from_lanes(results, outputs, out, first * outputs, identity)


@helper(inline="always")
def _windows_of(start, stop, x, out, div, planes, height, width, ho, wo, kh, kw, sh, sw, dh,
                dw, top, left, is_max, identity):
    """:func:`_pool_groups` with the common windows' sizes as constants (3x3 and 2x2, no
    dilation: each output's taps unrolled, 0.65-0.8x the loop's time on 7x7 and 14x14
    planes), any other as it comes."""
    if kh == 3 and kw == 3 and dh == 1 and dw == 1:
        _pool_groups(start, stop, x, out, div, planes, height, width, ho, wo, 3, 3, sh, sw, 1,
                     1, top, left, is_max, identity)
    elif kh == 2 and kw == 2 and dh == 1 and dw == 1:
        _pool_groups(start, stop, x, out, div, planes, height, width, ho, wo, 2, 2, sh, sw, 1,
                     1, top, left, is_max, identity)
    else:
        _pool_groups(start, stop, x, out, div, planes, height, width, ho, wo, kh, kw, sh, sw,
                     dh, dw, top, left, is_max, identity)


@loop
def avg_pool_lanes(start, stop, x, out, planes, lanes, height, width, ho, wo, kh, kw, sh, sw,
                   top, left, div):
    """Average pooling of groups ``start:stop`` of ``lanes`` (:func:`lanes`) planes
    (``pooling.avg_pool``'s arguments, the planes flat, with their count)."""
    if lanes == WIDE:
        _windows_of(start, stop, x, out, div, planes, height, width, ho, wo, kh, kw, sh, sw,
                    1, 1, top, left, False, broadcast_wide(F(0)))
    else:
        _windows_of(start, stop, x, out, div, planes, height, width, ho, wo, kh, kw, sh, sw,
                    1, 1, top, left, False, broadcast(F(0)))


@loop
def max_pool_lanes(start, stop, x, out, planes, lanes, height, width, ho, wo, kh, kw, sh, sw,
                   dh, dw, top, left):
    """Max pooling's values of groups ``start:stop`` of ``lanes`` (:func:`lanes`) planes
    (``pooling.max_pool_values``' arguments, the planes flat, with their count)."""
    if lanes == WIDE:
        _windows_of(start, stop, x, out, out, planes, height, width, ho, wo, kh, kw, sh, sw,
                    dh, dw, top, left, True, broadcast_wide(F(-np.inf)))
    else:
        _windows_of(start, stop, x, out, out, planes, height, width, ho, wo, kh, kw, sh, sw,
                    dh, dw, top, left, True, broadcast(F(-np.inf)))


def lanes(planes: int) -> int:
    """How many planes a group pools in the lanes of one vector: sixteen where the loops
    run AVX-512 at full width (``isa.full_width``) and there are sixteen planes, else
    eight."""
    return WIDE if isa.full_width() and planes >= WIDE else LANES


def fits(dtype, planes: int, wo: int) -> bool:
    """Whether the loops here take these planes: float32 (the transposes move 32-bit
    lanes), eight planes at least, rows of fewer than 16 outputs (on wider rows a vector
    along the row is as busy, and the transposes cost more than they save)."""
    return dtype == np.float32 and planes >= LANES and wo < 2 * LANES

