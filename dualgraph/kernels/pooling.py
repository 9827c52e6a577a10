"""2-D max pooling (float32) in one pass: each window's maximum and where it was, and the
backward's scatter of gradients to those places. NumPy needs a pass per kernel position
plus masks and index arithmetic for the same result."""
from __future__ import annotations

from . import loop


@loop
def max_pool(xp, kh, kw, sh, sw, dh, dw, top, left, width, best, index):
    """For the padded planes ``xp (P, Hp, Wp)``: ``best (P, Ho, Wo)`` gets each window's
    maximum and ``index`` its flat position in the unpadded plane (``width`` columns;
    ``top``/``left`` padding). The first maximum wins; a NaN beats numbers and a later NaN
    an earlier one, as in the NumPy kernel (and torch)."""
    for p in range(best.shape[0]):
        plane = xp[p]
        for i in range(best.shape[1]):
            r0 = i * sh
            for j in range(best.shape[2]):
                c0 = j * sw
                b, at_r, at_c = plane[r0, c0], r0, c0
                for u in range(kh):
                    r = r0 + u * dh
                    for v in range(kw):
                        c = c0 + v * dw
                        val = plane[r, c]
                        if val > b or val != val:
                            b, at_r, at_c = val, r, c
                best[p, i, j] = b
                index[p, i, j] = (at_r - top) * width + (at_c - left)


@loop
def max_pool_backward(g, index, out):
    """``out[p, index[p, k]] += g[p, k]``: gradients back to the maxima (``out`` zeroed,
    shape (P, H * W); windows that share a maximum add up)."""
    for p in range(g.shape[0]):
        target, grads, where = out[p], g[p], index[p]
        for k in range(grads.size):
            target[where[k]] += grads[k]
