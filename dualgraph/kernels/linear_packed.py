"""A linear layer's product ``x @ Wᵀ`` (float32) on a weight packed once into panels of 32
output columns: no GEMM call, no copy of the weight per call.

:func:`pack` lays a weight ``(N, K)`` out as ``(panels, K, 32)``: panel ``p`` holds output
columns ``32p .. 32p + 31`` (zeros past ``N``), their ``K`` weights one row of 32 after
another, so the loop reads a panel as one contiguous run. The compiler makes that layout
once, from a constant weight (the lowering rule ``linear_packed``, ``passes/linears.py``);
a BLAS packs both operands at every call (OpenBLAS re-lays the whole weight each time).

The register block is six rows by 32 columns: per step of ``K`` four eight-lane weight
vectors are loaded, six values of ``x`` broadcast (a row of ``x`` is read along ``K``, in
order), and 24 multiply-adds issued into 24 sums that stay in registers. That needs the 32
vector registers of AVX-512 (24 sums, four weight vectors, a broadcast): on a CPU with 16
the sums would spill, so the rule takes linears only where the loops are compiled for
AVX-512VL (:func:`wanted`, ``isa.vector_registers``). A work item is a panel: its weights (``K * 128``
bytes) stay in the first or second level cache while a band of rows (up to
``BAND_BYTES`` of them) passes, and two threads take different panels. Rows past the last
block of six (one or two of them row by row, more as a zero-padded block of six) and
columns past ``N`` in the last panel go through a small scratch block, so one loop serves
every shape. Each output is a sum over ``k`` in order (one lane per column): it differs
from a BLAS's blocked sum in the last places only.
"""
from __future__ import annotations

import numpy as np

from . import helper, isa, loop, numba_available
from .simd import LANES, add, broadcast, broadcast_at, fma, load, store
from .threads import run_rows, threads_for

F = np.float32
COLUMNS = 4 * LANES     # output columns of one panel: four vectors
ROWS = 6                # rows of x summed at once
MIN_ROWS = 6            # the fewest rows of a product the rule packs the weight for
MIN_MACS = 1 << 18      # ... and the fewest multiply-adds (13 x 33 x 70: 6 us, OpenBLAS 3)
# Bytes of x's rows that pass through all the panels before the next rows: they stay in the
# second level cache (1 MB on Zen 4, 512 KB on Zen 2) beside a panel of up to ~3000 inputs
BAND_BYTES = 192 << 10


@helper(inline="always")
def _row(xf, at, wf, o, s0, s1, s2, s3):
    """One row's value ``xf[at]`` times a step's four weight vectors ``wf[o:o + 32]``,
    added to its four sums."""
    v = broadcast_at(xf, at)
    return (fma(v, load(wf, o), s0), fma(v, load(wf, o + LANES), s1),
            fma(v, load(wf, o + 2 * LANES), s2), fma(v, load(wf, o + 3 * LANES), s3))


@helper(inline="always")
def _put(of, at, bias, s0, s1, s2, s3):
    """A row's four sums plus the panel's bias vectors stored at ``of[at:at + 32]``."""
    store(of, at, add(s0, load(bias, 0)))
    store(of, at + LANES, add(s1, load(bias, LANES)))
    store(of, at + 2 * LANES, add(s2, load(bias, 2 * LANES)))
    store(of, at + 3 * LANES, add(s3, load(bias, 3 * LANES)))


@helper(inline="always")
def _block(xf, xb, k, wf, wb, bias, of, ob, ldo):
    """Six rows ``xf[xb + r*k : ...]`` (each ``k`` long) times the panel at ``wf[wb]``, plus
    ``bias`` (32), stored at ``of[ob + r*ldo : ... + 32]``: 24 sums in registers."""
    z = broadcast(F(0))
    a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = c0 = c1 = c2 = c3 = z
    d0 = d1 = d2 = d3 = e0 = e1 = e2 = e3 = f0 = f1 = f2 = f3 = z
    for j in range(k):
        o = wb + j * COLUMNS
        a0, a1, a2, a3 = _row(xf, xb + j, wf, o, a0, a1, a2, a3)
        b0, b1, b2, b3 = _row(xf, xb + k + j, wf, o, b0, b1, b2, b3)
        c0, c1, c2, c3 = _row(xf, xb + 2 * k + j, wf, o, c0, c1, c2, c3)
        d0, d1, d2, d3 = _row(xf, xb + 3 * k + j, wf, o, d0, d1, d2, d3)
        e0, e1, e2, e3 = _row(xf, xb + 4 * k + j, wf, o, e0, e1, e2, e3)
        f0, f1, f2, f3 = _row(xf, xb + 5 * k + j, wf, o, f0, f1, f2, f3)
    _put(of, ob, bias, a0, a1, a2, a3)
    _put(of, ob + ldo, bias, b0, b1, b2, b3)
    _put(of, ob + 2 * ldo, bias, c0, c1, c2, c3)
    _put(of, ob + 3 * ldo, bias, d0, d1, d2, d3)
    _put(of, ob + 4 * ldo, bias, e0, e1, e2, e3)
    _put(of, ob + 5 * ldo, bias, f0, f1, f2, f3)


@helper(inline="always")
def _one(xf, xb, k, wf, wb, bias, of, ob):
    """One row ``xf[xb:xb + k]`` times the panel at ``wf[wb]``, plus ``bias``, stored at
    ``of[ob:ob + 32]`` (a last row or two: four chains of sums, slower a row than
    :func:`_block`'s 24 but not padded to six rows)."""
    s0 = s1 = s2 = s3 = broadcast(F(0))
    for j in range(k):
        s0, s1, s2, s3 = _row(xf, xb + j, wf, wb + j * COLUMNS, s0, s1, s2, s3)
    _put(of, ob, bias, s0, s1, s2, s3)


@loop
def _panels(start, stop, x, wp, bias, out, band):
    """Panels ``start:stop`` of ``out (M, N) = x (M, K) @ W + bias`` for the packed
    ``wp (panels, K, 32)`` and ``bias`` padded to ``panels * 32``, ``band`` rows (a
    multiple of six) through all the panels before the next ``band``."""
    m, k = x.shape
    n = out.shape[1]
    xf, wf, of, bf = x.reshape(-1), wp.reshape(-1), out.reshape(-1), bias.reshape(-1)
    full = m - m % ROWS
    os = np.empty(ROWS * COLUMNS, F)        # a block of a partial panel or of the last rows
    for r0 in range(0, full, band):
        for p in range(start, stop):
            wb, c = p * k * COLUMNS, p * COLUMNS
            cols = min(COLUMNS, n - c)
            for i in range(r0, min(r0 + band, full), ROWS):
                if cols == COLUMNS:
                    _block(xf, i * k, k, wf, wb, bf[c:], of, i * n + c, n)
                else:
                    _block(xf, i * k, k, wf, wb, bf[c:], os, 0, COLUMNS)
                    for r in range(ROWS):
                        for j in range(cols):
                            of[(i + r) * n + c + j] = os[r * COLUMNS + j]
    if full == m:
        return
    xs = np.zeros(ROWS * k, F)              # the last rows, zero-padded to six
    xs[:(m - full) * k] = xf[full * k:]
    for p in range(start, stop):
        wb, c = p * k * COLUMNS, p * COLUMNS
        if m - full > 2:
            _block(xs, 0, k, wf, wb, bf[c:], os, 0, COLUMNS)
        else:
            for r in range(m - full):
                _one(xs, r * k, k, wf, wb, bf[c:], os, r * COLUMNS)
        for r in range(m - full):
            for j in range(min(COLUMNS, n - c)):
                of[(full + r) * n + c + j] = os[r * COLUMNS + j]


def pack(w: np.ndarray) -> np.ndarray:
    """The weight ``(N, K)`` as ``(panels, K, 32)`` float32: panel ``p``'s 32 output columns
    side by side for each ``k``, zeros past ``N``.

    >>> pack(np.ones((40, 3), np.float32)).shape
    (2, 3, 32)
    """
    n, k = w.shape
    panels = -(-n // COLUMNS)
    packed = np.zeros((panels * COLUMNS, k), F)
    packed[:n] = w
    return np.ascontiguousarray(packed.reshape(panels, COLUMNS, k).transpose(0, 2, 1))


def unpack(packed: np.ndarray, n: int) -> np.ndarray:
    """:func:`pack`'s inverse: the ``(N, K)`` weight."""
    return np.ascontiguousarray(packed.transpose(0, 2, 1).reshape(-1, packed.shape[1])[:n])


def wanted(rows: int | None, k: int, n: int) -> bool:
    """Whether the packed loop takes a float32 linear of ``rows`` rows (None: symbolic),
    ``K`` inputs and ``N`` outputs: with Numba on a host with AVX-512, at least 32 outputs
    (a narrower layer leaves lanes of every panel idle), 16 inputs and ``MIN_ROWS`` rows
    (fewer: a GEMV's work, which the BLAS and the batch-1 loop run from the weight's
    rows), and ``MIN_MACS`` multiply-adds where the rows are static (below, the call's
    fixed cost of a few microseconds outweighs the gain)."""
    return (n >= COLUMNS and k >= 16
            and (rows is None or (rows >= MIN_ROWS and rows * k * n >= MIN_MACS))
            and numba_available() and isa.vector_registers() >= 32)


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
        run_rows(_panels, packed.shape[0], rows, packed, b, out.reshape(-1, n), band,
                 threads=threads_for(rows.shape[0] * k * n // 32))
    return out


class Product:
    """:func:`product` for one weight ``w (N, K)`` over many calls of one kind, ``x (rows,
    K) @ Wᵀ`` into ``out (rows, N)``, both C-contiguous float32 (a recurrence's steps): the
    packing, the zero bias, the band and the thread count worked out once, and for one
    thread the compiled loop's entry kept, so that a call is the loop alone."""

    def __init__(self, w: np.ndarray, rows: int):
        n, k = w.shape
        self.packed = pack(w)
        self.bias = np.zeros(self.packed.shape[0] * COLUMNS, F)
        self.band = max(ROWS, BAND_BYTES // (4 * k) // ROWS * ROWS)
        self.threads = threads_for(rows * k * n // 32)
        self.entry = None

    def __call__(self, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        args = (0, self.packed.shape[0], x, self.packed, self.bias, out, self.band)
        if self.threads != 1:
            run_rows(_panels, *args[1:], threads=self.threads)
        else:
            if self.entry is None:
                self.entry = _panels.entry(*args)
            self.entry(*args)
        return out

