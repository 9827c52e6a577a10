"""Loops along one dim of an array seen as ``(outer, n, inner)``: the dim ``n`` between the
dims before it (``outer``) and after it (``inner``, contiguous), so that a reduction over a
non-last dim reads each row of ``inner`` elements once, in memory order, with no
transposed copy (NumPy's ``argmax(axis=1)`` copies the array into that dim's order first,
and is then a pass per output element); and gather and scatter-add along the dim, a load
or an add per element where NumPy's fancy indexing builds index grids (and ``np.add.at``
takes a slow path per element).
"""
from __future__ import annotations

from . import helper, loop


@helper(inline="always")
def _takes(v, best, largest):
    """Whether ``v`` replaces ``best`` as the extremum so far: strictly greater (smaller),
    so the first of equal extrema stays, or the first NaN (which then stays: NaN wins, as
    in torch and NumPy's argmax)."""
    if best != best:
        return False
    if v != v:
        return True
    return v > best if largest else v < best


@loop
def extreme(x, values, index, largest):
    """``values[o, k]`` = the largest (``largest``) or smallest of ``x[o, :, k]`` and
    ``index[o, k]`` its first position along the dim; ``x (outer, n >= 1, inner)``,
    ``values`` and ``index (outer, inner)``."""
    for o in range(x.shape[0]):
        vals, where = values[o], index[o]
        first = x[o, 0]
        for k in range(vals.size):
            vals[k] = first[k]
            where[k] = 0
        for j in range(1, x.shape[1]):
            row = x[o, j]
            for k in range(vals.size):
                v = row[k]
                if _takes(v, vals[k], largest):
                    vals[k] = v
                    where[k] = j


@loop
def gather(x, index, out):
    """``out[o, j, k] = x[o, index[o, j, k], k]``; ``x (outer, n, inner)``, ``index`` and
    ``out (outer, m, inner)``, the indices in ``[0, n)`` (the caller checks)."""
    for o in range(index.shape[0]):
        for j in range(index.shape[1]):
            picks, dst = index[o, j], out[o, j]
            for k in range(dst.size):
                dst[k] = x[o, picks[k], k]


@loop
def scatter_add(out, index, src):
    """``out[o, index[o, j, k], k] += src[o, j, k]`` in order (repeated targets add up);
    shapes as :func:`gather`'s, ``out`` in place of ``x``."""
    for o in range(index.shape[0]):
        for j in range(index.shape[1]):
            picks, add = index[o, j], src[o, j]
            for k in range(add.size):
                out[o, picks[k], k] += add[k]
