"""Attention, ``softmax(q @ kt * scale + mask) @ v``, one head block at a time.

The ops one by one write the (heads, Lq, Lk) score matrix of every head, read it back for
the scale, again for the mask and the softmax, and once more for the product with ``v``;
at batch 16, sequence 128 that is 4 MiB per pass, out of cache. :func:`attend` runs
:func:`blocks` instead: per head, the product ``q @ kt`` into one (Lq, Lk) scratch matrix
that stays in cache, the scale and the mask in one pass over each row (a mask read in its
own shape, a padding mask ``(B, 1, 1, Lk)`` as one row per sequence) and a numerically
stable softmax row by row on it (the loops of ``normalization.softmax``: the same bits),
and the product with ``v``
written straight into the result. ``q``, ``kt`` and ``v`` are read where they are, as
strided views (the heads of a projection split by ``reshape`` and ``permute``: each
matrix one ``sgemm`` reads as it is, ``batched._layout``), and the result may be written
with its heads dim after the sequence dim (``heads_out``), as the projection after
attention reads it, so that no transpose is copied on either side.

The products run on this thread; OpenBLAS shares a big one among its own threads.

Where the operands outgrow the second level cache (``AHEAD_BYTES``: at batch 16 the q/k/v
projection's output is 6 MiB), each head's rows come from the last level cache, strided
(a head's 64 values of a row, the next row a projection's width further on), and the
BLAS's packing of them waits on each line. While a block's softmax runs, the next block's
``q``, ``kt`` and ``v`` lines are asked into the second level cache, a share of them per
row of scores (on an Intel Xeon, loaded, one thread, operands just written by the
projection: 16 x 4 heads of 128 x 64 about 4% less time, 16 x 3 x 197 x 64 about 2%;
with those operands out of cache 6-15% and 6-8%). The arithmetic is unchanged.
"""
from __future__ import annotations

import math

import numpy as np

from . import helper, loop, native, numba_available
from .batched import NO_TRANS, _layout, _sgemm
from .blas_threads import sgemm_address
from .normalization import _REDUCE, _exp_into, _row_max
from .simd import prefetch_address

F = np.float32
# the modes :func:`blocks` takes: bit 0 divides by the scale, bit 3 scales at all (not
# a multiplication by 1); the mask added, or filled; the next block's operands prefetched
DIVIDE, ADD_MASK, FILL_MASK, SCALE, AHEAD = 1, 2, 4, 8, 16
AHEAD_BYTES = 1 << 20   # the operands' bytes from which blocks prefetch (half an L2)
LINE_BYTES = 64
_Q, _KT, _V, _OUT, _SCORES = 1, 7, 13, 19, 25     # word offsets: pointer + 5 layout words


@loop(fastmath=_REDUCE)
def blocks(start, stop, w, scores, mask, heads, scale, mode, fill):
    """Head blocks ``start:stop``. ``w`` holds int64 words: sgemm's address; for ``q``,
    ``kt``, ``v`` and the result its data pointer and ``batched._layout``'s words (inner
    count, outer and inner slice bytes, leading dim, CBLAS flag); the scratch's pointer;
    then Lq, Lk, E, Ev. ``scores`` is the (Lq, Lk) scratch, ``mask`` C-contiguous (B', H',
    Q', Lk), each of B', H', Q' either 1 (the mask the same along that dim) or the
    blocks' count over ``heads``, ``heads`` or Lq: block i reads ``mask[i // heads, i %
    heads]`` (read only with a mask mode). ``scale``/``fill`` float32; with ``AHEAD`` in
    ``mode``, block ``i + 1``'s operands are prefetched during block ``i``'s softmax."""
    m, n, k, ev = w[26], w[27], w[28], w[29]
    for i in range(start, stop):
        _sgemm(w[0], w[6], w[12], m, n, k, _at(w, _Q, i), w[5], _at(w, _KT, i), w[11],
               w[_SCORES], n)
        block_mask = mask[i // heads if mask.shape[0] > 1 else 0,
                          i % heads if mask.shape[1] > 1 else 0]
        for r in range(m):
            row = scores[r]
            if mode & AHEAD and i + 1 < stop:
                _ahead(w, _Q, i + 1, m, k, r, m)
                _ahead(w, _KT, i + 1, k, n, r, m)
                _ahead(w, _V, i + 1, n, ev, r, m)
            _scale_mask(row, block_mask[r if block_mask.shape[0] > 1 else 0], scale, mode,
                        fill)
            total = _exp_into(row, _row_max(row), row)
            for j in range(n):
                row[j] = row[j] / total
        _sgemm(w[0], NO_TRANS, w[18], m, ev, n, w[_SCORES], n, _at(w, _V, i), w[17],
               _at(w, _OUT, i), w[23])


@helper(inline="always")
def _scale_mask(row, mrow, scale, mode, fill):
    """The scores' row scaled (``row * scale`` or ``row / scale``, rounded as the ``mul`` or
    ``div`` op rounds) and masked (``+ mrow``, or ``fill`` where ``mrow`` is true) in one
    pass, each mode its own loop so that each vectorises; nothing where neither is asked."""
    if mode & ADD_MASK:
        if mode & DIVIDE:
            for j in range(row.size):
                row[j] = row[j] / scale + mrow[j]
        else:      # (a scale of 1 multiplies exactly)
            for j in range(row.size):
                row[j] = row[j] * scale + mrow[j]
    elif mode & FILL_MASK:
        if mode & DIVIDE:
            for j in range(row.size):
                row[j] = fill if mrow[j] else row[j] / scale
        else:
            for j in range(row.size):
                row[j] = fill if mrow[j] else row[j] * scale
    elif mode & DIVIDE:
        for j in range(row.size):
            row[j] = row[j] / scale
    elif mode & SCALE:
        for j in range(row.size):
            row[j] = row[j] * scale


@helper(inline="always")
def _ahead(w, base, i, rows, cols, part, parts):
    """Asks the second level cache for share ``part`` of ``parts`` of the rows of matrix
    ``i`` of the operand whose words start at ``base``, a ``rows x cols`` matrix (stored
    transposed where its CBLAS flag says so), every line a row's run of values touches."""
    if w[base + 5] != NO_TRANS:
        rows, cols = cols, rows
    at, ld = _at(w, base, i), w[base + 4] * 4
    for r in range(part * rows // parts, (part + 1) * rows // parts):
        first = at + r * ld
        for line in range(first - first % LINE_BYTES, first + cols * 4, LINE_BYTES):
            prefetch_address(line)


@helper(inline="always")
def _at(w, base, i):
    """The data pointer of matrix ``i`` of the operand whose words start at ``base``."""
    return w[base] + (i // w[base + 1]) * w[base + 2] + (i % w[base + 1]) * w[base + 3]


def wanted(*arrays) -> bool:
    """Whether :func:`attend` may run: float32 operands (the mask aside), Numba and native
    entries on, and OpenBLAS's 64-bit ``sgemm`` at hand."""
    return (all(a.dtype == np.float32 for a in arrays) and numba_available()
            and native.enabled() and sgemm_address() is not None)


class _Plan:
    """What :func:`attend` works out once per kind of call (the operands' shapes and
    strides): the result's shape, :func:`blocks`' words with the five pointers left
    blank, the block count, the scores' shape (the shape a mask broadcasts to), the heads,
    a zero mask for calls without one, and whether the blocks prefetch (``AHEAD_BYTES``
    of operands or more). Per call only the pointers change: working the layouts out again
    took most of a small head block's time."""

    def __init__(self, shape, words, count, masked, heads, ahead):
        self.shape, self.words, self.count = shape, words, count
        self.masked, self.heads, self.ahead = masked, heads, ahead
        self.no_mask = np.zeros((1, 1, 1, masked[-1]), F)


_plans: dict = {}
_POINTERS = [_Q, _KT, _V, _OUT, _SCORES]


def _plan(q, kt, v, heads_out: bool) -> _Plan | None:
    """The plan of calls with operands shaped and laid out as these; None where a matrix
    is not one ``sgemm`` reads as it is or the batch dims do not nest in two strides."""
    batch = np.broadcast_shapes(q.shape[:-2], kt.shape[:-2], v.shape[:-2])
    (m, k), n, ev = q.shape[-2:], kt.shape[-1], v.shape[-1]
    operands = [np.broadcast_to(x, batch + x.shape[-2:]) for x in (q, kt, v)]
    shape = batch[:-1] + (m, batch[-1], ev) if heads_out else batch + (m, ev)
    view = np.empty(shape, np.float32)
    view = np.swapaxes(view, -2, -3) if heads_out else view
    layouts = [_layout(x) for x in operands + [view]]
    if (any(lay is None for lay in layouts) or layouts[3][5] != NO_TRANS
            or 0 in shape or 0 in q.shape or 0 in kt.shape):
        return None
    count = math.prod(batch)
    heads = batch[-1] if batch else 1
    words = [sgemm_address()]
    for lay in layouts:
        words += [0, *lay[1:]]
    words = np.array(words + [0, m, n, k, ev], np.int64)
    ahead = count * (m * k + k * n + n * ev) * 4 >= AHEAD_BYTES
    return _Plan(shape, words, count, batch + (m, n), heads, ahead)


def _mask_blocks(mask, masked):
    """``mask`` as :func:`blocks` reads it: C-contiguous ``(B', H', Q', Lk)``, where ``B'``
    (the batch dims before the heads, flattened), ``H'`` and ``Q'`` stay 1 where the mask
    is the same along them. A padding mask ``(B, 1, 1, Lk)`` is read as it is: broadcast
    to the scores' shape it was a view of zero strides, and the row loop adding it did
    not vectorise (~4x the time of the other passes over a row). Copied only where a mask
    must be: broadcast along some batch dims and not others, or along the keys."""
    m = mask.reshape((1,) * (len(masked) - mask.ndim) + mask.shape)
    lead = len(masked) - 3
    target = list(m.shape[:-1]) + [masked[-1]]
    if lead > 0 and 1 in target[:lead] and any(d != 1 for d in target[:lead]):
        target[:lead] = masked[:lead]
    m = np.ascontiguousarray(np.broadcast_to(m, tuple(target)))
    return m.reshape(-1, target[-3] if lead >= 0 else 1, target[-2], target[-1])


def attend(q, kt, v, mask, scale: float, divide: bool, fill, heads_out: bool):
    """``softmax(q @ kt * scale (+ mask | masked to fill)) @ v`` as the ``attention`` op
    defines it, by :func:`blocks`; None (nothing done) where an operand's matrices are not
    ones ``sgemm`` reads as they are or the batch dims do not nest in two strides."""
    key = (q.shape, q.strides, kt.shape, kt.strides, v.shape, v.strides, heads_out)
    if key not in _plans:
        if len(_plans) >= 256:     # (shapes that keep changing: keep the recent ones)
            _plans.clear()
        _plans[key] = _plan(q, kt, v, heads_out)
    plan = _plans[key]
    if plan is None:
        return None
    mode = DIVIDE if divide else (SCALE if scale != 1 else 0)
    if plan.ahead:
        mode |= AHEAD
    if mask is None:
        mask4 = plan.no_mask
    else:
        mode |= ADD_MASK if fill is None else FILL_MASK
        mask4 = _mask_blocks(mask, plan.masked)
    out = np.empty(plan.shape, np.float32)
    scores = np.empty(plan.masked[-2:], np.float32)
    words = plan.words.copy()
    words[_POINTERS] = [x.ctypes.data for x in (q, kt, v, out, scores)]
    blocks(0, plan.count, words, scores, mask4, plan.heads, F(scale), mode,
           F(0 if fill is None else fill))
    return out
