"""2-D max pooling (float32): the common 2x2 / stride 2 window's maximum and where it was
in one pass, any other window likewise, and the backward's scatter of gradients to those places. NumPy needs a pass
per kernel position plus masks and index arithmetic for the same result."""
from __future__ import annotations

from . import loop


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
