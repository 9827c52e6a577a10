"""Matrix products that the BLAS runs slowly: ``A Bᵀ`` with few rows and very long ones.

A convolution's weight gradient is such a product: ``(Cout, N*Ho*Wo) @ (N*Ho*Wo, Cin*kh*kw)``.
For LeNet's first layer that is 6 x 25 outputs, each a dot product of 57k elements;
OpenBLAS took 0.8-1.1 ms for it here (16 GFLOP/s), this loop 0.34 ms. With more outputs
(16 x 150 for the second layer) the BLAS is faster again, so callers use :func:`wanted`.
"""
from __future__ import annotations

import numpy as np

from . import enabled, helper, loop

# The loop wins where the output is small and the rows long (measured: 6 x 25 x 57k 2.4x
# faster, 5 x 7 x 10k 5x; 16 x 150 x 9k 1.4x slower).
MAX_OUTPUTS, MIN_LENGTH = 512, 4096
_BLOCK = 2048     # columns per pass: a block of every row stays in the L2 cache


def wanted(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether :func:`a_bt` should compute ``a @ b.T`` for these 2-D operands."""
    return (a.shape[0] * b.shape[0] <= MAX_OUTPUTS and a.shape[1] >= MIN_LENGTH
            and enabled(a, b))


@loop(fastmath={"reassoc", "nsz", "contract"})
def a_bt(a, b, out):
    """``out = a @ b.T`` for C-contiguous float32 ``a (M, L)``, ``b (N, L)``: per block of
    columns, 2 x 4 tiles of outputs summed in registers (each loaded element of ``a`` and
    ``b`` feeds 4 and 2 products), then the leftover rows and columns one by one."""
    m, length = a.shape
    n = b.shape[0]
    for i in range(m):
        for j in range(n):
            out[i, j] = 0
    for s in range(0, length, _BLOCK):
        e = min(s + _BLOCK, length)
        for i in range(0, m - 1, 2):
            a0, a1 = a[i, s:e], a[i + 1, s:e]
            for j in range(0, n - 3, 4):
                b0, b1, b2, b3 = b[j, s:e], b[j + 1, s:e], b[j + 2, s:e], b[j + 3, s:e]
                c00 = c01 = c02 = c03 = c10 = c11 = c12 = c13 = np.float32(0)
                for k in range(e - s):
                    x0, x1 = a0[k], a1[k]
                    y0, y1, y2, y3 = b0[k], b1[k], b2[k], b3[k]
                    c00 += x0 * y0
                    c01 += x0 * y1
                    c02 += x0 * y2
                    c03 += x0 * y3
                    c10 += x1 * y0
                    c11 += x1 * y1
                    c12 += x1 * y2
                    c13 += x1 * y3
                out[i, j] += c00
                out[i, j + 1] += c01
                out[i, j + 2] += c02
                out[i, j + 3] += c03
                out[i + 1, j] += c10
                out[i + 1, j + 1] += c11
                out[i + 1, j + 2] += c12
                out[i + 1, j + 3] += c13
            for j in range(n - n % 4, n):
                for r in range(i, i + 2):
                    out[r, j] += _dot(a[r, s:e], b[j, s:e])
        if m % 2:
            for j in range(n):
                out[m - 1, j] += _dot(a[m - 1, s:e], b[j, s:e])


@helper(inline="always")
def _dot(x, y):
    total = np.float32(0)
    for k in range(x.size):
        total += x[k] * y[k]
    return total
