"""Sliding-window functions built on the 2-D ones (ops/conv.py), as torch.nn.functional's:
3-D convolution and pooling, ``unfold`` (im2col) and ``fold`` (col2im).

No kernel of their own: each is a few calls of the 2-D ops, so gradients (double ones
included), tracing, fusion and export come with them.

- ``conv3d``: the input's ``kD`` depth slices that each output depth reads are stacked
  into the channels, depth goes into the batch, and one ``conv2d`` with the weight's depth
  taps moved into its input channels computes every output depth at once (groups kept:
  the stacked channels are ordered group by group).
- ``max_pool3d`` / ``avg_pool3d``: a 3-D box is a 2-D box over (H, W) then a window over
  D, both 2-D pools (max and torch's divisors factor over the dims).
- ``adaptive_avg_pool3d``: an averaging matrix over D, then ``adaptive_avg_pool2d``.
- ``unfold`` / ``fold``: conv2d's window gather and its adjoint (an accumulating put).

>>> import dualgraph as dg
>>> conv3d(dg.ones(1, 2, 4, 5, 5), dg.ones(3, 2, 3, 3, 3), padding=1).shape
dualgraph.Size([1, 3, 4, 5, 5])
>>> unfold(dg.ones(1, 2, 4, 4), 2).shape
dualgraph.Size([1, 8, 9])
"""
from __future__ import annotations

from ..shapes import ShapeError
from . import conv, creation, elementwise, index, linalg
from . import shape as shape_ops

__all__ = ["conv3d", "conv_transpose3d", "max_pool3d", "avg_pool3d", "adaptive_avg_pool3d",
           "unfold", "fold"]


def _triple(v, name):
    t = (v,) * 3 if isinstance(v, int) else tuple(v)
    if len(t) != 3 or not all(isinstance(d, int) for d in t):
        raise ValueError(f"{name} must be an int or a 3-tuple of ints, got {v!r}")
    return t


def _depth_slices(x, k: int, stride: int, dilation: int, out: int):
    """The ``k`` depth slices (N, C, out, H, W) of ``x`` (N, C, D, H, W) that window tap
    ``i`` of each output depth reads."""
    return [x[:, :, i * dilation:i * dilation + (out - 1) * stride + 1:stride]
            for i in range(k)]


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-D convolution of ``input (N, C_in, D, H, W)`` with ``weight (C_out, C_in/groups,
    kD, kH, kW)``, as ``torch.nn.functional.conv3d``; ``padding`` an int, a triple,
    ``'valid'`` or ``'same'``."""
    conv._check_float("conv3d", input, weight, bias)
    stride, dilation = _triple(stride, "stride"), _triple(dilation, "dilation")
    if weight.ndim != 5:
        raise ShapeError(f"conv3d: expected a 5-D weight (C_out, C_in/groups, kD, kH, kW), "
                         f"got shape {tuple(weight.shape)}")
    kd = int(weight.shape[2])
    if isinstance(padding, str):
        if padding not in ("same", "valid") or (padding == "same" and stride != (1, 1, 1)):
            raise ValueError(f"conv3d: padding must be an int, a triple, 'valid' or 'same' "
                             f"(stride 1), got {padding!r} with stride {stride}")
        total = dilation[0] * (kd - 1) if padding == "same" else 0
        depth_pad, plane_pad = (total // 2, total - total // 2), padding
    else:
        p = _triple(padding, "padding")
        depth_pad, plane_pad = (p[0], p[0]), p[1:]

    def run(x):
        n, c, d, h, w = x.shape
        if c != weight.shape[1] * groups:
            raise ShapeError(f"conv3d: input of shape {tuple(x.shape)} has {c} channels, but "
                             f"the weight {tuple(weight.shape)} with groups={groups} expects "
                             f"{weight.shape[1] * groups}")
        out = conv._out_size(d, kd, stride[0], *depth_pad, dilation[0])
        if out < 1:
            raise ShapeError(f"conv3d: the input's depth {d} (padded {sum(depth_pad)}) is "
                             f"smaller than the kernel's extent {dilation[0] * (kd - 1) + 1}")
        xp = index.pad(x, (0, 0, 0, 0) + depth_pad)
        taps = shape_ops.stack(_depth_slices(xp, kd, stride[0], dilation[0], out), 2)
        taps = shape_ops.reshape(taps, (n, groups, c // groups, kd, out, h, w))
        planes = shape_ops.reshape(taps.permute(0, 4, 1, 3, 2, 5, 6),
                                   (n * out, c * kd, h, w))
        wk = shape_ops.reshape(weight.permute(0, 2, 1, 3, 4),
                               (weight.shape[0], -1) + tuple(weight.shape[3:]))
        y = conv.conv2d(planes, wk, bias, stride[1:], plane_pad, dilation[1:], groups)
        y = shape_ops.reshape(y, (n, out) + tuple(y.shape[1:]))
        return y.permute(0, 2, 1, 3, 4)
    return conv._batched(run, input, 5)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed 3-D convolution (the gradient of conv3d with respect to its input) of
    ``input (N, C_in, D, H, W)`` with ``weight (C_in, C_out/groups, kD, kH, kW)``, as
    ``torch.nn.functional.conv_transpose3d``.

    One transposed 2-D convolution of every depth slice with the depth taps stacked as
    output channels (``(C_in, kD * C_out/groups, kH, kW)``) gives each slice's
    contribution through each tap; tap ``t`` of slice ``i`` lands at output depth ``i *
    stride + t * dilation - padding``: each tap's slices are spread ``stride`` apart
    (zeros between), shifted by ``t * dilation`` and summed, then the depth padding is
    cropped (``output_padding`` extends the far end)."""
    conv._check_float("conv_transpose3d", input, weight, bias)
    if weight.ndim != 5:
        raise ShapeError(f"conv_transpose3d: expected a 5-D weight (C_in, C_out/groups, kD, "
                         f"kH, kW), got shape {tuple(weight.shape)}")
    stride, dilation = _triple(stride, "stride"), _triple(dilation, "dilation")
    pad, out_pad = _triple(padding, "padding"), _triple(output_padding, "output_padding")
    c_in, c_group, kd = (int(v) for v in weight.shape[:3])
    if out_pad[0] >= max(stride[0], dilation[0]):
        raise ValueError(f"output_padding {out_pad} must be smaller than stride {stride} or "
                         f"dilation {dilation}")
    stacked = shape_ops.reshape(weight.permute(0, 2, 1, 3, 4),
                                (c_in, kd * c_group) + tuple(weight.shape[3:]))

    def run(x):
        n, c, d, h, w = x.shape
        if c != c_in:
            raise ShapeError(f"conv_transpose3d: input of shape {tuple(x.shape)} has {c} "
                             f"channels, but the weight {tuple(weight.shape)} expects {c_in}")
        slices = shape_ops.reshape(x.permute(0, 2, 1, 3, 4), (n * d, c, h, w))
        y = conv.conv_transpose2d(slices, stacked, None, stride[1:], pad[1:], out_pad[1:],
                                  groups, dilation[1:])
        ho, wo = y.shape[2:]
        y = shape_ops.reshape(y, (n, d, groups, kd, c_group, ho, wo))
        spread = (d - 1) * stride[0] + 1
        full = dilation[0] * (kd - 1) + spread
        depth = full - 2 * pad[0] + out_pad[0]
        total = None
        for t in range(kd):
            tap = shape_ops.reshape(y[:, :, :, t], (n, d, 1, groups * c_group, ho, wo))
            if stride[0] > 1:
                tap = shape_ops.cat([tap, creation.zeros(
                    (n, d, stride[0] - 1, groups * c_group, ho, wo), dtype=tap.dtype)], 2)
            tap = shape_ops.reshape(tap, (n, d * stride[0], groups * c_group, ho, wo))
            before = t * dilation[0]
            after = full - before - spread + max(0, pad[0] + depth - full)
            tap = index.pad(tap[:, :spread], (0, 0, 0, 0, 0, 0, before, after))
            total = tap if total is None else elementwise.add(total, tap)
        out = total[:, pad[0]:pad[0] + depth].permute(0, 2, 1, 3, 4)
        return out if bias is None else out + shape_ops.reshape(bias, (-1, 1, 1, 1))
    return conv._batched(run, input, 5)


def _pool3d(pool2d, input, kernel_size, stride, padding, **kw):
    """A 3-D pool as ``pool2d`` over (H, W), then ``pool2d`` over D (a (k, 1) window on
    (N, C, D, Ho * Wo)); ``kw`` per-dim triples are split the same way."""
    k = _triple(kernel_size, "kernel_size")
    s = k if stride is None or stride == () else _triple(stride, "stride")
    p = _triple(padding, "padding")
    plane = {key: v[1:] for key, v in kw.items() if isinstance(v, tuple)}
    depth = {key: (v[0], 1) for key, v in kw.items() if isinstance(v, tuple)}
    same = {key: v for key, v in kw.items() if not isinstance(v, tuple)}

    def run(x):
        if x.ndim != 5:
            raise ShapeError(f"expected a 4-D (unbatched) or 5-D (batched) input, got "
                             f"shape {tuple(x.shape)}")
        n, c, d, h, w = x.shape
        y = pool2d(shape_ops.reshape(x, (n, c * d, h, w)), k[1:], s[1:], p[1:], **plane,
                   **same)
        ho, wo = y.shape[2:]
        y = pool2d(shape_ops.reshape(y, (n, c, d, ho * wo)), (k[0], 1), (s[0], 1),
                   (p[0], 0), **depth, **same)
        return shape_ops.reshape(y, (n, c, y.shape[2], ho, wo))
    return conv._batched(run, input, 5)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """3-D max pooling of ``(N, C, D, H, W)`` or ``(C, D, H, W)``, as torch's."""
    if return_indices:
        return _max_pool3d_with_indices(input, kernel_size, stride, padding,
                                        _triple(dilation, "dilation"), ceil_mode)
    return _pool3d(conv.max_pool2d, input, kernel_size, stride, padding,
                   dilation=_triple(dilation, "dilation"), ceil_mode=ceil_mode)


def _max_pool3d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode):
    """:func:`max_pool3d`'s values and the flat ``(D * H * W)`` index of each in its
    input plane, as ``_pool3d``'s two stages: each depth slice's maxima over (H, W) with
    their plane indices, then the maxima of those over D with the slice each came from; the
    index is that slice's plane index plus the slice times ``H * W``. Ties go to the first
    in (D, H, W) order, as torch's."""
    k = _triple(kernel_size, "kernel_size")
    s = k if stride is None or stride == () else _triple(stride, "stride")
    p = _triple(padding, "padding")

    def run(x):
        if x.ndim != 5:
            raise ShapeError(f"expected a 4-D (unbatched) or 5-D (batched) input, got "
                             f"shape {tuple(x.shape)}")
        n, c, d, h, w = x.shape
        y, plane_index = conv.max_pool2d(shape_ops.reshape(x, (n, c * d, h, w)), k[1:], s[1:],
                                         p[1:], dilation[1:], ceil_mode, return_indices=True)
        ho, wo = y.shape[2:]
        y, depth_index = conv.max_pool2d(shape_ops.reshape(y, (n, c, d, ho * wo)), (k[0], 1),
                                         (s[0], 1), (p[0], 0), (dilation[0], 1), ceil_mode,
                                         return_indices=True)
        flat = volume_index(plane_index, depth_index, (n, c, d), ho * wo, h * w)
        out = (n, c, y.shape[2], ho, wo)
        return shape_ops.reshape(y, out), shape_ops.reshape(flat, out)
    return conv._batched(run, input, 5)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """3-D average pooling, as ``torch.nn.functional.avg_pool3d`` (its divisors: the
    window's size inside the padded input, or inside the input alone without
    ``count_include_pad``, or ``divisor_override``)."""
    if divisor_override:   # (sums over both stages, then the one divisor)
        total = _pool3d(conv.avg_pool2d, input, kernel_size, stride, padding,
                        ceil_mode=ceil_mode, divisor_override=1)
        return total / divisor_override
    return _pool3d(conv.avg_pool2d, input, kernel_size, stride, padding,
                   ceil_mode=ceil_mode, count_include_pad=count_include_pad)


def adaptive_avg_pool3d(input, output_size):
    """Average pooling of ``(N, C, D, H, W)`` to a fixed ``output_size`` (an int, or a
    triple whose None entries keep the input's size), as torch's."""
    conv._check_float("adaptive_avg_pool3d", input)
    sizes = (output_size,) * 3 if isinstance(output_size, int) else tuple(output_size)

    def run(x):
        n, c, d, h, w = x.shape
        out = tuple(x.shape[2 + a] if sizes[a] is None else int(sizes[a]) for a in range(3))
        avg = creation.tensor(conv._averaging_matrix(d, out[0]), dtype=x.dtype)
        y = linalg.matmul(avg, shape_ops.reshape(x, (n, c, d, h * w)))
        y = conv.adaptive_avg_pool2d(shape_ops.reshape(y, (n, c * out[0], h, w)), out[1:])
        return shape_ops.reshape(y, (n, c) + out)
    return conv._batched(run, input, 5)


def volume_index(plane_index, depth_index, ncd, plane_out: int, plane_in: int):
    """Flat ``D * H * W`` indices of 3-D maxima taken in two stages: ``depth_index`` (the
    second stage's, over ``(D, plane_out)``) names the slice, ``plane_index`` (the first
    stage's, ``(N, C * D, ...)``) the position in that slice's plane."""
    slice_of = elementwise.floor_divide(depth_index, plane_out)
    within = index.gather(shape_ops.reshape(plane_index, ncd + (plane_out,)), 2, slice_of)
    return elementwise.add(elementwise.mul(slice_of, plane_in), within)


def _unfold_args(kernel_size, dilation, padding, stride):
    k, d = conv._pair(kernel_size, "kernel_size"), conv._pair(dilation, "dilation")
    p, s = conv._pair(padding, "padding"), conv._pair(stride, "stride")
    return k, d, ((p[0], p[0]), (p[1], p[1])), s


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """The sliding windows of ``input (N, C, H, W)`` as columns ``(N, C * kH * kW, L)``
    (im2col), as ``torch.nn.functional.unfold`` / ``nn.Unfold``."""
    conv._check_float("unfold", input)
    k, d, pads, s = _unfold_args(kernel_size, dilation, padding, stride)

    def run(x):
        cols, (ho, wo) = conv._unfold(x, k, s, pads, d, 1)
        if ho < 1 or wo < 1:
            raise ShapeError(f"unfold: the kernel {k} (dilation {d}) does not fit the padded "
                             f"input of shape {tuple(x.shape)}")
        return shape_ops.reshape(cols, (x.shape[0], -1, ho * wo))
    return conv._batched(run, input, 4)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """The adjoint of :func:`unfold` (col2im): columns ``(N, C * kH * kW, L)`` summed into
    ``(N, C, *output_size)``, overlapping windows adding up, as torch's ``F.fold``."""
    conv._check_float("fold", input)
    k, d, pads, s = _unfold_args(kernel_size, dilation, padding, stride)
    size = conv._pair(output_size, "output_size")

    def run(cols):
        n, rows, length = cols.shape
        ho, wo = conv._conv_out_hw(size, k, s, pads, d)
        if rows % (k[0] * k[1]) or length != ho * wo:
            raise ShapeError(
                f"fold: input of shape {tuple(cols.shape)} does not fit output_size {size} "
                f"with kernel {k}: expected C * {k[0] * k[1]} rows and {ho} * {wo} = "
                f"{ho * wo} columns (blocks)")
        cols = shape_ops.reshape(cols, (n, rows // (k[0] * k[1])) + k + (ho, wo))
        planes = conv._fold(cols, conv._padded(*size, pads), s, d, (ho, wo))
        return conv._crop_padding(planes, pads, size)
    return conv._batched(run, input, 3)
