"""Loops along one dim of an array seen as ``(outer, n, inner)``: the dim ``n`` between the
dims before it (``outer``) and after it (``inner``, contiguous), so that a reduction over a
non-last dim reads each row of ``inner`` elements once, in memory order, with no
transposed copy (NumPy's ``argmax(axis=1)`` copies the array into that dim's order first,
and is then a pass per output element).
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
