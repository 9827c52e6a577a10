"""Ops of channels-last regions, which the layout pass (``passes/layout.py``) makes:
``relayout`` (a permutation written out as a new contiguous array: the conversions at a
region's edges), ``depthwise_nhwc`` (a depthwise convolution with its epilogue on
``(N, H, W, C)`` activations) and ``pointwise_nhwc`` (a 1x1 convolution with its epilogue
there: a ``linear_epilogue`` over the last dim on a weight stored transposed, run by
blocks of positions).

Both are compiler-only: the pass makes them after autodiff, for inference graphs, and their
decompositions are the ordinary ops they stand for (``permute``; ``conv2d`` between two
permutes, then the epilogue; ``linear_epilogue``).
"""
from __future__ import annotations

import math

import numpy as np

from .. import kernels
from ..kernels.epilogue import ACTIVATIONS
from ..shapes import ShapedType, is_static
from . import conv as conv_ops
from . import epilogue, excite
from . import shape as shape_ops
from ._util import filling
from .opdef import defop

TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def _relayout_kernel(x, perm):
    """The permuted array, contiguous (NumPy's strided copy)."""
    return np.ascontiguousarray(np.transpose(x, perm))


RELAYOUT = defop(
    "relayout", _relayout_kernel, shape_ops.PERMUTE.infer, attrs=("perm",), saves="",
    onnx=None, compiler_only=True,
    decomposition=lambda x, perm: shape_ops.permute(x, *perm),
    doc="permute(x, perm) written out as a contiguous array: a layout conversion at the "
        "edge of a channels-last region")


def _nchw_weight(wt, channels):
    """``depthwise_nhwc``'s ``(kh, kw, cp)`` weight as the ``(C, 1, kh, kw)`` of conv2d."""
    kh, kw, _ = wt.shape
    w = shape_ops.permute(wt[:, :, :channels], 2, 0, 1)
    return shape_ops.reshape(w, channels, 1, kh, kw)


def _depthwise_decomposition(x, wt, b, *residual, act, bounds, residual_at, **conv):
    c = x.shape[3]
    y = epilogue._decomposition(
        shape_ops.permute(x, *TO_NCHW), _nchw_weight(wt, c), b,
        *[shape_ops.permute(r, *TO_NCHW) for r in residual], act=act, bounds=bounds,
        residual_at=residual_at, groups=c, **conv)
    return shape_ops.permute(y, *TO_NHWC)


def _depthwise_kernel(x, wt, b, *residual, act, bounds, residual_at, stride, padding,
                      dilation):
    """``kernels/conv_nhwc.py``'s loop (float32, Numba); else ``conv2d_epilogue``'s kernel
    between transposes."""
    out_type = _infer_depthwise(x, wt, b, *residual, act=act, bounds=bounds,
                                residual_at=residual_at, stride=stride, padding=padding,
                                dilation=dilation)
    if kernels.numba_available() and all(a.dtype == np.float32 for a in (x, wt, b, *residual)):
        where = epilogue.RESIDUAL.index(residual_at) if residual else 0
        out = np.empty(out_type.shape, np.float32)
        return kernels.conv_nhwc.conv(x, wt, out, stride, padding, dilation, b,
                                      residual=residual[0] if residual else None,
                                      where=where, act=ACTIVATIONS.index(act), lo=bounds[0],
                                      hi=bounds[1])
    c = x.shape[3]
    w = np.ascontiguousarray(np.transpose(wt[:, :, :c], (2, 0, 1)))[:, None]
    y = epilogue._kernel(np.transpose(x, TO_NCHW), w, b,
                         *[np.ascontiguousarray(np.transpose(r, TO_NCHW)) for r in residual],
                         act=act, bounds=bounds, residual_at=residual_at, stride=stride,
                         padding=padding, dilation=dilation, groups=c)
    return np.ascontiguousarray(np.transpose(y, TO_NHWC))


def _infer_depthwise(x, wt, b, *residual, act, bounds, residual_at, stride, padding,
                     dilation):
    n, h, w, c = x.shape
    kh, kw, cp = wt.shape
    if cp < c or tuple(b.shape) != (c,):
        raise ValueError(f"depthwise_nhwc: weight {tuple(wt.shape)} and bias "
                         f"{tuple(b.shape)} for {c} channels (want (kh, kw, cp >= {c}) and "
                         f"({c},): kernels.conv_nhwc.pack)")
    ho, wo = conv_ops._conv_out_hw((h, w), (kh, kw), stride, padding, dilation)
    out = ShapedType((n, ho, wo, c), x.dtype)
    if residual and tuple(residual[0].shape) != tuple(out.shape):
        raise ValueError(f"depthwise_nhwc: residual of shape {tuple(residual[0].shape)} for "
                         f"an output of shape {tuple(out.shape)}")
    return out


def _specialise_depthwise(x, wt, b, *residual, act, bounds, residual_at, stride, padding,
                          dilation):
    """``depthwise_nhwc`` fitted to static float32 shapes (``kernels.conv_nhwc.fitted``),
    as ``depthwise_nhwc_<act>``; else None (the op's kernel)."""
    if not (kernels.numba_available() and is_static(x.shape) and all(
            getattr(v, "dtype", None) == np.float32 for v in (x, wt, b, *residual))):
        return None
    run = kernels.conv_nhwc.fitted(
        tuple(x.shape), tuple(wt.shape), stride, padding, dilation, bool(residual),
        epilogue.RESIDUAL.index(residual_at) if residual else 0, ACTIVATIONS.index(act),
        bounds[0], bounds[1])
    return f"depthwise_nhwc_{act}", lambda x, wt, b, *r, out=None: run(x, wt, b, *r, out=out)


DEPTHWISE_NHWC = defop(
    "depthwise_nhwc", _depthwise_kernel, _infer_depthwise,
    attrs=("act", "bounds", "residual_at", "stride", "padding", "dilation"), saves="",
    onnx=None, compiler_only=True, decomposition=_depthwise_decomposition,
    specialise=_specialise_depthwise,
    doc="conv2d_epilogue of a depthwise conv on channels-last (N, H, W, C) activations, "
        "its weight (kh, kw, cp): channels rounded up to eight, spare lanes zero")


def _pointwise_kernel(x, wt, b, *residual, act, bounds, residual_at):
    """``kernels/conv_nhwc.py``'s blocked GEMM and row epilogue (float32, Numba and
    OpenBLAS's ``sgemm``); else ``linear_epilogue``'s kernel on the weight transposed."""
    if kernels.conv_nhwc.pointwise_available() and all(
            a.dtype == np.float32 for a in (x, wt, b, *residual)):
        return _fitted_pointwise(x, wt, b, *residual, act=act, bounds=bounds,
                                 residual_at=residual_at)(x, wt, b, *residual)
    return epilogue.LINEAR_EPILOGUE.kernel(x, np.transpose(wt), b, *residual, act=act,
                                           bounds=bounds, residual_at=residual_at)


def _fitted_pointwise(x, wt, b, *residual, act, bounds, residual_at):
    run = kernels.conv_nhwc.pointwise(
        tuple(x.shape), wt.shape[1], ACTIVATIONS.index(act), bounds[0], bounds[1],
        epilogue.RESIDUAL.index(residual_at) if residual else 0)
    return lambda x, wt, b, *r, out=None: run(x, wt, b, r[0] if r else None, out=out)


def _infer_pointwise(x, wt, b, *residual, act, bounds, residual_at):
    c, cout = wt.shape
    if x.ndim != 4 or x.shape[3] != c or tuple(b.shape) != (cout,):
        raise ValueError(f"pointwise_nhwc: input {tuple(x.shape)}, weight {tuple(wt.shape)} "
                         f"and bias {tuple(b.shape)} (want (N, H, W, C), (C, Cout), (Cout,))")
    out = ShapedType((*x.shape[:3], cout), x.dtype)
    if residual and tuple(residual[0].shape) != tuple(out.shape):
        raise ValueError(f"pointwise_nhwc: residual of shape {tuple(residual[0].shape)} for "
                         f"an output of shape {tuple(out.shape)}")
    return out


def _specialise_pointwise(x, wt, b, *residual, act, bounds, residual_at):
    """``pointwise_nhwc`` fitted to static float32 shapes, as ``conv1x1_nhwc_<act>``; else
    None (the op's kernel)."""
    if not (kernels.conv_nhwc.pointwise_available() and is_static(x.shape) and all(
            getattr(v, "dtype", None) == np.float32 for v in (x, wt, b, *residual))):
        return None
    return f"conv1x1_nhwc_{act}", _fitted_pointwise(x, wt, b, *residual, act=act,
                                                    bounds=bounds, residual_at=residual_at)


POINTWISE_NHWC = defop(
    "pointwise_nhwc", _pointwise_kernel, _infer_pointwise,
    attrs=("act", "bounds", "residual_at"), saves="", onnx=None, compiler_only=True,
    decomposition=lambda x, wt, b, *residual, act, bounds, residual_at:
        epilogue._linear_decomposition(x, shape_ops.permute(wt, 1, 0), b, *residual, act=act,
                                       bounds=bounds, residual_at=residual_at),
    specialise=_specialise_pointwise,
    doc="linear_epilogue of a 1x1 conv on channels-last (N, H, W, C) activations, its "
        "weight stored transposed (C, Cout): one sgemm per block of positions, the "
        "epilogue on its rows in cache")


# -- the channel-blocked layout (N, C/8, H, W, 8) ---------------------------------------------

def _infer_block(x):
    n, c, h, w = x.shape
    if c % 8:
        raise ValueError(f"block_channels: {c} channels of {tuple(x.shape)} (want a "
                         f"multiple of eight)")
    return ShapedType((n, c // 8, h, w, 8), x.dtype)


def _block_decomposition(x):
    n, c, h, w = x.shape
    return shape_ops.permute(shape_ops.reshape(x, n, c // 8, 8, h, w), 0, 1, 3, 4, 2)


def _unblock_decomposition(x):
    n, cb, h, w, _ = x.shape
    return shape_ops.reshape(shape_ops.permute(x, 0, 1, 4, 2, 3), n, cb * 8, h, w)


def _specialise_relayout(to_blocked: bool):
    """``specialise`` of ``block_channels`` (``to_blocked``) / ``unblock_channels``: a
    float32 input of static shape, Numba there, ``conv_blocked.fitted_relayout``; else
    None."""
    def specialise(x):
        if not (kernels.numba_available() and is_static(x.shape) and x.dtype == np.float32):
            return None
        run = kernels.conv_blocked.fitted_relayout(tuple(x.shape), to_blocked)
        return None if run is None else ("block_channels" if to_blocked
                                         else "unblock_channels", run)
    return specialise


BLOCK_CHANNELS = defop(
    "block_channels", filling(lambda x: kernels.conv_blocked.block(x)), _infer_block,
    attrs=(), saves="", onnx=None, compiler_only=True, decomposition=_block_decomposition,
    fills_out=True, specialise=_specialise_relayout(True),
    doc="(N, C, H, W) as the channel-blocked (N, C/8, H, W, 8), contiguous: a layout "
        "conversion at the edge of a blocked region")

UNBLOCK_CHANNELS = defop(
    "unblock_channels", filling(lambda x: kernels.conv_blocked.unblock(x)),
    lambda x: ShapedType((x.shape[0], x.shape[1] * 8, *x.shape[2:4]), x.dtype), attrs=(),
    saves="", onnx=None, compiler_only=True, decomposition=_unblock_decomposition,
    fills_out=True, specialise=_specialise_relayout(False),
    doc="block_channels' inverse: (N, C/8, H, W, 8) as (N, C, H, W), contiguous")


def _blocked_conv_decomposition(x, w, b, *residual, act, bounds, residual_at, groups,
                                **conv):
    y = epilogue._decomposition(
        _unblock_decomposition(x), w, b, *[_unblock_decomposition(r) for r in residual],
        act=act, bounds=bounds, residual_at=residual_at, groups=groups, **conv)
    return _block_decomposition(y)


def _infer_depthwise_blocked(x, w, b, *residual, act, bounds, residual_at, stride, padding,
                             dilation):
    n, cb, h, wd, _ = x.shape
    if tuple(w.shape[:2]) != (cb * 8, 1) or tuple(b.shape) != (cb * 8,):
        raise ValueError(f"depthwise_blocked: weight {tuple(w.shape)} and bias "
                         f"{tuple(b.shape)} for {cb * 8} channels (want ({cb * 8}, 1, kh, "
                         f"kw) and ({cb * 8},))")
    ho, wo = conv_ops._conv_out_hw((h, wd), tuple(w.shape[2:]), stride, padding, dilation)
    return _blocked_out(ShapedType((n, cb, ho, wo, 8), x.dtype), residual, "depthwise")


def _blocked_out(out, residual, name):
    if residual and tuple(residual[0].shape) != tuple(out.shape):
        raise ValueError(f"{name}_blocked: residual of shape {tuple(residual[0].shape)} "
                         f"for an output of shape {tuple(out.shape)}")
    return out


def _epilogue_codes(residual, act, bounds, residual_at) -> dict:
    """The kernels' epilogue arguments for an op's ``act``, ``bounds``, ``residual_at``."""
    return dict(residual=bool(residual), act=ACTIVATIONS.index(act), lo=bounds[0],
                hi=bounds[1], where=epilogue.RESIDUAL.index(residual_at) if residual else 0)


def _compiled_float32(x, *others) -> bool:
    """Whether a blocked op runs its loop: Numba, a static ``x``, float32 operands."""
    return kernels.numba_available() and is_static(x.shape) and all(
        getattr(v, "dtype", None) == np.float32 for v in (x, *others))


def _fitted_depthwise_blocked(x, w, b, *residual, act, bounds, residual_at, stride, padding,
                              dilation):
    if not _compiled_float32(x, w, b, *residual):
        return None
    return kernels.conv_blocked.fitted_depthwise(
        tuple(x.shape), tuple(w.shape), stride, padding, dilation,
        **_epilogue_codes(residual, act, bounds, residual_at))


def _depthwise_blocked_kernel(x, w, b, *residual, **attrs):
    """``kernels/conv_blocked.py``'s loop (float32, Numba); else ``conv2d_epilogue``'s
    kernel between layout conversions."""
    run = _fitted_depthwise_blocked(x, w, b, *residual, **attrs)
    if run is not None:
        return run(x, w, b, *residual)
    blocked = kernels.conv_blocked
    y = epilogue._kernel(blocked.unblock(x), w, b, *[blocked.unblock(r) for r in residual],
                         groups=w.shape[0], **attrs)
    return blocked.block(y)


def _specialise_depthwise_blocked(*args, **attrs):
    """``depthwise_blocked`` fitted to static float32 shapes, as
    ``depthwise_blocked_<act>``; else None (the op's kernel)."""
    run = _fitted_depthwise_blocked(*args, **attrs)
    return None if run is None else (f"depthwise_blocked_{attrs['act']}", run)


DEPTHWISE_BLOCKED = defop(
    "depthwise_blocked", filling(_depthwise_blocked_kernel), _infer_depthwise_blocked,
    attrs=("act", "bounds", "residual_at", "stride", "padding", "dilation"), saves="",
    onnx=None, compiler_only=True, fills_out=True,
    decomposition=lambda x, w, b, *r, **attrs: _blocked_conv_decomposition(
        x, w, b, *r, groups=w.shape[0], **attrs),
    specialise=_specialise_depthwise_blocked,
    doc="conv2d_epilogue of a depthwise conv on channel-blocked (N, C/8, H, W, 8) "
        "activations, its weight (C, 1, kh, kw) as conv2d's")


def _infer_shallow_blocked(x, w, b, *residual, act, bounds, residual_at, stride, padding,
                           dilation):
    y = epilogue.CONV2D_EPILOGUE.infer(x, w, b, act=act, bounds=bounds, residual_at=None,
                                       stride=stride, padding=padding, dilation=dilation,
                                       groups=1)
    n, cout, ho, wo = y.shape
    if cout % 8:
        raise ValueError(f"shallow_blocked: {cout} output channels (want a multiple of 8)")
    return _blocked_out(ShapedType((n, cout // 8, ho, wo, 8), x.dtype), residual, "shallow")


def shallow_blockable(x_shape, w_shape, stride, padding, dilation, groups) -> bool:
    """Whether ``kernels/conv_shallow.py`` runs a float32 conv of these static shapes that
    the blocked layout could take as ``shallow_blocked``: where its NCHW loop wins
    (``conv_shallow.wins``: at most four input channels), ``Cout`` a multiple of eight."""
    hw = conv_ops._conv_out_hw(x_shape[2:], w_shape[2:], stride, padding, dilation)
    return (w_shape[0] % 8 == 0 and math.prod(x_shape) >= kernels.MIN_ELEMENTS
            and kernels.conv_shallow.wins(x_shape, w_shape, hw, stride, padding, groups,
                                          np.float32))


def _fitted_shallow_blocked(x, w, b, *residual, act, bounds, residual_at, stride, padding,
                            dilation):
    if not (_compiled_float32(x, w, b, *residual) and shallow_blockable(
            tuple(x.shape), tuple(w.shape), stride, padding, dilation, 1)):
        return None
    hw = conv_ops._conv_out_hw(tuple(x.shape[2:]), tuple(w.shape[2:]), stride, padding,
                               dilation)
    n, cout = x.shape[0], w.shape[0]
    run = kernels.conv_shallow.fitted(
        tuple(x.shape), tuple(w.shape), (n, cout, *hw), stride, padding, dilation,
        blocked=True, **_epilogue_codes(residual, act, bounds, residual_at))
    return lambda x, w, b, *r, out=None: run(
        x, w, b, np.empty((n, cout // 8, *hw, 8), np.float32) if out is None else out,
        r[0] if r else None)


def _shallow_blocked_kernel(x, w, b, *residual, **attrs):
    """``kernels/conv_shallow.py``'s loop writing the blocked layout (float32, Numba, where
    it takes the conv); else ``conv2d_epilogue``'s kernel, then ``block_channels``."""
    run = _fitted_shallow_blocked(x, w, b, *residual, **attrs)
    if run is not None:
        return run(x, w, b, *residual)
    blocked = kernels.conv_blocked
    return blocked.block(epilogue._kernel(x, w, b, *[blocked.unblock(r) for r in residual],
                                          groups=1, **attrs))


def _specialise_shallow_blocked(*args, **attrs):
    """``shallow_blocked`` fitted to static float32 shapes, as
    ``conv_shallow_blocked_<act>``; else None (the op's kernel)."""
    run = _fitted_shallow_blocked(*args, **attrs)
    return None if run is None else (f"conv_shallow_blocked_{attrs['act']}", run)


SHALLOW_BLOCKED = defop(
    "shallow_blocked", filling(_shallow_blocked_kernel), _infer_shallow_blocked,
    attrs=("act", "bounds", "residual_at", "stride", "padding", "dilation"), saves="",
    onnx=None, compiler_only=True, fills_out=True,
    decomposition=lambda x, w, b, *r, **attrs: _block_decomposition(epilogue._decomposition(
        x, w, b, *[_unblock_decomposition(v) for v in r], groups=1, **attrs)),
    specialise=_specialise_shallow_blocked,
    doc="conv2d_epilogue of a conv of at most four input channels (an image's first "
        "layer) on NCHW input, written channel-blocked (N, Cout/8, Ho, Wo, 8) for the "
        "blocked layers after it: no block_channels pass")


def _unpacked_pointwise(wp, cout):
    """``pointwise_blocked``'s packed ``(groups, C, 24)`` weight as conv2d's ``(Cout, C, 1,
    1)``."""
    groups, c, width = wp.shape
    w = shape_ops.reshape(shape_ops.permute(wp, 0, 2, 1), groups * width, c)
    return shape_ops.reshape(w[:cout], cout, c, 1, 1)


def _infer_pointwise_blocked(x, wp, b, *residual, act, bounds, residual_at):
    n, cb, h, w, _ = x.shape
    cout = b.shape[0]
    if wp.ndim != 3 or wp.shape[1] != cb * 8 or wp.shape[0] * wp.shape[2] < cout or cout % 8:
        raise ValueError(f"pointwise_blocked: input {tuple(x.shape)}, weight "
                         f"{tuple(wp.shape)} and bias {tuple(b.shape)} (want (N, C/8, H, W, "
                         f"8), kernels.conv_blocked.pack's (groups, C, 24 or 48) and (Cout,), Cout "
                         f"a multiple of eight)")
    return _blocked_out(ShapedType((n, cout // 8, h, w, 8), x.dtype), residual, "pointwise")


def _fitted_pointwise_blocked(x, wp, b, *residual, act, bounds, residual_at):
    if not _compiled_float32(x, wp, b, *residual):
        return None
    return kernels.conv_blocked.pointwise(tuple(x.shape), b.shape[0],
                                          **_epilogue_codes(residual, act, bounds,
                                                            residual_at))


def _pointwise_blocked_kernel(x, wp, b, *residual, **attrs):
    """``kernels/conv_blocked.py``'s micro-kernel (float32, Numba); else
    ``conv2d_epilogue``'s kernel between layout conversions."""
    run = _fitted_pointwise_blocked(x, wp, b, *residual, **attrs)
    if run is not None:
        return run(x, wp, b, *residual)
    blocked = kernels.conv_blocked
    cout, c = b.shape[0], wp.shape[1]
    w = np.transpose(wp, (0, 2, 1)).reshape(-1, c)[:cout].reshape(cout, c, 1, 1)
    y = epilogue._kernel(blocked.unblock(x), np.ascontiguousarray(w), b,
                         *[blocked.unblock(r) for r in residual], stride=(1, 1),
                         padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1, **attrs)
    return blocked.block(y)


def _specialise_pointwise_blocked(*args, **attrs):
    """``pointwise_blocked`` fitted to static float32 shapes, as
    ``conv1x1_blocked_<act>``; else None (the op's kernel)."""
    run = _fitted_pointwise_blocked(*args, **attrs)
    return None if run is None else (f"conv1x1_blocked_{attrs['act']}", run)


POINTWISE_BLOCKED = defop(
    "pointwise_blocked", filling(_pointwise_blocked_kernel), _infer_pointwise_blocked,
    attrs=("act", "bounds", "residual_at"), saves="", onnx=None, compiler_only=True,
    fills_out=True,
    decomposition=lambda x, wp, b, *r, **attrs: _blocked_conv_decomposition(
        x, _unpacked_pointwise(wp, b.shape[0]), b, *r, groups=1, stride=(1, 1),
        padding=((0, 0), (0, 0)), dilation=(1, 1), **attrs),
    specialise=_specialise_pointwise_blocked,
    doc="conv2d_epilogue of a 1x1 conv on channel-blocked (N, C/8, H, W, 8) activations, "
        "its weight packed (groups, C, 24): 24 output channels by 8 positions in registers")


def _infer_expand_depthwise(x, wp, b, w, db, *residual, expand_act, expand_bounds, **attrs):
    y = _infer_pointwise_blocked(x, wp, b, act=expand_act, bounds=expand_bounds,
                                 residual_at=None)
    return _infer_depthwise_blocked(y, w, db, *residual, **attrs)


def _fitted_expand_depthwise(x, wp, b, w, db, *residual, expand_act, expand_bounds, act,
                             bounds, residual_at, stride, padding, dilation):
    if not _compiled_float32(x, wp, b, w, db, *residual):
        return None
    codes = _epilogue_codes(residual, act, bounds, residual_at)
    return kernels.conv_expand.fitted(
        tuple(x.shape), b.shape[0], tuple(w.shape), stride, padding, dilation,
        _epilogue_codes((), expand_act, expand_bounds, None), codes)


def _expand_depthwise_kernel(x, wp, b, w, db, *residual, expand_act, expand_bounds,
                             **attrs):
    """``kernels/conv_expand.py``'s loop (float32, Numba); else ``pointwise_blocked``'s
    kernel, then ``depthwise_blocked``'s."""
    run = _fitted_expand_depthwise(x, wp, b, w, db, *residual, expand_act=expand_act,
                                   expand_bounds=expand_bounds, **attrs)
    if run is not None:
        return run(x, wp, b, w, db, *residual)
    y = POINTWISE_BLOCKED.kernel(x, wp, b, act=expand_act, bounds=expand_bounds,
                                 residual_at=None)
    return DEPTHWISE_BLOCKED.kernel(y, w, db, *residual, **attrs)


def _specialise_expand_depthwise(*args, **attrs):
    """``expand_depthwise_blocked`` fitted to static float32 shapes, as
    ``expand_depthwise_blocked_<act>``; else None (the op's kernel)."""
    run = _fitted_expand_depthwise(*args, **attrs)
    return None if run is None else (f"expand_depthwise_blocked_{attrs['act']}", run)


EXPAND_DEPTHWISE_BLOCKED = defop(
    "expand_depthwise_blocked", _expand_depthwise_kernel, _infer_expand_depthwise,
    attrs=("expand_act", "expand_bounds", "act", "bounds", "residual_at", "stride", "padding",
           "dilation"), saves="", onnx=None, compiler_only=True,
    decomposition=lambda x, wp, b, w, db, *r, expand_act, expand_bounds, **attrs: (
        DEPTHWISE_BLOCKED.decomposition(
            POINTWISE_BLOCKED.decomposition(x, wp, b, act=expand_act, bounds=expand_bounds,
                                            residual_at=None), w, db, *r, **attrs)),
    specialise=_specialise_expand_depthwise,
    doc="depthwise_blocked of pointwise_blocked's output, by bands of output rows: the "
        "1x1's output computed a band's input rows at a time into a padded scratch, never "
        "written whole")


def _infer_excite_blocked(x, w1, b1, w2, b2, *, acts, bounds):
    n, cb, h, w, lanes = x.shape if len(x.shape) == 5 else (None,) * 5
    if lanes != 8:
        raise ValueError(f"squeeze_excite_blocked: input {tuple(x.shape)} (want (N, C/8, H, "
                         f"W, 8))")
    excite.SQUEEZE_EXCITE.infer(ShapedType((n, cb * 8, h, w), x.dtype), w1, b1, w2, b2,
                                acts=acts, bounds=bounds)
    return ShapedType(tuple(x.shape), x.dtype)


def _excite_blocked_kernel(x, w1, b1, w2, b2, *, acts, bounds):
    """``kernels/excite.py``'s blocked loop (float32, Numba); else ``squeeze_excite``'s
    kernel between layout conversions."""
    if excite.compiled(x, w1, b1, w2, b2):
        n, cb, h, w, _ = x.shape
        return excite.run_loop(kernels.excite.squeeze_excite_blocked, x, w1, b1, w2, b2,
                               acts, bounds, (n, cb, h * w, 8))
    blocked = kernels.conv_blocked
    return blocked.block(excite.SQUEEZE_EXCITE.kernel(blocked.unblock(x), w1, b1, w2, b2,
                                                      acts=acts, bounds=bounds))


SQUEEZE_EXCITE_BLOCKED = defop(
    "squeeze_excite_blocked", filling(_excite_blocked_kernel), _infer_excite_blocked,
    attrs=("acts", "bounds"), saves="", onnx=None, compiler_only=True, fills_out=True,
    specialise=lambda *inputs, **attrs: excite.specialise_loop(
        kernels.excite.squeeze_excite_blocked, lambda s: (s[0], s[1], s[2] * s[3], 8), *inputs,
        **attrs),
    decomposition=lambda x, *weights, acts, bounds: _block_decomposition(
        excite.SQUEEZE_EXCITE.decomposition(_unblock_decomposition(x), *weights, acts=acts,
                                            bounds=bounds)),
    doc="squeeze_excite on channel-blocked (N, C/8, H, W, 8) activations: the pooled "
        "gate and the channel scale in one loop per image, in the region's layout")


def _infer_gated_pointwise(x, w1, b1, w2, b2, wp, b, *residual, gate_acts, gate_bounds,
                           **epilogue_attrs):
    _infer_excite_blocked(x, w1, b1, w2, b2, acts=gate_acts, bounds=gate_bounds)
    return _infer_pointwise_blocked(x, wp, b, *residual, **epilogue_attrs)


def _fitted_gated_pointwise(x, w1, b1, w2, b2, wp, b, *residual, gate_acts, gate_bounds, act,
                            bounds, residual_at):
    if not _compiled_float32(x, w1, b1, w2, b2, wp, b, *residual):
        return None
    return kernels.excite.gated_pointwise(
        tuple(x.shape), b.shape[0], excite.activation_codes(gate_acts, gate_bounds),
        **_epilogue_codes(residual, act, bounds, residual_at))


def _gated_pointwise_kernel(x, w1, b1, w2, b2, wp, b, *residual, gate_acts, gate_bounds,
                            **epilogue_attrs):
    """``kernels/excite.py``'s gated weights and ``conv_blocked``'s 1x1 loop on them
    (float32, Numba); else ``squeeze_excite_blocked``'s kernel, then
    ``pointwise_blocked``'s."""
    run = _fitted_gated_pointwise(x, w1, b1, w2, b2, wp, b, *residual, gate_acts=gate_acts,
                                  gate_bounds=gate_bounds, **epilogue_attrs)
    if run is not None:
        return run(x, w1, b1, w2, b2, wp, b, *residual)
    y = SQUEEZE_EXCITE_BLOCKED.kernel(x, w1, b1, w2, b2, acts=gate_acts, bounds=gate_bounds)
    return POINTWISE_BLOCKED.kernel(y, wp, b, *residual, **epilogue_attrs)


def _specialise_gated_pointwise(*args, **attrs):
    """``gated_pointwise_blocked`` fitted to static float32 shapes, as
    ``gated_conv1x1_blocked_<act>``; else None (the op's kernel)."""
    run = _fitted_gated_pointwise(*args, **attrs)
    return None if run is None else (f"gated_conv1x1_blocked_{attrs['act']}", run)


GATED_POINTWISE_BLOCKED = defop(
    "gated_pointwise_blocked", filling(_gated_pointwise_kernel), _infer_gated_pointwise,
    attrs=("gate_acts", "gate_bounds", "act", "bounds", "residual_at"), saves="", onnx=None,
    compiler_only=True, fills_out=True,
    decomposition=lambda x, w1, b1, w2, b2, wp, b, *r, gate_acts, gate_bounds, **attrs: (
        POINTWISE_BLOCKED.decomposition(
            SQUEEZE_EXCITE_BLOCKED.decomposition(x, w1, b1, w2, b2, acts=gate_acts,
                                                 bounds=gate_bounds), wp, b, *r, **attrs)),
    specialise=_specialise_gated_pointwise,
    doc="pointwise_blocked of squeeze_excite_blocked's output: each image's gate scales the "
        "1x1 conv's packed weights (per input channel) instead of the image")
