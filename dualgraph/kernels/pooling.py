"""2-D max pooling (float32): the common 2x2 / stride 2 window's maximum and where it was
in one pass, any other window likewise, and the backward's scatter of gradients to those places. NumPy needs a pass
per kernel position plus masks and index arithmetic for the same result."""
from __future__ import annotations

import numpy as np

from . import helper, loop
from .simd import LANES, broadcast, load, load_even, maximum_nan, store

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
def max_pool(start, stop, x, best, index, kh, kw, sh, sw, dh, dw, top, left):
    """Any window (planes ``start:stop`` of ``x (P, H, W)``, no NaN in them): ``best (P,
    Ho, Wo)`` and ``index`` as :func:`max_pool_2x2`'s, the window at output ``(i, j)``
    starting at ``(i * sh - top, j * sw - left)`` with dilation ``(dh, dw)``. Positions
    outside the plane (padding, ceil mode's last window) are skipped: they would be
    -inf, which never wins over the first inside position. Rows and columns in window
    order: the first maximum wins, as in torch (NumPy needed a pass and two masks per
    window position: ResNet's 3x3/2 pool 30x slower)."""
    height, width = x.shape[1], x.shape[2]
    for p in range(start, stop):
        plane = x[p]
        for i in range(best.shape[1]):
            y0 = i * sh - top
            for j in range(best.shape[2]):
                x0 = j * sw - left
                b, k = plane[0, 0], -1
                for a in range(kh):
                    y = y0 + a * dh
                    if 0 <= y < height:
                        for c in range(kw):
                            col = x0 + c * dw
                            if 0 <= col < width:
                                v = plane[y, col]
                                if k < 0 or v > b:
                                    b, k = v, y * width + col
                best[p, i, j] = b
                index[p, i, j] = k


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
    """The maximum of one window (positions outside the plane skipped), NaN if any value
    in it is NaN, as in torch."""
    b = -np.inf
    for a in range(kh):
        y = y0 + a * dh
        if 0 <= y < height:
            for c in range(kw):
                col = x0 + c * dw
                if 0 <= col < width:
                    v = plane[y * width + col]
                    if not v <= b:    # (greater, or NaN)
                        b = v
                    if b != b:
                        return b
    return b


@helper(inline="always")
def _vector_max(plane, width, y0, a0, a1, x0, kw, sw, dh, dw):
    """The maxima of eight windows side by side (rows ``a0:a1`` of the window inside the
    plane, every column inside): each tap one eight-lane load (every other column at
    stride 2) and a NaN-keeping maximum."""
    b = broadcast(F(-np.inf))
    for a in range(a0, a1):
        o = (y0 + a * dh) * width + x0
        for c in range(kw):
            v = load(plane, o + c * dw) if sw == 1 else load_even(plane, o + c * dw)
            b = maximum_nan(b, v)
    return b


@helper(inline="always")
def inside_columns(width, wo, kw, sw, dw, left):
    """``(first, last)``: the outputs of a row whose windows' columns are all inside it."""
    return -(-left // sw), min(wo - 1, (width - 1 - (kw - 1) * dw + left) // sw)


def vectorised(width, wo, kw, sw, dw, left) -> bool:
    """Whether :func:`max_pool_values` takes eight windows at a time on such rows (else
    it is slower than NumPy's running maximum: strides over 2, rows of fewer than eight
    inside outputs)."""
    first, last = inside_columns(width, wo, kw, sw, dw, left)
    return sw <= 2 and last + 1 - first >= LANES


@loop
def max_pool_values(start, stop, x, best, height, width, ho, wo, kh, kw, sh, sw, dh, dw, top,
                    left):
    """Planes ``start:stop`` of the flat planes ``x (P, H*W)`` max-pooled into ``best (P,
    Ho*Wo)`` (NaN where a window holds one, as in torch), the window of output ``(i, j)``
    starting at ``(i * sh - top, j * sw - left)`` with dilation ``(dh, dw)``; positions
    outside the plane are skipped (padding, ceil mode). At column stride 1 or 2 the
    outputs whose windows lie inside the row go eight at a time (:func:`_vector_max`; the
    row's last eight end at its last such output, recomputing some), the others one by
    one. NumPy's running maximum took a pass over the output per tap."""
    first, last = inside_columns(width, wo, kw, sw, dw, left)
    if not (sw <= 2 and last + 1 - first >= LANES):
        first, last = wo, wo - 1      # (all one by one)
    for p in range(start, stop):
        plane, out = x[p], best[p]
        for i in range(ho):
            y0 = i * sh - top
            a0, a1 = max(0, -(y0 // dh)), min(kh, -((y0 - height) // dh))
            row = out[i * wo:(i + 1) * wo]
            for j in range(first, last + 1, LANES):
                j = min(j, last + 1 - LANES)
                store(row, j, _vector_max(plane, width, y0, a0, a1, j * sw - left, kw, sw, dh,
                                          dw))
            for j in range(min(first, wo)):
                row[j] = _scalar_max(plane, height, width, y0, j * sw - left, kh, kw, dh, dw)
            for j in range(max(first, last + 1), wo):
                row[j] = _scalar_max(plane, height, width, y0, j * sw - left, kh, kw, dh, dw)
