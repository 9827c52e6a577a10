"""1x1 convolutions (stride 1, no padding, one group, float32) on a weight packed once
(``conv_packed.pack``'s ``(pairs, C, 16)``), as a GEMM micro-kernel with the output
positions in the lanes of the vectors: no call of OpenBLAS, so no packing of the weight
at every call, and the epilogue on each block while it is in L1.

An image's 1x1 conv is ``out (Cout, H*W) = w (Cout, C) @ x (C, H*W)``; in NCHW both ``x``
and ``out`` have the positions contiguous. So eight channels by three vectors of eight
positions are 24 vector sums (the register block: 24 of the 32 ``ymm`` registers AVX-512
gives, with the three input vectors and a broadcast): per input channel ``k``, three input
vectors are loaded from row ``k`` of ``x`` and each of the eight channels' weights
broadcast from the packed row (eight consecutive floats of the pair's sixteen), 24
multiply-adds. A CPU with 16 vector registers (AVX2) would spill those sums, so there the
loop runs the eight channels as two halves of four, twelve sums each. Where the CPU runs
sixteen-lane vectors at full width (AVX-512 on Intel: ``isa.full_width``) the same 24
sums are ``zmm`` vectors of sixteen positions, 48 positions a block: per input channel
the same three loads, eight broadcasts and 24 multiply-adds, each on twice the positions
(0.7-0.8x the eight-lane time on 7x7 to 56x56 planes; docs/benchmarks.md, "sixteen-lane
1x1 convs"). The helpers are written once for both widths (the lanes of the zero
vector the sums start from: ``simd.load_like``); :func:`block_sums` chooses by the CPU
the loop is compiled for (``isa.py``). OpenBLAS packs both operands at
every call: on 7x7 and 14x14 planes, where the weight is as large as the activations
(1280 x 320 against 320 x 49), that packing and its small-``N`` edge kernels cost as much
as a third of the product.

A work item is an image's chunk of ``CHUNK`` positions and a group of the output
channels' blocks of eight: one group where the images have four chunks a thread or more,
else a group a thread, so that batch 1 on a 7x7 or 14x14 plane (one chunk, or a chunk
and a sliver) still gives every thread the same share.
Its input channels are taken ``KC`` at a time (the chunk's ``KC`` input rows stay in L1
while every block of eight channels passes over them); the sums go to the output and are
taken up again for the next ``KC`` channels (float32 either way: each output is one chain
of multiply-adds over ``k = 0 .. C-1`` in order, whatever the chunk, block or thread, so
the bits do not depend on them). Where a chunk's rows of every input channel fit a
quarter of L2 (a cached input on a small plane: :func:`rows_a_block`), all of them are one
block, the sums kept in registers from the first input channel to the last and the rows
read from L2 at a constant stride. The chunk's positions are taken 48 then 16 at a time
(sixteen lanes), or 24 (eight lanes), then 8 at a time;
its last few (fewer than eight: one of a 7x7 plane's 49) turn the block around, the
channels in the lanes (:func:`_column`): a position's input value broadcast and the
packed rows of eight blocks of channels loaded as they are, eight sums over every input
channel at once. With the positions in the lanes, a lone position would take a block's
eight broadcasts and multiply-adds per input channel for one useful lane: a sixth more
work on a 7x7 plane, all of it on the weights' memory. The columns run for each block of
``KC`` input channels right after the blocks of output channels they belong to (their
sums kept in the slot's scratch meanwhile), so they read the rows of the weight the blocks
have just brought into L1, where a pass at the end read the whole weight again, from
memory where it exceeds L2 (512 -> 1000 channels: 2 MB for a 13x13 plane's last position).
After the last input channels the chunk's run of each output channel gets the epilogue
(``epilogue.plane_tail``: bias, activation, residual before or after) while it is in L1.

Inside a model a layer's weight, read once a call, has left the caches by its next call,
and each pair's rows for a block of ``KC`` input channels are a run of ``KC`` lines that
the hardware's prefetcher meets cold (the next pair's run lies ``C*64`` bytes further on):
while a block sums, the run the next pair will read is asked into L2, one line a step of
its loop over the input channels (:func:`_next_run`; a 384 -> 384 layer on 7x7 took
0.75x its time with the weight cold, docs/benchmarks.md "1x1 convs whose weights come from
memory").

An input larger than ``STREAM_BYTES`` (2 MB: larger than a core's L2, so at batch 16
and more it comes from the last-level cache or memory at every call) is streamed: while a
block of input rows sums, the rows of the next block (the chunk's next ``kc`` channels,
else the first block of the slot's next item) are asked into L2, one cache line at a time
(:func:`_ask_rows`). A chunk's rows are ``kc`` runs of 768 bytes a plane apart, too many
and too short for the hardware's prefetcher, so each line had been a miss the loop waited
on. Where the output channels are few (at most ``FEW_BLOCKS`` blocks of eight: a
squeeze, a bottleneck's reduction), a streamed input is taken ``FEW_KC`` (32) channels at
a time, whose rows (24 kB) stay in L1 while the blocks pass, where 64 (48 kB) did not fit
a 32 kB L1 and each block after the first read them from L2; with many blocks the sums'
extra trips through the output cost more (1.03-1.18x at 64 to 1000 outputs), and a
cached input at batch 1 gained nothing from either (docs/benchmarks.md, 2026-12-05
"streamed 1x1 inputs": 128 -> 16 channels on 55x55 at batch 16 0.6x its time).

A prologue (``conv2d_prologue``: an eval-mode BatchNorm and its activation before the
conv, ``act(x * scale[k] + shift[k])`` per input channel ``k``) is applied to each block
of ``KC`` input rows of the chunk as the item takes it up, into the slot's own buffer,
which the register blocks then read in place of ``x`` (and to the chunk's last few
positions, for :func:`_column`, over all the channels): one pass over a block in L1 per
group of output channels, where a separate pass would write and read again the whole
input.
"""
from __future__ import annotations

import math

import numpy as np

from . import helper, isa, loop, numba_available, out_images
from .epilogue import _ZERO, _activate, plane_tail
from .simd import (LANES, WIDE, broadcast, broadcast_at, broadcast_at_like, broadcast_wide,
                   fma, lanes_of, load, load_like, prefetch, store)
from .threads import run_kept, threads_for
from .tuning import cores

F = np.float32
PAIR = 2 * LANES      # output channels of a packed pair (``conv_packed.PAIR``)
RUN = 3 * LANES       # positions of the register block
CHUNK = 8 * RUN       # positions of a work item (192: 768 bytes a row, 48 kB for 64 rows)
KC = 64               # input channels summed before the sums go to the output
FEW_KC = 32           # ... of a streamed input where the output channels are at most
FEW_BLOCKS = 4        # ... this many blocks of eight
STREAM_BYTES = 2 << 20   # inputs larger than this are streamed (module docstring)
WHOLE_BYTES = 512 << 10  # a cached chunk's rows up to this size are summed in one block
# The register blocks, the column and the epilogue are functions of their own, compiled
# once per vector width and called (LLVM may still inline them), with the loop's flags (the
# same code, the same bits): Numba's inlining in its IR copies the callee's whole IR at each
# call site, and with all of them inlined the loop's first compile took 200 s, 85% of it in
# those copies, against 11-14 s now (docs/benchmarks.md, "its first compile cut"). The small
# helpers inside a block stay inlined in its IR.
_OWN = {"error_model": "numpy", "fastmath": {"contract"}}


@helper(inline="always")
def _get(out, at, ok, zero):
    """A vector of partial sums at ``out[at]`` (as many lanes as ``zero``) where the channel
    exists (``ok``), else ``zero``."""
    return load_like(out, at, zero) if ok else zero


@helper(inline="always")
def _put(out, at, ok, v):
    """A vector of sums to ``out[at]`` where the channel exists (``ok``)."""
    if ok:
        store(out, at, v)


@helper(inline="always")
def _get3(out, at, ok, zero):
    """:func:`_get` of three vectors, one after another."""
    step = lanes_of(zero)
    return (_get(out, at, ok, zero), _get(out, at + step, ok, zero),
            _get(out, at + 2 * step, ok, zero))


@helper(inline="always")
def _put3(out, at, ok, v0, v1, v2):
    """:func:`_put` of three vectors, one after another."""
    step = lanes_of(v0)
    _put(out, at, ok, v0)
    _put(out, at + step, ok, v1)
    _put(out, at + 2 * step, ok, v2)


@helper(inline="always")
def _fma3(wp, at, x0, x1, x2, a0, a1, a2):
    """One channel's weight ``wp[at]`` times three input vectors, into its three sums."""
    u = broadcast_at_like(wp, at, x0)
    return fma(u, x0, a0), fma(u, x1, a1), fma(u, x2, a2)


@helper(inline="always")
def _get4(out, oo, os, n, zero):
    """Four channels' twelve sums (three vectors each, channel ``r`` at ``out[oo + r*os]``)
    where the channel exists (``r < n``), else zeros."""
    a00, a01, a02 = _get3(out, oo, n > 0, zero)
    a10, a11, a12 = _get3(out, oo + os, n > 1, zero)
    a20, a21, a22 = _get3(out, oo + 2 * os, n > 2, zero)
    a30, a31, a32 = _get3(out, oo + 3 * os, n > 3, zero)
    return a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32


@helper(inline="always")
def _put4(out, oo, os, n, a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32):
    """:func:`_get4`'s inverse: the twelve sums stored where the channel exists."""
    _put3(out, oo, n > 0, a00, a01, a02)
    _put3(out, oo + os, n > 1, a10, a11, a12)
    _put3(out, oo + 2 * os, n > 2, a20, a21, a22)
    _put3(out, oo + 3 * os, n > 3, a30, a31, a32)


@helper(inline="always")
def _fma4(wp, t, x0, x1, x2, a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32):
    """Four channels' weights ``wp[t:t + 4]`` times the three input vectors, into their
    twelve sums."""
    a00, a01, a02 = _fma3(wp, t, x0, x1, x2, a00, a01, a02)
    a10, a11, a12 = _fma3(wp, t + 1, x0, x1, x2, a10, a11, a12)
    a20, a21, a22 = _fma3(wp, t + 2, x0, x1, x2, a20, a21, a22)
    a30, a31, a32 = _fma3(wp, t + 3, x0, x1, x2, a30, a31, a32)
    return a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32


@helper(inline="always")
def _load3(x, xa, z):
    """Three input vectors (``z``'s lanes each) from ``x[xa]`` on."""
    step = lanes_of(z)
    return load_like(x, xa, z), load_like(x, xa + step, z), load_like(x, xa + 2 * step, z)


@helper(inline="always")
def _ask(wp, ahead, lines, j):
    """Step ``j`` of a block's loop over its input channels asks the ``j``-th of ``lines``
    cache lines of the packed weight from ``wp[ahead]`` on (one row of a pair: ``PAIR``
    floats, one line) into the second-level cache (:func:`_next_run`)."""
    if j < lines:
        prefetch(wp, ahead + j * PAIR)


@helper(**_OWN)
def _block3(x, xo, xs, wp, wo, k0, k1, out, oo, os, n, first, z, ahead, lines):
    """Eight channels (their packed weights from ``wp[wo]``, row pitch ``PAIR``; ``n`` of
    them exist) by three vectors of ``L`` positions (``L`` the lanes of ``z``, a zero
    vector: 8, or 16 where :func:`block_sums` is 48): ``out[oo + r*os + 0:3L] (+)= sum_k
    wp[wo + k*16 + r] * x[xo + k*xs + 0:3L]`` for ``k`` in ``k0:k1`` (``first``: from
    zero); 24 sums, the first four channels' ``a``, the last four's ``b``. Meanwhile the
    ``lines`` rows of the weight from ``wp[ahead]`` are asked into L2 (:func:`_ask`)."""
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = a8 = a9 = a10 = a11 = z
    b0 = b1 = b2 = b3 = b4 = b5 = b6 = b7 = b8 = b9 = b10 = b11 = z
    if not first:
        a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11 = _get4(out, oo, os, n, z)
        b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11 = _get4(out, oo + 4 * os, os, n - 4,
                                                                 z)
    for k in range(k0, k1):
        _ask(wp, ahead, lines, k - k0)
        x0, x1, x2 = _load3(x, xo + k * xs, z)
        t = wo + k * PAIR
        a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11 = _fma4(
            wp, t, x0, x1, x2, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11)
        b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11 = _fma4(
            wp, t + 4, x0, x1, x2, b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11)
    _put4(out, oo, os, n, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11)
    _put4(out, oo + 4 * os, os, n - 4, b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11)


@helper(**_OWN)
def _half3(x, xo, xs, wp, wo, k0, k1, out, oo, os, n, first, ahead, lines):
    """:func:`_block3` on four channels (``n`` of them exist) and eight lanes: twelve sums,
    three input vectors and a broadcast, within the 16 vector registers of an AVX2 CPU."""
    z = broadcast(F(0))
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = a8 = a9 = a10 = a11 = z
    if not first:
        a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11 = _get4(out, oo, os, n, z)
    for k in range(k0, k1):
        _ask(wp, ahead, lines, k - k0)
        x0, x1, x2 = _load3(x, xo + k * xs, z)
        a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11 = _fma4(
            wp, wo + k * PAIR, x0, x1, x2, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11)
    _put4(out, oo, os, n, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11)


@helper(**_OWN)
def _block1(x, xo, xs, wp, wo, k0, k1, out, oo, os, n, first, z, ahead, lines):
    """:func:`_block3` on one vector of positions (``z``'s lanes; eight sums, one input
    vector a channel ``k``)."""
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = z
    if not first:
        a0, a1 = _get(out, oo, n > 0, z), _get(out, oo + os, n > 1, z)
        a2, a3 = _get(out, oo + 2 * os, n > 2, z), _get(out, oo + 3 * os, n > 3, z)
        a4, a5 = _get(out, oo + 4 * os, n > 4, z), _get(out, oo + 5 * os, n > 5, z)
        a6, a7 = _get(out, oo + 6 * os, n > 6, z), _get(out, oo + 7 * os, n > 7, z)
    for k in range(k0, k1):
        _ask(wp, ahead, lines, k - k0)
        v = load_like(x, xo + k * xs, z)
        t = wo + k * PAIR
        a0 = fma(broadcast_at_like(wp, t, z), v, a0)
        a1 = fma(broadcast_at_like(wp, t + 1, z), v, a1)
        a2 = fma(broadcast_at_like(wp, t + 2, z), v, a2)
        a3 = fma(broadcast_at_like(wp, t + 3, z), v, a3)
        a4 = fma(broadcast_at_like(wp, t + 4, z), v, a4)
        a5 = fma(broadcast_at_like(wp, t + 5, z), v, a5)
        a6 = fma(broadcast_at_like(wp, t + 6, z), v, a6)
        a7 = fma(broadcast_at_like(wp, t + 7, z), v, a7)
    _put(out, oo, n > 0, a0), _put(out, oo + os, n > 1, a1)
    _put(out, oo + 2 * os, n > 2, a2), _put(out, oo + 3 * os, n > 3, a3)
    _put(out, oo + 4 * os, n > 4, a4), _put(out, oo + 5 * os, n > 5, a5)
    _put(out, oo + 6 * os, n > 6, a6), _put(out, oo + 7 * os, n > 7, a7)


@helper(inline="always")
def _block_positions(x, xo, xs, wp, wo, k0, k1, out, oo, os, n, first, q0, whole, sums,
                     ahead, lines):
    """A block of eight channels (as :func:`_block3`) over the chunk's positions ``q0 :
    whole`` (whole vectors of eight): three vectors at a time in the register block
    ``sums`` (:func:`block_sums`), then one at a time; the first of them asks the ``lines``
    rows of the weight from ``wp[ahead]`` into L2 (:func:`_next_run`)."""
    q = q0
    if sums == 48:
        zw = broadcast_wide(F(0))
        while q + 3 * WIDE <= whole:
            _block3(x, xo + q, xs, wp, wo, k0, k1, out, oo + q, os, n, first, zw, ahead,
                    lines)
            q, lines = q + 3 * WIDE, 0
        while q + WIDE <= whole:
            _block1(x, xo + q, xs, wp, wo, k0, k1, out, oo + q, os, n, first, zw, ahead,
                    lines)
            q, lines = q + WIDE, 0
    z = broadcast(F(0))
    while q + RUN <= whole:
        if sums == 24:
            _block3(x, xo + q, xs, wp, wo, k0, k1, out, oo + q, os, n, first, z, ahead,
                    lines)
        else:
            _half3(x, xo + q, xs, wp, wo, k0, k1, out, oo + q, os, n, first, ahead, lines)
            if n > 4:
                _half3(x, xo + q, xs, wp, wo + 4, k0, k1, out, oo + 4 * os + q, os, n - 4,
                       first, ahead, 0)
        q, lines = q + RUN, 0
    while q < whole:
        _block1(x, xo + q, xs, wp, wo, k0, k1, out, oo + q, os, n, first, z, ahead, lines)
        q, lines = q + LANES, 0


@helper(inline="always")
def _row_of(b, b1, channels):
    """Where block ``b`` of eight output channels starts in the packed weight: its pair's
    rows, its half of the sixteen lanes (a block from ``b1`` on is read as ``b1 - 1``)."""
    b = min(b, b1 - 1)
    return (b // 2) * channels * PAIR + (b % 2) * LANES


@helper(inline="always")
def _next_run(b, b0, b1, k0, k1, kc, channels):
    """Where the weight's rows that the block after ``b`` reads start in the packed weight
    and how many (one cache line each), where that block is of another pair than ``b``
    (the same pair's rows are already in L1): block ``b + 1``'s rows ``k0:k1``, or after
    the last block ``b0``'s next ``kc`` rows; ``(0, 0)`` after the last rows. Asked into L2
    while block ``b`` sums: the weight of a layer read once a call comes from memory or
    the last-level cache (inside a model every layer's weight has been evicted since the
    last call), and the pair's rows, a run of ``kc`` lines 24-40 kB from the last pair's,
    would each start cold, where the hardware's prefetcher has not seen the stride."""
    if b + 1 < b1:
        if (b + 1) // 2 == b // 2:
            return 0, 0
        return _row_of(b + 1, b1, channels) + k0 * PAIR, k1 - k0
    if k1 >= channels:
        return 0, 0
    return _row_of(b0, b1, channels) + k1 * PAIR, min(kc, channels - k1)


@helper(**_OWN)
def _column(x, xa, xs, wp, channels, k0, k1, first, b, b1, acc, ao):
    """One output position (its input ``x[xa + k*xs]``) for the eight blocks of eight
    channels from ``b`` (those before ``b1``; past it the last is summed again, never
    written out), the channels in the lanes: per input channel ``k`` in ``k0:k1`` the value
    broadcast and each block's packed row ``k`` loaded, eight sums carried on from
    ``acc[ao:ao + 64]`` (from zero where ``first``) and stored back there; over ``k = 0 ..
    C-1`` in order, the bits of the positions-in-lanes blocks. Called for each block of
    input rows right after the blocks' positions (:func:`_forward`), so it reads their
    rows of the weight while they are in L1, where a pass over all the rows at the end
    read the whole weight again (from memory where it is larger than L2)."""
    o0, o1 = _row_of(b, b1, channels), _row_of(b + 1, b1, channels)
    o2, o3 = _row_of(b + 2, b1, channels), _row_of(b + 3, b1, channels)
    o4, o5 = _row_of(b + 4, b1, channels), _row_of(b + 5, b1, channels)
    o6, o7 = _row_of(b + 6, b1, channels), _row_of(b + 7, b1, channels)
    z = broadcast(F(0))
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = z
    if not first:
        a0, a1, a2, a3 = (load(acc, ao), load(acc, ao + 8), load(acc, ao + 16),
                          load(acc, ao + 24))
        a4, a5, a6, a7 = (load(acc, ao + 32), load(acc, ao + 40), load(acc, ao + 48),
                          load(acc, ao + 56))
    for k in range(k0, k1):
        v = broadcast_at(x, xa + k * xs)
        t = k * PAIR
        a0 = fma(load(wp, o0 + t), v, a0)
        a1 = fma(load(wp, o1 + t), v, a1)
        a2 = fma(load(wp, o2 + t), v, a2)
        a3 = fma(load(wp, o3 + t), v, a3)
        a4 = fma(load(wp, o4 + t), v, a4)
        a5 = fma(load(wp, o5 + t), v, a5)
        a6 = fma(load(wp, o6 + t), v, a6)
        a7 = fma(load(wp, o7 + t), v, a7)
    store(acc, ao, a0), store(acc, ao + 8, a1), store(acc, ao + 16, a2)
    store(acc, ao + 24, a3), store(acc, ao + 32, a4), store(acc, ao + 40, a5)
    store(acc, ao + 48, a6), store(acc, ao + 56, a7)


@helper(inline="always")
def _columns(x, xa, xs, wp, channels, k0, k1, first, b, b0, b1, tail, acc):
    """:func:`_column` of the chunk's ``tail`` last positions (their inputs from
    ``x[xa]`` on) for the eight blocks from ``b``: position ``q``'s sums at ``acc[(q *
    eights + (b - b0) // 8) * 64]``, ``eights`` the item's runs of eight blocks."""
    eights = -(-(b1 - b0) // 8)
    for q in range(tail):
        _column(x, xa + q, xs, wp, channels, k0, k1, first, b, b1, acc,
                (q * eights + (b - b0) // 8) * 64)


@helper(**_OWN)
def _columns_out(acc, b0, b1, tail, cout, out, oa, os):
    """:func:`_columns`' sums, whole, to ``out[oa + q + co*os]`` (position ``q`` of the
    tail, the output channels ``co`` of the blocks ``b0:b1``)."""
    eights = -(-(b1 - b0) // 8)
    for q in range(tail):
        for co in range(b0 * LANES, min(cout, b1 * LANES)):
            out[oa + q + co * os] = acc[q * eights * 64 + co - b0 * LANES]


@helper(**_OWN)
def _tail(out, oo, ro, size, q0, q1, c0, c1, bias, residual, act, lo, hi, where):
    """The epilogue (``epilogue.plane_tail``) of the runs ``q0:q1`` of output channels
    ``c0:c1`` (channel ``co``'s at ``out[oo + co*size]``, its residual's at
    ``residual[ro + co*size]``)."""
    for co in range(c0, c1):
        at, rt = oo + co * size, ro + co * size
        plane_tail(out[at + q0:at + q1], bias[co],
                   residual[rt + q0:rt + q1] if where else residual[0:1], act, lo, hi, where)


@helper(**_OWN)
def _ask_rows(x, xo, xs, k0, k1, n):
    """Asks rows ``k0:k1`` of ``x`` (row ``k``'s ``n`` values from ``x[xo + k*xs]``) into
    L2, each cache line they touch once (a hint: no load, no fault)."""
    for k in range(k0, k1):
        for i in range(0, n + LANES * 2 - 1, LANES * 2):
            prefetch(x, xo + k * xs + min(i, n - 1))


@helper(**_OWN)
def _prologue(x, xo, xs, k0, k1, n, dst, do, ds, scale, shift, act, lo, hi):
    """The prologue of rows ``k0:k1``: ``dst[do + (k-k0)*ds + 0:n] =
    ACTIVATIONS[act](x[xo + k*xs + 0:n] * scale[k] + shift[k])`` (``epilogue._activate``'s
    formulas; NaN stays NaN)."""
    for k in range(k0, k1):
        row = dst[do + (k - k0) * ds:do + (k - k0) * ds + n]
        src, s, t = x[xo + k * xs:xo + k * xs + n], scale[k], shift[k]
        if act == 1:   # (ReLU in the same loop, as ``epilogue._add_activate``)
            for i in range(n):
                v = src[i] * s + t + _ZERO
                row[i] = _ZERO if v < _ZERO else v
        else:
            for i in range(n):
                row[i] = src[i] * s + t
            _activate(row, act, lo, hi)


@loop(fastmath={"contract"})
def _forward(start, stop, x, wp, bias, out, residual, scratch, act, lo, hi, where,
             channels, size, cout, kc, sums, groups, ostride, pact, pscale, pshift, plo,
             phi, pbuf, istride, ask):
    """Work items ``start * T // S : stop * T // S`` (``S = scratch.shape[0]`` slots, ``T``
    items: ``groups`` groups of the output channels' blocks of eight, each over every
    image's chunks of ``CHUNK`` positions) of the flat ``out (N, Cout, size)`` (image
    ``n`` from ``n * ostride``: ``kernels.out_images``) = the 1x1
    conv of the flat ``x (N, C, size)`` with the packed ``wp (pairs, C, 16)`` (flat), then
    ``plane_tail``'s epilogue (``bias (Cout,)``, ``residual`` flat like ``out`` where
    ``where`` is not 0). ``scratch[slot] (7 * ceil(blocks / 8) * 64,)``: the sums of
    :func:`_columns`, kept from one block of input rows to the next.
    ``sums``: the register block (:func:`block_sums`): 48, 24 or 12. ``pact`` 0 or more:
    the prologue (module docstring; ``pscale``, ``pshift (C,)``, ``plo``, ``phi`` its
    activation's, ``pbuf[slot] (kc*CHUNK + C*LANES,)`` its rows), -1: none. Image ``n``
    of ``x`` from ``n * istride`` (a concatenation's first channels: :func:`_images`).
    ``ask``: while a block of ``kc`` rows sums, the next block (the chunk's, else the
    slot's next item's first) is asked into L2 (:func:`_ask_rows`; an input streamed from
    memory, module docstring)."""
    chunks = -(-size // CHUNK)
    images = (x.size - channels * size) // istride + 1
    total = images * chunks * groups
    blocks = -(-cout // LANES)
    for slot in range(start, stop):
        for item in range(slot * total // scratch.shape[0],
                          (slot + 1) * total // scratch.shape[0]):
            group, part = item // (images * chunks), item % (images * chunks)
            img, q0 = part // chunks, (part % chunks) * CHUNK
            b0, b1 = group * blocks // groups, (group + 1) * blocks // groups
            q1 = min(size, q0 + CHUNK)
            whole = q0 + (q1 - q0) // LANES * LANES    # positions in whole vectors
            xo, oo, ro = img * istride, img * ostride, img * cout * size
            src, so, ss = x, xo, size   # (the rows the blocks read: x's, or the prologue's)
            tail = q1 - whole           # (positions after the whole vectors: the columns')
            ts, to, tss = x, xo + whole, size
            if pact >= 0 and tail > 0:
                _prologue(x, xo + whole, size, 0, channels, tail, pbuf[slot], kc * CHUNK,
                          LANES, pscale, pshift, pact, plo, phi)
                ts, to, tss = pbuf[slot], kc * CHUNK, LANES
            last = item + 1 == (slot + 1) * total // scratch.shape[0]
            for k0 in range(0, channels, kc):
                k1 = min(channels, k0 + kc)
                first = k0 == 0
                if ask and k1 < channels:       # (this chunk's next block of rows)
                    _ask_rows(x, xo + q0, size, k1, min(channels, k1 + kc), q1 - q0)
                elif ask and not last:          # (the slot's next item's first block)
                    nxt = (item + 1) % (images * chunks)
                    nq0 = (nxt % chunks) * CHUNK
                    _ask_rows(x, (nxt // chunks) * istride + nq0, size, 0, min(channels, kc),
                              min(size, nq0 + CHUNK) - nq0)
                if pact >= 0:
                    _prologue(x, xo + q0, size, k0, k1, whole - q0, pbuf[slot], 0, CHUNK,
                              pscale, pshift, pact, plo, phi)
                    src, so, ss = pbuf[slot], -k0 * CHUNK - q0, CHUNK
                for b in range(b0, b1):
                    n = min(LANES, cout - b * LANES)
                    wo = (b // 2) * channels * PAIR + (b % 2) * LANES
                    ob = oo + b * LANES * size
                    ahead, lines = _next_run(b, b0, b1, k0, k1, kc, channels)
                    _block_positions(src, so, ss, wp, wo, k0, k1, out, ob, size, n, first,
                                     q0, whole, sums, ahead, lines)
                    if tail > 0 and ((b - b0) % 8 == 7 or b == b1 - 1):
                        _columns(ts, to, tss, wp, channels, k0, k1, first,
                                 b - (b - b0) % 8, b0, b1, tail, scratch[slot])
            _columns_out(scratch[slot], b0, b1, tail, cout, out, oo + whole, size)
            _tail(out, oo, ro, size, q0, q1, b0 * LANES, min(cout, b1 * LANES), bias,
                  residual, act, lo, hi, where)


def wins(x_shape, w_shape, stride, padding, dilation, groups, dtype) -> bool:
    """Whether :func:`conv` takes a conv (its weight packed once): float32, a 1x1 kernel
    without padding, one group, at least eight output channels and an output plane of at
    least eight positions (a 1x1 plane, squeeze-and-excitation's, is one GEMM over the
    batch: ``epilogue.pointwise``). At a stride above 1 (a residual block's downsampling
    shortcut) the loop runs on the input's every ``s``-th row and column, gathered first
    (:func:`fitted`), where ``conv_pointwise``'s GEMMs packed the weight at every call."""
    ho, wo = _out_plane(x_shape, stride)
    return (np.dtype(dtype) == np.float32 and groups == 1 and tuple(w_shape[2:]) == (1, 1)
            and all(p == 0 for pair in padding for p in pair)
            and w_shape[0] >= LANES and ho * wo >= LANES and numba_available())


def _out_plane(x_shape, stride) -> tuple:
    """The output plane ``(Ho, Wo)`` of a 1x1 conv of ``x_shape`` at ``stride``, unpadded."""
    return (x_shape[2] - 1) // stride[0] + 1, (x_shape[3] - 1) // stride[1] + 1


def block_sums() -> int:
    """The register block the compiled loop can keep, counted in eight-lane sums: 48 (24
    sixteen-lane sums, :func:`_block3` on ``zmm`` vectors) where it has full-width AVX-512
    (``isa.full_width``), 24 where it has AVX-512VL's 32 vector registers at half width
    (Zen 4), else 12 (``isa.vector_registers``; 24 on 16 registers spill: 2.3-3.5x the
    time of OpenBLAS's GEMM, docs/benchmarks.md "AVX2")."""
    if isa.full_width():
        return 48
    return 24 if isa.vector_registers() >= 32 else 12


def rows_a_block(channels: int, size: int, blocks: int, streamed: bool) -> int:
    """The input channels :func:`_forward` sums before its sums go to the output (``kc``)
    for ``channels`` input channels on planes of ``size`` positions, ``blocks`` blocks of
    eight outputs: a streamed input's ``KC``, or ``FEW_KC`` where the blocks are at most
    ``FEW_BLOCKS`` (module docstring); a cached input's every channel where a chunk's rows
    (``channels * min(size, CHUNK)`` floats) are at most ``WHOLE_BYTES`` (half of a 1 MB
    L2), else ``KC``. In one block the sums stay in registers from the first input
    channel to the last, where with ``KC`` each block of eight outputs took its 24 sums
    from the output and put them back ``C / KC`` times, each trip a wait on L2 (the
    chunk's output, 75 kB for 384 channels on 7x7, outgrows L1); the rows, read from L2
    for every block of outputs, come at a constant stride the hardware prefetches.
    384 -> 384 channels on 7x7 took 0.95x its time, 320 -> 1280 on 7x7 and 96 -> 576 on
    14x14 0.95-0.97x; chunks of 256-512 kB (512 -> 1000 on 13x13: 338 kB, 512 -> 512 and
    576 -> 96 on 14x14) 0.91-0.97x; 1024 -> 128 on 14x14 (768 kB of rows a chunk) took
    1.05x, so larger chunks keep ``KC`` (docs/benchmarks.md, 2026-12-06 "1x1 convs' input
    channels in one block" and "fire modules")."""
    if streamed:
        return FEW_KC if blocks <= FEW_BLOCKS else KC
    return channels if channels * min(size, CHUNK) * 4 <= WHOLE_BYTES else KC


def fitted(x_shape, cout: int, residual: bool, where=0, act=0, lo=-np.inf,
           hi=np.inf, sums=None, pre_act=-1, pre_lo=-np.inf, pre_hi=np.inf, stride=(1, 1)):
    """``run(x, packed, b, *residual, out=None, pre=None)``: :func:`_forward` fitted to
    the static ``x_shape (N, C, H, W)``, ``cout`` output channels and the epilogue's codes,
    its scratch and threads worked out once (at batch 1 on 7x7 planes a call is ~50 us:
    NumPy's allocations and the type dispatch per call would be a tenth of it); ``sums``,
    the register block, :func:`block_sums` where None (all give the same bits).
    ``pre_act`` 0 or more (an ``epilogue.ACTIVATIONS`` code, ``pre_lo``, ``pre_hi`` its
    clamp's bounds): each call takes ``pre=(scale, shift)``, the prologue's per input
    channel (module docstring); -1: no prologue. At a ``stride`` above 1 each call first
    gathers the input's every ``s``-th row and column into a buffer of its own (a quarter
    of the input at stride 2; the prologue, per element, is the same on either side of
    the gather), which the loop reads as a stride-1 input."""
    sums = block_sums() if sums is None else sums
    n, c = x_shape[:2]
    h, w = _out_plane(x_shape, stride)
    size = h * w
    shape = (n, cout, h, w)
    sh, sw = stride
    gathered = np.empty((n, c, h, w) if (sh, sw) != (1, 1) else (0,), F)
    parts, blocks = n * -(-size // CHUNK), -(-cout // LANES)
    threads = threads_for(n * cout * size * c) or cores()
    groups = min(blocks, threads) if parts < 4 * threads else 1   
    workers = max(1, min(parts * groups, threads))
    streamed = n * c * size * 4 > STREAM_BYTES
    kc = rows_a_block(c, size, blocks, streamed)
    scratch = np.empty((workers, (LANES - 1) * -(-blocks // 8) * 8 * LANES), F)
    pbuf = np.empty((workers, kc * CHUNK + c * LANES if pre_act >= 0 else 1), F)
    no_residual = np.zeros(1, F)
    lo, hi, pre_lo, pre_hi = F(lo), F(hi), F(pre_lo), F(pre_hi)
    where = where if residual else 0
    entry = []

    def run(x, packed, b, *r, out=None, pre=None):
        out = np.empty(shape, F) if out is None else out
        flat_out, ostride = out_images(out)
        scale, shift = (no_residual, no_residual) if pre is None else pre
        if gathered.size:
            np.copyto(gathered, x[:, :, ::sh, ::sw])
            x = gathered
        flat_x, istride = _images(x)
        args = (flat_x, packed.reshape(-1),
                np.ascontiguousarray(b, F), flat_out,
                np.ascontiguousarray(r[0], F).reshape(-1) if r else no_residual, scratch,
                act, lo, hi, where, c, size, cout, kc, sums, groups, ostride, pre_act,
                np.ascontiguousarray(scale, F), np.ascontiguousarray(shift, F), pre_lo,
                pre_hi, pbuf, istride, streamed)
        run_kept(_forward, workers, entry, *args)
        return out
    return run


def _images(x):
    """``x (N, C, H, W)`` as a flat float32 array and the distance between its images:
    ``kernels.out_images``'s view where each image is contiguous (the first channels of a
    concatenation grown in place: ``cat_in_place``), else a contiguous copy's."""
    if x.dtype == F and not x.flags.c_contiguous and x.flags.writeable:
        try:
            return out_images(x)
        except ValueError:
            pass
    return np.ascontiguousarray(x, F).reshape(-1), math.prod(x.shape[1:])


def conv(x, packed, out, bias, residual=None, where=0, act=0, lo=-np.inf, hi=np.inf,
         sums=None, pre=None, pre_act=0, pre_lo=-np.inf, pre_hi=np.inf, stride=(1, 1)):
    """``out (N, Cout, Ho, Wo)`` = the 1x1 conv at ``stride`` of ``x (N, C, H, W)`` with
    the weight packed by ``conv_packed.pack`` (``(pairs, C, 16)``) and ``bias (Cout,)``,
    then the epilogue
    (``where``, ``act``, ``lo``, ``hi`` as ``conv_tiles.conv``'s; ``where`` ignored without
    a ``residual``; ``sums`` as :func:`fitted`'s; ``out`` may be a concatenation's block of
    channels: ``kernels.out_images``); ``pre=(scale, shift)``: the conv of
    ``ACTIVATIONS[pre_act](x * scale + shift)`` per input channel, in the loop (the
    prologue: :func:`fitted`). Returns ``out``."""
    run = fitted(x.shape, out.shape[1], residual is not None, where, act, lo, hi, sums,
                 -1 if pre is None else pre_act, pre_lo, pre_hi, tuple(stride))
    return run(x, packed, bias, *(() if residual is None else (residual,)), out=out, pre=pre)
