"""Attention, ``softmax(q @ kt * scale + mask) @ v``, one head block at a time.

The ops one by one write the (heads, Lq, Lk) score matrix of every head, read it back for
the scale, again for the mask and the softmax, and once more for the product with ``v``;
at batch 16, sequence 128 that is 4 MiB per pass, out of cache. :func:`attend` runs
:func:`blocks` instead: per head, the product ``q @ kt`` into one (Lq, Lk) scratch matrix
that stays in cache, the scale, mask and a numerically stable softmax row by row on it
(the loops of ``normalization.softmax``: the same bits), and the product with ``v``
written straight into the result. ``q``, ``kt`` and ``v`` are read where they are, as
strided views (the heads of a projection split by ``reshape`` and ``permute``: each
matrix one ``sgemm`` reads as it is, ``batched._layout``), and the result may be written
with its heads dim after the sequence dim (``heads_out``), as the projection after
attention reads it, so that no transpose is copied on either side.

The products run on this thread; OpenBLAS shares a big one among its own threads.
"""
from __future__ import annotations

import math

import numpy as np

from . import helper, loop, native, numba_available
from .batched import NO_TRANS, _layout, _sgemm
from .blas_threads import sgemm_address
from .normalization import _REDUCE, _exp_into, _row_max

F = np.float32
# the modes :func:`blocks` takes: bit 0 divides by the scale; the mask added, or filled
DIVIDE, ADD_MASK, FILL_MASK = 1, 2, 4
_Q, _KT, _V, _OUT, _SCORES = 1, 7, 13, 19, 25     # word offsets: pointer + 5 layout words


@loop(fastmath=_REDUCE)
def blocks(start, stop, w, scores, mask, scale, mode, fill):
    """Head blocks ``start:stop``. ``w`` holds int64 words: sgemm's address; for ``q``,
    ``kt``, ``v`` and the result its data pointer and ``batched._layout``'s words (inner
    count, outer and inner slice bytes, leading dim, CBLAS flag); the scratch's pointer;
    then Lq, Lk, E, Ev. ``scores`` is the (Lq, Lk) scratch, ``mask`` (blocks / heads,
    heads, Lq, Lk) (a broadcast view, block i at ``[i // heads, i % heads]``; read only
    with a mask mode), ``scale``/``fill`` float32."""
    m, n, k, ev = w[26], w[27], w[28], w[29]
    heads = mask.shape[1]
    for i in range(start, stop):
        _sgemm(w[0], w[6], w[12], m, n, k, _at(w, _Q, i), w[5], _at(w, _KT, i), w[11],
               w[_SCORES], n)
        block_mask = mask[i // heads, i % heads]
        for r in range(m):
            row = scores[r]
            if mode & DIVIDE:
                for j in range(n):
                    row[j] = row[j] / scale
            else:
                for j in range(n):
                    row[j] = row[j] * scale
            if mode & ADD_MASK:
                mrow = block_mask[r]
                for j in range(n):
                    row[j] = row[j] + mrow[j]
            elif mode & FILL_MASK:
                mrow = block_mask[r]
                for j in range(n):
                    if mrow[j]:
                        row[j] = fill
            total = _exp_into(row, _row_max(row), row)
            for j in range(n):
                row[j] = row[j] / total
        _sgemm(w[0], NO_TRANS, w[18], m, ev, n, w[_SCORES], n, _at(w, _V, i), w[17],
               _at(w, _OUT, i), w[23])


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
    blank, the block count, the mask's shapes (broadcast, then as ``blocks`` reads it) and
    a zero mask of that shape. Per call only the pointers change: working the layouts out
    again took most of a small head block's time."""

    def __init__(self, shape, words, count, masked, blocked):
        self.shape, self.words, self.count = shape, words, count
        self.masked, self.blocked = masked, blocked
        self.no_mask = np.broadcast_to(F(0), blocked)


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
    return _Plan(shape, words, count, batch + (m, n), (count // heads, heads, m, n))


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
    if mask is None:
        mode, mask4 = 0, plan.no_mask
    else:   # (a padding mask broadcast over the heads and queries stays a view: the
        # heads are indexed apart, where one dim of blocks would copy it, MBs per call)
        mode = ADD_MASK if fill is None else FILL_MASK
        mask4 = np.broadcast_to(mask, plan.masked).reshape(plan.blocked)
    out = np.empty(plan.shape, np.float32)
    scores = np.empty(plan.blocked[2:], np.float32)
    words = plan.words.copy()
    words[_POINTERS] = [x.ctypes.data for x in (q, kt, v, out, scores)]
    blocks(0, plan.count, words, scores, mask4, F(scale), mode | (DIVIDE if divide else 0),
           F(0 if fill is None else fill))
    return out
