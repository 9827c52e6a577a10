"""Convolution and pooling, with torch.nn.functional's names, arguments and defaults.

Primitives: ``conv2d`` and its two adjoints ``conv2d_input_grad`` (which *is*
``conv_transpose2d``) and ``conv2d_weight_grad`` (and, for the compiler's
``share_conv_columns``, the im2col ``conv2d_columns`` with the two GEMMs on it);
``max_pool2d`` (values and argmax indices) with ``max_pool2d_backward``; ``avg_pool2d``
with ``avg_pool2d_backward``. The three conv ops are each other's VJPs and the two
avg-pool ops are each other's, so double backward works. The 1-D forms are the 2-D ones on
a unit height; adaptive average pooling is avg_pool2d when the sizes divide, else two small
averaging matmuls.

Kernels (``conv_method`` chooses): a 1x1 conv is one batched GEMM on the input as it is;
a depthwise or narrow grouped conv a direct loop (``kernels/conv_direct.py``,
``kernels/conv.py``); any other conv copies im2col columns
``cols[g, (c, i, j), (n, h, w)]`` (a strided view of the padded input) a cache-sized block
of images or rows at a time, one GEMM per block and group. A stride-1 conv's input
gradient is the conv of the output gradient with the flipped weight (the same blocks);
other input gradients multiply into each image's columns and add them back
(``kernels/conv_columns.py``; in NumPy, one add per kernel position). Non-overlapping
unpadded max pooling has a fast path. Float16/bfloat16 are computed in float32.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .. import dtypes, kernels
from ..dispatch import apply
from ..kernels import pool_separable
from ..kernels.threads import run_kept, run_rows, threads_for
from ..kernels.tuning import cores
from ..shapes import ShapedType, ShapeError, is_static
from . import creation, index, linalg, reduce
from . import shape as shape_ops
from ._util import cast, empty_into, is_float, needs_grad, out_part
from .opdef import defop

__all__ = ["conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "max_pool1d",
           "max_pool2d", "avg_pool1d", "avg_pool2d", "adaptive_avg_pool1d",
           "adaptive_avg_pool2d"]


# -- geometry ------------------------------------------------------------------------------------
def _out_size(size, k, stride, lo, hi, dilation, ceil_mode=False):
    """Output length of a sliding window (works on symbolic sizes too).

    In ceil mode the last window may hang over the end, but (as in torch) must start
    inside the input or the left padding.
    """
    span = dilation * (k - 1) + 1
    extra = stride - 1 if ceil_mode else 0
    out = (size + (lo + hi - span + extra)) // stride + 1
    if ceil_mode and type(size) is int and (out - 1) * stride >= size + lo:
        out -= 1
    return out


def _pad(x, pads, value=0.0):
    """``x`` padded by ``((top, bottom), (left, right))`` on its last two dims."""
    (pt, pb), (pl, pr) = pads
    if not (pt or pb or pl or pr):
        return x
    h, w = x.shape[-2:]
    out = np.full(x.shape[:-2] + (pt + h + pb, pl + w + pr), value, dtype=x.dtype)
    out[..., pt:pt + h, pl:pl + w] = x
    return out


def _windows(xp, kernel, stride, dilation, out_hw):
    """A read-only view ``(..., Ho, Wo, kh, kw)`` of the windows of ``xp``'s last two dims."""
    sh, sw = xp.strides[-2:]
    shape = xp.shape[:-2] + tuple(out_hw) + tuple(kernel)
    strides = xp.strides[:-2] + (sh * stride[0], sw * stride[1],
                                 sh * dilation[0], sw * dilation[1])
    return as_strided(xp, shape, strides, writeable=False)


def _col2im(cols, padded_hw, stride, dilation):
    """The adjoint of :func:`_windows`: sum ``cols (..., kh, kw, Ho, Wo)`` into a zero
    array of shape ``(..., *padded_hw)``, one strided add per kernel position."""
    kh, kw, ho, wo = cols.shape[-4:]
    out = np.zeros(cols.shape[:-4] + tuple(padded_hw), dtype=cols.dtype)
    for i in range(kh):
        r = i * dilation[0]
        rows = slice(r, r + stride[0] * (ho - 1) + 1, stride[0])
        for j in range(kw):
            c = j * dilation[1]
            out[..., rows, c:c + stride[1] * (wo - 1) + 1:stride[1]] += cols[..., i, j, :, :]
    return out


def _crop(xp, pads, hw):
    (pt, _), (pl, _) = pads
    return np.ascontiguousarray(xp[..., pt:pt + hw[0], pl:pl + hw[1]])


# -- conv2d and its adjoints ---------------------------------------------------------------------
# ``conv`` below is the attrs shared by the three ops: stride (sh, sw), padding
# ((top, bottom), (left, right)), dilation (dh, dw), groups.
def _conv_out_hw(hw, kernel, stride, padding, dilation):
    return tuple(_out_size(hw[a], kernel[a], stride[a], *padding[a], dilation[a])
                 for a in range(2))


def _padded(h, w, padding):
    return h + sum(padding[0]), w + sum(padding[1])


def _grad_matrix(g, groups, width):
    """``g (N, Cout, Ho, Wo)`` -> ``(G, Cout/G, N*Ho*width)``, the layout the GEMMs use,
    zero in the junk columns past Wo."""
    n, c, ho, wo = g.shape
    out = np.empty((c, n, ho, width), g.dtype)
    out[..., :wo] = g.transpose(1, 0, 2, 3)
    out[..., wo:] = 0
    return out.reshape(groups, c // groups, -1)


# -- blocked im2col: the eager kernels ------------------------------------------------------
# A whole-batch im2col is the input times kh*kw (46 MB for a 64 x 32 x 26 x 26 input and a
# 3x3 kernel): written to memory, read back by the GEMM, and the GEMM's (Cout, N, Ho, Wo)
# result transposed again; on a 3x3 conv that copying cost more than the GEMM. Here the
# columns are built a block at a time (whole images, or rows of one image, up to
# ``COLUMN_BLOCK_BYTES``) in one buffer that stays in cache while its GEMM reads it, and the
# GEMM writes (N, Cout, Ho, Wo) directly where a block is one image. ``conv_method`` picks
# among this, a plain GEMM for 1x1 convs and a direct loop for depthwise convs.
COLUMN_BLOCK_BYTES = 1 << 20   # a block's columns: about half this CPU's 2 MB L2


def conv_method(x_shape, w_shape, stride, padding, dilation, groups) -> str:
    """How the eager conv kernels compute a convolution of these shapes and attrs:

    - ``"pointwise"``: a 1x1 kernel with stride 1 and no padding: the input is already the
      GEMM's right operand, (C/G, H*W) per image and group; one batched GEMM, no copy.
    - ``"depthwise"``: one input and one output channel per group (MobileNet's 3x3
      layers): C independent small 2-D filters, whose per-group GEMMs (1 x kh*kw x Ho*Wo)
      would be all overhead; forward, a direct loop over zero-padded phase planes
      (``kernels.conv_direct``), the gradients direct loops over each plane
      (``kernels.conv``), with padding, stride and dilation as index ranges.
    - ``"direct"``: other grouped convs with few channels per group (a channel
      multiplier, ResNeXt's groups: ``kernels.conv_direct.wanted``): the forward
      is the same direct loop, the gradients are blocked.
    - ``"blocked"``: anything else: im2col a block at a time (``COLUMN_BLOCK_BYTES``) and
      one GEMM per block and group.
    """
    cout, cg, kh, kw = w_shape
    if (kh, kw) == (1, 1) and stride == (1, 1) and not any(padding[0] + padding[1]):
        return "pointwise"
    if groups > 1 and kernels.numba_available():
        if cg == 1 and cout == groups:
            return "depthwise"
        if kernels.conv_direct.wanted(w_shape, groups):
            return "direct"
    return "blocked"


def columns_fit_one_block(x_shape, w_shape, stride, padding, dilation, groups,
                          itemsize) -> bool:
    """Whether the eager kernels im2col the whole batch as one block (the blocked method
    but ``kernels.conv_outlanes``' loops, the batch's columns within
    ``COLUMN_BLOCK_BYTES``): only then does sharing one whole
    im2col between a conv and its weight gradient (``passes.share_conv_columns``) cost no
    more memory traffic than each kernel's own blocks."""
    if not all(type(d) is int for d in tuple(x_shape) + tuple(w_shape)):
        return False   # (a symbolic batch)
    if conv_method(x_shape, w_shape, stride, padding, dilation, groups) != "blocked":
        return False
    dtype = np.dtype(f"f{itemsize}")
    if (math.prod(x_shape) >= kernels.MIN_ELEMENTS and kernels.conv_outlanes.wanted(
            x_shape, w_shape, padding, groups, dtype) and kernels.conv_outlanes.grad_wanted(
            x_shape, w_shape, padding, groups, dtype)):
        return False   # (both run without columns: ``kernels.conv_outlanes``)
    n, c, h, w = x_shape
    ho, wo = _conv_out_hw((h, w), w_shape[2:], stride, padding, dilation)
    return n * ho * wo * c * w_shape[2] * w_shape[3] * itemsize <= COLUMN_BLOCK_BYTES


def _blocks(n, ho, row_bytes):
    """``(i0, i1, r0, r1)`` blocks covering ``n`` images of ``ho`` output rows, each
    ``row_bytes`` of columns: several whole images per block where an image's columns fit
    in ``COLUMN_BLOCK_BYTES``, else runs of rows of one image."""
    if row_bytes * ho <= COLUMN_BLOCK_BYTES:
        per = max(1, COLUMN_BLOCK_BYTES // (row_bytes * ho))
        return [(i, min(i + per, n), 0, ho) for i in range(0, n, per)]
    rows = max(1, COLUMN_BLOCK_BYTES // row_bytes)
    return [(i, i + 1, r, min(r + rows, ho)) for i in range(n) for r in range(0, ho, rows)]


def _columns(padded, kernel, stride, dilation, out_hw, rows, out):
    """Copy the im2col of output rows ``rows = (r0, r1)`` of the padded images ``padded
    (n, G, Cg, Hp, Wp)`` into ``out (G, Cg*kh*kw, n*(r1-r0)*Wo)``, columns ordered (image,
    row, col): one copy of a strided view of the windows."""
    (kh, kw), (r0, r1) = kernel, rows
    n, groups, cg = padded.shape[:3]
    win = _windows(padded, kernel, stride, dilation, out_hw)          # n G Cg Ho Wo kh kw
    np.copyto(out.reshape(groups, cg, kh, kw, n, r1 - r0, out_hw[1]),
              win[:, :, :, r0:r1].transpose(1, 2, 5, 6, 0, 3, 4))
    return out


def _padded_images(x, padding, groups):
    n, c, h, w = x.shape
    return _pad(x, padding).reshape(n, groups, c // groups, *_padded(h, w, padding))


def _block_columns(x, kernel, stride, padding, dilation, groups):
    """Yield ``(i0, i1, r0, r1, cols)`` for the blocks of :func:`_blocks`: ``cols`` the
    block's im2col (:func:`_columns`), in one buffer reused by every block (use it before
    taking the next). Padding is applied per block of images, never to the whole batch."""
    n, c, h, w = x.shape
    (kh, kw), cg = kernel, c // groups
    out_hw = _conv_out_hw((h, w), kernel, stride, padding, dilation)
    blocks = _blocks(n, out_hw[0], c * kh * kw * out_hw[1] * x.itemsize)
    i0, i1, r0, r1 = blocks[0]
    buf = np.empty(c * kh * kw * (i1 - i0) * (r1 - r0) * out_hw[1], x.dtype)
    # (a "same" conv's rows as runs of the input planes: no padded copy)
    direct = kernels.enabled(x) and kernels.conv_columns.same_width(x.shape, kernel, stride,
                                                                    padding, dilation)
    x = np.ascontiguousarray(x) if direct else x
    padded, at = None, None
    for i0, i1, r0, r1 in blocks:
        size = c * kh * kw * (i1 - i0) * (r1 - r0) * out_hw[1]
        cols = buf[:size].reshape(groups, cg * kh * kw, -1)
        if direct:
            kernels.conv_columns.im2col(x, cols.reshape(c * kh * kw, -1), kernel, padding,
                                        dilation, (i0, i1), (r0, r1))
            yield i0, i1, r0, r1, cols
            continue
        if at != (i0, i1):   # (a run of row blocks pads its image once)
            padded, at = _padded_images(x[i0:i1], padding, groups), (i0, i1)
        yield i0, i1, r0, r1, _columns(padded, kernel, stride, dilation, out_hw, (r0, r1),
                                       cols)


def _gemm_block(wm, cols, out, i0, i1, r0, r1):
    """The conv's GEMM on a block's columns, into ``out[i0:i1, :, r0:r1]`` (``wm (G,
    Cout/G, Cg*kh*kw)``): straight into the output where the block is one whole image."""
    n, cout, ho, wo = out.shape
    groups = wm.shape[0]
    if (i1 - i0, r1 - r0) == (1, ho):
        np.matmul(wm, cols, out=out[i0].reshape(groups, cout // groups, ho * wo))
        return
    y = np.matmul(wm, cols).reshape(groups, cout // groups, i1 - i0, r1 - r0, wo)
    out[i0:i1, :, r0:r1] = y.transpose(2, 0, 1, 3, 4).reshape(i1 - i0, cout, r1 - r0, wo)


def _weight_grad_block(g, cols, i0, i1, r0, r1, part):
    """``part (G, Cout/G, Cg*kh*kw)`` = the weight gradient's GEMM on one block: the
    block of ``g (N, Cout, Ho, Wo)`` times the block's columns, transposed. Few outputs
    and long rows (LeNet's first layer) take ``kernels.products.a_bt``."""
    groups, cog = part.shape[:2]
    gb = g[i0:i1, :, r0:r1].reshape(i1 - i0, groups, cog, -1)
    gb = gb[0] if i1 - i0 == 1 else np.ascontiguousarray(gb.transpose(1, 2, 0, 3))
    gb = gb.reshape(groups, cog, -1)
    if kernels.products.wanted(gb[0], cols[0]):
        for k in range(groups):
            kernels.products.a_bt(np.ascontiguousarray(gb[k]), cols[k], part[k])
        return part
    return np.matmul(gb, cols.transpose(0, 2, 1), out=part)


def _conv_blocked(x, w, bias):
    """conv2d by ``conv_method``: ``(x, w, bias)`` in one BLAS dtype; -> (N, Cout, Ho, Wo)."""
    def conv(stride, padding, dilation, groups):
        n, c, h, wd = x.shape
        cout, cg, kh, kw = w.shape
        ho, wo = _conv_out_hw((h, wd), (kh, kw), stride, padding, dilation)
        cog = cout // groups
        wm = w.reshape(groups, cog, cg * kh * kw)
        method = conv_method(x.shape, w.shape, stride, padding, dilation, groups)
        out = np.empty((n, cout, ho, wo), x.dtype)
        # an empty batch, or no input channels: each output its bias (a channel count the
        # weight does not take still fails below, with the shapes, as compiled code does)
        if x.size == 0 and c == cg * groups:
            out[...] = bias[0].reshape(-1, 1, 1) if bias else 0
            return out
        if method == "pointwise":
            np.matmul(wm, x.reshape(n, groups, cg, h * wd),
                      out=out.reshape(n, groups, cog, ho * wo))
        elif method in ("depthwise", "direct") and (not bias or bias[0].shape == (cout,)):
            b = bias[0] if bias else np.zeros(cout, x.dtype)   # (added in the same pass)
            return kernels.conv_direct.conv(x, w, out, stride, padding, dilation, groups, b)
        elif kernels.enabled(x) and kernels.conv_tiles.shifted(x.shape, w.shape, stride,
                                                               padding, dilation, groups):
            b = bias[0] if bias else np.zeros(cout, x.dtype)   # (added in the same pass)
            return kernels.conv_tiles.conv(x, w, out, stride, padding, dilation, groups, b)
        elif kernels.enabled(x) and kernels.conv_shallow.wins(x.shape, w.shape, (ho, wo),
                                                              stride, padding, groups,
                                                              x.dtype):
            b = bias[0] if bias else np.zeros(cout, x.dtype)   # (added in the same pass)
            return kernels.conv_shallow.conv(x, w, out, stride, padding, dilation, groups, b)
        elif kernels.enabled(x) and kernels.conv_outlanes.wanted(x.shape, w.shape, padding,
                                                                 groups, x.dtype):
            b = bias[0] if bias else np.zeros(cout, x.dtype)   # (added in the same pass)
            return kernels.conv_outlanes.conv(x, w, out, stride, padding, dilation, groups, b)
        elif _batch_loop(x.shape, x.dtype, w.shape, stride, padding, dilation):
            kernels.conv_batch.conv(x, w, out, stride, padding, dilation, groups)
        else:
            for i0, i1, r0, r1, cols in _block_columns(x, (kh, kw), stride, padding,
                                                       dilation, groups):
                _gemm_block(wm, cols, out, i0, i1, r0, r1)
        if bias:
            out += bias[0].reshape(-1, 1, 1)
        return out
    return conv


def _batch_loop(x_shape, dtype, w_shape, stride, padding, dilation) -> bool:
    """Whether the blocked method's GEMMs run in one compiled loop over the batch
    (``kernels.conv_batch``: no Python call per block; float32, stride 1 with output
    rows at most as wide as the input's, or strides above 1 by row phases)."""
    return (math.prod(x_shape) >= kernels.MIN_ELEMENTS
            and kernels.conv_batch.wanted(x_shape, w_shape, stride, padding, dilation, dtype))


def _conv2d_kernel(x, w, *bias, stride, padding, dilation, groups):
    linalg.check_same_dtype("conv2d", x, w, *bias)   # (eager runs kernels, not shape rules)
    (x, w, *bias), dt = linalg.blas_operands(x, w, *bias)
    return cast(_conv_blocked(x, w, bias)(stride, padding, dilation, groups), dt)


def _flipped_weight(w, groups):
    """The weight of the convolution that is a stride-1 conv's input gradient: channels
    in and out swapped within each group, the kernel turned 180 degrees."""
    cout, cg, kh, kw = w.shape
    swapped = w.reshape(groups, cout // groups, cg, kh, kw).transpose(0, 2, 1, 3, 4)
    return np.ascontiguousarray(swapped.reshape(groups * cg, cout // groups, kh, kw)[
        ..., ::-1, ::-1])


def _input_grad_kernel(g, w, *, input_size, stride, padding, dilation, groups, out=None):
    """(``out``, ``fills_out``: written by the depthwise loop; the other forms return
    their own new array)"""
    (g, w), dt = linalg.blas_operands(g, w)
    if g.size == 0 or w.size == 0:   # (an empty batch, no channels, or an empty output)
        return cast(np.zeros((g.shape[0], w.shape[1] * groups, *input_size), g.dtype), dt)
    span = [dilation[a] * (w.shape[2 + a] - 1) for a in range(2)]
    full = tuple((span[a] - padding[a][0], span[a] - padding[a][1]) for a in range(2))
    if conv_method(g.shape, w.shape, stride, padding, dilation, groups) == "depthwise":
        dx = empty_into(out, (g.shape[0], w.shape[0], *input_size), g.dtype)
        kernels.conv.depthwise_input_grad(g, w, dx, stride, padding, dilation)
        return cast(dx, dt)
    if stride == (1, 1) and min(full[0] + full[1]) >= 0 and w.shape[1] >= w.shape[0] // groups:
        # the input gradient of a stride-1 conv is a conv of g, padded by the kernel's span
        # less the padding, with the flipped weight: the forward's blocked GEMMs. Only
        # where the input has at least as many channels as the output: that GEMM has Cin
        # rows and Cout*kh*kw columns to copy, and with few rows (LeNet's 16 -> 6: 5.5 ms,
        # 0.7 ms the other way) the copies dominate; the columns way below multiplies
        # first (Cin*kh*kw rows, Cout deep) and adds the columns back.
        flipped = _flipped_weight(w, groups)
        return cast(_conv_blocked(g, flipped, ())(stride, full, dilation, groups), dt)
    n, ho, wo = g.shape[0], g.shape[2], g.shape[3]
    cout, cg, kh, kw = w.shape
    padded = _padded(*input_size, padding)
    wm = w.reshape(groups, cout // groups, -1).transpose(0, 2, 1)
    if g.dtype == np.float32 and kernels.numba_available():
        # (at every size: the NumPy forms below take kh*kw passes over the whole batch)
        return cast(_col2im_blocks(g, wm, input_size, (kh, kw), stride, padding, dilation), dt)
    width = padded[1] if stride == (1, 1) else wo
    cols = np.matmul(wm, _grad_matrix(g, groups, width))              # G Kg N*Ho*R
    if stride == (1, 1):
        xp = _flat_col2im(cols.reshape(groups * cg, kh, kw, n, ho, width), padded, dilation)
    else:
        cols = cols.reshape(groups, cg, kh, kw, n, ho, wo).transpose(4, 0, 1, 2, 3, 5, 6)
        xp = _col2im(cols, padded, stride, dilation)                  # N G Cg Hp Wp
        xp = xp.reshape(n, groups * cg, *padded)
    return cast(_crop(xp, padding, input_size), dt)


def _col2im_blocks(g, wm, input_size, kernel, stride, padding, dilation):
    """The input gradient ``(N, C, H, W)`` from ``g (N, Cout, Ho, Wo)`` and ``wm (G, Kg,
    Cout/G)`` (the weight, transposed per group) a block of images at a time: each
    image's columns ``wm @ g_i`` (``g`` as it is laid out: no transpose) in one buffer
    that stays in cache, summed into the block's planes by ``kernels.conv_columns``."""
    n, cout, ho, wo = g.shape
    groups, k = wm.shape[:2]
    out = np.empty((n, groups * k // (kernel[0] * kernel[1]), *input_size), g.dtype)
    per = max(1, COLUMN_BLOCK_BYTES // (groups * k * ho * wo * g.itemsize))
    buf = np.empty((min(per, n), groups, k, ho * wo), g.dtype)
    gm = np.ascontiguousarray(g).reshape(n, groups, cout // groups, ho * wo)
    for i0 in range(0, n, per):
        cols = buf[:min(per, n - i0)]
        np.matmul(wm, gm[i0:i0 + per], out=cols)
        kernels.conv_columns.col2im(cols.reshape(len(cols), groups * k, -1), out[i0:i0 + per],
                                    kernel, stride, padding, dilation, wo)
    return out


def _flat_col2im(cols, padded, dilation):
    """Stride-1 col2im from columns on rows of the padded width (output pixel (h, v) of
    kernel position (i, j) is padded pixel ``(h + i*dh) * Wp + v + j*dw``, so each
    position's columns are one contiguous run of the flat plane): ``cols (C, kh, kw, N,
    Ho, Wp)`` summed into ``(N, C, Hp, Wp)`` with one run add per kernel position."""
    c, kh, kw, n, ho, wp = cols.shape
    run = (ho - 1) * wp + wp - dilation[1] * (kw - 1)   # (Ho - 1) full rows, then Wo
    flat = cols.reshape(c, kh * kw, n, ho * wp)
    out = np.zeros((c, n, padded[0] * wp), cols.dtype)
    for pos in range(kh * kw):
        start = (pos // kw) * dilation[0] * wp + (pos % kw) * dilation[1]
        out[..., start:start + run] += flat[:, pos, :, :run]
    return out.reshape(c, n, *padded).transpose(1, 0, 2, 3)


def _weight_grad_kernel(x, g, *, kernel_size, stride, padding, dilation, groups, out=None):
    """(``fills_out``: a new array each call, the size of a weight; ``out`` is not used)"""
    (x, g), dt = linalg.blas_operands(x, g)
    n, cout, ho, wo = g.shape
    cg, cog = x.shape[1] // groups, cout // groups
    if x.size == 0 or g.size == 0:   # (an empty batch or output: no term in the sum)
        return cast(np.zeros((cout, cg, *kernel_size), g.dtype), dt)
    method = conv_method(x.shape, (cout, cg) + tuple(kernel_size), stride, padding, dilation,
                         groups)
    if method == "depthwise":
        gw = np.empty((cout, 1) + tuple(kernel_size), g.dtype)
        kernels.conv.depthwise_weight_grad(x, g, gw, stride, padding, dilation)
        return cast(gw, dt)
    gw = np.zeros((groups, cog, cg * kernel_size[0] * kernel_size[1]), g.dtype)
    part = np.empty_like(gw)
    if method == "pointwise":   # sum over images of g_i x_i^T
        xs = x.reshape(n, groups, cg, -1).transpose(0, 1, 3, 2)
        for i in range(n):
            gw += np.matmul(g[i].reshape(groups, cog, -1), xs[i], out=part)
        return cast(gw.reshape(cout, cg, *kernel_size), dt)
    if kernels.enabled(x, g) and kernels.conv_outlanes.grad_wanted(
            x.shape, (cout, cg) + tuple(kernel_size), padding, groups, x.dtype):
        return cast(kernels.conv_outlanes.weight_grad(x, g, kernel_size, stride, padding,
                                                      dilation), dt)
    if (_batch_loop(x.shape, x.dtype, (cout, cg) + tuple(kernel_size), stride, padding,
                    dilation)
            and cg * kernel_size[1] >= kernels.conv_batch.GRAD_MIN_DEPTH
            and gw.size > kernels.products.MAX_OUTPUTS):   # (few outputs: products.a_bt)
        return cast(kernels.conv_batch.weight_grad(x, g, kernel_size, stride, padding,
                                                   dilation, groups), dt)
    for i0, i1, r0, r1, cols in _block_columns(x, kernel_size, stride, padding, dilation,
                                               groups):
        gw += _weight_grad_block(g, cols, i0, i1, r0, r1, part)
    return cast(gw.reshape(cout, cg, *kernel_size), dt)


# -- the same GEMMs on shared columns (passes.share_conv_columns: one im2col of an input
# for both the conv and its weight gradient) -------------------------------------------------
def _columns_kernel(x, *, kernel_size, stride, padding, dilation, groups):
    (x,), _ = linalg.blas_operands(x)
    n, c = x.shape[:2]
    out_hw = _conv_out_hw(x.shape[2:], kernel_size, stride, padding, dilation)
    out = np.empty((groups, c // groups * kernel_size[0] * kernel_size[1],
                    n * out_hw[0] * out_hw[1]), x.dtype)
    return _columns(_padded_images(x, padding, groups), kernel_size, stride, dilation,
                    out_hw, (0, out_hw[0]), out)


def _infer_columns(x, *, kernel_size, stride, padding, dilation, groups):
    n, c = x.shape[0], x.shape[1]
    w_shape = (groups, c // groups) + tuple(kernel_size)
    ho, wo = _check_conv(x.shape, w_shape, None, "conv2d_columns", stride, padding, dilation,
                         groups)
    k = c // groups * kernel_size[0] * kernel_size[1]
    return ShapedType((groups, k, n * ho * wo), linalg.compute_dtype(x.dtype))


def _conv_from_columns_kernel(cols, x, w, *bias, stride, padding, dilation, groups):
    """``conv2d(x, w, bias)`` from ``cols = conv2d_columns(x)`` (``x`` gives the shape;
    the pass uses these ops only where x, w and bias share one dtype)."""
    dt = dtypes.result_type(x, w, *bias)
    (w, *bias), _ = linalg.blas_operands(w, *bias)
    n, cout = x.shape[0], w.shape[0]
    ho, wo = _conv_out_hw(x.shape[2:], w.shape[2:], stride, padding, dilation)
    out = np.empty((n, cout, ho, wo), cols.dtype)
    _gemm_block(w.reshape(groups, cout // groups, -1), cols, out, 0, n, 0, ho)
    if bias:
        out += bias[0].reshape(-1, 1, 1)
    return cast(out, dt)


def _infer_conv_from_columns(cols, x, w, *bias, **conv):
    return _infer_conv2d(x, w, *bias, **conv)


def _weight_grad_from_columns_kernel(cols, x, g, *, kernel_size, stride, padding, dilation,
                                     groups):
    """``conv2d_weight_grad(x, g)`` from ``cols = conv2d_columns(x)``."""
    dt = dtypes.result_type(x, g)
    (g,), _ = linalg.blas_operands(g)
    n, cout, ho, _ = g.shape
    part = np.empty((groups, cout // groups, cols.shape[1]), cols.dtype)
    gw = _weight_grad_block(g, cols, 0, n, 0, ho, part)
    return cast(gw.reshape(cout, -1, *kernel_size), dt)


def _infer_weight_grad_from_columns(cols, x, g, **attrs):
    return _infer_weight_grad(x, g, **attrs)


def _check_conv(x, w, g_shape, what, stride, padding, dilation, groups):
    """Shape checks shared by the three conv ops; returns the conv's output (Ho, Wo)."""
    sx, sw = tuple(x), tuple(w)
    if len(sx) != 4 or len(sw) != 4:
        raise ShapeError(f"{what}: expected a 4-D input (N, C, H, W) and a 4-D weight "
                         f"(C_out, C_in/groups, kH, kW), got shapes {sx} and {sw}")
    if sx[1] != sw[1] * groups or sw[0] % groups:
        raise ShapeError(f"{what}: input of shape {sx} has {sx[1]} channels but the weight "
                         f"of shape {sw} with groups={groups} expects {sw[1] * groups} (and "
                         f"C_out={sw[0]} must be divisible by groups)")
    out_hw = _conv_out_hw(sx[2:], sw[2:], stride, padding, dilation)
    if any(type(d) is int and d < 1 for d in out_hw):
        raise ShapeError(f"{what}: the input of shape {sx} (padding {padding}) is smaller "
                         f"than the dilated kernel of shape {sw[2:]}")
    if g_shape is not None and tuple(g_shape) != (sx[0], sw[0]) + tuple(out_hw):
        raise ShapeError(f"{what}: the output gradient has shape {tuple(g_shape)} but a conv "
                         f"of {sx} with weight {sw} gives {(sx[0], sw[0]) + tuple(out_hw)}")
    return out_hw


def _infer_conv2d(x, w, *bias, stride, padding, dilation, groups):
    out_hw = _check_conv(x.shape, w.shape, None, "conv2d", stride, padding, dilation, groups)
    if bias and tuple(bias[0].shape) != (w.shape[0],):
        raise ShapeError(f"conv2d: bias of shape {tuple(bias[0].shape)} should be "
                         f"({w.shape[0]},), one value per output channel")
    linalg.check_same_dtype("conv2d", x, w, *bias)
    return ShapedType((x.shape[0], w.shape[0]) + tuple(out_hw), x.dtype)


def _infer_input_grad(g, w, *, input_size, stride, padding, dilation, groups):
    x_shape = (g.shape[0], w.shape[1] * groups) + tuple(input_size)
    _check_conv(x_shape, w.shape, g.shape, "conv2d_input_grad", stride, padding, dilation,
                groups)
    return ShapedType(x_shape, dtypes.result_type(g, w))


def _infer_weight_grad(x, g, *, kernel_size, stride, padding, dilation, groups):
    w_shape = (g.shape[1], x.shape[1] // groups) + tuple(kernel_size)
    _check_conv(x.shape, w_shape, g.shape, "conv2d_weight_grad", stride, padding, dilation,
                groups)
    return ShapedType(w_shape, dtypes.result_type(x, g))


def _hw(t):
    return tuple(t.shape[-2:])


# The VJPs: conv2d(x, w) is bilinear, and its two adjoints are each other's derivatives.
def _conv2d_vjp(g, out, x, w, *bias, **conv):
    gx = apply(CONV2D_INPUT_GRAD, g, w, input_size=_hw(x), **conv) if needs_grad(x) else None
    gw = (apply(CONV2D_WEIGHT_GRAD, x, g, kernel_size=_hw(w), **conv)
          if needs_grad(w) else None)
    if not bias:
        return gx, gw
    return gx, gw, reduce.sum(g, (0, 2, 3)) if needs_grad(bias[0]) else None


def _input_grad_vjp(gy, out, g, w, *, input_size, **conv):
    gg = apply(CONV2D, gy, w, **conv) if needs_grad(g) else None
    gw = (apply(CONV2D_WEIGHT_GRAD, gy, g, kernel_size=_hw(w), **conv)
          if needs_grad(w) else None)
    return gg, gw


def _weight_grad_vjp(gy, out, x, g, *, kernel_size, **conv):
    gx = apply(CONV2D_INPUT_GRAD, g, gy, input_size=_hw(x), **conv) if needs_grad(x) else None
    gg = apply(CONV2D, x, gy, **conv) if needs_grad(g) else None
    return gx, gg


# -- decompositions: the compiler-only conv ops from index, einsum and matmul ------------------
def _window_positions(padded_hw, kernel_size, stride, dilation, out_hw):
    """Where window element (i, j) of output (h, v) sits in a flattened padded plane: an
    int64 array ``(kh, kw, Ho, Wo)``."""
    (kh, kw), (ho, wo), wp = kernel_size, out_hw, padded_hw[1]
    rows = (np.arange(ho).reshape(ho, 1) * stride[0]
            + np.arange(kh).reshape(kh, 1, 1, 1) * dilation[0])
    cols = np.arange(wo) * stride[1] + np.arange(kw).reshape(kw, 1, 1) * dilation[1]
    return rows * wp + cols


def _unfold(x, kernel_size, stride, padding, dilation, groups):
    """The windows of ``x (N, C, H, W)`` as ``(N, G, C/G, kh, kw, Ho, Wo)``, by one index
    of the flattened padded planes."""
    n, c, h, w = x.shape
    out_hw = _conv_out_hw((h, w), kernel_size, stride, padding, dilation)
    padded = _padded(h, w, padding)
    (pt, pb), (pl, pr) = padding
    flat = shape_ops.reshape(index.pad(x, (pl, pr, pt, pb)),
                             (n, groups, c // groups, padded[0] * padded[1]))
    where = _window_positions(padded, kernel_size, stride, dilation, out_hw)
    return index.index_dims(flat, [creation.constant(where)], (3,)), out_hw


def _fold(cols, padded_hw, stride, dilation, out_hw):
    """The adjoint of :func:`_unfold` (width Wo): ``cols (M..., kh, kw, Ho, Wo)`` added into
    zero padded planes ``(M..., Hp, Wp)``; repeated positions sum."""
    lead = tuple(cols.shape[:-4])
    where = _window_positions(padded_hw, tuple(cols.shape[-4:-2]), stride, dilation, out_hw)
    zeros = creation.zeros(lead + (padded_hw[0] * padded_hw[1],), dtype=cols.dtype)
    flat = index.index_put_dims(zeros, cols, [creation.constant(where)], (len(lead),),
                                accumulate=True)
    return shape_ops.reshape(flat, lead + tuple(padded_hw))


def _crop_padding(xp, pads, hw):
    (pt, _), (pl, _) = pads
    return xp[..., pt:pt + hw[0], pl:pl + hw[1]]


def _conv2d_decomposition(x, w, *bias, stride, padding, dilation, groups):
    n, cout = x.shape[0], w.shape[0]
    cols, (ho, wo) = _unfold(x, tuple(w.shape[2:]), stride, padding, dilation, groups)
    y = linalg.einsum("ngcijhw,gocij->ngohw", cols,
                      shape_ops.reshape(w, (groups, cout // groups) + tuple(w.shape[1:])))
    y = shape_ops.reshape(y, (n, cout, ho, wo))
    return y + shape_ops.reshape(bias[0], (-1, 1, 1)) if bias else y


def _columns_decomposition(x, *, kernel_size, stride, padding, dilation, groups):
    """:func:`_columns`'s layout ``(G, C/G*kh*kw, N*Ho*Wo)``."""
    ho, wo = _conv_out_hw(tuple(x.shape[2:]), kernel_size, stride, padding, dilation)
    x = x.to(linalg.compute_dtype(x.dtype.np))
    cols, _ = _unfold(x, kernel_size, stride, padding, dilation, groups)
    cols = shape_ops.permute(cols, (1, 2, 3, 4, 0, 5, 6))
    return shape_ops.reshape(cols, (groups, -1, x.shape[0] * ho * wo))


def _from_columns_decomposition(cols, x, w, *bias, stride, padding, dilation, groups):
    """The conv's GEMM on the columns (:func:`_gemm_block`)."""
    n, cout = x.shape[0], w.shape[0]
    ho, wo = _conv_out_hw(tuple(x.shape[2:]), tuple(w.shape[2:]), stride, padding, dilation)
    y = linalg.matmul(shape_ops.reshape(w, (groups, cout // groups, -1)), cols)
    y = shape_ops.reshape(y, (cout, n, ho, -1))[..., :wo]
    y = shape_ops.permute(y, (1, 0, 2, 3))
    if bias:
        y = y + shape_ops.reshape(bias[0], (-1, 1, 1))
    return y.to(dtypes.result_type(x, w, *bias))


def _weight_grad_from_columns_decomposition(cols, x, g, *, kernel_size, stride, padding,
                                            dilation, groups):
    """The weight gradient's GEMM on the columns (:func:`_weight_grad_block`): ``g`` laid
    out as they are."""
    n, cout, ho, wo = g.shape
    width = cols.shape[-1] // (n * ho)
    gm = index.pad(shape_ops.permute(g, (1, 0, 2, 3)), (0, width - wo))
    gm = shape_ops.reshape(gm, (groups, cout // groups, -1))
    gw = linalg.matmul(gm.to(cols.dtype), linalg.mT(cols))
    return shape_ops.reshape(gw, (cout, -1) + tuple(kernel_size)).to(
        dtypes.result_type(x, g))


def _weight_grad_decomposition(x, g, *, kernel_size, stride, padding, dilation, groups):
    n, cout, ho, wo = g.shape
    cols, _ = _unfold(x, kernel_size, stride, padding, dilation, groups)
    gw = linalg.einsum("ngcijhw,ngohw->gocij", cols,
                       shape_ops.reshape(g, (n, groups, cout // groups, ho, wo)))
    return shape_ops.reshape(gw, (cout, -1) + tuple(kernel_size))


def _input_grad_decomposition(g, w, *, input_size, stride, padding, dilation, groups):
    n, cout, ho, wo = g.shape
    cols = linalg.einsum("ngohw,gocij->ngcijhw",
                         shape_ops.reshape(g, (n, groups, cout // groups, ho, wo)),
                         shape_ops.reshape(w, (groups, cout // groups) + tuple(w.shape[1:])))
    xp = _fold(cols, _padded(*input_size, padding), stride, dilation, (ho, wo))
    return _crop_padding(shape_ops.reshape(xp, (n, -1) + tuple(xp.shape[-2:])), padding,
                         input_size)


def _onnx_conv2d(e, node):
    (top, bottom), (left, right) = node.attrs["padding"]
    inputs = [e.input(0), e.input(1)] + ([e.input(2)] if len(node.inputs) > 2 else [])
    return [e.op("Conv", [i for i in inputs if i], strides=list(node.attrs["stride"]),
                 pads=[top, left, bottom, right], dilations=list(node.attrs["dilation"]),
                 group=node.attrs["groups"])]


def _onnx_conv2d_input_grad(e, node):
    """A conv's gradient with respect to its input (what ConvTranspose2d computes):
    ConvTranspose with the conv's weight as it is, and the output padding that makes the
    result ``input_size``."""
    a, g, w = node.attrs, node.inputs[0], node.inputs[1]
    (top, bottom), (left, right) = a["padding"]
    pads = ((top, bottom), (left, right))
    extra = [size - ((n - 1) * s + d * (k - 1) + 1 - lo - hi)
             for size, n, s, d, k, (lo, hi) in zip(a["input_size"], g.shape[2:], a["stride"],
                                                   a["dilation"], w.shape[2:], pads)]
    return [e.op("ConvTranspose", [e.input(0), e.input(1)], strides=list(a["stride"]),
                 pads=[top, left, bottom, right], dilations=list(a["dilation"]),
                 group=a["groups"], output_padding=extra if any(extra) else None)]


def specialise_pointwise(name: str, x, w, *rest, stride, padding, dilation, groups, act=0,
                         bounds=(-np.inf, np.inf), where=0):
    """``specialise`` (codegen) of an unpadded 1x1 convolution of static shapes, every
    operand float32 and Numba there: ``(name, run)``, the GEMM and the epilogue fitted to
    these shapes once; else None (the op's kernel). ``rest`` is the bias (if any) and the
    residual (``where`` 1 or 2), Values of the graph. Stride 1 (``conv_method``'s
    ``"pointwise"``) runs ``kernels.epilogue.pointwise`` (one batched GEMM, then the
    epilogue's pass) or, where the output would leave L2 before that pass and the work
    is not shared among threads, the GEMMs by blocks of positions of
    ``kernels.conv_pointwise`` (its epilogue on each block in cache); larger strides
    always the latter (the input gathered a block at a time)."""
    if not (kernels.numba_available() and is_static(x.shape)
            and all(getattr(v, "dtype", None) == np.float32 for v in (x, w, *rest))
            and tuple(w.shape[2:]) == (1, 1) and not any(padding[0] + padding[1])):
        return None
    bias, shape, cout = len(rest) > (1 if where else 0), tuple(x.shape), w.shape[0]
    strided = tuple(stride) != (1, 1)
    blocks = kernels.conv_pointwise
    if not (blocks.available() and blocks.wanted(shape, cout, stride)):
        return None if strided else (name, kernels.epilogue.pointwise(
            shape, cout, groups, act, bounds, bias, where))
    blocked = blocks.fitted(shape, cout, groups, tuple(stride), act, bounds, where)
    plain = None if strided else kernels.epilogue.pointwise(shape, cout, groups, act,
                                                            bounds, bias, where)
    out_shape = (shape[0], cout, *_conv_out_hw(shape[2:], (1, 1), stride, padding, dilation))
    size, zero_bias = math.prod(out_shape), np.zeros(cout, np.float32)

    def run(x, w, *rest, out=None):
        if plain is not None and cores() > 1 and threads_for(size) != 1:
            return plain(x, w, *rest, out=out)   # (its GEMM and its pass on the threads)
        return blocked(x, w, rest[0] if bias else zero_bias, rest[-1] if where else None,
                       np.empty(out_shape, np.float32) if out is None else out)
    return name, run


def _specialise_conv2d(x, w, *bias, stride, padding, dilation, groups):
    """``specialise`` of ``conv2d``: a 1x1 conv's (:func:`specialise_pointwise`, as
    ``conv1x1``); a depthwise or direct conv of static shapes, float32 and Numba there,
    ``kernels.conv_direct`` fitted to them once (as ``conv_direct``: the loop the eager
    kernel runs, so the same bits, without its choice and set-up at each call); else
    None."""
    conv = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    fitted = specialise_pointwise("conv1x1", x, w, *bias, **conv)
    if fitted is not None or not (
            kernels.numba_available() and is_static(x.shape) and math.prod(x.shape) > 0
            and all(getattr(v, "dtype", None) == np.float32 for v in (x, w, *bias))
            and all(tuple(b.shape) == (w.shape[0],) for b in bias)
            and conv_method(tuple(x.shape), tuple(w.shape), **conv) in ("depthwise", "direct")):
        return fitted
    shape = (x.shape[0], w.shape[0], *_conv_out_hw(x.shape[2:], w.shape[2:], stride, padding,
                                                   dilation))
    run = kernels.conv_direct.fitted(tuple(x.shape), tuple(w.shape), shape, stride, padding,
                                     dilation, groups, np.float32)
    zero_bias = np.zeros(w.shape[0], np.float32)

    def direct(x, w, *bias, out=None):
        out = np.empty(shape, np.float32) if out is None else out
        return run(x, w, bias[0] if bias else zero_bias, out)
    return "conv_direct", direct


_CONV_ATTRS = ("stride", "padding", "dilation", "groups")
CONV2D = defop("conv2d", _conv2d_kernel, _infer_conv2d, vjp=_conv2d_vjp, attrs=_CONV_ATTRS,
               decomposition=_conv2d_decomposition,
               specialise=_specialise_conv2d,
               saves="i",
               onnx=_onnx_conv2d,
               autocast="lower")
CONV2D_INPUT_GRAD = defop("conv2d_input_grad", _input_grad_kernel, _infer_input_grad,
                          compiler_only=True,
                          decomposition=_input_grad_decomposition,
                          vjp=_input_grad_vjp, attrs=("input_size",) + _CONV_ATTRS, saves="i",
                          fills_out=True, onnx=_onnx_conv2d_input_grad)
CONV2D_WEIGHT_GRAD = defop("conv2d_weight_grad", _weight_grad_kernel, _infer_weight_grad,
                           compiler_only=True,
                           decomposition=_weight_grad_decomposition,
                           vjp=_weight_grad_vjp, attrs=("kernel_size",) + _CONV_ATTRS,
                           saves="i", fills_out=True)
# Made by passes.share_conv_columns after autodiff, so they need no VJP.
CONV2D_COLUMNS = defop("conv2d_columns", _columns_kernel, _infer_columns,
                       compiler_only=True,
                       decomposition=_columns_decomposition,
                       attrs=("kernel_size",) + _CONV_ATTRS, saves="",
                       doc="im2col of a conv's input: (G, C/G*kh*kw, N*Ho*R), R the row "
                           "width of the GEMM layout (the padded width for stride 1)")
CONV2D_FROM_COLUMNS = defop("conv2d_from_columns", _conv_from_columns_kernel,
                            _infer_conv_from_columns, attrs=_CONV_ATTRS, saves="",
                            compiler_only=True,
                            decomposition=_from_columns_decomposition,
                            doc="conv2d(x, w, bias) from conv2d_columns(x); x gives the shape")
CONV2D_WEIGHT_GRAD_FROM_COLUMNS = defop(
    "conv2d_weight_grad_from_columns", _weight_grad_from_columns_kernel,
    _infer_weight_grad_from_columns, attrs=("kernel_size",) + _CONV_ATTRS, saves="",
    compiler_only=True,
    decomposition=_weight_grad_from_columns_decomposition,
    doc="conv2d_weight_grad(x, g) from conv2d_columns(x); x gives the shape")


# -- argument normalisation ----------------------------------------------------------------------
def _pair(v, name):
    t = (v, v) if isinstance(v, int) else tuple(v)
    if len(t) != 2 or not all(isinstance(d, int) for d in t):
        raise ValueError(f"{name} must be an int or a pair of ints, got {v!r}")
    return t


def _conv_padding(padding, kernel, stride, dilation):
    """torch's padding argument -> ((top, bottom), (left, right))."""
    if padding == "valid":
        return ((0, 0), (0, 0))
    if padding == "same":
        if stride != (1, 1):
            raise ValueError(f"padding='same' is not supported for strided convolutions "
                             f"(stride={stride}); pad explicitly instead")
        totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return tuple((t // 2, t - t // 2) for t in totals)   # the extra pixel goes last
    if isinstance(padding, str):
        raise ValueError(f"padding must be an int, a pair, 'same' or 'valid', got {padding!r}")
    ph, pw = _pair(padding, "padding")
    return ((ph, ph), (pw, pw))


def _check_float(name, *tensors):
    for t in tensors:
        if t is not None and not is_float(t.dtype.np):
            raise TypeError(f"{name} needs floating-point tensors, got {t.dtype}; "
                            "convert with .float()")


def _batched(fn, x, ndim):
    """Run ``fn`` on ``x`` with a batch dim added when ``x`` is unbatched (ndim - 1 dims)."""
    if x.ndim == ndim:
        return fn(x)
    if x.ndim != ndim - 1:
        raise ShapeError(f"expected a {ndim - 1}-D (unbatched) or {ndim}-D (batched) input, "
                         f"got shape {tuple(x.shape)}")
    out = fn(shape_ops.reshape(x, (1,) + tuple(x.shape)))
    if isinstance(out, tuple):
        return tuple(shape_ops.reshape(o, tuple(o.shape[1:])) for o in out)
    return shape_ops.reshape(out, tuple(out.shape[1:]))


def _with_bias(args, bias):
    return args if bias is None else args + (bias,)


# -- public conv functions -----------------------------------------------------------------------
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution (cross-correlation) of ``input (N, C_in, H, W)`` with ``weight
    (C_out, C_in/groups, kH, kW)``, as ``torch.nn.functional.conv2d``. ``padding`` is an
    int, a pair, ``'valid'`` or ``'same'`` (stride 1; an odd total puts the extra pixel
    at the bottom/right, as torch does).

    >>> conv2d(ones(8, 3, 32, 32), ones(16, 3, 5, 5), padding=2).shape
    Size([8, 16, 32, 32])
    """
    _check_float("conv2d", input, weight, bias)
    stride, dilation = _pair(stride, "stride"), _pair(dilation, "dilation")
    kernel = tuple(weight.shape[2:])
    conv = dict(stride=stride, padding=_conv_padding(padding, kernel, stride, dilation),
                dilation=dilation, groups=int(groups))
    return _batched(lambda x: apply(CONV2D, *_with_bias((x, weight), bias), **conv), input, 4)


def _unit_height(x):
    """(N, C, L) -> (N, C, 1, L): the 1-D ops are the 2-D ones on a unit height."""
    return shape_ops.reshape(x, tuple(x.shape[:-1]) + (1, x.shape[-1]))


def _drop_height(x):
    return shape_ops.reshape(x, tuple(x.shape[:-2]) + (x.shape[-1],))


def _one(v, name):
    """A 1-D size argument (an int or a 1-tuple) -> an int."""
    t = (v,) if isinstance(v, int) else tuple(v)
    if len(t) != 1:
        raise ValueError(f"{name} must be an int or a 1-tuple for a 1-D op, got {v!r}")
    return t[0]


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D convolution of ``input (N, C_in, L)`` with ``weight (C_out, C_in/groups, k)``,
    as ``torch.nn.functional.conv1d``."""
    if not isinstance(padding, str):
        padding = (0, _one(padding, "padding"))
    return _batched(lambda x: _drop_height(conv2d(
        _unit_height(x), _unit_height(weight), bias, (1, _one(stride, "stride")), padding,
        (1, _one(dilation, "dilation")), groups)), input, 3)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """Transposed 2-D convolution (the gradient of conv2d with respect to its input) of
    ``input (N, C_in, H, W)`` with ``weight (C_in, C_out/groups, kH, kW)``, as
    ``torch.nn.functional.conv_transpose2d``."""
    _check_float("conv_transpose2d", input, weight, bias)
    stride, dilation = _pair(stride, "stride"), _pair(dilation, "dilation")
    pad, out_pad = _pair(padding, "padding"), _pair(output_padding, "output_padding")
    kernel = tuple(weight.shape[2:])
    for a in range(2):
        if out_pad[a] >= max(stride[a], dilation[a]):
            raise ValueError(f"output_padding {out_pad} must be smaller than stride {stride} "
                             f"or dilation {dilation}")
    conv = dict(stride=stride, padding=((pad[0], pad[0]), (pad[1], pad[1])),
                dilation=dilation, groups=int(groups))

    def run(x):
        size = tuple((x.shape[2 + a] - 1) * stride[a] - 2 * pad[a]
                     + dilation[a] * (kernel[a] - 1) + out_pad[a] + 1 for a in range(2))
        y = apply(CONV2D_INPUT_GRAD, x, weight, input_size=size, **conv)
        return y if bias is None else y + shape_ops.reshape(bias, (-1, 1, 1))
    return _batched(run, input, 4)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """Transposed 1-D convolution, as ``torch.nn.functional.conv_transpose1d``."""
    return _batched(lambda x: _drop_height(conv_transpose2d(
        _unit_height(x), _unit_height(weight), bias, (1, _one(stride, "stride")),
        (0, _one(padding, "padding")), (0, _one(output_padding, "output_padding")), groups,
        (1, _one(dilation, "dilation")))), input, 3)


# -- pooling -------------------------------------------------------------------------------------
# Pool kernels work on (..., H, W). ``pool`` attrs: kernel_size, stride, padding (symmetric,
# per dim) and ceil_mode, plus dilation for max and count_include_pad / divisor_override
# for avg. In ceil mode the windows may need extra padding at the bottom/right.
def _pool_geometry(hw, kernel_size, stride, padding, ceil_mode, dilation=(1, 1)):
    """(Ho, Wo) and the ((top, bottom), (left, right)) padding that fits every window."""
    out = tuple(_out_size(hw[a], kernel_size[a], stride[a], padding[a], padding[a],
                          dilation[a], ceil_mode) for a in range(2))
    pads = tuple((padding[a], max(0, (out[a] - 1) * stride[a] + dilation[a]
                                  * (kernel_size[a] - 1) + 1 - hw[a] - padding[a]))
                 for a in range(2))
    return out, pads


def _check_pool_rank(name, x):
    """(the kernels check it too: NumPy's windows would pool a 5-D input's last dims)"""
    if x.ndim not in (3, 4):
        raise ShapeError(f"{name}: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got "
                         f"shape {tuple(x.shape)}")


def _infer_pool(name, x, kernel_size, stride, padding, ceil_mode, dilation=(1, 1)):
    _check_pool_rank(name, x)
    for a in range(2):
        if 2 * padding[a] > kernel_size[a]:
            raise ShapeError(f"{name}: padding {padding} must be at most half the kernel size "
                             f"{kernel_size}")
    out = tuple(_out_size(x.shape[-2 + a], kernel_size[a], stride[a], padding[a], padding[a],
                          dilation[a], ceil_mode) for a in range(2))
    if any(type(d) is int and d < 1 for d in out):
        raise ShapeError(f"{name}: the input of shape {tuple(x.shape)} is too small for "
                         f"kernel {kernel_size} with padding {padding}")
    return tuple(x.shape[:-2]) + out


def _max_pool_kernel(x, *, kernel_size, stride, padding, dilation, ceil_mode, out=None):
    _check_pool_rank("max_pool2d", x)
    (x,), dt = linalg.blas_operands(x)
    hw = x.shape[-2:]
    out_hw, pads = _pool_geometry(hw, kernel_size, stride, padding, ceil_mode, dilation)
    if (kernel_size == stride == (2, 2) and dilation == (1, 1) and pads == ((0, 0), (0, 0))
            and kernels.enabled(x) and not np.isnan(x).any()):
        planes = np.ascontiguousarray(x).reshape((-1,) + hw)
        rows = (planes.shape[0],) + tuple(out_hw)
        best = empty_into(out_part(out, 0), rows, x.dtype)
        where = empty_into(out_part(out, 1), rows, np.dtype(np.int64))
        kernels.pooling.max_pool_2x2(planes, best, where)
        shape = x.shape[:-2] + tuple(out_hw)
        return cast(best.reshape(shape), dt), where.reshape(shape)
    if kernels.enabled(x) and hw[0] * hw[1] < 1 << 24 and not np.isnan(x).any():
        best, where = _max_pool_loop(x, kernel_size, stride, padding, dilation, out_hw)
        return cast(best, dt), where
    win = _windows(_pad(x, pads, -np.inf), kernel_size, stride, dilation, out_hw)
    if stride == kernel_size and dilation == (1, 1) and pads == ((0, 0), (0, 0)):
        fast = _tiled_max_pool(win, hw)
        if fast is not None:
            return cast(fast[0], dt), fast[1]
    # A running max over the kernel positions; NaN wins, as in torch. Preallocated masks
    # and copyto: this loop is the whole cost of the op.
    best = win[..., 0, 0].copy()
    arg = np.zeros(best.shape, dtype=np.int64)
    take, nan = np.empty(best.shape, bool), np.empty(best.shape, bool)
    for pos in range(1, kernel_size[0] * kernel_size[1]):
        v = win[..., pos // kernel_size[1], pos % kernel_size[1]]
        np.greater(v, best, out=take)
        take |= np.isnan(v, out=nan)
        np.copyto(best, v, where=take)
        np.copyto(arg, pos, where=take)
    # Flat index into the unpadded input plane (torch's indices): the window's corner plus
    # the offset of the kernel position that won.
    rows = (np.arange(out_hw[0]) * stride[0] - padding[0])[:, None]
    cols = np.arange(out_hw[1]) * stride[1] - padding[1]
    i, j = np.divmod(np.arange(kernel_size[0] * kernel_size[1]), kernel_size[1])
    offsets = i * dilation[0] * hw[1] + j * dilation[1]
    return cast(best, dt), np.take(offsets, arg) + (rows * hw[1] + cols)


def max_pool_values(x, kernel_size, stride, padding, dilation, ceil_mode, out=None):
    """Max pooling's values alone (no indices) of the float32 ``x (..., H, W)``, planes
    shared among threads, by the loop :func:`_max_values_plan` chooses, into ``out`` where
    given (``empty_into``). None where none runs (another dtype, no Numba, a small
    input)."""
    if not kernels.enabled(x):
        return None
    return _run_plan(_max_values_plan(tuple(x.shape), tuple(kernel_size), tuple(stride),
                                      tuple(padding), tuple(dilation), ceil_mode), x, out)


@lru_cache(maxsize=256)
def _max_values_plan(shape, kernel_size, stride, padding, dilation, ceil_mode):
    """How :func:`max_pool_values` pools a float32 input of ``shape`` (a :class:`_Plan`):
    ``kernels.pooling.max_pool_values`` (or, for windows of at most three columns without
    column dilation, ``kernels.pool_separable``'s loop: ``values_loop``; eight or sixteen
    outputs of a row a vector, straight from the input rows, NaN kept) where it takes the
    rows (input rows of eight at least, column stride
    1 or 2: ``pooling.vectorised``); else with eight or sixteen planes in the lanes
    (``kernels.pool_lanes``, where it ``fits``), or by ``pooling.max_pool_rows`` (the
    first loop's order in plain loops)."""
    hw = shape[-2:]
    out_hw, _ = _pool_geometry(hw, kernel_size, stride, padding, ceil_mode, dilation)
    planes = math.prod(shape[:-2])
    final = shape[:-2] + tuple(out_hw)
    geometry = (*hw, *out_hw, *kernel_size, *stride, *dilation, *padding)
    if kernels.pooling.vectorised(hw[1], stride[1]):
        loop = pool_separable.values_loop(kernel_size[1], stride[1], dilation[1])
        return _Plan(loop, planes, (planes, -1), final,
                     geometry + (kernels.pooling.values_lanes(out_hw[1]),))
    if kernels.pool_lanes.fits(np.float32, planes, out_hw[1]):
        lanes = kernels.pool_lanes.lanes(planes)
        return _Plan(kernels.pool_lanes.max_pool_lanes, -(-planes // lanes), (-1,), final,
                     (planes, lanes) + geometry)
    return _Plan(kernels.pooling.max_pool_rows, planes, (planes, -1), final, geometry)


class _Plan(NamedTuple):
    """A pooling loop as it runs on inputs of one shape: ``loop(start, stop, x, out,
    *args)`` over ``range(rows)``, ``x`` and ``out`` contiguous and seen in ``layout``
    (flat, or a row a plane), the result of shape ``final``."""
    loop: object
    rows: int
    layout: tuple
    final: tuple
    args: tuple


def _run_plan(plan: _Plan, x, out=None):
    """``plan`` run on ``x``, its rows shared among threads, into ``out`` where given
    (``empty_into``)."""
    target = empty_into(out, plan.final, x.dtype)
    run_rows(plan.loop, plan.rows, np.ascontiguousarray(x).reshape(plan.layout),
             target.reshape(plan.layout), *plan.args, threads=threads_for(x.size))
    return target


def fitted_pool(plan: _Plan, size: int):
    """``run(x, out=None)``: ``plan`` for a compiled graph's node of ``size`` input
    elements, its threads and the loop's compiled entry worked out once (``run_kept``):
    choosing the loop, typing its arguments and checking the buffers cost more than a
    small plane's pooling at every call. A call at a time (the entry is the closure's)."""
    workers, entry = min(plan.rows, threads_for(size) or cores()), []

    def run(x, out=None):
        target = np.empty(plan.final, np.float32) if out is None else out
        run_kept(plan.loop, workers, entry, np.ascontiguousarray(x).reshape(plan.layout),
                 target.reshape(plan.layout), *plan.args, rows=plan.rows)
        return target
    return run


def _fits_plans(x) -> bool:
    """Whether a node's input ``x`` (a typed Value) takes a fitted pooling plan: float32,
    of static shape, Numba there."""
    return (kernels.numba_available() and is_static(x.shape)
            and getattr(x, "dtype", None) == np.float32)


def specialise_max_values(x, *, kernel_size, stride, padding, dilation, ceil_mode):
    """``specialise`` (codegen) of ``max_pool2d_values``: :func:`max_pool_values`' plan
    fitted to the node (:func:`fitted_pool`), where its loops take the input; else None
    (the op's kernel)."""
    shape = tuple(x.shape)
    if not (_fits_plans(x) and math.prod(shape) >= kernels.MIN_ELEMENTS):
        return None
    return "max_pool_fitted", fitted_pool(_max_values_plan(
        shape, tuple(kernel_size), tuple(stride), tuple(padding), tuple(dilation),
        ceil_mode), math.prod(shape))


def _max_pool_loop(x, kernel_size, stride, padding, dilation, out_hw):
    """``kernels.pooling.max_pool`` on the float32 ``x (..., H, W)``, planes shared among
    threads: the maxima and their flat positions in their planes."""
    hw, shape = x.shape[-2:], x.shape[:-2] + tuple(out_hw)
    planes = np.ascontiguousarray(x).reshape(-1, hw[0] * hw[1])
    best = np.empty((planes.shape[0], out_hw[0] * out_hw[1]), x.dtype)
    where = np.empty(best.shape, np.int64)
    run_rows(kernels.pooling.max_pool, planes.shape[0], planes, best, where, *hw, *out_hw,
             *kernel_size, *stride, *dilation, padding[0], padding[1],
             threads=threads_for(planes.size))
    return best.reshape(shape), where.reshape(shape)


def _tiled_max_pool(win, hw):
    """Max pooling over non-overlapping, unpadded windows ``win (..., Ho, Wo, kh, kw)``:
    the values and torch's flat argmax indices, or None when a window holds a NaN (the
    general loop then reproduces torch's choice among NaNs).

    One copy puts each kernel position in its own contiguous plane, so the max is one
    reduction and the argmax is kh*kw compares, all on contiguous arrays; the positions
    are visited last to first so that the first maximum wins, as in torch."""
    kh, kw = win.shape[-2:]
    ho, wo = win.shape[-4:-2]
    planes = np.moveaxis(win, (-2, -1), (0, 1)).reshape((kh * kw,) + win.shape[:-2])
    best = np.maximum.reduce(planes, axis=0)
    if np.isnan(best).any():
        return None
    arg = np.empty(best.shape, np.int64)
    hit = np.empty(best.shape, bool)
    for pos in range(kh * kw - 1, -1, -1):
        np.equal(planes[pos], best, out=hit)
        np.copyto(arg, (pos // kw) * hw[1] + pos % kw, where=hit)
    arg += (np.arange(ho) * kh * hw[1])[:, None] + np.arange(wo) * kw
    return best, arg


def _infer_max_pool(x, *, kernel_size, stride, padding, dilation, ceil_mode):
    shape = _infer_pool("max_pool2d", x, kernel_size, stride, padding, ceil_mode, dilation)
    return ShapedType(shape, x.dtype), ShapedType(shape, np.dtype(np.int64))


def _max_pool_backward_kernel(g, indices, *, input_size, out=None):
    (g,), dt = linalg.blas_operands(g)
    lead, plane = g.shape[:-2], input_size[0] * input_size[1]
    n = math.prod(lead)
    if kernels.enabled(g):
        dx = empty_into(out, (n, plane), g.dtype)
        dx.fill(0)   # (the loop adds each window's gradient at its maximum)
        kernels.pooling.max_pool_backward(kernels.rows(g, g.shape[-2] * g.shape[-1]),
                                          kernels.rows(indices, g.shape[-2] * g.shape[-1]),
                                          dx)
        return cast(dx.reshape(lead + tuple(input_size)), dt)
    flat = indices.reshape(n, -1) + (np.arange(n) * plane)[:, None]
    # bincount sums the gradients of windows that share their maximum (overlapping pools).
    out = np.bincount(flat.ravel(), weights=g.ravel(), minlength=n * plane)
    return out.astype(dt).reshape(lead + tuple(input_size))


def _infer_max_pool_backward(g, indices, *, input_size):
    return ShapedType(tuple(g.shape[:-2]) + tuple(input_size), g.dtype)


def _max_pool_vjp(g, out, x, **pool):
    return apply(MAX_POOL2D_BACKWARD, g[0], out[1], input_size=_hw(x))


def _max_pool_backward_vjp(gy, out, g, indices, *, input_size):
    # The backward scatters g to the argmax positions; its adjoint gathers from them.
    lead = tuple(g.shape[:-2])
    flat = shape_ops.reshape(gy, lead + (-1,))
    picked = index.gather(flat, -1, shape_ops.reshape(indices, lead + (-1,)))
    return shape_ops.reshape(picked, tuple(g.shape)), None


def _max_pool_backward_decomposition(g, indices, *, input_size):
    """Each window's gradient added at its argmax, a scatter-add into each plane."""
    lead = tuple(g.shape[:-2])
    zeros = creation.zeros(lead + (input_size[0] * input_size[1],), dtype=g.dtype)
    planes = index.scatter_add(zeros, -1, shape_ops.reshape(indices, lead + (-1,)),
                               shape_ops.reshape(g, lead + (-1,)))
    return shape_ops.reshape(planes, lead + tuple(input_size))


def _onnx_max_pool2d(e, node):
    a = node.attrs
    ph, pw = a["padding"]
    h, w = node.inputs[0].shape[-2:]

    def pool(x):
        values, indices = e.op(
            "MaxPool", [x], outputs=2, kernel_shape=list(a["kernel_size"]),
            strides=list(a["stride"]), pads=[ph, pw, ph, pw], dilations=list(a["dilation"]),
            ceil_mode=int(a["ceil_mode"]))
        # ONNX counts indices over the whole NCHW tensor, dualgraph (as torch) per plane
        plane = e.scalar(h * w, np.int64, "plane")
        return [values, e.op("Mod", [indices, plane])]
    return e.batched(pool)


MAX_POOL2D = defop("max_pool2d", _max_pool_kernel, _infer_max_pool, vjp=_max_pool_vjp,
                   attrs=("kernel_size", "stride", "padding", "dilation", "ceil_mode"),
                   num_outputs=2, differentiable_outputs=(0,), saves="o",
                   saved_outputs=(1,), fills_out=True,
                   onnx=_onnx_max_pool2d)
MAX_POOL2D_BACKWARD = defop("max_pool2d_backward", _max_pool_backward_kernel,
                            _infer_max_pool_backward, vjp=_max_pool_backward_vjp,
                            compiler_only=True,
                            decomposition=_max_pool_backward_decomposition,
                            attrs=("input_size",), saves="i", fills_out=True)


def _avg_divisor(hw, out_hw, kernel_size, stride, padding, count_include_pad,
                 divisor_override):
    """The (Ho, Wo) divisors: the window's size within the padded input (or within the
    input alone when count_include_pad is False), as torch computes them."""
    if divisor_override:
        return float(divisor_override)
    counts = []
    for a in range(2):
        start = np.arange(out_hw[a]) * stride[a] - padding[a]
        end = np.minimum(start + kernel_size[a], hw[a] + padding[a])
        if not count_include_pad:
            start, end = np.maximum(start, 0), np.minimum(end, hw[a])
        counts.append(end - start)
    return np.outer(*counts)


def _avg_pool_kernel(x, *, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override, out=None):
    _check_pool_rank("avg_pool2d", x)
    (x,), dt = linalg.blas_operands(x)
    hw = x.shape[-2:]
    if _whole_plane(hw, kernel_size, padding, divisor_override):
        total = np.add.reduce(x, axis=(-2, -1), keepdims=True)
        total /= np.asarray(hw[0] * hw[1], total.dtype)
        return cast(total, dt)
    if _loops_take(x):
        plan = _avg_plan(tuple(x.shape), tuple(kernel_size), tuple(stride), tuple(padding),
                         ceil_mode, count_include_pad, divisor_override, x.dtype)
        return cast(_run_plan(plan, x, out), dt)
    out_hw, pads = _pool_geometry(hw, kernel_size, stride, padding, ceil_mode)
    div = _avg_divisor(hw, out_hw, kernel_size, stride, padding, count_include_pad,
                       divisor_override)
    win = _windows(_pad(x, pads), kernel_size, stride, (1, 1), out_hw)
    total = win[..., 0, 0].copy()
    for pos in range(1, kernel_size[0] * kernel_size[1]):
        total += win[..., pos // kernel_size[1], pos % kernel_size[1]]
    return cast(total / np.asarray(div, total.dtype), dt)


def _loops_take(x) -> bool:
    """Whether ``kernels.pooling``'s average-pooling loops run on ``x``: float32 or
    float64 (they compile per dtype) with Numba on, at every size (NumPy's form is a pass
    per kernel position)."""
    return x.dtype in (np.float32, np.float64) and kernels.numba_available()


@lru_cache(maxsize=256)
def _avg_plan(shape, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override, dtype):
    """How ``avg_pool2d``'s kernel pools an input of ``shape`` and ``dtype`` (float32 or
    float64, Numba there; a :class:`_Plan`): ``kernels.pooling.avg_pool`` (a row of
    column sums into a padded scratch row, then across it); on small float32 planes
    ``kernels.pool_lanes.avg_pool_lanes`` where it ``fits``, unless the rows are wide
    enough for ``kernels.pool_means``' loop to win (``beats_lanes``), which takes float32
    rows of eight at column stride 1 or 2 otherwise, straight from the input rows, 0.2-0.7x
    the time of ``avg_pool``."""
    hw = shape[-2:]
    out_hw, div = _divisor_rows(hw, kernel_size, stride, padding, ceil_mode,
                                count_include_pad, divisor_override, dtype)
    planes = math.prod(shape[:-2])
    final = shape[:-2] + tuple(out_hw)
    geometry = (*hw, *out_hw, *kernel_size, *stride, *padding)
    rows = dtype == np.float32 and kernels.pooling.vectorised(hw[1], stride[1])
    if (kernels.pool_lanes.fits(dtype, planes, out_hw[1])
            and not (rows and kernels.pool_means.beats_lanes(hw[1]))):
        lanes = kernels.pool_lanes.lanes(planes)
        return _Plan(kernels.pool_lanes.avg_pool_lanes, -(-planes // lanes), (-1,), final,
                     (planes, lanes) + geometry + (div,))
    if rows:
        return _Plan(kernels.pool_means.rows_loop(kernel_size[1], stride[1]), planes,
                     (planes, -1), final,
                     (div,) + geometry + (kernels.pooling.values_lanes(out_hw[1]),))
    return _Plan(kernels.pooling.avg_pool, planes, (planes, -1), final, (div,) + geometry)


def specialise_avg_pool(x, *, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    """``specialise`` (codegen) of ``avg_pool2d``: the kernel's plan (:func:`_avg_plan`)
    fitted to the node (:func:`fitted_pool`) for float32 inputs of static shape, but the
    whole plane's mean (the kernel's own); else None."""
    shape = tuple(x.shape)
    if not _fits_plans(x) or _whole_plane(shape[-2:], kernel_size, padding, divisor_override):
        return None
    return "avg_pool_fitted", fitted_pool(_avg_plan(
        shape, tuple(kernel_size), tuple(stride), tuple(padding), ceil_mode, count_include_pad,
        divisor_override, np.dtype(np.float32)), math.prod(shape))


def _avg_pool_backward_loop(g, hw, kernel_size, stride, padding, *divisor):
    """``kernels.pooling.avg_pool_backward`` on the planes of ``g (..., Ho, Wo)``, shared
    among threads (``divisor``: ceil_mode, count_include_pad, divisor_override): the
    gradient of the input, ``(..., H, W)``."""
    out_hw, div = _divisor_rows(hw, tuple(kernel_size), tuple(stride), tuple(padding),
                                *divisor, g.dtype)
    planes = kernels.rows(g, out_hw[0] * out_hw[1])
    dx = np.empty((planes.shape[0], hw[0] * hw[1]), g.dtype)
    run_rows(kernels.pooling.avg_pool_backward, planes.shape[0], planes, div, dx, *hw, *out_hw,
             *kernel_size, *stride, *padding, threads=threads_for(planes.size))
    return dx.reshape(g.shape[:-2] + tuple(hw))


@lru_cache(maxsize=256)
def _divisor_rows(hw, kernel_size, stride, padding, ceil_mode, count_include_pad,
                  divisor_override, dtype):
    """``(Ho, Wo)`` and the divisors (``_avg_divisor``) laid out as the loops read them
    (``kernels.pooling.avg_divisors``), once per geometry: working them out cost more than
    a small plane's pooling."""
    out_hw, _ = _pool_geometry(hw, kernel_size, stride, padding, ceil_mode)
    div = _avg_divisor(hw, out_hw, kernel_size, stride, padding, count_include_pad,
                       divisor_override)
    return out_hw, kernels.pooling.avg_divisors(div, *out_hw).astype(dtype)


def _infer_avg_pool(x, *, kernel_size, stride, padding, ceil_mode, **divisor):
    return ShapedType(_infer_pool("avg_pool2d", x, kernel_size, stride, padding, ceil_mode),
                      x.dtype)


def _whole_plane(hw, kernel_size, padding, divisor_override) -> bool:
    """Whether an average pool's one window is the whole unpadded plane (global average
    pooling: ``adaptive_avg_pool2d(x, 1)``, squeeze-and-excitation), which its kernels
    compute as a mean and its spread-out gradient: one pass each, where the window's
    ``kh * kw`` shifted views cost a pass apiece (a 16x16 plane: 256)."""
    return (tuple(kernel_size) == tuple(hw) and not any(padding)
            and divisor_override is None)


def _avg_pool_backward_kernel(g, *, input_size, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override):
    (g,), dt = linalg.blas_operands(g)
    if _whole_plane(input_size, kernel_size, padding, divisor_override):
        dx = np.empty(g.shape[:-2] + tuple(input_size), g.dtype)
        dx[...] = g / np.asarray(input_size[0] * input_size[1], g.dtype)
        return cast(dx, dt)
    if _loops_take(g):
        return cast(_avg_pool_backward_loop(g, tuple(input_size), kernel_size, stride, padding,
                                            ceil_mode, count_include_pad, divisor_override),
                    dt)
    out_hw, pads = _pool_geometry(input_size, kernel_size, stride, padding, ceil_mode)
    div = _avg_divisor(input_size, out_hw, kernel_size, stride, padding, count_include_pad,
                       divisor_override)
    share = g / np.asarray(div, g.dtype)
    cols = np.broadcast_to(share[..., None, None, :, :],
                           share.shape[:-2] + tuple(kernel_size) + share.shape[-2:])
    xp = _col2im(cols, _padded(*input_size, pads), stride, (1, 1))
    return cast(_crop(xp, pads, input_size), dt)


def _infer_avg_pool_backward(g, *, input_size, **pool):
    return ShapedType(tuple(g.shape[:-2]) + tuple(input_size), g.dtype)


def _avg_pool_backward_decomposition(g, *, input_size, kernel_size, stride, padding,
                                     ceil_mode, count_include_pad, divisor_override):
    """Each window's share of its gradient added over the window (:func:`_fold`)."""
    out_hw, pads = _pool_geometry(input_size, kernel_size, stride, padding, ceil_mode)
    div = _avg_divisor(input_size, out_hw, kernel_size, stride, padding, count_include_pad,
                       divisor_override)
    share = g / creation.tensor(div, dtype=g.dtype)
    lead = tuple(g.shape[:-2])
    cols = shape_ops.expand(shape_ops.reshape(share, lead + (1, 1) + tuple(out_hw)),
                            lead + tuple(kernel_size) + tuple(out_hw))
    xp = _fold(cols, _padded(*input_size, pads), stride, (1, 1), out_hw)
    return _crop_padding(xp, pads, input_size)


def _onnx_avg_pool2d(e, node):
    a = node.attrs
    ph, pw = a["padding"]
    divisor = a["divisor_override"]
    if divisor is not None and a["ceil_mode"]:
        raise e.fail("avg_pool2d with divisor_override and ceil_mode has no ONNX form",
                     "pad the input so that ceil_mode is not needed")

    def pool(x):
        mean = e.op("AveragePool", [x], kernel_shape=list(a["kernel_size"]),
                    strides=list(a["stride"]), pads=[ph, pw, ph, pw],
                    ceil_mode=int(a["ceil_mode"]),
                    count_include_pad=int(a["count_include_pad"] or divisor is not None))
        if divisor is None:
            return [mean]
        # every window then holds kh * kw values (padding included): rescale the mean
        kh, kw = a["kernel_size"]
        scale = e.scalar(kh * kw / divisor, node.outputs[0].dtype, "scale")
        return [e.op("Mul", [mean, scale])]
    return e.batched(pool)


# avg_pool2d is linear; its backward is its transpose, and each is the other's VJP.
AVG_POOL2D = defop("avg_pool2d", _avg_pool_kernel, _infer_avg_pool, saves="",
                   vjp=lambda g, out, x, **pool: apply(AVG_POOL2D_BACKWARD, g,
                                                       input_size=_hw(x), **pool),
                   attrs=("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                          "divisor_override"),
                   onnx=_onnx_avg_pool2d, fills_out=True, specialise=specialise_avg_pool)
AVG_POOL2D_BACKWARD = defop("avg_pool2d_backward", _avg_pool_backward_kernel,
                            _infer_avg_pool_backward, saves="",
                            compiler_only=True,
                            decomposition=_avg_pool_backward_decomposition,
                            vjp=lambda gy, out, g, input_size, **pool: apply(AVG_POOL2D, gy,
                                                                             **pool),
                            attrs=("input_size", "kernel_size", "stride", "padding",
                                   "ceil_mode", "count_include_pad", "divisor_override"))


def _pool_args(kernel_size, stride, padding):
    kernel_size = _pair(kernel_size, "kernel_size")
    stride = kernel_size if stride is None or stride == () else _pair(stride, "stride")
    return kernel_size, stride, _pair(padding, "padding")


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """2-D max pooling of ``(N, C, H, W)`` or ``(C, H, W)``, as
    ``torch.nn.functional.max_pool2d``; the input is padded with -inf. With
    ``return_indices`` it also returns the argmax as flat indices into each H*W plane.

    >>> max_pool2d(ones(8, 6, 28, 28), 2).shape
    Size([8, 6, 14, 14])
    """
    _check_float("max_pool2d", input)
    kernel_size, stride, padding = _pool_args(kernel_size, stride, padding)
    values, indices = apply(MAX_POOL2D, input, kernel_size=kernel_size, stride=stride,
                            padding=padding, dilation=_pair(dilation, "dilation"),
                            ceil_mode=bool(ceil_mode))
    return (values, indices) if return_indices else values


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """2-D average pooling, as ``torch.nn.functional.avg_pool2d``."""
    _check_float("avg_pool2d", input)
    kernel_size, stride, padding = _pool_args(kernel_size, stride, padding)
    return apply(AVG_POOL2D, input, kernel_size=kernel_size, stride=stride, padding=padding,
                 ceil_mode=bool(ceil_mode), count_include_pad=bool(count_include_pad),
                 divisor_override=divisor_override)


def _pool1d(pool2d, input, kernel_size, stride, padding, **kw):
    """A 2-D pool run on a unit height; the kernel, stride and padding get a unit row."""
    stride = None if stride is None or stride == () else (1, _one(stride, "stride"))
    out = pool2d(_unit_height(input), (1, _one(kernel_size, "kernel_size")), stride,
                 (0, _one(padding, "padding")), **kw)
    if isinstance(out, tuple):
        return tuple(_drop_height(o) for o in out)
    return _drop_height(out)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """1-D max pooling of ``(N, C, L)`` or ``(C, L)``, as torch's."""
    return _pool1d(max_pool2d, input, kernel_size, stride, padding,
                   dilation=(1, _one(dilation, "dilation")), ceil_mode=ceil_mode,
                   return_indices=return_indices)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    """1-D average pooling of ``(N, C, L)`` or ``(C, L)``, as torch's."""
    return _pool1d(avg_pool2d, input, kernel_size, stride, padding, ceil_mode=ceil_mode,
                   count_include_pad=count_include_pad)


def _averaging_matrix(size: int, out: int) -> np.ndarray:
    """(out, size) rows averaging torch's adaptive windows [floor(i*size/out),
    ceil((i+1)*size/out))."""
    m = np.zeros((out, size))
    for i in range(out):
        lo, hi = (i * size) // out, -((-(i + 1) * size) // out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


def adaptive_avg_pool2d(input, output_size):
    """Average pooling to a fixed ``output_size`` (an int, or a pair whose None entries
    keep the input's size), as ``torch.nn.functional.adaptive_avg_pool2d``. When the sizes
    divide it is avg_pool2d; otherwise the windows overlap unevenly and it is
    ``P_h @ x @ P_w.T`` with averaging matrices."""
    _check_float("adaptive_avg_pool2d", input)
    hw = tuple(input.shape[-2:])
    sizes = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    out = tuple(hw[a] if sizes[a] is None else int(sizes[a]) for a in range(2))
    if hw[0] % out[0] == 0 and hw[1] % out[1] == 0:
        k = (hw[0] // out[0], hw[1] // out[1])
        return input if k == (1, 1) else avg_pool2d(input, k)
    ph, pw = (creation.tensor(_averaging_matrix(hw[a], out[a]), dtype=input.dtype)
              for a in range(2))
    return linalg.matmul(linalg.matmul(ph, input), linalg.mT(pw))


def adaptive_avg_pool1d(input, output_size):
    """Average pooling of ``(N, C, L)`` to ``output_size``, as torch's."""
    return _drop_height(adaptive_avg_pool2d(_unit_height(input),
                                            (1, _one(output_size, "output_size"))))


METHODS: dict = {}
