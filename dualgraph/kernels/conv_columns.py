"""im2col and col2im of the blocked convolution (``ops/conv.py``) as loops, with the
padding as index ranges (no padded copy).

NumPy's im2col pads a block of images (one copy) and then copies a 7-D strided view of
the windows into the columns (a second copy, whose runs are one output row each). Where
the output rows are as wide as the input's and both strides are 1 (a "same" conv: 3x3
with padding 1, a residual block's layers), the rows of one tap are one contiguous run of the input
plane: :func:`im2col` copies it at once and zeroes the few columns that hang over the
padding (a 16 x 32 x 32 image's columns: ~55 us against ~85 us). Other geometries keep
NumPy's copy, which a loop of one short run per output row did not beat.

col2im is the adjoint, for every geometry: the input gradient of a conv that is not the
forward conv of the output gradient (strides above 1, fewer input than output channels,
padding wider than the kernel) is, per block of images, one GEMM giving each image's
columns from the output gradient as it is laid out, then :func:`col2im` summing each
plane from its column runs while they are in cache, straight into the unpadded result.
NumPy's form transposed the output gradient, made the whole batch's columns, and added
one strided, transposed view per kernel position over the padded batch before cropping
it (a stride-2 3x3 layer's input gradient at batch 64: 16 -> 7 ms).

Rows of the columns (im2col) and planes (col2im) are shared among threads; each is
written by one thread in one order, so the bits do not depend on the thread count (the
copies are exact; the sums add in the kernel positions' order).
"""
from __future__ import annotations

from . import helper, loop
from .threads import run_rows, threads_for


@helper(inline="always")
def _inside(j, dw, left, width, sw, positions):
    """``(v0, v1, offset)``: the output positions ``v`` whose tap-``j`` input column ``v *
    sw + offset`` (offset ``j * dw - left``) lies inside ``[0, width)``."""
    offset = j * dw - left
    v0 = 0 if offset >= 0 else min(positions, (sw - 1 - offset) // sw)
    v1 = 0 if width - 1 - offset < 0 else min(positions, (width - 1 - offset) // sw + 1)
    return v0, max(v0, v1), offset


@helper(inline="always")
def _zero(dst, a, b):
    """``dst[a:b] = 0``."""
    for v in range(a, b):
        dst[v] = 0


@helper(inline="always")
def _same_rows(dst, plane, r0, r1, y0, height, width, v0, v1, offset):
    """``dst ((r1-r0)*width)`` = output rows ``r0:r1`` of one tap (row ``r`` reads input
    row ``r + y0``, column ``v + offset``) from the flat ``plane (H*W)``: the inside rows
    are one contiguous run of the plane, copied at once (views indexed from 0: the copy
    vectorises); then the columns outside ``[v0, v1)``, which read a neighbouring row's
    ends, are zeroed."""
    ra, rb = max(r0, -y0), min(r1, height - y0)
    if rb <= ra:
        _zero(dst, 0, dst.size)
        return
    _zero(dst, 0, (ra - r0) * width)
    _zero(dst, (rb - r0) * width, dst.size)
    base = (ra + y0) * width + offset
    run = dst[(ra - r0) * width:(rb - r0) * width]
    t0, t1 = max(0, -base), min(run.size, height * width - base)
    _zero(run, 0, t0)
    target, source = run[t0:t1], plane[base + t0:]
    for u in range(target.size):
        target[u] = source[u]
    _zero(run, t1, run.size)
    for r in range(rb - ra):
        _zero(run, r * width, r * width + v0)
        _zero(run, r * width + v1, (r + 1) * width)


@helper
def same_columns(start, stop, x, out, kh, kw, dh, dw, top, left, i0, r0, r1, height):
    """Rows ``start:stop`` of ``out (C*kh*kw, n*(r1-r0)*W)``: row ``(c, i, j)`` holds
    tap ``(i, j)`` of channel ``c`` for output rows ``r0:r1`` of images ``i0:i0+n`` of
    ``x (N, C, H*W)`` (``height`` = H; strides 1, output width W), columns ordered (image,
    row, position); zero over the padding."""
    width = x.shape[2] // height
    rows = r1 - r0
    images = out.shape[1] // (rows * width)
    for q in range(start, stop):
        c, i, j = q // (kh * kw), (q // kw) % kh, q % kw
        v0, v1, offset = _inside(j, dw, left, width, 1, width)
        row = out[q]
        for n in range(images):
            _same_rows(row[n * rows * width:(n + 1) * rows * width], x[i0 + n, c], r0, r1,
                       i * dh - top, height, width, v0, v1, offset)


@loop
def _im2col(start, stop, x, out, kh, kw, dh, dw, top, left, i0, r0, r1, height):
    """:func:`same_columns` as a loop of its own."""
    same_columns(start, stop, x, out, kh, kw, dh, dw, top, left, i0, r0, r1, height)


@loop
def _col2im(start, stop, cols, out, kh, kw, sh, sw, dh, dw, top, left, wo):
    """Planes ``start:stop`` (image-major) of ``out (n, C, H, W)`` = the sum of the
    column runs of ``cols (n, C*kh*kw, Ho*wo)`` that read them (the adjoint of an im2col
    of these images), kernel positions in order."""
    channels, height, width = out.shape[1], out.shape[2], out.shape[3]
    ho = cols.shape[2] // wo
    for p in range(start, stop):
        n, c = p // channels, p % channels
        plane = out[n, c]
        plane[:] = 0
        for i in range(kh):
            for j in range(kw):
                v0, v1, offset = _inside(j, dw, left, width, sw, wo)
                if v1 == v0:
                    continue
                source = cols[n, (c * kh + i) * kw + j]
                for r in range(ho):
                    y = r * sh + i * dh - top
                    if y < 0 or y >= height:
                        continue
                    src, dst = source[r * wo:], plane[y]
                    if sw == 1:
                        target, run = dst[v0 + offset:v1 + offset], src[v0:v1]
                        for u in range(target.size):
                            target[u] += run[u]
                    else:
                        for v in range(v0, v1):
                            dst[v * sw + offset] += src[v]


def same_width(x_shape, kernel, stride, padding, dilation) -> bool:
    """Whether :func:`im2col` takes this conv: strides 1 and output rows as wide as the
    input's (the left and right padding together span the dilated kernel)."""
    return (tuple(stride) == (1, 1)
            and padding[1][0] + padding[1][1] == dilation[1] * (kernel[1] - 1))


def im2col(x, out, kernel, padding, dilation, images, rows):
    """``out (C*kh*kw, (i1-i0)*(r1-r0)*W)`` = the im2col of output rows ``rows = (r0,
    r1)`` of images ``images = (i0, i1)`` of the C-contiguous ``x (N, C, H, W)``, a conv
    that :func:`same_width` takes (padding ``((top, bottom), (left, right))``); returns
    ``out``."""
    n, c, h, w = x.shape
    run_rows(_im2col, out.shape[0], x.reshape(n, c, h * w), out, kernel[0], kernel[1],
             dilation[0], dilation[1], padding[0][0], padding[1][0], images[0], rows[0],
             rows[1], h, threads=threads_for(out.size))
    return out


def col2im(cols, out, kernel, stride, padding, dilation, out_width):
    """``out (n, C, H, W)`` = every column of ``cols (n, C*kh*kw, Ho*Wo)`` (``out_width``
    = Wo) added where an im2col of ``out``'s images would have read it; returns
    ``out``."""
    run_rows(_col2im, out.shape[0] * out.shape[1], cols, out, kernel[0], kernel[1],
             stride[0], stride[1], dilation[0], dilation[1], padding[0][0], padding[1][0],
             out_width, threads=threads_for(out.size))
    return out
