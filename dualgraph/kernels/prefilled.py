"""A linear layer's bias (and residual) written where its product goes, then the product
added to it by one ``sgemm`` with beta 1: ``c = x @ w.T + c``.

OpenBLAS runs ``sgemm`` with beta 0 as a pass that zeroes ``c`` and then the product added
to it; NumPy's ``x @ w.T`` then ``+= b`` (and ``+= r``) reads and writes the result once
more for each. Written first, the bias (or ``r + b``) takes the zeroing pass's place and
the product's own stores add it: one pass over the result instead of two or three
(measured on the Zen 4 VM, one thread: 197x192x576 with its bias 489 -> 461 us, 128x256x768
612 -> 593; with a residual 197x768x192 729 -> 692, 128x1024x256 831 -> 767:
docs/benchmarks.md). The sums are the same products in the same order; the bias and the
residual join them where sgemm adds ``c`` (after each block of ``K``), not last.
"""
from __future__ import annotations

import math

import numpy as np

from .batched import NO_TRANS, ROW_MAJOR, TRANS
from .blas_threads import sgemm_function


def _weight_layout(w: np.ndarray):
    """``(CBLAS flag, leading dim)`` that makes sgemm read ``w.T`` for a weight ``w (N, K)``
    laid out row-major (an NT product) or as the transpose of a row-major ``(K, N)`` array
    (``weights_kn``'s layout: an NN product); None for any other layout."""
    if w.flags.c_contiguous:
        return TRANS, w.shape[1]
    if w.T.flags.c_contiguous:
        return NO_TRANS, w.shape[0]
    return None


def wanted(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *residual) -> bool:
    """Whether :func:`linear` takes ``x @ w.T (+ b) (+ r)``: float32 operands whose shapes
    fit (``x (..., K)``, ``w (N, K)``, ``b (N,)``, ``r`` of the result's shape: sgemm reads
    raw pointers, so a misfit must go to NumPy's path, which raises the shape error), a
    2-D weight read as it is, ``x`` C-contiguous with rows to multiply, OpenBLAS's
    ``sgemm`` at hand."""
    return (x.dtype == w.dtype == np.float32 and w.ndim == 2 and x.ndim >= 1
            and x.shape[-1] == w.shape[1]
            and (b is None or (b.dtype == np.float32 and b.shape == w.shape[:1]))
            and all(r.dtype == np.float32 and r.shape == x.shape[:-1] + w.shape[:1]
                    for r in residual)
            and x.flags.c_contiguous and x.size > 0 and w.size > 0
            and _weight_layout(w) is not None and sgemm_function() is not None)


def linear_into(x: np.ndarray, w: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out += x @ w.T`` (``x (..., K)`` C-contiguous float32, ``w (N, K)`` as
    :func:`wanted` takes it, ``out (..., N)`` C-contiguous float32, holding the bias or the
    residual already); returns ``out``."""
    k, n = w.shape[1], w.shape[0]
    m = x.size // k
    flag, ldw = _weight_layout(w)
    sgemm_function()(ROW_MAJOR, NO_TRANS, flag, m, n, k, 1.0, x.ctypes.data, k, w.ctypes.data, ldw,
             1.0, out.ctypes.data, n)
    return out


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray, r: np.ndarray | None = None,
           out: np.ndarray | None = None):
    """``x @ w.T + b`` (``+ r``) in ``out`` (a planned C-contiguous float32 array of the
    result's size, overlapping no operand: ``OpDef.fills_out``) or a fresh array, the bias
    (``r + b``) written first and the product added to it by :func:`linear_into` (the
    caller checked :func:`wanted`; ``b (N,)`` and ``r`` of the result's shape, float32)."""
    shape = x.shape[:-1] + (w.shape[0],)
    if out is not None and out.dtype == np.float32 and out.size == math.prod(shape):
        out = out.reshape(shape)
    else:
        out = np.empty(shape, np.float32)
    if r is None:
        out[...] = b
    else:
        np.add(r, b, out=out)
    return linear_into(x, w, out)
