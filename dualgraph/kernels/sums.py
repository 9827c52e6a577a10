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
"""
from __future__ import annotations

import numpy as np

from . import helper
from .simd import add, load, tree_sum

F = np.float32
BLOCK = 128      # NumPy's PW_BLOCKSIZE
STACK = 64       # frames of the pairwise tree: enough for 2**64 elements


@helper(inline="always")
def _block_sum(a, lo, n):
    """``sum(a[lo:lo + n])`` for ``n <= 128`` in NumPy's order: under 8 elements left to
    right; else eight running sums joined as a tree, then the tail."""
    if n < 8:
        total = F(-0.0)
        for i in range(n):
            total += a[lo + i]
        return total
    r = load(a, lo)     # (lane k: the running sum of elements lo + k, lo + k + 8, ...)
    i, whole = 8, n - n % 8
    while i < whole:
        r = add(r, load(a, lo + i))
        i += 8
    total = tree_sum(r)
    for j in range(i, n):
        total += a[lo + j]
    return total


@helper(inline="always")
def pairwise_sum(a, lo, n, frames, left):
    """``sum(a[lo:lo + n])`` of the 1-D contiguous ``a`` in NumPy's pairwise order: blocks
    of up to 128 by ``_block_sum``; a longer run is its two halves (the first a multiple
    of 8) summed alike and added. NumPy recurses; this walks the same tree with a stack:
    ``frames (STACK, 3)`` int64 (start, length, whether the left half's sum is known) and
    ``left (STACK,)`` of ``a``'s dtype (that sum), scratch the caller allocates once."""
    if n <= BLOCK:
        return _block_sum(a, lo, n)
    top, frames[0, 0], frames[0, 1], frames[0, 2] = 0, lo, n, 0
    start, length, value, returning = lo, n, F(0), False
    while True:
        if returning:
            if frames[top, 2]:          # both halves done: add, and return to the parent
                value = left[top] + value
                if top == 0:
                    return value
                top -= 1
                continue
            left[top], frames[top, 2] = value, 1     # then the right half
            half = frames[top, 1] // 2 - (frames[top, 1] // 2) % 8
            start, length = frames[top, 0] + half, frames[top, 1] - half
        else:                           # a new frame: its left half first
            half = frames[top, 1] // 2 - (frames[top, 1] // 2) % 8
            start, length = frames[top, 0], half
        if length <= BLOCK:
            value, returning = _block_sum(a, start, length), True
        else:
            top += 1
            frames[top, 0], frames[top, 1], frames[top, 2], returning = start, length, 0, False
