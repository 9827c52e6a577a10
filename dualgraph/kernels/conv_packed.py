"""Dense and grouped convolutions (float32) on a weight packed once, with sixteen output
channels in the lanes of two vectors (``simd.py``) and six output positions at a time: no
im2col, no GEMM call, no copy of the weight per call.

:func:`pack` lays a weight ``(Cout, C, kh, kw)`` out as ``(pairs, C*kh*kw, 16)``: pair
``p`` holds output channels ``16p .. 16p + 15`` (zeros past ``Cout``), its taps ``t = (c,
i, j)`` one after another, so the kernel reads a pair's weights as one contiguous run.
The compiler makes that layout once, from a constant weight (the lowering rule
``conv_packed``, ``passes/convs.py``), so a call pays nothing for it (the GEMMs pack
their operands at every call).

Each image is copied once into zero-padded planes ``xp (C, Hp, Wp)``
(``conv_outlanes.pad_image``) and every output is a sum over taps of ``w[t, lanes] *
xp[offset(t) + base(position)]``. Six output positions, taken in order over the flat
output ``(Ho*Wo)`` (a run crosses rows; stride and padding are in each position's
``base``), times sixteen channels are twelve vector sums: per tap two weight vectors are
loaded and six input values broadcast, twelve multiply-adds, enough sums in flight to hide
their latency on two FMA units (the register block of a 6 x 16 GEMM micro-kernel). The
positions of a pair of channel blocks are summed a block of taps at a time whose weights
stay in L1 (the sums kept in the staging buffer from one block of taps to the next). A
work item is an image's pair of channel blocks, so that two threads share batch 1. The
sums plus the bias (added last: a conv's rounding
and then its bias's, as ``conv_outlanes`` sums them: the same bits, tap by tap in one
order) go to ``(2, Ho*Wo, 8)`` and are transposed 8x8 into the output planes with
the epilogue (``conv_lanes.finish``).

Where the loops are compiled with AVX-512 (:func:`wide`) a pair's sixteen channels are one
``WIDE`` vector and twelve positions are summed at once (:func:`_wide_pair_sums`): twelve
multiply-adds a tap where the eight-lane pair takes twenty-four for the same outputs, each
output the same chain of multiply-adds in the same order (the same bits), the sums stored
to the same staging buffer as two halves.

A conv of one group with more than sixteen outputs there sums two pairs an item
(:func:`_quad_pair_sums`, where every thread still gets an item): twenty-four sums, two
weight loads and twelve broadcasts a tap (1.35x the multiply-adds a cycle of one pair's
twelve). Its positions are taken on the padded planes' grid (row ``q // Wp``, column ``q %
Wp``; the columns past ``Wo`` summed and dropped), where twelve neighbouring positions read
twelve neighbouring inputs: one address register for all twelve, where twelve positions
across rows need twelve, and LLVM, short of registers for them and twenty-four sums,
spilled both. At stride ``s`` the image is first split into its ``s*s`` phases
(:func:`pad_phases`: every ``s``-th row and column from each offset), each of which a tap
reads at stride 1 (:func:`grid_offsets`), so the grid drops only ``(kw - 1) // s`` columns
a row, where the padded planes' grid would drop half. On small planes the columns the
grid drops are many (two of nine on a 7x7 plane): there three pairs an item are summed on
runs of seven positions of one row (:func:`_row_pair_sums`; twenty-one sums, three weight
loads and seven broadcasts a tap), which drop none where ``Wo`` is a multiple of seven
(``Plan.rows`` chooses by the positions each sums), and the pairs left over from the
threes (one or two) alone on runs of two rows (:func:`_two_row_pair_sums`), where summing
the last pair again in a three wasted a pair's or two pairs' work. Each output is the same
chain of multiply-adds as one pair's (the same bits). On AVX-512 at half width (Zen 4: the
eight-lane pair elsewhere) the three pairs on runs of a row are taken where ``Plan.rows``
takes the shape (:func:`rows_wide`).

Grouped convs (RegNet's and ResNeXt-style groups of many channels) run the same loop:
:func:`pack` pads each group's outputs to whole pairs, so a pair lies in one group, its
taps are the ``C/G*kh*kw`` of that group's input channels, its positions' bases start at
the group's first padded plane (``origin``) and the offsets are those of ``C/G`` channels.
A group's product is one pair's, with all twelve sums busy, where the direct loop
(``conv_direct``) reloads each input plane once per output channel; a group whose width is
not a multiple of sixteen leaves its last pair's spare lanes idle (``groups_fit`` bounds
that share). At stride 1 on planes whose rows are whole runs of seven (7x7, 14x14, 28x28),
an item of one pair (a group's, or any pair where threads outnumber the items) is summed
two rows at a time in runs of seven on the padded planes (:func:`_two_row_pair_sums`:
fourteen sums, one weight load and fourteen broadcasts a tap, two address registers where
twelve positions across rows take twelve; a 7x7 plane sums 56 positions where runs of
twelve sum 60; ``Plan.row_pair``), the same chain of multiply-adds for each output (the
same bits).
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from . import helper, isa, loop, numba_available, out_images
from .conv_lanes import _interleave, finish
from . import conv_outlanes
from .conv_outlanes import _offsets, _planes, pad_image
from .conv_shallow import MAX_CHANNELS
from .epilogue import _activate
from .simd import (LANES, add, broadcast, broadcast_at, broadcast_at_wide, fma, high_half,
                   joined, load, load_wide, low_half, store)
from .threads import run_kept, threads_for
from .tuning import cores

F = np.float32
PAIR = 2 * LANES      # output channels of one packed block: two vectors
RUN = 6               # output positions summed at once
WIDE_RUN = 12         # ... where sixteen channels are one vector (``wide``)
ROW_RUN = 7           # ... of one output row, three pairs at once (``WIDE_ROWS``)
# A position of a pair summed on runs of a row costs this many of the grid's (21 sums a
# tap where the grid's take 24, runs of 7 where they take 12: 1.04x on 7x7 planes, 1.1x on
# 14x14 ones, batch 1, ``Plan.rows``). With the pairs left over from the threes alone,
# runs of rows took 0.86-0.96x the grid's time on 128-384 channels of 14x14 at stride 1,
# 1.01x on 128 -> 256 channels at stride 2 onto 14x14 (1.1 costed them 0.998x), 1.07x
# on 96 of 28x28, 0.76x on 160 and 512 of 7x7 (batch 1 and 8)
ROW_COST = 1.12
# ... and one pair's on runs of two rows, of the positions twelve at a time across rows
# (0.90-0.97x their time on stride-1 grouped 3x3s of 7x7 to 28x28 planes, whose rows are
# whole runs; ``Plan.row_pair``)
ROW_PAIR_COST = 1.0
# Weight bytes of a pair's block of taps: they stay in L1 while the positions pass.
BLOCK_BYTES = 12 << 10
# The loop's kinds of work item (``_forward``'s ``mode``): a pair on eight-lane vectors, a
# pair on one sixteen-lane vector (``wide``), two pairs at once on them (one group, and
# items enough for every thread: an item each at least), three pairs at once on runs of a
# row (``Plan.rows``)
NARROW, WIDE_PAIR, WIDE_PAIRS, WIDE_ROWS = 0, 1, 2, 3
# ... and one pair an item on runs of two rows (``Plan.row_pair``)
WIDE_ROW_PAIR = 4
# The items of two and three pairs are functions of their own, compiled once with the loop's
# flags (the same bits) and called (LLVM may still inline them), as ``conv_pointpacked``'s
# blocks: inlined in Numba's IR, each copies its whole IR into the loop, whose first compile
# took 24 s with both where it takes 17 s (docs/benchmarks.md, 2026-12-05 "strided and
# small-plane 3x3 convs").
_OWN = {"error_model": "numpy", "fastmath": {"contract"}}


@helper(inline="always")
def _step(u0, u1, xp, at, a, b):
    """One position's input value ``xp[at]`` times the tap's two weight vectors, added to
    its two sums."""
    x = broadcast_at(xp, at)
    return fma(u0, x, a), fma(u1, x, b)


@helper(inline="always")
def _sums(xp, wp, offsets, k0, k1, t, p0, p1, p2, p3, p4, p5, a0, a1, a2, a3, a4, a5, b0, b1,
          b2, b3, b4, b5):
    """The twelve vector sums ``a_k, b_k`` of six positions (their bases ``p0 .. p5`` in
    ``xp``) by the sixteen channels whose taps ``k0:k1`` start at ``wp[t]``, carried on."""
    for k in range(k0, k1):
        o = offsets[k]
        u0 = load(wp, t)
        u1 = load(wp, t + LANES)
        a0, b0 = _step(u0, u1, xp, p0 + o, a0, b0)
        a1, b1 = _step(u0, u1, xp, p1 + o, a1, b1)
        a2, b2 = _step(u0, u1, xp, p2 + o, a2, b2)
        a3, b3 = _step(u0, u1, xp, p3 + o, a3, b3)
        a4, b4 = _step(u0, u1, xp, p4 + o, a4, b4)
        a5, b5 = _step(u0, u1, xp, p5 + o, a5, b5)
        t += PAIR
    return a0, a1, a2, a3, a4, a5, b0, b1, b2, b3, b4, b5


@helper(inline="always")
def _load6(sums, q0, q1, q2, q3, q4, q5):
    """Six positions' partial sums from ``sums[q_k * 8]``."""
    return (load(sums, q0 * LANES), load(sums, q1 * LANES), load(sums, q2 * LANES),
            load(sums, q3 * LANES), load(sums, q4 * LANES), load(sums, q5 * LANES))


@helper(inline="always")
def _store6(sums, q0, q1, q2, q3, q4, q5, a0, a1, a2, a3, a4, a5):
    """Six positions' sums at ``sums[q_k * 8]``."""
    store(sums, q0 * LANES, a0)
    store(sums, q1 * LANES, a1)
    store(sums, q2 * LANES, a2)
    store(sums, q3 * LANES, a3)
    store(sums, q4 * LANES, a4)
    store(sums, q5 * LANES, a5)


@helper(inline="always")
def _base(q, wo, sh, sw, wp):
    """Output position ``q``'s offset in the padded planes."""
    return (q // wo) * sh * wp + (q % wo) * sw


@helper(inline="always")
def _pair_sums(xp, wp, offsets, bias, sums, p, size, block, wo, sh, sw, wpad, origin):
    """The outputs of pair ``p`` (two blocks of eight channels) of one image (padded into
    ``xp``, its group's planes from ``origin``) into ``sums (2, Ho*Wo, 8)`` (flat),
    ``block`` taps at a time (their weights stay in L1 while every position passes; the sums
    carried in ``sums`` from one block of taps to the next, the bias added after the last),
    six positions at a time in order across rows (the last run repeats the last position).
    """
    taps = offsets.size
    last = size - 1
    zero = broadcast(F(0))
    s0 = load(bias, p * PAIR)
    s1 = load(bias, p * PAIR + LANES)
    for k0 in range(0, taps, block):
        k1 = min(k0 + block, taps)
        for q in range(0, size, RUN):
            q0, q1, q2 = q, min(q + 1, last), min(q + 2, last)
            q3, q4, q5 = min(q + 3, last), min(q + 4, last), min(q + 5, last)
            a0 = a1 = a2 = a3 = a4 = a5 = b0 = b1 = b2 = b3 = b4 = b5 = zero
            if k0 > 0:
                a0, a1, a2, a3, a4, a5 = _load6(sums, q0, q1, q2, q3, q4, q5)
                b0, b1, b2, b3, b4, b5 = _load6(sums, size + q0, size + q1, size + q2,
                                                size + q3, size + q4, size + q5)
            a0, a1, a2, a3, a4, a5, b0, b1, b2, b3, b4, b5 = _sums(
                xp, wp, offsets, k0, k1, (p * taps + k0) * PAIR,
                origin + _base(q0, wo, sh, sw, wpad), origin + _base(q1, wo, sh, sw, wpad),
                origin + _base(q2, wo, sh, sw, wpad), origin + _base(q3, wo, sh, sw, wpad),
                origin + _base(q4, wo, sh, sw, wpad), origin + _base(q5, wo, sh, sw, wpad),
                a0, a1, a2, a3, a4, a5, b0, b1, b2, b3, b4, b5)
            if k1 == taps:
                a0, a1, a2, a3, a4, a5 = (add(a0, s0), add(a1, s0), add(a2, s0),
                                          add(a3, s0), add(a4, s0), add(a5, s0))
                b0, b1, b2, b3, b4, b5 = (add(b0, s1), add(b1, s1), add(b2, s1),
                                          add(b3, s1), add(b4, s1), add(b5, s1))
            _store6(sums, q0, q1, q2, q3, q4, q5, a0, a1, a2, a3, a4, a5)
            _store6(sums, size + q0, size + q1, size + q2, size + q3, size + q4, size + q5,
                    b0, b1, b2, b3, b4, b5)


@helper(inline="always")
def _wide_sums(xp, wp, offsets, k0, k1, t, p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11,
               a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11):
    """:func:`_sums` with the sixteen channels in one ``WIDE`` vector: twelve positions'
    sums ``a_k`` (their bases ``p0 .. p11``), one weight load a tap."""
    for k in range(k0, k1):
        o = offsets[k]
        u = load_wide(wp, t)
        a0 = fma(u, broadcast_at_wide(xp, p0 + o), a0)
        a1 = fma(u, broadcast_at_wide(xp, p1 + o), a1)
        a2 = fma(u, broadcast_at_wide(xp, p2 + o), a2)
        a3 = fma(u, broadcast_at_wide(xp, p3 + o), a3)
        a4 = fma(u, broadcast_at_wide(xp, p4 + o), a4)
        a5 = fma(u, broadcast_at_wide(xp, p5 + o), a5)
        a6 = fma(u, broadcast_at_wide(xp, p6 + o), a6)
        a7 = fma(u, broadcast_at_wide(xp, p7 + o), a7)
        a8 = fma(u, broadcast_at_wide(xp, p8 + o), a8)
        a9 = fma(u, broadcast_at_wide(xp, p9 + o), a9)
        a10 = fma(u, broadcast_at_wide(xp, p10 + o), a10)
        a11 = fma(u, broadcast_at_wide(xp, p11 + o), a11)
        t += PAIR
    return a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11


@helper(inline="always")
def _wide_get(sums, size, q, first, zero):
    """Position ``q``'s partial sums, both halves of ``sums`` (``zero`` at the ``first``
    block of taps)."""
    if first:
        return zero
    return joined(load(sums, q * LANES), load(sums, (size + q) * LANES))


@helper(inline="always")
def _wide_put(sums, size, q, a, bias, done):
    """Position ``q``'s sums ``a`` into both halves of ``sums``, plus ``bias`` after the
    last block of taps (``done``)."""
    if done:
        a = add(a, bias)
    store(sums, q * LANES, low_half(a))
    store(sums, (size + q) * LANES, high_half(a))


@helper(inline="always")
def _wide_pair_sums(xp, wp, offsets, bias, sums, p, size, block, wo, sh, sw, wpad, origin):
    """:func:`_pair_sums` by :func:`_wide_sums`, ``WIDE_RUN`` positions at a time: each
    output the same chain of multiply-adds (the same bits) in half the instructions where
    a ``WIDE`` vector is one register."""
    taps = offsets.size
    last = size - 1
    zero = joined(broadcast(F(0)), broadcast(F(0)))
    s = load_wide(bias, p * PAIR)
    for k0 in range(0, taps, block):
        k1 = min(k0 + block, taps)
        first, done = k0 == 0, k1 == taps
        for q in range(0, size, WIDE_RUN):
            q0, q1, q2, q3 = q, min(q + 1, last), min(q + 2, last), min(q + 3, last)
            q4, q5, q6, q7 = (min(q + 4, last), min(q + 5, last), min(q + 6, last),
                              min(q + 7, last))
            q8, q9, q10, q11 = (min(q + 8, last), min(q + 9, last), min(q + 10, last),
                                min(q + 11, last))
            a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11 = _wide_sums(
                xp, wp, offsets, k0, k1, (p * taps + k0) * PAIR,
                origin + _base(q0, wo, sh, sw, wpad), origin + _base(q1, wo, sh, sw, wpad),
                origin + _base(q2, wo, sh, sw, wpad), origin + _base(q3, wo, sh, sw, wpad),
                origin + _base(q4, wo, sh, sw, wpad), origin + _base(q5, wo, sh, sw, wpad),
                origin + _base(q6, wo, sh, sw, wpad), origin + _base(q7, wo, sh, sw, wpad),
                origin + _base(q8, wo, sh, sw, wpad), origin + _base(q9, wo, sh, sw, wpad),
                origin + _base(q10, wo, sh, sw, wpad), origin + _base(q11, wo, sh, sw, wpad),
                _wide_get(sums, size, q0, first, zero), _wide_get(sums, size, q1, first, zero),
                _wide_get(sums, size, q2, first, zero), _wide_get(sums, size, q3, first, zero),
                _wide_get(sums, size, q4, first, zero), _wide_get(sums, size, q5, first, zero),
                _wide_get(sums, size, q6, first, zero), _wide_get(sums, size, q7, first, zero),
                _wide_get(sums, size, q8, first, zero), _wide_get(sums, size, q9, first, zero),
                _wide_get(sums, size, q10, first, zero), _wide_get(sums, size, q11, first, zero))
            _wide_put(sums, size, q0, a0, s, done)
            _wide_put(sums, size, q1, a1, s, done)
            _wide_put(sums, size, q2, a2, s, done)
            _wide_put(sums, size, q3, a3, s, done)
            _wide_put(sums, size, q4, a4, s, done)
            _wide_put(sums, size, q5, a5, s, done)
            _wide_put(sums, size, q6, a6, s, done)
            _wide_put(sums, size, q7, a7, s, done)
            _wide_put(sums, size, q8, a8, s, done)
            _wide_put(sums, size, q9, a9, s, done)
            _wide_put(sums, size, q10, a10, s, done)
            _wide_put(sums, size, q11, a11, s, done)


@helper(inline="always")
def _quad_sums(xp, wp, offsets, k0, k1, t, t2, base, a, c):
    """:func:`_wide_sums` of two pairs at once (weights from ``wp[t]`` and ``wp[t2]``) and
    twelve positions one after another in ``xp`` from ``base``: the twenty-four sums ``a +
    c`` (two tuples of twelve: a call of more than thirty arguments is one Numba cannot
    inline), each input value broadcast once for both pairs. The positions' addresses are
    ``base + o`` plus a constant, so that only one of them takes a register (twelve did:
    with twenty-four sums, LLVM then spilled both kinds)."""
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11 = a
    c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11 = c
    for k in range(k0, k1):
        o = base + offsets[k]
        u, v = load_wide(wp, t), load_wide(wp, t2)
        x = broadcast_at_wide(xp, o)
        a0, c0 = fma(u, x, a0), fma(v, x, c0)
        x = broadcast_at_wide(xp, o + 1)
        a1, c1 = fma(u, x, a1), fma(v, x, c1)
        x = broadcast_at_wide(xp, o + 2)
        a2, c2 = fma(u, x, a2), fma(v, x, c2)
        x = broadcast_at_wide(xp, o + 3)
        a3, c3 = fma(u, x, a3), fma(v, x, c3)
        x = broadcast_at_wide(xp, o + 4)
        a4, c4 = fma(u, x, a4), fma(v, x, c4)
        x = broadcast_at_wide(xp, o + 5)
        a5, c5 = fma(u, x, a5), fma(v, x, c5)
        x = broadcast_at_wide(xp, o + 6)
        a6, c6 = fma(u, x, a6), fma(v, x, c6)
        x = broadcast_at_wide(xp, o + 7)
        a7, c7 = fma(u, x, a7), fma(v, x, c7)
        x = broadcast_at_wide(xp, o + 8)
        a8, c8 = fma(u, x, a8), fma(v, x, c8)
        x = broadcast_at_wide(xp, o + 9)
        a9, c9 = fma(u, x, a9), fma(v, x, c9)
        x = broadcast_at_wide(xp, o + 10)
        a10, c10 = fma(u, x, a10), fma(v, x, c10)
        x = broadcast_at_wide(xp, o + 11)
        a11, c11 = fma(u, x, a11), fma(v, x, c11)
        t += PAIR
        t2 += PAIR
    return (a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11,
            c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11)


@helper(inline="always")
def _seven(sums, size, q, first, zero):
    """:func:`_wide_get` of positions ``q .. q + 6``."""
    return (_wide_get(sums, size, q, first, zero), _wide_get(sums, size, q + 1, first, zero),
            _wide_get(sums, size, q + 2, first, zero),
            _wide_get(sums, size, q + 3, first, zero),
            _wide_get(sums, size, q + 4, first, zero),
            _wide_get(sums, size, q + 5, first, zero),
            _wide_get(sums, size, q + 6, first, zero))


@helper(inline="always")
def _twelve(sums, size, q, first, zero):
    """:func:`_wide_get` of positions ``q .. q + 11`` (``q + 5`` and ``q + 6`` read twice:
    the same loads, which LLVM merges)."""
    return _seven(sums, size, q, first, zero) + _seven(sums, size, q + 5, first, zero)[2:]


@helper(inline="always")
def _put_run(sums, size, q, a, s, done):
    """:func:`_wide_put` of positions ``q, q + 1, ...``, their sums the tuple ``a``."""
    for k in range(len(a)):
        _wide_put(sums, size, q + k, a[k], s, done)


@helper(**_OWN)
def _quad_pair_sums(xp, wp, offsets, bias, sums, p, size, block):
    """:func:`_wide_pair_sums` of pairs ``p`` and ``p + 1`` of a conv of one group by
    :func:`_quad_sums`, on the grid of the padded planes' phases (at stride 1 the padded
    planes: :func:`grid_offsets`): position ``q`` is the output at row ``q // Wq``, column
    ``q % Wq`` (``Wq`` a phase's width; columns past ``Wo`` are summed too and never
    read), so that its input lies at ``xp[q + offset]`` and a run of
    twelve positions is twelve neighbours, whatever rows it crosses. ``size`` grid
    positions (a multiple of twelve) into ``sums (4, size, 8)``. Twenty-four multiply-adds
    a tap for two weight loads and twelve broadcasts (one pair's twelve take one and
    twelve); each output the same chain of multiply-adds as there (the same bits)."""
    taps = offsets.size
    zero = joined(broadcast(F(0)), broadcast(F(0)))
    s, s2 = load_wide(bias, p * PAIR), load_wide(bias, (p + 1) * PAIR)
    for k0 in range(0, taps, block):
        k1 = min(k0 + block, taps)
        first, done = k0 == 0, k1 == taps
        for q in range(0, size, WIDE_RUN):
            (a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11,
             c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11) = _quad_sums(
                xp, wp, offsets, k0, k1, (p * taps + k0) * PAIR, ((p + 1) * taps + k0) * PAIR,
                q, _twelve(sums, size, q, first, zero),
                _twelve(sums, size, 2 * size + q, first, zero))
            _put_run(sums, size, q, (a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11), s,
                     done)
            _put_run(sums, size, 2 * size + q, (c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10,
                                                c11), s2, done)


@helper(inline="always")
def _fma3(u, v, w, x, a, c, e):
    """The sums ``a, c, e`` plus ``x`` times the weight vectors ``u, v, w``."""
    return fma(u, x, a), fma(v, x, c), fma(w, x, e)


@helper(inline="always")
def _row_sums(xp, wp, offsets, k0, k1, t, t2, t3, base, a, c, e):
    """:func:`_quad_sums` of three pairs (weights from ``wp[t]``, ``wp[t2]``, ``wp[t3]``)
    and ``ROW_RUN`` positions one after another in ``xp`` from ``base``: the twenty-one
    sums ``a + c + e`` (three tuples of seven), each input value broadcast once for the
    three pairs: twenty-one multiply-adds a tap for three weight loads and seven
    broadcasts (two pairs' twenty-four take two and twelve)."""
    a0, a1, a2, a3, a4, a5, a6 = a
    c0, c1, c2, c3, c4, c5, c6 = c
    e0, e1, e2, e3, e4, e5, e6 = e
    for k in range(k0, k1):
        o = base + offsets[k]
        u, v, w = load_wide(wp, t), load_wide(wp, t2), load_wide(wp, t3)
        a0, c0, e0 = _fma3(u, v, w, broadcast_at_wide(xp, o), a0, c0, e0)
        a1, c1, e1 = _fma3(u, v, w, broadcast_at_wide(xp, o + 1), a1, c1, e1)
        a2, c2, e2 = _fma3(u, v, w, broadcast_at_wide(xp, o + 2), a2, c2, e2)
        a3, c3, e3 = _fma3(u, v, w, broadcast_at_wide(xp, o + 3), a3, c3, e3)
        a4, c4, e4 = _fma3(u, v, w, broadcast_at_wide(xp, o + 4), a4, c4, e4)
        a5, c5, e5 = _fma3(u, v, w, broadcast_at_wide(xp, o + 5), a5, c5, e5)
        a6, c6, e6 = _fma3(u, v, w, broadcast_at_wide(xp, o + 6), a6, c6, e6)
        t += PAIR
        t2 += PAIR
        t3 += PAIR
    return (a0, a1, a2, a3, a4, a5, a6), (c0, c1, c2, c3, c4, c5, c6), (e0, e1, e2, e3, e4,
                                                                         e5, e6)


@helper(**_OWN)
def _row_pair_sums(xp, wp, offsets, bias, sums, p, p2, p3, ho, wo, wq, span, block):
    """The outputs of pairs ``p``, ``p2`` and ``p3`` of a conv of one group by
    :func:`_row_sums`, on the grid of the padded planes' phases (``wq`` columns a row, as
    :func:`_quad_pair_sums`) in runs of ``ROW_RUN`` positions of one row each: row ``y``'s
    runs from column 0 to ``span`` (``Wo`` rounded up to runs; the columns past ``Wo``
    summed too, reading on into the next row, and never read) into ``sums (6, Ho*span,
    8)``. No run crosses a row, so that a 7x7 plane sums 49 positions where the grid of
    nine columns a row sums 72; each output the same chain of multiply-adds as one
    pair's (the same bits)."""
    taps, size = offsets.size, ho * span
    zero = joined(broadcast(F(0)), broadcast(F(0)))
    s, s2, s3 = (load_wide(bias, p * PAIR), load_wide(bias, p2 * PAIR),
                 load_wide(bias, p3 * PAIR))
    for k0 in range(0, taps, block):
        k1 = min(k0 + block, taps)
        first, done = k0 == 0, k1 == taps
        for y in range(ho):
            for x0 in range(0, wo, ROW_RUN):
                q = y * span + x0
                a, c, e = _row_sums(xp, wp, offsets, k0, k1, (p * taps + k0) * PAIR,
                                    (p2 * taps + k0) * PAIR, (p3 * taps + k0) * PAIR,
                                    y * wq + x0, _seven(sums, size, q, first, zero),
                                    _seven(sums, size, 2 * size + q, first, zero),
                                    _seven(sums, size, 4 * size + q, first, zero))
                _put_run(sums, size, q, a, s, done)
                _put_run(sums, size, 2 * size + q, c, s2, done)
                _put_run(sums, size, 4 * size + q, e, s3, done)


@helper(inline="always")
def _run_of_seven(u, xp, o, a):
    """The sums ``a`` (a tuple of seven) of the positions whose inputs lie at ``xp[o]``,
    ``xp[o + 1]``, ... plus each input times the weight vector ``u``."""
    a0, a1, a2, a3, a4, a5, a6 = a
    return (fma(u, broadcast_at_wide(xp, o), a0), fma(u, broadcast_at_wide(xp, o + 1), a1),
            fma(u, broadcast_at_wide(xp, o + 2), a2), fma(u, broadcast_at_wide(xp, o + 3), a3),
            fma(u, broadcast_at_wide(xp, o + 4), a4), fma(u, broadcast_at_wide(xp, o + 5), a5),
            fma(u, broadcast_at_wide(xp, o + 6), a6))


@helper(inline="always")
def _two_row_sums(xp, wp, offsets, k0, k1, t, base, wq, a, c):
    """:func:`_row_sums` of one pair (weights from ``wp[t]``) on two runs of ``ROW_RUN``
    positions, one from ``base`` in ``xp`` and one a row (``wq``) below it: the fourteen
    sums ``a + c`` (two tuples of seven), one weight load and fourteen broadcasts a tap,
    their addresses two registers plus constants."""
    for k in range(k0, k1):
        o = base + offsets[k]
        u = load_wide(wp, t)
        a = _run_of_seven(u, xp, o, a)
        c = _run_of_seven(u, xp, o + wq, c)
        t += PAIR
    return a, c


@helper(**_OWN)
def _two_row_pair_sums(xp, wp, offsets, bias, sums, p, ho, wo, wq, span, block, origin):
    """The outputs of pair ``p`` (its group's planes from ``origin``) by
    :func:`_two_row_sums`, on the grid of the padded planes' phases (``wq`` columns a row,
    as :func:`_row_pair_sums`), two rows at a time in runs of ``ROW_RUN`` positions (the
    columns past ``Wo`` and, where ``Ho`` is odd, a row past the last summed too and never
    read) into ``sums (2, rows*span, 8)`` (``rows``: ``Ho`` rounded up to even). For a
    group of one pair, whose item cannot share broadcasts with another pair: a 7x7 plane
    sums 56 positions where twelve at a time across rows sum 60 with twelve address
    registers (:func:`_wide_pair_sums`). Each output the same chain of multiply-adds as
    there (the same bits)."""
    taps, size = offsets.size, -(-ho // 2) * 2 * span
    zero = joined(broadcast(F(0)), broadcast(F(0)))
    s = load_wide(bias, p * PAIR)
    for k0 in range(0, taps, block):
        k1 = min(k0 + block, taps)
        first, done = k0 == 0, k1 == taps
        for y in range(0, ho, 2):
            for x0 in range(0, wo, ROW_RUN):
                q = y * span + x0
                a, c = _two_row_sums(xp, wp, offsets, k0, k1, (p * taps + k0) * PAIR,
                                     origin + y * wq + x0, wq,
                                     _seven(sums, size, q, first, zero),
                                     _seven(sums, size, q + span, first, zero))
                _put_run(sums, size, q, a, s, done)
                _put_run(sums, size, q + span, c, s, done)


@helper
def pad_phases(x, base, channels, height, width, xp, hq, wq, sh, sw, top, left):
    """Planes ``base + c * height * width`` of the flat ``x``, bordered by ``top`` rows and
    ``left`` columns of zeros, split into their ``sh * sw`` phases: plane ``(c, a, b)`` of
    ``xp (C, sh, sw, hq, wq)`` holds the bordered plane's rows ``a, a + sh, ...`` and columns
    ``b, b + sw, ...``, so that a conv of stride ``(sh, sw)`` reads each phase at stride 1
    (:func:`grid_offsets`). What lies outside ``x`` is never written: it stays zero.

    At ``sw == 2`` one loop writes a row's two column phases from each pair of neighbours,
    which LLVM turns into vector loads and shuffles: a loop a phase of every other element
    took 1.3-1.6x the time (a stride-2 conv's copy of 64 channels of 56x56: 0.086 ms of its
    0.9, now 0.055). Bordered column ``u = s + left`` of source column ``s`` is phase ``u %
    2``'s column ``u // 2``; the pairs start at the first source column of an even one."""
    s0 = left % 2
    p0 = (s0 + left) // 2
    n = max(0, min((width - s0) // 2, wq - p0))         # (the whole pairs)
    last = (width - 1 + left) // 2 if (width - s0) % 2 == 1 else wq     # (a spare column)
    for c in range(channels):
        for a in range(sh):
            for r in range(hq):
                y = r * sh + a - top
                if y < 0 or y >= height:
                    continue
                row = x[base + (c * height + y) * width:base + (c * height + y + 1) * width]
                if sw == 2:     # (both column phases in one pass)
                    dst = ((c * sh + a) * 2 * hq + r) * wq
                    even, odd = xp[dst:dst + wq], xp[dst + hq * wq:dst + (hq + 1) * wq]
                    src, e, o = row[s0:s0 + 2 * n], even[p0:p0 + n], odd[p0:p0 + n]
                    for m in range(n):
                        e[m] = src[2 * m]
                        o[m] = src[2 * m + 1]
                    # (column 0 where it lies at an odd bordered column, and a last
                    # column at an even one, through ``xp`` and ``x``: stored through
                    # ``odd`` and ``even``, LLVM no longer vectorised the loop, 3x the time)
                    if s0 == 1 and left // 2 < wq:
                        xp[dst + hq * wq + left // 2] = x[base + (c * height + y) * width]
                    if last < wq:
                        xp[dst + last] = x[base + (c * height + y + 1) * width - 1]
                    continue
                for b in range(sw):
                    v0 = max(0, -((b - left) // sw))       # (the first column in ``x``)
                    v1 = min(wq, (width - 1 + left - b) // sw + 1)
                    if v1 <= v0:
                        continue
                    dst = (((c * sh + a) * sw + b) * hq + r) * wq
                    into, src = xp[dst + v0:dst + v1], row[v0 * sw + b - left:]
                    for v in range(v1 - v0):
                        into[v] = src[v * sw]


@loop(fastmath={"contract"})
def _forward(start, stop, x, wp, offsets, bias, out, residual, scratch, acc, act, lo, hi,
             where, channels, height, width, cout, ho, wo, sh, sw, top, left, hp, wpad,
             block, groups, ostride, mode):
    """Work items ``start * T // W : stop * T // W`` (``W = acc.shape[0]`` slots, ``T``
    items: each image's pairs of channel blocks) of the flat ``out (N, Cout, Ho, Wo)``
    (image ``n`` from ``n * ostride``: ``kernels.out_images``; by ``mode``: ``NARROW``
    by :func:`_pair_sums`, ``WIDE_PAIR`` by :func:`_wide_pair_sums`, ``WIDE_PAIRS`` two
    pairs an item by :func:`_quad_pair_sums`, in one group, ``acc`` rows of ``4 Ho*Wo``
    groups of eight; ``WIDE_ROWS`` three by :func:`_row_pair_sums`, those left over
    alone as ``WIDE_ROW_PAIR``'s; ``WIDE_ROW_PAIR`` one
    on runs of two rows by :func:`_two_row_pair_sums`):
    the conv of the flat ``x (N, C, H, W)`` with the packed ``wp (pairs, C*kh*kw, 16)``
    (flat; tap ``t`` at ``offsets[t]`` in the padded planes of its group, ``groups`` of
    ``Cout/G`` outputs each, padded to whole pairs: :func:`pack`) and ``bias (pairs*16,)``
    (padded as the weight),
    with ``conv_lanes.finish``'s epilogue (``residual`` flat like ``out``). A slot pads
    each image it meets once (at batch 1 every slot pads the one image) into its row of
    ``scratch``, whose border the caller has zeroed (:func:`fitted`)."""
    pairs = wp.size // (offsets.size * PAIR)
    size, plane = ho * wo, height * width
    # (a group's planes: padded, or split into phases for ``_two_row_pair_sums``)
    phases = sh * sw if mode == WIDE_ROW_PAIR else 1
    group_pairs, group_planes = pairs // groups, channels // groups * phases * hp * wpad
    images = x.size // (channels * plane)
    rows, cols = min(height, hp - top), min(width, wpad - left)
    per = 3 if mode == WIDE_ROWS else 2 if mode == WIDE_PAIRS else 1     # pairs an item
    span = -(-wo // ROW_RUN) * ROW_RUN             # (a row of ``_row_pair_sums``)
    # the positions of the grid modes (``_quad_pair_sums``, ``_row_pair_sums``,
    # ``_two_row_pair_sums``) and their rows' pitch
    lone = -(-ho // 2) * 2 * span                  # (``_two_row_pair_sums``')
    grid = (ho * span if per == 3 else lone if mode == WIDE_ROW_PAIR
            else -(-ho * wpad // WIDE_RUN) * WIDE_RUN)
    pitch = span if per == 3 or mode == WIDE_ROW_PAIR else wpad
    # (an image's items: ``per`` pairs each, then each pair left over alone)
    units = pairs // per + pairs % per
    total = images * units
    for slot in range(start, stop):
        xp, sums = scratch[slot], acc[slot]
        padded = -1
        for item in range(slot * total // acc.shape[0], (slot + 1) * total // acc.shape[0]):
            n, u = item // units, item % units
            whole = u < pairs // per
            p = u * per if whole else pairs // per * per + u - pairs // per
            count = per if whole else 1         # (the item's pairs)
            if n != padded and mode >= WIDE_PAIRS and sh * sw > 1:
                pad_phases(x, n * channels * plane, channels, height, width, xp, hp, wpad,
                           sh, sw, top, left)
            elif n != padded:
                pad_image(x, n * channels * plane, channels, rows, cols, width, height, xp,
                          hp, wpad, top, left)
            padded = n
            on_grid = per == 3 or count == 2 or mode == WIDE_ROW_PAIR
            at = lone if per == 3 and count == 1 else grid   # (the item's positions)
            if count == 3:
                _row_pair_sums(xp, wp, offsets, bias, sums, p, p + 1, p + 2, ho, wo, wpad,
                               span, block)
            elif mode == WIDE_ROW_PAIR or per == 3:     # (or a pair left from the threes)
                _two_row_pair_sums(xp, wp, offsets, bias, sums, p, ho, wo, wpad, span, block,
                                   p // group_pairs * group_planes)
            elif on_grid:
                _quad_pair_sums(xp, wp, offsets, bias, sums, p, grid, block)
            elif mode == NARROW:
                _pair_sums(xp, wp, offsets, bias, sums, p, size, block, wo, sh, sw, wpad,
                           p // group_pairs * group_planes)
            elif per == 1:
                _wide_pair_sums(xp, wp, offsets, bias, sums, p, size, block, wo, sh, sw,
                                wpad, p // group_pairs * group_planes)
            else:       # (a spare pair of WIDE_PAIRS: stride 1 on the phases' grid)
                _wide_pair_sums(xp, wp, offsets, bias, sums, p, size, block, wo, 1, 1, wpad,
                                0)
            # (the pair's first output channel and how many it has: its group's outputs
            # padded to whole pairs, ``pack``; the modes of several pairs an item take one
            # group only)
            local = p % group_pairs * PAIR
            channel = p // group_pairs * (cout // groups) + local
            channels2 = min(PAIR * count, cout // groups - local)
            halves = -(-channels2 // LANES)
            if where == 0:
                _activate(sums[:halves * (at if on_grid else size) * LANES], act, lo, hi)
            for h in range(halves):
                lanes = min(LANES, channels2 - h * LANES)
                first = (channel + h * LANES) * size
                base = n * ostride + first
                if on_grid and pitch != wo:     # (row by row, from the grid)
                    for y in range(ho):
                        _interleave(out, base + y * wo, size, lanes,
                                    sums[(h * at + y * pitch) * LANES:], wo, False)
                else:   # (a grid of rows of ``Wo`` is the plane: 8x8 transposes across rows)
                    _interleave(out, base, size, lanes,
                                sums[h * (at if on_grid else size) * LANES:], size, False)
                if where != 0:
                    for c in range(lanes):
                        q, r = base + c * size, n * cout * size + first + c * size
                        finish(out[q:q + size], residual[r:r + size], where, act, lo, hi)


def wide() -> bool:
    """Whether the loop sums a pair's sixteen channels in one ``WIDE`` vector, twelve
    positions at a time (:func:`_wide_pair_sums`): where the loops are compiled with
    AVX-512 run at full width (``isa.full_width``), whose one register then holds them,
    where the eight-lane pair takes two and twice the multiply-adds."""
    return isa.full_width()


def rows_wide() -> bool:
    """Whether three pairs an item on runs of a row (``WIDE_ROWS``: :func:`_row_pair_sums`,
    sixteen-lane vectors) run where the loops are not :func:`wide` but have AVX-512's 32
    registers at half width (Zen 4: each sixteen-lane multiply-add two halves), where
    ``Plan.rows`` takes the shape. There the three pairs' 21 sums took 0.80-0.92x the
    eight-lane pair's time (7x7 outputs of 48-512 channels, stride 1 and 2, 3x3 and 5x5;
    docs/benchmarks.md, 2026-12-06 "fire modules"), where on larger planes the grid's two
    pairs (``WIDE_PAIRS``) took 1.02-1.05x: a seven-position row's sums need fewer
    address registers and loads a multiply-add than six positions across rows."""
    return isa.vector_registers() >= 32


def padded_width(cout: int, groups: int = 1) -> int:
    """The output channels of a group in :func:`pack`'s layout: ``Cout/G`` up to whole
    pairs, so that no pair holds two groups' channels."""
    return -(-(cout // groups) // PAIR) * PAIR


def pack(w: np.ndarray, groups: int = 1) -> np.ndarray:
    """The weight ``(Cout, C/G, kh, kw)`` of ``groups`` as ``(pairs, C/G*kh*kw, 16)``
    float32: pair ``p``'s sixteen output channels side by side for each tap, each group's
    ``Cout/G`` channels followed by zeros up to whole pairs (:func:`padded_width`).

    >>> pack(np.ones((3, 2, 1, 1), np.float32)).shape
    (1, 2, 16)
    >>> pack(np.ones((24, 2, 3, 3), np.float32), groups=3).shape    # (8 outputs a group)
    (3, 18, 16)
    """
    cout, width = w.shape[0], padded_width(w.shape[0], groups)
    packed = np.zeros((groups, width, math.prod(w.shape[1:])), F)
    packed[:, :cout // groups] = w.reshape(groups, cout // groups, -1)
    return np.ascontiguousarray(packed.reshape(-1, PAIR, packed.shape[2]).transpose(0, 2, 1))


def unpack(packed: np.ndarray, w_shape, groups: int = 1) -> np.ndarray:
    """:func:`pack`'s inverse: the ``(Cout, C/G, kh, kw)`` weight."""
    cout = w_shape[0]
    planes = packed.transpose(0, 2, 1).reshape(groups, -1, packed.shape[1])
    return np.ascontiguousarray(planes[:, :cout // groups]).reshape(w_shape)


class Plan(NamedTuple):
    """What a conv of one geometry needs besides its arrays, worked out once."""
    offsets: np.ndarray     # each tap's offset in the padded planes
    hp: int                 # padded planes' rows and columns
    wp: int
    block: int              # taps summed before the sums are stored and taken up again
    grid_offsets: np.ndarray    # ... in the phases' planes (``WIDE_PAIRS``: :func:`pad_phases`)
    hq: int                 # a phase's rows and columns
    wq: int
    grid_scratch: int       # the phases' planes and what a grid's last run reads past them
    rows: bool              # whether three pairs an item on runs of a row sum fewer positions
    row_pair: bool          # whether one pair an item on runs of two rows sums fewer ones


def plan(x_shape, w_shape, out_hw, stride, dilation) -> Plan:
    """The :class:`Plan` of a conv of ``x_shape`` by ``w_shape`` to ``out_hw`` (the taps'
    offsets: those of one group's ``w_shape[1]`` channels). Three pairs an item on runs of
    a row (``WIDE_ROWS``) where they sum fewer positions times pairs than two on the grid
    (``WIDE_PAIRS``), each at ``ROW_COST`` of the grid's: a grid of ``Wq`` columns a row
    drops ``Wq - Wo`` of them, runs of ``ROW_RUN`` drop none where ``Wo`` is a multiple of
    seven (7x7 planes: 49 positions a pair where the grid of nine columns sums 72), and a
    pair or two left over from the threes are summed alone on runs of two rows (``Ho``
    rounded up to even: 56 positions of a 7x7 plane, where a three of the pair and two
    copies of it summed 147). One pair an item on runs of two rows
    (``WIDE_ROW_PAIR``) at stride 1 where it sums fewer positions (at ``ROW_PAIR_COST``)
    than twelve at a time across rows: rows of whole runs of seven (at stride 2 the image
    is split into phases first, which cost more than the positions saved)."""
    c, (kh, kw), (ho, wo) = w_shape[1], w_shape[2:], out_hw
    hp, wp = _planes(ho, wo, (kh, kw), stride, dilation)
    block = kh * kw * max(1, BLOCK_BYTES // (4 * PAIR * kh * kw))
    hq, wq = ho + (kh - 1) * dilation[0] // stride[0], wo + (kw - 1) * dilation[1] // stride[1]
    grid = grid_offsets(c, (kh, kw), tuple(stride), tuple(dilation), hq, wq)
    phased, span = -(-ho * wq // WIDE_RUN) * WIDE_RUN, -(-wo // ROW_RUN) * ROW_RUN
    even = -(-ho // 2) * 2      # (the rows of ``_two_row_pair_sums``)
    scratch = max(c * stride[0] * stride[1] * hq * wq, phased + int(grid.max()),
                  (even - 1) * wq + span + int(grid.max()))
    pairs = -(-w_shape[0] // PAIR)
    rows = pairs >= 3 and (ROW_COST * span * (3 * ho * (pairs // 3) + even * (pairs % 3))
                           < phased * -(-pairs // 2) * 2)
    row_pair = (tuple(stride) == (1, 1)
                and ROW_PAIR_COST * even * span < -(-ho * wo // WIDE_RUN) * WIDE_RUN)
    return Plan(_offsets(c, (kh, kw), dilation, hp, wp), hp, wp, block, grid, hq, wq, scratch,
                rows, row_pair)


@lru_cache(maxsize=256)
def grid_offsets(c, kernel, stride, dilation, hq, wq):
    """Each tap ``(c, i, j)``'s offset in the phases' planes ``(C, sh, sw, hq, wq)``
    (:func:`pad_phases`), int64: the bordered plane's row ``sh * y + i * dh`` is row ``y +
    i * dh // sh`` of phase ``i * dh % sh``, so that output ``(y, x)`` reads tap ``t`` at
    ``y * wq + x + offsets[t]``: a stride-1 conv on the grid of ``wq`` columns, whatever
    the stride (at stride 1 the one phase is the bordered plane: ``_offsets``)."""
    ci, ii, jj = np.meshgrid(np.arange(c), np.arange(kernel[0]) * dilation[0],
                             np.arange(kernel[1]) * dilation[1], indexing="ij")
    phase = (ci * stride[0] + ii % stride[0]) * stride[1] + jj % stride[1]
    return ((phase * hq + ii // stride[0]) * wq + jj // stride[1]).reshape(-1).astype(np.int64)


def packed_wins(x_shape, w_shape, padding, groups, dtype) -> bool:
    """Whether :func:`conv` takes a conv whose weight is packed once: float32, one group
    or groups whose pairs are busy enough (:func:`groups_fit`), no negative
    padding, at least sixteen output channels (a packed pair: fewer leave
    lanes idle), a kernel larger than 1x1 (a 1x1 conv's GEMM on the input as it is, no
    copy, measured 1.3-1.4x faster), and of an image's first layers (at most
    ``conv_shallow.MAX_CHANNELS`` input channels) those that ``conv_outlanes`` declines
    (many weights a position: a 3-channel 7x7 stride-2 stem, 11x11 stride 4, 5x5; there
    the packed loop's twelve sums took 0.71-0.93x ``conv_shallow``'s eight, where the
    few-weight ones ran 0.72-1.0x the packed time in ``conv_outlanes`` at batch 1:
    docs/benchmarks.md, 2026-12-04 "stems"). Measured against each path it replaces on 3x3
    layers of 16-512 channels, 7x7 to 56x56 planes, stride 1 and 2, and 5x5 layers:
    0.5-1.0x their time (docs/benchmarks.md, "packed weights")."""
    return (np.dtype(dtype) == np.float32 and groups_fit(w_shape, groups)
            and w_shape[0] >= PAIR
            and w_shape[2] * w_shape[3] > 1 and min(min(p) for p in padding) >= 0
            and numba_available()
            and (x_shape[1] > MAX_CHANNELS
                 or not conv_outlanes.wanted(x_shape, w_shape, padding, groups, dtype)))


def groups_fit(w_shape, groups) -> bool:
    """Whether the loop takes a conv of ``groups`` with weight ``w_shape``: one group, or
    several of more than one input channel (one is a depthwise conv's) whose pairs have at
    least half their lanes busy (a group of ``Cout/G`` outputs takes :func:`padded_width`'s),
    where it beat ``conv_direct``'s loop, which reloads each input plane once per output
    channel. On sixteen-lane vectors (:func:`wide`) 1.6-1.8x faster at sixteen and
    thirty-two outputs a group, 1.4-1.5x at 24 and 40, 1.1x at 8 (docs/benchmarks.md,
    "grouped convs of any width"); on eight lanes (Zen 4) 1.8-2.3x at sixteen at stride 1
    and 2 on 56x56 and 112x112 planes, 1.4-2.1x at 24 and 40, 1.0-1.4x at 8, batch 1 and
    16 (docs/benchmarks.md, issue 26 i-regnet4). At four outputs a group the direct loop
    took half the time on either width."""
    if groups == 1:
        return True
    return w_shape[1] > 1 and 2 * (w_shape[0] // groups) >= padded_width(w_shape[0], groups)


def conv(x, packed, out, stride, padding, dilation, bias, kernel, plan_=None, residual=None,
         where=0, act=0, lo=-np.inf, hi=np.inf, groups=1):
    """``out (N, Cout, Ho, Wo)`` = the conv of ``x (N, C, H, W)`` with the weight of
    ``kernel = (kh, kw)`` packed by :func:`pack` and ``bias (Cout,)`` (float32,
    :func:`packed_wins`), in ``groups``, with ``conv_tiles.conv``'s epilogue arguments
    (``out`` may be a concatenation's block of channels: ``kernels.out_images``);
    ``plan_`` the geometry's :func:`plan` where the caller keeps it. Returns ``out``."""
    run = fitted(np.shape(x), out.shape, stride, padding, dilation, kernel, plan_,
                 residual is not None, where, act, lo, hi, groups)
    return run(x, packed, bias, out, residual)


def fitted(x_shape, out_shape, stride, padding, dilation, kernel, plan_=None,
           residual=False, where=0, act=0, lo=-np.inf, hi=np.inf, groups=1):
    """``run(x, packed, bias, out, residual=None)``: :func:`conv` fitted to the shapes,
    what depends on them alone (the plan, threads and mode, the scratch, the padded bias's
    buffer, the loop's compiled entry) worked out once: a compiled graph's call of a
    conv on a small plane spent ~18 us in that Python and Numba's type dispatch. A call
    at a time (the scratch and the bias's buffer are the closure's)."""
    n, c, h, wd = x_shape
    cout, ho, wo = out_shape[1:]
    p = plan_ or plan(x_shape, (cout, c // groups, *kernel), (ho, wo), stride, dilation)
    b = np.zeros((groups, padded_width(cout, groups)), F)
    pairs = b.size // PAIR
    workers = max(1, min(n * pairs, threads_for(n * cout * ho * wo * c // groups * kernel[0]
                                                * kernel[1]) or cores()))
    rows = groups == 1 and p.rows and n * (pairs // 3) >= workers
    mode = (WIDE_ROWS if rows and (wide() or rows_wide())
            else NARROW if not wide()
            else WIDE_PAIRS if groups == 1 and n * (pairs // 2) >= workers
            else WIDE_ROW_PAIR if p.row_pair else WIDE_PAIR)
    grid = mode >= WIDE_PAIRS
    offsets, hp, wp = (p.grid_offsets, p.hq, p.wq) if grid else (p.offsets, p.hp, p.wp)
    # (a grid's last run reads past the planes: zeros; the groups before the last are
    # whole phases' planes)
    group = c // groups * stride[0] * stride[1] * p.hq * p.wq
    # (zeroed once: the copies, ``pad_image`` and ``pad_phases``, write only the planes'
    # inside, the same places at every call, so the border stays zero; zeroing the buffer
    # at every call wrote all of it, as large as the input, inside a model from memory)
    scratch = np.zeros((workers, (groups - 1) * group + p.grid_scratch if grid
                        else c * hp * wp), F)
    span = -(-wo // ROW_RUN) * ROW_RUN
    acc = np.empty((workers, 3 * PAIR * ho * span if mode == WIDE_ROWS
                    else PAIR * -(-ho // 2) * 2 * span if mode == WIDE_ROW_PAIR
                    else 2 * PAIR * -(-ho * wp // WIDE_RUN) * WIDE_RUN if grid
                    else PAIR * ho * wo), F)
    geometry = (act, F(lo), F(hi), where, c, h, wd, cout, ho, wo,
                stride[0], stride[1], padding[0][0], padding[1][0], hp, wp, p.block, groups)
    no_residual, entry = np.zeros(1, F), []

    def run(x, packed, bias, out, residual=None):
        b[:, :cout // groups] = np.reshape(bias, (groups, -1))
        res = (no_residual if residual is None
               else np.ascontiguousarray(residual, F).reshape(-1))
        flat_out, ostride = out_images(out)
        run_kept(_forward, workers, entry, np.ascontiguousarray(x, F).reshape(-1),
                 packed.reshape(-1), offsets, b.reshape(-1), flat_out, res, scratch, acc,
                 *geometry, ostride, mode)
        return out
    return run
