"""A linear layer's product ``x @ Wᵀ`` (float32) on a weight packed once into panels of 64
output columns: no GEMM call, no copy of the weight per call.

:func:`pack` lays a weight ``(N, K)`` out as ``(panels, K, 64)``: panel ``p`` holds output
columns ``64p .. 64p + 63`` (zeros past ``N``), their ``K`` weights one row of 64 after
another, so the loop reads a panel as one contiguous run. The compiler makes that layout
once, from a constant weight (the lowering rule ``linear_packed``, ``passes/linears.py``);
a BLAS packs both operands at every call (OpenBLAS re-lays the whole weight each time).

The register block is six rows by 64 columns: per step of ``K`` four sixteen-lane weight
vectors (``zmm``: an instruction does twice the eight-lane form's work, 1.45x faster at 32
x 128 x 512) are loaded, six values of ``x`` broadcast (a row of ``x`` is read along ``K``,
in order), and 24 multiply-adds issued into 24 sums that stay in registers. That needs the
32 vector registers of AVX-512 (24 sums, four weight vectors, a broadcast): on a CPU with
16 the sums would spill, so the rule takes linears only where the loops are compiled for
AVX-512VL (:func:`wanted`, ``isa.vector_registers``). A work item is a panel; a band of
rows (up to ``BAND_BYTES`` of them) passes over it ``DEPTH`` steps of K at a time, so that
each block of the panel's weights (``DEPTH * 256`` bytes) stays in the first level cache
while the band's rows pass (the sums stored and taken up again between blocks: the same
bits); two threads take different panels. While the band's rows pass over a block, the
next block's weights (the next run of the packed weight) are asked into the second level
cache a line every few steps: a model's weights do not stay in that cache from one call to
the next, and the first rows to reach a block would otherwise wait on the last level cache
(on an Intel Xeon, ``benchmarks/packed_linears.py``'s products of 128-197 rows on 16
weights in turn: 1.16-1.32x onnxruntime's time without, 1.04-1.09x with). Rows past the last
block of six (up to four of them two by two, five as a zero-padded block of six) and
columns past ``N`` in the last panel go through a small scratch block, so one loop serves
every shape. Each output is a sum over ``k`` in order (one lane per column): it differs
from a BLAS's blocked sum in the last places only.
"""
from __future__ import annotations

import numpy as np

from . import helper, isa, loop, numba_available
from .simd import WIDE, add, broadcast_at_wide, broadcast_wide, fma, load_wide, prefetch, store
from .threads import run_rows, threads_for

F = np.float32
COLUMNS = 4 * WIDE      # output columns of one panel: four vectors
MIN_OUTPUTS = 32        # the fewest outputs the rule packs for (fewer: most lanes idle)
ROWS = 6                # rows of x summed at once
DEPTH = 128             # steps of K a panel's block of weights (32 KB) covers while rows pass
MIN_ROWS = 6            # the fewest rows of a product the rule packs the weight for
MIN_MACS = 1 << 18      # ... and the fewest multiply-adds (13 x 33 x 70: 6 us, OpenBLAS 3)
# Bytes of x's rows that pass through all the panels before the next rows: they stay in the
# second level cache (1-2 MB on the AVX-512 CPUs the loop runs on; a panel needs only its
# block of DEPTH steps, in L1), and the whole weight is read once a band: where it does not
# fit in L2 (1536 x 384), 192 KB bands read it five times for 128 rows (9% slower on an
# Intel Xeon than 512 KB's two). Past a thousand rows the band shares L2 with the stream
# of the whole weight and of the band's outputs (their partial sums read again at each
# block of DEPTH): on an Intel Xeon (2 MB L2, loaded, one thread) 256 KB bands took 4-10%
# less time than 512 KB's at 2048-3152 rows (K 192-1024, N 192-1024) and the same
# (within the load's noise) at 128-394 rows, 1536 x 384 included
BAND_BYTES = 256 << 10
PER_CALL_DEPTH = 192    # the longest sum a product packs its matrix for at every call
# ... or any sum of a narrow product (at most two panels) whose packed matrix fits in this
# many floats (256 KB: it stays in the second level cache while every band of rows passes),
# from NARROW_ROWS rows on
NARROW_COLUMNS, NARROW_FLOATS, NARROW_ROWS = 2 * COLUMNS, 1 << 16, 256
LINE = 16               # float32 values in a cache line


@helper(inline="always")
def _row(xf, at, wf, o, s0, s1, s2, s3):
    """One row's value ``xf[at]`` times a step's four weight vectors ``wf[o:o + 64]``,
    added to its four sums."""
    v = broadcast_at_wide(xf, at)
    return (fma(v, load_wide(wf, o), s0), fma(v, load_wide(wf, o + WIDE), s1),
            fma(v, load_wide(wf, o + 2 * WIDE), s2), fma(v, load_wide(wf, o + 3 * WIDE), s3))


@helper(inline="always")
def _put(of, at, bias, s0, s1, s2, s3):
    """A row's four sums plus the panel's bias vectors stored at ``of[at:at + 64]``."""
    store(of, at, add(s0, load_wide(bias, 0)))
    store(of, at + WIDE, add(s1, load_wide(bias, WIDE)))
    store(of, at + 2 * WIDE, add(s2, load_wide(bias, 2 * WIDE)))
    store(of, at + 3 * WIDE, add(s3, load_wide(bias, 3 * WIDE)))


@helper(inline="always")
def _get(of, at):
    """The four partial sums of a row at ``of[at:at + 64]``."""
    return (load_wide(of, at), load_wide(of, at + WIDE), load_wide(of, at + 2 * WIDE),
            load_wide(of, at + 3 * WIDE))


@helper(inline="always")
def _set(of, at, s0, s1, s2, s3):
    """A row's four partial sums stored at ``of[at:at + 64]``."""
    store(of, at, s0)
    store(of, at + WIDE, s1)
    store(of, at + 2 * WIDE, s2)
    store(of, at + 3 * WIDE, s3)


@helper(inline="always")
def _block(xf, xb, ld, k, wf, wb, bias, of, ob, ldo, first, last, ahead=0, lines=0):
    """Six rows' inputs ``k`` of them from ``xf[xb + r*ld]`` times ``k`` steps of the panel
    from ``wf[wb]``, 24 sums in registers: started from zero (``first``) or from the partial
    sums at ``of[ob + r*ldo : ... + 64]``, stored back there, plus ``bias`` (64) where the
    steps are the ``last`` of the sum (a float32 sum stored and loaded again is the same
    number: the blocking does not change a bit). Meanwhile ``lines`` cache lines of the
    weights from ``wf[ahead]`` on are asked into the second level cache, spread evenly
    over the steps (:func:`panel_rows`: the next block's weights)."""
    if first:
        z = broadcast_wide(F(0))
        a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = c0 = c1 = c2 = c3 = z
        d0 = d1 = d2 = d3 = e0 = e1 = e2 = e3 = f0 = f1 = f2 = f3 = z
    else:
        a0, a1, a2, a3 = _get(of, ob)
        b0, b1, b2, b3 = _get(of, ob + ldo)
        c0, c1, c2, c3 = _get(of, ob + 2 * ldo)
        d0, d1, d2, d3 = _get(of, ob + 3 * ldo)
        e0, e1, e2, e3 = _get(of, ob + 4 * ldo)
        f0, f1, f2, f3 = _get(of, ob + 5 * ldo)
    gap = max(1, k // max(1, lines))      # steps between two prefetches
    due, stop = 0, ahead + lines * LINE
    for j in range(k):
        if j == due and ahead < stop:
            prefetch(wf, ahead)
            ahead += LINE
            due += gap
        o = wb + j * COLUMNS
        a0, a1, a2, a3 = _row(xf, xb + j, wf, o, a0, a1, a2, a3)
        b0, b1, b2, b3 = _row(xf, xb + ld + j, wf, o, b0, b1, b2, b3)
        c0, c1, c2, c3 = _row(xf, xb + 2 * ld + j, wf, o, c0, c1, c2, c3)
        d0, d1, d2, d3 = _row(xf, xb + 3 * ld + j, wf, o, d0, d1, d2, d3)
        e0, e1, e2, e3 = _row(xf, xb + 4 * ld + j, wf, o, e0, e1, e2, e3)
        f0, f1, f2, f3 = _row(xf, xb + 5 * ld + j, wf, o, f0, f1, f2, f3)
    if last:
        _put(of, ob, bias, a0, a1, a2, a3)
        _put(of, ob + ldo, bias, b0, b1, b2, b3)
        _put(of, ob + 2 * ldo, bias, c0, c1, c2, c3)
        _put(of, ob + 3 * ldo, bias, d0, d1, d2, d3)
        _put(of, ob + 4 * ldo, bias, e0, e1, e2, e3)
        _put(of, ob + 5 * ldo, bias, f0, f1, f2, f3)
    else:
        _set(of, ob, a0, a1, a2, a3)
        _set(of, ob + ldo, b0, b1, b2, b3)
        _set(of, ob + 2 * ldo, c0, c1, c2, c3)
        _set(of, ob + 3 * ldo, d0, d1, d2, d3)
        _set(of, ob + 4 * ldo, e0, e1, e2, e3)
        _set(of, ob + 5 * ldo, f0, f1, f2, f3)


@helper(inline="always")
def _pair(xf, xb, k, wf, wb, bias, of, ob):
    """Two rows ``xf[xb:xb + 2k]`` times the panel at ``wf[wb]``, plus ``bias``, stored at
    ``of[ob:ob + 128]`` (last rows: eight chains of sums, as many as keep the multiply-adds
    of a CPU with two FMA units busy, where a padded :func:`_block` would sum six)."""
    a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = broadcast_wide(F(0))
    for j in range(k):
        o = wb + j * COLUMNS
        a0, a1, a2, a3 = _row(xf, xb + j, wf, o, a0, a1, a2, a3)
        b0, b1, b2, b3 = _row(xf, xb + k + j, wf, o, b0, b1, b2, b3)
    _put(of, ob, bias, a0, a1, a2, a3)
    _put(of, ob + COLUMNS, bias, b0, b1, b2, b3)


@helper(inline="always")
def _one(xf, xb, k, wf, wb, bias, of, ob):
    """One row ``xf[xb:xb + k]`` times the panel at ``wf[wb]``, plus ``bias``, stored at
    ``of[ob:ob + 64]`` (a last odd row: four chains of sums, slower a row than
    :func:`_block`'s 24 but not padded to six rows)."""
    s0 = s1 = s2 = s3 = broadcast_wide(F(0))
    for j in range(k):
        s0, s1, s2, s3 = _row(xf, xb + j, wf, wb + j * COLUMNS, s0, s1, s2, s3)
    _put(of, ob, bias, s0, s1, s2, s3)


@loop
def _panels(start, stop, xf, k, wf, bf, of, n, band, scratch):
    """:func:`panel_rows` as a loop of its own (a range of panels: ``run_rows`` shares
    them between threads), on the row ``scratch[start]`` (:func:`scratch_floats` each):
    a range's own, as ranges start at different panels. The caller flattens the arrays
    and allocates the scratch, so the loop neither reshapes nor allocates (each a call
    into Numba's runtime) and has a native job entry, which OpenBLAS's worker runs
    (``blas_threads.py``): without one the ranges went through Numba's dispatcher to a
    thread of dualgraph's own pool, beside OpenBLAS's polling worker."""
    panel_rows(start, stop, xf, k, wf, bf, of, n, band, scratch[start])


def scratch_floats(k: int) -> int:
    """The float32 scratch :func:`panel_rows` needs for a sum of ``k``: a block of six
    rows of a panel, and the last rows of ``x`` padded to six."""
    return ROWS * (COLUMNS + k)


def flat_args(x: np.ndarray, packed: np.ndarray, bias: np.ndarray, out: np.ndarray,
              band: int, scratch: np.ndarray) -> tuple:
    """:func:`_panels`' arguments after ``start, stop`` for ``out (M, N) = x (M, K) @ W +
    bias`` (C-contiguous float32; ``bias`` padded to the panels)."""
    return (x.reshape(-1), x.shape[1], packed.reshape(-1), bias, out.reshape(-1),
            out.shape[1], band, scratch)


@helper(inline="always")
def panel_rows(start, stop, xf, k, wf, bf, of, n, band, scratch):
    """Panels ``start:stop`` of ``out (M, N) = x (M, K) @ W + bias``, all flat: ``xf``
    (M * K), the packed ``wf`` ((panels, K, 64) flat), ``bf`` (the bias padded to
    ``panels * 64``) and ``of`` (M * N); ``band`` rows (a multiple of six) through all the
    panels before the next ``band`` (a recurrence's loop calls it too,
    ``kernels/recurrence.py``), on ``scratch`` (float32, at least :func:`scratch_floats`;
    the call's own: it is written)."""
    m = xf.size // k
    full = m - m % ROWS
    os = scratch[:ROWS * COLUMNS]           # a block of a partial panel or of the last rows
    for r0 in range(0, full, band):
        for p in range(start, stop):
            wb, c = p * k * COLUMNS, p * COLUMNS
            cols = min(COLUMNS, n - c)
            if cols == COLUMNS:
                blocks = (min(r0 + band, full) - r0) // ROWS
                for k0 in range(0, k, DEPTH):
                    kn = min(DEPTH, k - k0)
                    # the next block of weights: this one's successor in the packed run,
                    # or the first panel's first block again for the next band
                    ahead = wb + (k0 + kn) * COLUMNS
                    if k0 + kn == k and p + 1 == stop:
                        ahead = start * k * COLUMNS
                    lines = min(min(DEPTH, k) * COLUMNS, wf.size - ahead) // LINE
                    each = min(kn, -(-lines // blocks))
                    for b in range(blocks):
                        i = r0 + b * ROWS
                        _block(xf, i * k + k0, k, kn, wf, wb + k0 * COLUMNS, bf[c:], of,
                               i * n + c, n, k0 == 0, k0 + kn == k,
                               ahead + b * each * LINE, max(0, min(each, lines - b * each)))
                continue
            for i in range(r0, min(r0 + band, full), ROWS):
                _block(xf, i * k, k, k, wf, wb, bf[c:], os, 0, COLUMNS, True, True)
                for r in range(ROWS):
                    for j in range(cols):
                        of[(i + r) * n + c + j] = os[r * COLUMNS + j]
    if full == m:
        return
    left = m - full
    xs = scratch[ROWS * COLUMNS:ROWS * (COLUMNS + k)]     # the last rows, zero-padded to six
    for i in range(ROWS * k):   # (element by element: a slice assignment may copy)
        xs[i] = xf[full * k + i] if i < left * k else F(0)
    for p in range(start, stop):
        wb, c = p * k * COLUMNS, p * COLUMNS
        if left > 4:
            _block(xs, 0, k, k, wf, wb, bf[c:], os, 0, COLUMNS, True, True)
        else:
            for r in range(0, left - 1, 2):
                _pair(xs, r * k, k, wf, wb, bf[c:], os, r * COLUMNS)
            if left % 2:
                _one(xs, (left - 1) * k, k, wf, wb, bf[c:], os, (left - 1) * COLUMNS)
        for r in range(left):
            for j in range(min(COLUMNS, n - c)):
                of[(full + r) * n + c + j] = os[r * COLUMNS + j]


def pack(w: np.ndarray) -> np.ndarray:
    """The weight ``(N, K)`` as ``(panels, K, 64)`` float32: panel ``p``'s 64 output columns
    side by side for each ``k``, zeros past ``N``.

    >>> pack(np.ones((80, 3), np.float32)).shape
    (2, 3, 64)
    """
    return pack_kn(w.T)


def pack_kn(m: np.ndarray) -> np.ndarray:
    """:func:`pack` of the weight ``mᵀ`` from ``m (K, N)`` (for ``x @ m``): panel ``p`` is
    columns ``64p .. 64p + 63`` of ``m``'s rows, so a C-contiguous ``m`` is copied in runs
    of 64 (a quarter of the time of :func:`pack` on its transposed copy)."""
    k, n = m.shape
    panels = -(-n // COLUMNS)
    if n % COLUMNS:
        padded = np.zeros((k, panels * COLUMNS), F)
        padded[:, :n] = m
        m = padded
    return np.ascontiguousarray(m.reshape(k, panels, COLUMNS).transpose(1, 0, 2), F)


def unpack(packed: np.ndarray, n: int) -> np.ndarray:
    """:func:`pack`'s inverse: the ``(N, K)`` weight."""
    return np.ascontiguousarray(packed.transpose(0, 2, 1).reshape(-1, packed.shape[1])[:n])


def wanted(rows: int | None, k: int, n: int) -> bool:
    """Whether the packed loop takes a float32 linear of ``rows`` rows (None: symbolic),
    ``K`` inputs and ``N`` outputs: with Numba on a host with AVX-512, at least
    ``MIN_OUTPUTS`` (a narrower layer leaves most lanes of its panel idle), 16 inputs and
    ``MIN_ROWS`` rows (fewer: a GEMV's work, which the BLAS and the batch-1 loop run from
    the weight's rows), and ``MIN_MACS`` multiply-adds where the rows are static (below,
    the call's fixed cost of a few microseconds outweighs the gain)."""
    return (n >= MIN_OUTPUTS and k >= 16
            and (rows is None or (rows >= MIN_ROWS and rows * k * n >= MIN_MACS))
            and numba_available() and isa.vector_registers() >= 32)


def constant_wins(rows: int | None, k: int, n: int) -> bool:
    """Whether the lowering rule packs a constant ``(N, K)`` weight for a float32 linear of
    ``rows`` rows (None: symbolic): :func:`wanted`, and every panel full (``N`` a multiple
    of 64). A partial panel's idle lanes cost a whole panel's multiply-adds: on an Intel
    Xeon (loaded, one thread) OpenBLAS's NN product on the ``(K, N)`` weight ran 1.1-2x
    faster than the loop at N 32-160 not a multiple of 64 (24-3136 rows, K 40-320:
    3136 x 48 x 40 124 against 196 us, 3136 x 160 x 40 399 against 548), level or slower
    at N 192 and 320."""
    return n % COLUMNS == 0 and wanted(rows, k, n)


def per_call(rows: int, k: int, n: int) -> bool:
    """Whether a float32 product ``(rows, K) @ (K, N)`` on a matrix that changes between
    calls (a trained layer's weight, packed at each call) runs faster here than through
    the BLAS: :func:`wanted`, every panel full (``N`` a multiple of 64), and a short sum
    (``K`` at most ``PER_CALL_DEPTH``) or a narrow product (``N`` at most two panels,
    ``NARROW_ROWS`` rows or more, its packed matrix at most ``NARROW_FLOATS``). OpenBLAS
    lays out both operands at every call, which a short sum does not pay back, while
    packing ``K x N`` costs a few microseconds: on an Intel Xeon 1.2-1.7x faster at 1024 x
    16..192 x 64..512 and 512 x 256 x 128 (the bias added in registers, not in a second
    pass). Past K 192 the loop's register block still wins where N is narrow: at 256-4096
    rows, K 256-1024, N 64 it took 0.8-0.9x OpenBLAS's time (the packing included, either
    operand layout), at N 128 and K up to 512 0.86-0.97x from 512 rows (level at 256); at
    128 rows, at K 1024 with N 128, and at N 192 and wider it ran level or slower (up to
    1.25x at N 512-1024, K 512-1024)."""
    if n % COLUMNS or not wanted(rows, k, n):
        return False
    narrow = n <= NARROW_COLUMNS and k * n <= NARROW_FLOATS and rows >= NARROW_ROWS
    return k <= PER_CALL_DEPTH or narrow


def product(x: np.ndarray, packed: np.ndarray, n: int, bias: np.ndarray | None = None,
            out: np.ndarray | None = None) -> np.ndarray:
    """``x (..., K) @ Wᵀ (+ bias)`` for the ``(N, K)`` weight packed by :func:`pack`, into
    ``out (..., N)`` (fresh where None or not C-contiguous); float32, :func:`wanted`."""
    k = x.shape[-1]
    rows = np.ascontiguousarray(x, F).reshape(-1, k)
    shape = (*x.shape[:-1], n)
    if out is None or not out.flags.c_contiguous or out.dtype != F:
        out = np.empty(shape, F)
    b = np.zeros(packed.shape[0] * COLUMNS, F)
    if bias is not None:
        b[:n] = bias
    if rows.shape[0]:
        band = max(ROWS, BAND_BYTES // (4 * k) // ROWS * ROWS)
        scratch = np.empty((packed.shape[0], scratch_floats(k)), F)
        run_rows(_panels, packed.shape[0], *flat_args(rows, packed, b, out.reshape(-1, n),
                                                      band, scratch),
                 threads=threads_for(rows.shape[0] * k * n // 32))
    return out


class Product:
    """:func:`product` for one matrix ``m (K, N)`` over many calls of one kind, ``x (rows,
    K) @ m`` into ``out (rows, N)``, both C-contiguous float32 (a recurrence's steps): the
    packing (:func:`pack_kn`), the zero bias, the band, the loop's scratch and the thread
    count worked out once, and for one thread the compiled loop's entry kept, so that a
    call is the loop alone (one call at a time: the scratch is the object's)."""

    def __init__(self, m: np.ndarray, rows: int):
        k, n = m.shape
        self.packed = pack_kn(m)
        self.bias = np.zeros(self.packed.shape[0] * COLUMNS, F)
        self.band = max(ROWS, BAND_BYTES // (4 * k) // ROWS * ROWS)
        self.scratch = np.empty((self.packed.shape[0], scratch_floats(k)), F)
        self.threads = threads_for(rows * k * n // 32)
        self.entry = None

    def __call__(self, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        args = (0, self.packed.shape[0],
                *flat_args(x, self.packed, self.bias, out, self.band, self.scratch))
        if self.threads != 1:
            run_rows(_panels, *args[1:], threads=self.threads)
        else:
            if self.entry is None:
                self.entry = _panels.entry(*args)
            self.entry(*args)
        return out

