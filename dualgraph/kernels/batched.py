"""Stacks of small matrix products (attention's ``q @ kᵀ`` and ``p @ v``) on two cores.

NumPy computes ``a @ b`` for stacks of matrices one OpenBLAS ``sgemm`` per matrix, and a
64 x 32 x 64 product (one attention head's) is below OpenBLAS's threading threshold, so
the whole stack runs on one core. Here the same ``sgemm`` calls, with the same arguments
(row-major; an operand that is a transposed view passed as transposed, as NumPy does),
are shared by slices between this thread and OpenBLAS's worker (``blas_threads.py``, the
``"blas"`` trick of ``tuning.py``): the same bits as NumPy's, on two cores.

A job calls ``sgemm`` on OpenBLAS's worker, so the product must run there single-threaded,
as it would on one core: an ``sgemm`` bigger than OpenBLAS's threshold (65536 x
``GEMM_MULTITHREAD_THRESHOLD``, 4 in its default build, multiply-adds) would hand work to
the worker it runs on. Slices are kept to half that (``MAX_SLICE``).
"""
from __future__ import annotations

import math

import numpy as np

from . import Intrinsic, blas_threads, loop, native, numba_available
from .threads import run_rows

MAX_SLICE = 1 << 17       # multiply-adds of one slice's product (see the docstring)
MIN_TOTAL = 1 << 19       # a smaller stack is not worth handing half of to another thread
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112   # CBLAS's enums
_WORDS = 18               # a product's words, in the order ``sgemm_slices`` reads them


def _emit_sgemm(builder, args, beta):
    """The call ``c = a @ b + beta * c`` by the CBLAS ``sgemm`` at address ``args[0]``
    (64-bit integers, row-major, alpha 1), ``args`` as the intrinsics below take them."""
    from llvmlite import ir
    i32, f32 = ir.IntType(32), ir.FloatType()
    floats = f32.as_pointer()
    kind = ir.FunctionType(ir.VoidType(), [i32, i32, i32] + [ir.IntType(64)] * 3 + [
        f32, floats, ir.IntType(64), floats, ir.IntType(64), f32, floats, ir.IntType(64)])
    call = builder.inttoptr(args[0], kind.as_pointer())
    fn, ta, tb, m, n, k, a, lda, b, ldb, c, ldc = args[:12]
    builder.call(call, [i32(ROW_MAJOR), builder.trunc(ta, i32), builder.trunc(tb, i32),
                        m, n, k, f32(1.0), builder.inttoptr(a, floats), lda,
                        builder.inttoptr(b, floats), ldb, beta,
                        builder.inttoptr(c, floats), ldc])


@Intrinsic
def _sgemm(typingctx, function, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc):
    """``c = a @ b`` by the CBLAS ``sgemm`` at address ``function`` (64-bit integers,
    row-major, alpha 1, beta 0); the matrices are data pointers, ``trans_*`` CBLAS's
    enums."""
    from llvmlite import ir
    from numba.core import types

    def codegen(context, builder, signature, args):
        _emit_sgemm(builder, args, ir.FloatType()(0.0))
        return context.get_dummy_value()
    return types.void(*[types.int64] * 12), codegen


@Intrinsic
def sgemm_add(typingctx, function, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, add):
    """As ``_sgemm``, and where ``add`` is not 0 ``c += a @ b`` (sgemm's beta 1): one
    product summed over several calls without another pass."""
    from llvmlite import ir
    from numba.core import types

    def codegen(context, builder, signature, args):
        f32 = ir.FloatType()
        beta = builder.select(builder.icmp_signed("!=", args[12], ir.IntType(64)(0)),
                              f32(1.0), f32(0.0))
        _emit_sgemm(builder, args, beta)
        return context.get_dummy_value()
    return types.void(*[types.int64] * 13), codegen


@loop
def sgemm_slices(start, stop, w):
    """The slices ``start:stop`` of a stacked product, one ``sgemm`` each. ``w`` holds the
    ``_WORDS`` int64 words :func:`matmul` writes: sgemm's address; for ``a`` and ``b``
    their data pointer, the two-level batch layout of :func:`_layout` (inner count, outer
    and inner slice bytes), leading dim and CBLAS transpose flag; ``c``'s data pointer and
    slice bytes; m, n, k."""
    for i in range(start, stop):
        a = w[1] + (i // w[2]) * w[3] + (i % w[2]) * w[4]
        b = w[7] + (i // w[8]) * w[9] + (i % w[8]) * w[10]
        _sgemm(w[0], w[6], w[12], w[15], w[16], w[17], a, w[5], b, w[11],
               w[13] + i * w[14], w[16])


def _layout(x: np.ndarray):
    """How ``sgemm`` reads each matrix of the float32 stack ``x``: ``(slices, inner count,
    outer bytes, inner bytes, leading dim, CBLAS flag)``, slice ``i`` starting at
    ``(i // inner) * outer + (i % inner) * inner_bytes``. Each matrix must be one BLAS
    reads as it is (unit stride along its rows, or along its columns: a transposed view),
    as NumPy requires to call the BLAS; the batch dims at most two strides once the ones
    that nest evenly are merged (attention's (batch, heads) of a reshaped projection).
    None otherwise."""
    *batch, rows, cols = x.shape
    *batch_strides, row_stride, col_stride = x.strides
    if col_stride == 4 and row_stride % 4 == 0 and row_stride >= 4 * cols:
        flag, ld = NO_TRANS, row_stride // 4
    elif row_stride == 4 and col_stride % 4 == 0 and col_stride >= 4 * rows:
        flag, ld = TRANS, col_stride // 4
    else:
        return None
    levels = []                          # (count, bytes), outermost first
    for count, stride in zip(batch, batch_strides):
        if count == 1:
            continue
        if levels and levels[-1][1] == stride * count:
            levels[-1] = (levels[-1][0] * count, stride)
        else:
            levels.append((count, stride))
    if len(levels) > 2:
        return None
    levels = [(1, 0)] * (2 - len(levels)) + levels
    (outer, outer_bytes), (inner, inner_bytes) = levels
    return outer * inner, inner, outer_bytes, inner_bytes, ld, flag


def wanted(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether :func:`matmul` would share ``a @ b`` between threads: float32 stacks of one
    batch shape (no broadcasting) of products of at most ``MAX_SLICE`` multiply-adds each,
    ``MIN_TOTAL`` in all, with OpenBLAS's threads and its 64-bit ``sgemm`` at hand, and
    native entries (Numba installed and on, ``DUALGRAPH_NATIVE`` not 0)."""
    if a.ndim < 3 or a.ndim != b.ndim or a.shape[:-2] != b.shape[:-2]:
        return False
    if a.dtype != np.float32 or b.dtype != np.float32:
        return False
    (m, k), n = a.shape[-2:], b.shape[-1]
    if m < 2 or n < 2:               # (NumPy multiplies a row or a column by a GEMV)
        return False
    slice_macs = m * k * n
    return (0 < slice_macs <= MAX_SLICE and slice_macs * math.prod(a.shape[:-2]) >= MIN_TOTAL
            and numba_available() and native.enabled() and blas_threads.count() > 1
            and blas_threads.sgemm_address() is not None)


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray | None:
    """``a @ b`` for stacks :func:`wanted` accepts, its slices shared between this thread
    and OpenBLAS's worker (``threads.run_rows``), written into ``out`` when given (a
    C-contiguous float32 array of the result's shape); None (nothing done) where an
    operand's layout is not one ``sgemm`` takes as it is, or where both are one buffer."""
    la, lb = _layout(a), _layout(b)
    if la is None or lb is None or a.ctypes.data == b.ctypes.data:
        return None   # (one buffer twice: NumPy takes ``x.T @ x`` as a syrk, other bits)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if out is None:
        out = np.empty(a.shape[:-1] + (n,), np.float32)
    words = np.array((blas_threads.sgemm_address(), a.ctypes.data, *la[1:], b.ctypes.data,
                      *lb[1:], out.ctypes.data, 4 * m * n, m, n, k), np.int64)
    assert words.size == _WORDS
    run_rows(sgemm_slices, la[0], words, threads=blas_threads.count())
    return out
