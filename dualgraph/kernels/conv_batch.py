"""A convolution's im2col GEMMs over a whole batch in one compiled call, a block of images
at a time: the block's columns written into one buffer, then, while they are in cache,
OpenBLAS's ``sgemm`` on them, called by address from the loop (``batched.sgemm_add``).

The blocked kernels of ``ops/conv.py`` do the same from Python, a block of images at a
time: an im2col loop call and a NumPy matmul per block, some 15-20 us of calls each,
which on small planes at a large batch is a millisecond per conv (as much as a fifth of
it); several images to a block make one wide GEMM, but then its ``(Cout, images, Ho*Wo)``
result is transposed into the output in another pass, and the weight gradient's partial
products are added to the sum in a third. Here:

- :func:`conv` (the forward, and the flipped-weight conv that is a stride-1 input
  gradient): per block and group, ``out[n, g] = wm[g] @ cols[g]``, written straight into
  the image's output planes where a block is one image (planes of 512 positions or more);
- :func:`weight_grad`: per block and group, ``gwt[g] += cols[g] @ g[n, g]ᵀ`` (sgemm's
  beta), the gradient transposed, ``(Cg*kh*kw, Cout/G)``: the GEMM's long side is then
  its rows, which OpenBLAS runs faster than the ``(Cout/G, Cg*kh*kw)`` form (16 x 144 x
  1024 per image: ~20% less time).

Only "same" convs (strides 1, output rows as wide as the input's), whose columns
:func:`conv_columns.same_columns` writes as runs of the input planes; other geometries'
columns were slower written by a loop than by NumPy's strided copy. Bits: each
output element is one sgemm's (the forward) or the sum over images in image order (the
weight gradient) on any thread count: the loop runs on the calling thread and OpenBLAS
splits each sgemm by rows and columns, never along its depth.
"""
from __future__ import annotations

import numpy as np

from . import blas_threads, loop, native, numba_available
from .batched import NO_TRANS, TRANS, sgemm_add
from .conv_columns import same_columns, same_width

# One image's columns at most (bytes): the buffer the GEMM reads stays in L2 or the last
# level cache. Larger images keep the blocked kernels' runs of rows.
MAX_IMAGE_BYTES = 1 << 20
# Small planes are taken several images to a GEMM, so that it has at least ``MIN_WIDTH``
# columns (a 64 x 576 x 64 product per 8x8 image ran ~10% slower than 8 images' at once),
# up to ``BLOCK_BYTES`` of columns.
MIN_WIDTH = 512
BLOCK_BYTES = 2 << 20


@loop
def _forward(start, stop, x, wm, out, buf, tile, block, sgemm, height, ho, wo, kh, kw, dh,
             dw, top, left):
    """Images ``start:stop`` of ``out (N, Cout, Ho*Wo)`` = ``wm (G, Cout/G, Kg)`` times
    the columns of each ``block`` of images (in ``buf``), one sgemm per block and group:
    straight into the output for a block of one image, else into ``tile`` and from there
    into each image's planes."""
    groups, cog, kg = wm.shape
    cout, positions = groups * cog, ho * wo
    for n0 in range(start, stop, block):
        n1 = min(n0 + block, stop)
        width = (n1 - n0) * positions
        cols = buf[:groups * kg * width].reshape(groups * kg, width)
        same_columns(0, cols.shape[0], x, cols, kh, kw, dh, dw, top, left, n0, 0, ho,
                     height)
        part = tile[:cout * width].reshape(cout, width)
        target, pitch = out.ctypes.data + 4 * n0 * cout * positions, positions
        if n1 - n0 > 1:
            target, pitch = part.ctypes.data, width
        for g in range(groups):
            sgemm_add(sgemm, NO_TRANS, NO_TRANS, cog, width, kg,
                      wm.ctypes.data + 4 * g * cog * kg, kg,
                      cols.ctypes.data + 4 * g * kg * width, width,
                      target + 4 * g * cog * pitch, pitch, 0)
        if n1 - n0 > 1:
            for n in range(n0, n1):
                for c in range(cout):
                    out[n, c] = part[c, (n - n0) * positions:(n - n0 + 1) * positions]


@loop
def _weight_grad(start, stop, x, gy, gwt, buf, tile, block, sgemm, height, ho, wo, kh, kw,
                 dh, dw, top, left):
    """``gwt (G, Kg, Cout/G)`` = the sum over the ``block``s of images ``start:stop`` of
    their columns (in ``buf``) times their output gradient ``gy (N, Cout, Ho*Wo)``
    (gathered into ``tile``, ``(Cout, block*Ho*Wo)``, for blocks of several images),
    transposed; one sgemm per block and group, the first writing, the others adding."""
    groups, kg, cog = gwt.shape
    cout, positions = groups * cog, ho * wo
    for n0 in range(start, stop, block):
        n1 = min(n0 + block, stop)
        width = (n1 - n0) * positions
        cols = buf[:groups * kg * width].reshape(groups * kg, width)
        same_columns(0, cols.shape[0], x, cols, kh, kw, dh, dw, top, left, n0, 0, ho,
                     height)
        source = gy.ctypes.data + 4 * n0 * cout * positions
        if n1 - n0 > 1:
            part = tile[:cout * width].reshape(cout, width)
            for n in range(n0, n1):
                for c in range(cout):
                    part[c, (n - n0) * positions:(n - n0 + 1) * positions] = gy[n, c]
            source = part.ctypes.data
        for g in range(groups):
            sgemm_add(sgemm, NO_TRANS, TRANS, kg, cog, width,
                      cols.ctypes.data + 4 * g * kg * width, width,
                      source + 4 * g * cog * width, width,
                      gwt.ctypes.data + 4 * g * kg * cog, cog, n0 - start)


def wanted(x_shape, w_shape, stride, padding, dilation, dtype) -> bool:
    """Whether :func:`conv` and :func:`weight_grad` take a conv of a ``dtype`` input of
    ``x_shape`` with a weight of ``w_shape``: float32, a "same" conv
    (``conv_columns.same_width``), one image's columns within ``MAX_IMAGE_BYTES``, Numba's
    native entries and OpenBLAS's 64-bit ``sgemm`` at hand."""
    n, c, h, _ = x_shape
    kh, kw = w_shape[2:]
    ho = h + padding[0][0] + padding[0][1] - dilation[0] * (kh - 1)
    return (dtype == np.float32 and same_width(x_shape, (kh, kw), stride, padding, dilation)
            and 4 * c * kh * kw * ho * x_shape[3] <= MAX_IMAGE_BYTES and ho > 0
            and numba_available() and native.enabled()
            and blas_threads.sgemm_address() is not None)


def _block(n, positions, image_columns):
    """Images per block: enough for ``MIN_WIDTH`` columns in the block's GEMM, as long as
    their columns fit ``BLOCK_BYTES`` (at least one image)."""
    want = -(-MIN_WIDTH // positions)
    return max(1, min(n, want, BLOCK_BYTES // (4 * image_columns)))


def _buffers(x, kernel, cout, ho, wo):
    """``(x as (N, C, H*W), column buffer, tile buffer, images per block, sgemm's
    address)`` for the loops."""
    n, c, h, wd = x.shape
    depth, positions = c * kernel[0] * kernel[1], ho * wo
    block = _block(n, positions, depth * positions)
    return (x.reshape(n, c, h * wd), np.empty(depth * block * positions, np.float32),
            np.empty(cout * block * positions, np.float32), block,
            blas_threads.sgemm_address())


def conv(x, w, out, padding, dilation, groups):
    """``out (N, Cout, Ho, Wo)`` = the conv (stride 1, no bias) of ``x (N, C, H, W)`` with
    ``w (Cout, C/G, kh, kw)``, as :func:`wanted` accepts; returns ``out``."""
    x = np.ascontiguousarray(x)
    n, c, h = x.shape[:3]
    cout, cg, kh, kw = w.shape
    ho, wo = out.shape[2:]
    wm = np.ascontiguousarray(w).reshape(groups, cout // groups, cg * kh * kw)
    x3, buf, tile, block, sgemm = _buffers(x, (kh, kw), cout, ho, wo)
    _forward(0, n, x3, wm, out.reshape(n, cout, ho * wo), buf, tile, block, sgemm, h, ho, wo,
             kh, kw, *dilation, padding[0][0], padding[1][0])
    return out


def weight_grad(x, gy, kernel, padding, dilation, groups):
    """The weight gradient ``(Cout, C/G, kh, kw)`` of the conv (stride 1) of ``x (N, C, H,
    W)`` given its output gradient ``gy (N, Cout, Ho, Wo)``, as :func:`wanted` accepts."""
    x, gy = np.ascontiguousarray(x), np.ascontiguousarray(gy, np.float32)
    n, c, h = x.shape[:3]
    cout, ho, wo = gy.shape[1:]
    (kh, kw), cg = kernel, c // groups
    gwt = (np.empty if n else np.zeros)((groups, cg * kh * kw, cout // groups), np.float32)
    x3, buf, tile, block, sgemm = _buffers(x, kernel, cout, ho, wo)
    _weight_grad(0, n, x3, gy.reshape(n, cout, ho * wo), gwt, buf, tile, block, sgemm, h,
                 ho, wo, kh, kw, *dilation, padding[0][0], padding[1][0])
    return np.ascontiguousarray(gwt.transpose(0, 2, 1)).reshape(cout, cg, kh, kw)
