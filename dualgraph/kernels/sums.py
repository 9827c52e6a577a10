"""Sums in NumPy's order, so that a compiled sum or mean has eager's very bits.

NumPy sums a contiguous run of float32 or float64 elements pairwise (``pairwise_sum`` in
``numpy/_core/src/umath/loops_utils.h.src``): under 8 elements left to right from -0.0;
up to 128 in eight running sums (lane k: elements k, k + 8, ...) joined as a tree, then
the tail; a longer run as its two halves, the first a multiple of 8, summed alike and
added. (``np.add.reduce`` then adds that to its initial 0.0, which only turns a -0.0
into 0.0.) The eight running sums are one eight-lane vector (``simd``), so these loops
vectorise without LLVM's ``reassoc``, which would reorder the sum (and, applied to a
whole kernel, the arithmetic around it). Either float type: the literals below take the
array's type where they meet its elements.

``pairwise_sum_of_squares`` sums ``(a[i] - shift)**2`` in the same order, each square
rounded as NumPy's ``np.square(a - shift)`` rounds it: a variance (LayerNorm's) or a mean
square (RMSNorm's) with the bits of NumPy's ``mean`` over a squared array, without
storing the squares. ``column_sums`` sums a matrix over its rows (axis 0), where NumPy
adds the rows in turn, not pairwise: the same order, its sums held in registers.
"""
from __future__ import annotations

import numpy as np

from . import Intrinsic, helper, loop
from .simd import (WIDE, add, broadcast, broadcast_wide, load, load_wide, multiply, store,
                   subtract, tree_sum)

F = np.float32
BLOCK = 128      # NumPy's PW_BLOCKSIZE
COLUMN_BLOCK = 128   # columns column_sums carries down the rows at once: 8 vectors
STACK = 64       # frames of the pairwise tree: enough for 2**64 elements
FRAME_WORDS = 3 * STACK


@Intrinsic
def _stack_array(typingctx, like, size):
    """A 1-D array of ``size`` (a constant) elements of ``like``'s type in the stack frame
    of the loop it is inlined into (made once, at the loop's entry: no allocation, no
    Numba runtime)."""
    from numba.core import types
    if not isinstance(size, types.IntegerLiteral):
        return None   # (Numba then types the call again with the size as a literal)
    count, array_type = size.literal_value, types.Array(like, 1, "C")

    def codegen(context, builder, signature, args):
        from numba.core import cgutils
        from numba.np.arrayobj import make_array, populate_array
        element = context.get_data_type(like)
        intp = context.get_value_type(types.intp)
        itemsize = intp(context.get_abi_sizeof(element))
        array = make_array(array_type)(context, builder)
        populate_array(array, data=cgutils.alloca_once(builder, element, size=count),
                       shape=[intp(count)], strides=[itemsize], itemsize=itemsize,
                       meminfo=None)
        return array._getvalue()
    return array_type(like, size), codegen


@helper(inline="always")
def _term(x, shift, square):
    """One element as the sum takes it: ``(x - shift)**2`` if ``square``, else ``x``."""
    if square:
        d = x - shift
        return d * d
    return x


@helper(inline="always")
def _lanes(a, at, shift, square):
    """Elements ``at`` to ``at + 7`` as the sum takes them, a vector (``_term``'s lanes)."""
    v = load(a, at)
    if square:
        d = subtract(v, broadcast(shift))
        return multiply(d, d)
    return v


@helper(inline="always")
def _block_sum(a, lo, n, shift, square):
    """``sum(a[lo:lo + n])`` (of ``_term``'s) for ``n <= 128`` in NumPy's order: under 8
    elements left to right; else eight running sums joined as a tree, then the tail."""
    if n < 8:
        total = F(-0.0)
        for i in range(n):
            total += _term(a[lo + i], shift, square)
        return total
    r = _lanes(a, lo, shift, square)   # (lane k: the running sum of lo + k, lo + k + 8, ...)
    i, whole = 8, n - n % 8
    while i < whole:
        r = add(r, _lanes(a, lo + i, shift, square))
        i += 8
    total = tree_sum(r)
    for j in range(i, n):
        total += _term(a[lo + j], shift, square)
    return total


@helper(inline="always")
def _pairwise(a, lo, n, shift, square):
    """``sum(a[lo:lo + n])`` (of ``_term``'s) of the 1-D contiguous ``a`` in NumPy's
    pairwise order: blocks of up to 128 by ``_block_sum``; a longer run is its two halves
    (the first a multiple of 8) summed alike and added. NumPy recurses; this walks the
    same tree with a stack in the loop's frame (a recursive helper would leave the loop's
    object unlinked, an allocated one would need Numba's runtime: ``native.py``):
    ``frames``, three words a frame (start, length, whether the left half's sum is known),
    and ``left`` (that sum)."""
    if n <= BLOCK:
        return _block_sum(a, lo, n, shift, square)
    frames = _stack_array(np.int64(0), FRAME_WORDS)   # (frame k: words 3k to 3k + 2)
    left = _stack_array(shift, STACK)
    top, frames[0], frames[1], frames[2] = 0, lo, n, 0
    start, length, value, returning = lo, n, F(0), False
    while True:
        if returning:
            if frames[3 * top + 2]:     # both halves done: add, and return to the parent
                value = left[top] + value
                if top == 0:
                    return value
                top -= 1
                continue
            left[top], frames[3 * top + 2] = value, 1    # then the right half
            half = frames[3 * top + 1] // 2 - (frames[3 * top + 1] // 2) % 8
            start, length = frames[3 * top] + half, frames[3 * top + 1] - half
        else:                           # a new frame: its left half first
            half = frames[3 * top + 1] // 2 - (frames[3 * top + 1] // 2) % 8
            start, length = frames[3 * top], half
        if length <= BLOCK:
            value, returning = _block_sum(a, start, length, shift, square), True
        else:
            top += 1
            frames[3 * top], frames[3 * top + 1], frames[3 * top + 2] = start, length, 0
            returning = False


@helper(inline="always")
def pairwise_sum(a, lo, n):
    """``sum(a[lo:lo + n])`` of the 1-D contiguous ``a`` in NumPy's pairwise order."""
    return _pairwise(a, lo, n, a.dtype.type(0), False)


@helper(inline="always")
def pairwise_sum_of_squares(a, lo, n, shift):
    """``sum((a[lo:lo + n] - shift)**2)`` in NumPy's pairwise order, each square rounded
    in ``a``'s dtype (``shift`` of that dtype)."""
    return _pairwise(a, lo, n, shift, True)



@helper(inline="always")
def _column_block(af, n, m, j, out):
    """Columns ``j .. j + 127`` of ``column_sums``: eight sixteen-lane sums in registers
    down all the rows."""
    z = broadcast_wide(af.dtype.type(0))
    s0, s1, s2, s3 = (add(z, load_wide(af, j)), add(z, load_wide(af, j + WIDE)),
                      add(z, load_wide(af, j + 2 * WIDE)), add(z, load_wide(af, j + 3 * WIDE)))
    s4, s5, s6, s7 = (add(z, load_wide(af, j + 4 * WIDE)), add(z, load_wide(af, j + 5 * WIDE)),
                      add(z, load_wide(af, j + 6 * WIDE)), add(z, load_wide(af, j + 7 * WIDE)))
    for r in range(1, m):
        o = r * n + j
        s0, s1 = add(s0, load_wide(af, o)), add(s1, load_wide(af, o + WIDE))
        s2, s3 = add(s2, load_wide(af, o + 2 * WIDE)), add(s3, load_wide(af, o + 3 * WIDE))
        s4, s5 = add(s4, load_wide(af, o + 4 * WIDE)), add(s5, load_wide(af, o + 5 * WIDE))
        s6, s7 = add(s6, load_wide(af, o + 6 * WIDE)), add(s7, load_wide(af, o + 7 * WIDE))
    store(out, j, s0)
    store(out, j + WIDE, s1)
    store(out, j + 2 * WIDE, s2)
    store(out, j + 3 * WIDE, s3)
    store(out, j + 4 * WIDE, s4)
    store(out, j + 5 * WIDE, s5)
    store(out, j + 6 * WIDE, s6)
    store(out, j + 7 * WIDE, s7)


@loop
def column_sums(af, out):
    """``out = a.sum(axis=0)`` of a C-contiguous float32 ``a (M, N)``, ``M >= 1``, given
    flat (``af``; N is ``out.size``: a reshape inside would call Numba's runtime, which a
    native entry cannot), in NumPy's order for that axis: from 0, each row added in turn
    (no pairwise tree across rows; a bias's gradient over a batch), so the same bits. 128
    columns at a time go down all the rows as eight vector sums held in registers (NumPy
    adds each row into the whole result row in memory: 1.3-2.5x the time at 1024 x 512 ..
    4096 x 128); the last ``N % 128`` columns row by row."""
    n = out.size
    m = af.size // n
    full = n - n % COLUMN_BLOCK
    for j in range(0, full, COLUMN_BLOCK):
        _column_block(af, n, m, j, out)
    for j in range(full, n):
        out[j] = af[j] + af.dtype.type(0)
    for r in range(1, m):
        o = r * n
        for j in range(full, n):
            out[j] += af[o + j]
