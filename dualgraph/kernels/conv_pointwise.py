"""A 1x1 convolution (no padding, any stride) with its epilogue, as OpenBLAS ``sgemm``
calls on blocks of output positions, each block's bias, activation and residual applied
while the block is still in L2; one compiled loop over the whole batch.

A 1x1 conv of an image is the GEMM ``w (Cout, C) @ x (C, H*W)``. As one GEMM over the
batch followed by the epilogue's pass (``epilogue.pointwise``), the product of a large
plane (96 channels of 112x112 are 4.8 MB) leaves L2 before the epilogue reads it back,
and a batch's outputs leave it whatever their planes. Here each image's positions are cut
into blocks of whole output rows whose input and output columns fit ``BLOCK_BYTES``: one
``sgemm`` per block and group (BLAS reads the block's columns of the input plane in place,
leading dimension ``H*W``, and writes them into the output planes, leading dimension
``Ho*Wo``), then :func:`epilogue.plane_tail` on each output channel's run of the block.

With strides above 1 the block's input columns are gathered first (row ``r`` of the
output reads every ``sh``-th input row at every ``sw``-th column) into a scratch block
that stays in cache for its GEMM: a quarter of the input at stride 2, read once, instead
of an im2col of the whole batch or the tiles' columns and their scatter.

Bits: each output element is one ``sgemm`` dot product over the input channels, as in
``epilogue.pointwise`` (OpenBLAS splits a product by rows and columns, never along its
depth), then the same epilogue arithmetic.
"""
from __future__ import annotations

import numpy as np

from . import blas_threads, loop, native, numba_available
from .batched import NO_TRANS, sgemm_add
from .epilogue import plane_tail

# A block's input and output columns (bytes): within this CPU's 512 kB L2 with the packed
# weight panel OpenBLAS keeps beside them.
BLOCK_BYTES = 256 << 10
# Stride 1 is blocked only where the batch's output is larger than this (it would leave
# L2 before the epilogue's pass: a 24-channel output of 56x56, 301 kB, measured 1.1x the
# time blocked), and a block is at least MIN_POSITIONS wide (narrower GEMMs ran slower:
# 576 channels of 14x14 at batch 16 in blocks of 84 positions, 1.07-1.1x).
MIN_OUTPUT_BYTES = 512 << 10
MIN_POSITIONS = 256


@loop
def _blocks(start, stop, x, w, out, scratch, bias, residual, sgemm, rows, sh, sw, act, lo,
            hi, where):
    """Items ``start:stop`` of ``out (N, Cout, Ho*Wo)`` = ``act(w @ x + bias (+ r))``, an
    item being an image's block of ``rows`` output rows; ``x (N, C, H, W)``, ``w (G,
    Cout/G, C/G)``, ``scratch (C, rows*Wo)`` (read where a stride is above 1),
    ``residual (N, Cout, Ho*Wo)`` (``where`` as in ``epilogue.planes``; else any 3-D
    array)."""
    n_in, c, h, wd = x.shape
    groups, cog, cg = w.shape
    cout, positions = out.shape[1], out.shape[2]
    ho = (h - 1) // sh + 1
    wo = positions // ho
    per = (ho + rows - 1) // rows
    strided = sh != 1 or sw != 1
    for item in range(start, stop):
        n, r0 = item // per, (item % per) * rows
        r1 = min(ho, r0 + rows)
        p0, width = r0 * wo, (r1 - r0) * wo
        if strided:
            for ch in range(c):
                for r in range(r0, r1):
                    src, dst = x[n, ch, r * sh], scratch[ch, (r - r0) * wo:(r - r0 + 1) * wo]
                    for v in range(wo):
                        dst[v] = src[v * sw]
            source, lead = scratch.ctypes.data, scratch.shape[1]
        else:
            source, lead = x.ctypes.data + 4 * (n * c * h * wd + p0), h * wd
        target = out.ctypes.data + 4 * (n * cout * positions + p0)
        for g in range(groups):
            sgemm_add(sgemm, NO_TRANS, NO_TRANS, cog, width, cg,
                      w.ctypes.data + 4 * g * cog * cg, cg, source + 4 * g * cg * lead,
                      lead, target + 4 * g * cog * positions, positions, 0)
        q0, q1 = (p0, p0 + width) if where else (0, 1)   # (no residual: one element)
        for k in range(cout):
            plane_tail(out[n, k, p0:p0 + width], bias[k],
                       residual[n if where else 0, k if where else 0, q0:q1], act, lo, hi,
                       where)


def available() -> bool:
    """Numba's native entries and OpenBLAS's 64-bit ``sgemm`` at hand."""
    return numba_available() and native.enabled() and blas_threads.sgemm_address() is not None


def wanted(x_shape, cout: int, stride) -> bool:
    """Whether :func:`fitted` pays for a 1x1 conv of an input of ``x_shape`` into ``cout``
    channels: strides above 1 (the input gathered a block at a time), or outputs that do
    not stay in L2 until the epilogue's pass (more than ``MIN_OUTPUT_BYTES`` in all)."""
    n, c, h, w = x_shape
    ho, wo = (h - 1) // stride[0] + 1, (w - 1) // stride[1] + 1
    return tuple(stride) != (1, 1) or 4 * n * cout * ho * wo > MIN_OUTPUT_BYTES


def fitted(x_shape: tuple, cout: int, groups: int, stride, act: int, bounds: tuple,
           where: int):
    """``run(x, w, bias, residual, out)`` for float32 inputs of the static ``x_shape``
    (N, C, H, W), weights ``(cout, C/G, 1, 1)``, a bias of ``cout`` and a residual of
    the output's shape where ``where`` is not 0 (else None), writing ``out (N, cout, Ho,
    Wo)``: the loop's compiled entry, looked up at the first call, over every block of
    the batch on this thread (each ``sgemm`` uses OpenBLAS's own threads)."""
    n, c, h, wd = x_shape
    (sh, sw), ho, wo = stride, (h - 1) // stride[0] + 1, (wd - 1) // stride[1] + 1
    rows = min(ho, max(BLOCK_BYTES // (4 * (c + cout) * wo), -(-MIN_POSITIONS // wo)))
    items = n * -(-ho // rows)
    scratch_shape = (c, rows * wo) if (sh, sw) != (1, 1) else (1, 1)
    lo, hi = np.float32(bounds[0]), np.float32(bounds[1])
    no_residual = np.zeros((1, 1, 1), np.float32)
    w_view, entry = (groups, cout // groups, c // groups), []

    def run(x, w, bias, residual, out):
        args = (np.ascontiguousarray(x), np.ascontiguousarray(w).reshape(w_view),
                out.reshape(n, cout, ho * wo), np.empty(scratch_shape, np.float32),
                np.ascontiguousarray(bias),
                no_residual if residual is None
                else np.ascontiguousarray(residual).reshape(n, cout, ho * wo),
                blas_threads.sgemm_address(), rows, sh, sw, act, lo, hi, where)
        if not entry:
            entry.append(_blocks.entry(0, items, *args))
        entry[0](0, items, *args)
        return out
    return run
