"""2-D pooling of small float32 planes with eight planes in the lanes of a vector: the
eight planes transposed into an array of eight-lane positions, each window's taps one
vector apiece (the geometry worked out once for eight planes), and the results
transposed back. Where a plane's rows hold few outputs (a 14x14 plane pooled to 7x7, a
7x7 branch pool), a vector along the row is mostly idle or a scalar remainder; here every
lane works, and the taps are summed in torch's window order."""
from __future__ import annotations

import numpy as np

from . import helper, loop
from .pooling import taps_inside
from .simd import LANES, add, broadcast_at, divide, load, maximum_nan, store, transpose


@helper(inline="always")
def _to_lanes(x, offset, size, lanes):
    """``lanes[q * 8 + l]`` = element ``q`` of plane ``l`` of the eight planes of ``size``
    elements at ``x[offset:]``: 8x8 transposes, the last ``size % 8`` one by one."""
    whole = size - size % LANES
    for q in range(0, whole, LANES):
        transpose(x, offset + q, size, lanes, q * LANES, LANES)
    for q in range(whole, size):
        for lane in range(LANES):
            lanes[q * LANES + lane] = x[offset + lane * size + q]


@helper(inline="always")
def _from_lanes(lanes, size, out, offset):
    """:func:`_to_lanes` undone: element ``q`` of plane ``l`` at ``out[offset:]`` =
    ``lanes[q * 8 + l]``."""
    whole = size - size % LANES
    for q in range(0, whole, LANES):
        transpose(lanes, q * LANES, LANES, out, offset + q, size)
    for q in range(whole, size):
        for lane in range(LANES):
            out[offset + lane * size + q] = lanes[q * LANES + lane]


@helper(inline="always")
def _pool_lanes(start, stop, x, out, div, planes, height, width, ho, wo, kh, kw, sh, sw, dh, dw,
                top, left, is_max):
    """Groups ``start:stop`` of eight planes (eight at least: :func:`fits`; the last group
    the last eight planes, some pooled twice: the same values) of the flat ``x (P * H *
    W)`` pooled into the flat ``out (P * Ho * Wo)``: sums of the window's positions inside
    the plane over ``div`` (``Ho`` rows of ``Wo`` rounded up to eight), or their maxima
    (NaN wins)."""
    size, outputs, span = height * width, ho * wo, -(-wo // LANES) * LANES
    inputs = np.empty(size * LANES, x.dtype)
    results = np.empty(outputs * LANES, x.dtype)
    identity = np.full(LANES, -np.inf if is_max else 0.0, x.dtype)
    for group in range(start, stop):
        first = min(group * LANES, planes - LANES)
        _to_lanes(x, first * size, size, inputs)
        for i in range(ho):
            y0 = i * sh - top
            a0, a1 = taps_inside(y0, kh, dh, height)
            for j in range(wo):
                x0 = j * sw - left
                c0, c1 = taps_inside(x0, kw, dw, width)
                b = load(identity, 0)
                for a in range(a0, a1):
                    o = (y0 + a * dh) * width + x0
                    for c in range(c0, c1):
                        v = load(inputs, (o + c * dw) * LANES)
                        b = maximum_nan(b, v) if is_max else add(b, v)
                if not is_max:
                    b = divide(b, broadcast_at(div, i * span + j))
                store(results, (i * wo + j) * LANES, b)
        _from_lanes(results, outputs, out, first * outputs)


@loop
def avg_pool_lanes(start, stop, x, out, planes, height, width, ho, wo, kh, kw, sh, sw, top,
                   left, div):
    """Average pooling by :func:`_pool_lanes` (``pooling.avg_pool``'s arguments, the planes
    flat, with their count)."""
    _pool_lanes(start, stop, x, out, div, planes, height, width, ho, wo, kh, kw, sh, sw, 1, 1,
                top, left, False)


@loop
def max_pool_lanes(start, stop, x, out, planes, height, width, ho, wo, kh, kw, sh, sw, dh, dw,
                   top, left):
    """Max pooling's values by :func:`_pool_lanes` (``pooling.max_pool_values``' arguments,
    the planes flat, with their count)."""
    _pool_lanes(start, stop, x, out, out, planes, height, width, ho, wo, kh, kw, sh, sw, dh, dw,
                top, left, True)


def fits(dtype, planes: int, wo: int) -> bool:
    """Whether the loops here take these planes: float32 (the transposes move 32-bit
    lanes), eight planes at least, rows of fewer than 16 outputs (on wider rows a vector
    along the row is as busy, and the transposes cost more than they save)."""
    return dtype == np.float32 and planes >= LANES and wo < 2 * LANES
