"""Products ``a @ b`` split into independent single-threaded ``sgemm`` calls, shared
between this thread and OpenBLAS's worker (``blas_threads.py``), with OpenBLAS held at one
thread of its own meanwhile: the GEMMs of 1x1 convolutions by columns (:func:`fitted`),
and 2-D products (``linear``'s and its gradients', ``matmul``'s) by rows
(:func:`by_rows`), on two cores without OpenBLAS's threaded GEMM.

Why not OpenBLAS's own threads: its threaded GEMM runs its jobs in lockstep (each job
packs a panel of ``b`` that the others wait for, block after block), so a worker the OS
has not scheduled holds the caller up at every block, not once: on these two cores under
load a (24, 144) @ (144, 50176) product took 72 ms on two threads against 16 ms on one
(docs/benchmarks.md). Here each part is a whole product of its own columns, so a late
worker costs at most one wait, and the relay's back-off (``tuning.Backoff``) then runs the
next calls alone. And small products, where the hand-off costs more than it saves, stay
on one thread (``SHARE_MIN``), as OpenBLAS would otherwise thread anything above 2^18
multiply-adds.

Bits: the parts are fixed by the shapes alone (``_parts_of``, never by the load), and each
is summed along its depth in one ``sgemm``, so a product taken here gives the same bits
whether its parts are shared or run alone (the relay backing off on a busy host). At one
thread (``dg.set_num_threads(1)``) products are left to ``np.matmul``, unsplit, which may
round differently in the last places (OpenBLAS's small-matrix kernel and blocking), as
OpenBLAS's own one- and two-thread GEMMs always did.
"""
from __future__ import annotations

import numpy as np

from . import blas_threads, loop, native, numba_available, tuning
from .batched import NO_TRANS, _layout, _sgemm
from .threads import run_rows

# Below this many multiply-adds a product runs on one thread: measured best of 15 on two
# cores, OpenBLAS's two threads gained nothing on (192, 32) @ (32, 784) (4.8M) and
# 10-15% on 2.4-4.8M of other shapes, with a stall risk of milliseconds on a busy host.
SHARE_MIN = 1 << 22
# The column parts of one product where the stack alone does not split evenly: two halves
# (the cores this is tuned for); at least MIN_COLUMNS columns a part.
PARTS, MIN_COLUMNS = 2, 16
# The fewest multiply-adds of a row range (:func:`by_rows`): past the products OpenBLAS
# gives its small-matrix kernel (up to 10^6 on AVX-512), which sums in another order, so
# that every range runs the blocked kernel the whole product runs on one thread.
RANGE_MIN = 1 << 21


@loop
def _parts(start, stop, w):
    """Parts ``start:stop`` of a stack of products, one ``sgemm`` each. ``w``: sgemm's
    address; ``a``'s pointer, slice bytes (0: one matrix for the stack), leading dim and
    CBLAS flag; the same four for ``b``; ``c``'s pointer, slice bytes and leading dim;
    m, n, k; parts per product and columns per part."""
    for i in range(start, stop):
        s, p = i // w[15], i % w[15]
        j0 = p * w[16]
        cols = min(w[13], j0 + w[16]) - j0
        b_step = 4 * j0 if w[8] == 111 else 4 * j0 * w[7]     # (111: CBLAS's NoTrans)
        _sgemm(w[0], w[4], w[8], w[12], cols, w[14], w[1] + s * w[2], w[3],
               w[5] + s * w[6] + b_step, w[7], w[9] + s * w[10] + 4 * j0, w[11])


def _parts_of(stack: int, n: int, macs: int) -> int:
    """Column parts per product of a stack of ``macs`` multiply-adds in all: the products
    whole where the stack is never shared (below ``SHARE_MIN``) or splits evenly between
    two threads, else two halves of at least ``MIN_COLUMNS`` columns. (The shapes alone
    decide: the bits never depend on the thread count or the load.)"""
    if macs < SHARE_MIN or stack % PARTS == 0 or n < PARTS * MIN_COLUMNS:
        return 1
    return PARTS


def _run(words: np.ndarray, rows: int, macs: int) -> None:
    """``_parts`` over ``rows`` parts: shared where ``macs`` reaches ``SHARE_MIN``, with
    OpenBLAS's own threads held back either way."""
    with tuning.blas_alone():
        run_rows(_parts, rows, words,
                 threads=blas_threads.count() if macs >= SHARE_MIN else 1)


def fitted(m: int, k: int, stack: int, n: int):
    """``shared(a, b, out) -> bool``: ``a @ b`` into ``out`` for a node fitted to static
    shapes (``a (m, k)``, ``b (stack, k, n)``, ``out (stack, m, n)``, float32,
    C-contiguous), in parts shared between this thread and OpenBLAS's worker when it has
    ``SHARE_MIN`` multiply-adds, else on this thread alone, OpenBLAS held at one thread
    either way; True when done. False (nothing done) where it is not wanted: products
    OpenBLAS would not thread (2^18 multiply-adds or fewer), one thread, no native
    ``sgemm``, an operand not C-contiguous or ``out`` on an operand, so the caller runs
    its own product. The shapes are decided here, once; the thread count at each call."""
    macs = m * k * n
    if not (m >= 2 and n >= 2 and macs > 1 << 18 and numba_available()
            and native.enabled()):
        return lambda a, b, out: False
    parts = _parts_of(stack, n, macs * stack)
    # (C-contiguous a (m, k) for the whole stack, b (stack, k, n), out (stack, m, n))
    layout = (0, 0, k, NO_TRANS, 0, 4 * k * n, n, NO_TRANS, 0, 4 * m * n, n, m, n, k, parts,
              -(-n // parts))     # (the pointers, words 1, 5 and 9, set at each call)

    def shared(a, b, out) -> bool:
        sgemm = blas_threads.sgemm_address()
        if (sgemm is None or blas_threads.count() < 2 or not a.flags.c_contiguous
                or not b.flags.c_contiguous or not out.flags.c_contiguous
                or out.ctypes.data in (a.ctypes.data, b.ctypes.data)):
            return False
        words = np.array((sgemm, *layout), np.int64)
        words[[1, 5, 9]] = a.ctypes.data, b.ctypes.data, out.ctypes.data
        _run(words, stack * parts, macs * stack)
        return True
    return shared


@loop
def _row_range(start, stop, w):
    """Rows ``start:stop`` of ``c = a @ b`` in one ``sgemm``. ``w``: sgemm's address;
    ``a``'s pointer, leading dim and CBLAS flag; the same three for ``b``; ``c``'s pointer
    and leading dim; n and k."""
    if start < stop:
        a_step = w[2] if w[3] == NO_TRANS else 1      # (a transposed: a row is a column)
        _sgemm(w[0], w[3], w[6], stop - start, w[9], w[10], w[1] + 4 * start * a_step,
               w[2], w[4], w[5], w[7] + 4 * start * w[8], w[8])


def by_rows(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray | None:
    """``a @ b`` for float32 matrices of ``SHARE_MIN`` multiply-adds or more, in ranges of
    rows, one single-threaded ``sgemm`` each, shared between this thread and OpenBLAS's
    worker (OpenBLAS's own threads held back meanwhile), into ``out`` where given
    (C-contiguous float32 of the result's shape, apart from the operands). None (nothing
    done) where the caller's ``np.matmul`` runs it: one thread, little work, a row or a
    column (NumPy's GEMV), an operand that is not a matrix or its transpose as one
    ``sgemm`` reads it, one buffer twice (NumPy's SYRK), no native ``sgemm``.

    The bits are ``np.matmul``'s on one thread, however many ranges and whether shared or
    run alone (the relay backing off): each element is summed along ``k`` by the blocked
    kernel of the whole product, whose blocking of ``k`` depends on ``k`` alone, and every
    range has ``RANGE_MIN`` multiply-adds (OpenBLAS's own threaded GEMM gives other bits
    on some shapes)."""
    if a.ndim != 2 or b.ndim != 2:
        return None
    (m, k), n = a.shape, b.shape[1]
    macs = m * k * n
    if macs < SHARE_MIN or m < 2 or n < 2:
        return None
    ranges = min(blas_threads.count(), macs // RANGE_MIN)
    if (ranges < 2 or a.dtype != np.float32 or b.dtype != np.float32
            or not (numba_available() and native.enabled())):
        return None
    sgemm, la, lb = blas_threads.sgemm_address(), _layout(a), _layout(b)
    if sgemm is None or la is None or lb is None or np.may_share_memory(a, b):
        return None
    if out is None:
        out = np.empty((m, n), np.float32)
    elif (out.shape != (m, n) or out.dtype != np.float32 or not out.flags.c_contiguous
          or np.may_share_memory(out, a) or np.may_share_memory(out, b)):
        return None
    words = np.array((sgemm, a.ctypes.data, *la[4:], b.ctypes.data, *lb[4:],
                      out.ctypes.data, n, n, k), np.int64)
    with tuning.blas_alone():
        run_rows(_row_range, m, words, threads=ranges)
    return out
