"""Ops the inference lowering rules make: ``conv2d_epilogue`` and ``linear_epilogue`` (a
convolution or a linear layer with its bias, activation and residual add as one op),
``conv2d_cat`` (convolutions written into their channels of one concatenation) and
``max_pool2d_values`` (max pooling without the argmax indices nobody reads).

``conv2d_epilogue(x, w, b[, r], act=, bounds=, residual=)`` is ``act(conv2d(x, w, b) + r)``
(``residual="before"``) or ``act(conv2d(x, w, b)) + r`` (``"after"``), or without ``r``
``act(conv2d(x, w, b))``; ``act`` is one of ``kernels/epilogue.py``'s ``ACTIVATIONS``
(``"clamp"`` between ``bounds = (lo, hi)``: ReLU6, hardtanh). The lowering rule
``conv_epilogue`` (``passes/epilogue.py``) makes it from those ops after autodiff, so it
has no VJP; its decomposition is the ops it replaces. The kernel runs the conv without
its bias, then one loop over the output planes adds the bias and the residual and applies
the activation in place (float32 with Numba; NumPy's passes otherwise).
"""
from __future__ import annotations

import math
from functools import partial

import numpy as np

from .. import kernels
from ..dispatch import apply
from ..kernels import matvec
from ..kernels.epilogue import ACTIVATIONS
from ..kernels.threads import run_kept, run_rows, threads_for
from ..shapes import ShapedType, is_static
from . import conv as conv_ops
from . import elementwise as ew
from . import linalg
from . import norm
from . import shape as shape_ops
from ._util import cast
from .opdef import defop

RESIDUAL = (None, "before", "after")


def activation(y, act: str, bounds=(-np.inf, np.inf)):
    """``act`` of the tensor ``y`` with the ordinary ops the rule matched."""
    lo, hi = bounds
    if act == "relu":
        return ew.relu(y)
    if act == "clamp":
        y = y if lo == -np.inf else ew.maximum(y, lo)
        return y if hi == np.inf else ew.minimum(y, hi)
    if act == "sigmoid":
        return ew.sigmoid(y)
    if act == "silu":
        return ew.silu(y)
    if act in ("hardswish", "hardsigmoid"):
        gate = ew.minimum(ew.maximum(y + 3.0, 0.0), 6.0) / 6.0
        return y * gate if act == "hardswish" else gate
    if act == "gelu":
        return ew.gelu(y)
    if act == "gelu_tanh":
        return ew.gelu(y, approximate="tanh")
    return y


def _tail(y, residual, act, bounds, residual_at, activate=activation, add=lambda a, b: a + b):
    """The epilogue after the layer's (biased) output ``y``: the residual before the
    activation, the activation, or the residual after it (tensors, or NumPy arrays with
    ``activate=_numpy_activation`` and an in-place ``add``)."""
    if residual and residual_at == "before":
        y = add(y, residual[0])
    y = activate(y, act, bounds)
    return y + residual[0] if residual and residual_at == "after" else y


def _decomposition(x, w, b, *residual, act, bounds, residual_at, **conv):
    return _tail(apply(conv_ops.CONV2D, x, w, b, **conv), residual, act, bounds, residual_at)


def _numpy_activation(y: np.ndarray, act: str, bounds) -> np.ndarray:
    """``act`` of the array ``y``, in place where NumPy can."""
    if act == "relu":
        return np.maximum(y, 0, out=y)
    if act == "clamp":
        return np.minimum(np.maximum(y, bounds[0], out=y), bounds[1], out=y)
    if act == "sigmoid":
        return ew.SIGMOID.kernel(y)
    if act == "silu":
        return ew.SILU.kernel(y)
    if act in ("hardswish", "hardsigmoid"):   # (min(max(y + 3, 0), 6) / 6, one temporary)
        gate = y if act == "hardsigmoid" else np.empty_like(y)
        np.add(y, 3, out=gate)
        np.maximum(gate, 0, out=gate)
        np.minimum(gate, 6, out=gate)
        np.divide(gate, 6, out=gate)
        return gate if act == "hardsigmoid" else np.multiply(y, gate, out=y)
    if act in ("gelu", "gelu_tanh"):
        return (ew.GELU if act == "gelu" else ew.GELU_TANH).kernel(y)
    return y


def _kernel(x, w, b, *residual, act, bounds, residual_at, out=None, **conv):
    """(``out``: an array of the output's shape and dtype to write, a block of channels of
    a concatenation's: ``conv2d_cat``, whose images may lie apart; a fresh one otherwise)"""
    if out is not None and not out.flags.c_contiguous:
        out[...] = _kernel(x, w, b, *residual, act=act, bounds=bounds,
                           residual_at=residual_at, **conv)   # (its loops: contiguous only)
        return out
    tiled = _tiled(x, w, b, *residual, act=act, bounds=bounds, residual_at=residual_at,
                   out=out, **conv)
    if tiled is not None:
        return tiled
    y = conv_ops.CONV2D.kernel(x, w, **conv)
    b = b.astype(y.dtype, copy=False)
    r = residual[0].astype(y.dtype, copy=False) if residual else None
    if not _in_place(kernels.epilogue.planes, y, math.prod(y.shape[2:]), b, r, act, bounds,
                     residual_at):
        y = _numpy_tail(y + b.reshape(-1, 1, 1), r, act, bounds, residual_at)
    if out is None:
        return y
    out[...] = y
    return out


def _tiled(x, w, b, *residual, act, bounds, residual_at, out, stride, padding, dilation,
           groups):
    """The float32 kernels that apply the epilogue while the result is in cache: each
    tile's GEMM result (``kernels/conv_tiles.py``), each image's sums of a conv with few
    weights per output (``kernels/conv_outlanes.py``) or few input channels
    (``kernels/conv_shallow.py``), each band of a depthwise or narrow
    grouped conv's direct loop (``kernels/conv_direct.py``), or a 1x1 conv's one batched
    GEMM on the input as it is and then its planes (``kernels.epilogue.pointwise``: that
    measured faster than a GEMM and the epilogue per image); None where none applies
    (another dtype, no Numba), which then runs the conv and the epilogue's own pass."""
    if not (kernels.numba_available() and x.dtype == w.dtype == b.dtype == np.float32
            and all(r.dtype == np.float32 for r in residual)):
        return None
    where = RESIDUAL.index(residual_at) if residual else 0
    method = conv_ops.conv_method(x.shape, w.shape, stride, padding, dilation, groups)
    if method == "pointwise":
        run = kernels.epilogue.pointwise(x.shape, w.shape[0], groups, ACTIVATIONS.index(act),
                                         bounds, True, where)
        return run(x, w, b, *residual, out=out)
    kernel = _conv_module(x.shape, w.shape, method, stride, padding, dilation, groups)
    if kernel is None:
        return None
    hw = conv_ops._conv_out_hw(x.shape[2:], w.shape[2:], stride, padding, dilation)
    out = np.empty((x.shape[0], w.shape[0], *hw), np.float32) if out is None else out
    epilogue = dict(residual=residual[0] if residual else None, where=where,
                    act=ACTIVATIONS.index(act), lo=bounds[0], hi=bounds[1])
    return kernel.conv(x, w, out, stride, padding, dilation, groups, np.ascontiguousarray(b),
                       **epilogue)


def _conv_module(x_shape, w_shape, method, stride, padding, dilation, groups):
    """The kernel module that runs a float32 conv of ``method`` (not ``"pointwise"``) with
    its epilogue: ``conv_direct``'s loop (depthwise, narrow groups); ``conv_shallow`` for
    few input channels where it wins (``conv_shallow.wins``), then ``conv_outlanes``'
    loops (few weights per output: the epilogue on each image's sums), both first as the
    eager conv takes them (the same bits); ``conv_shallow`` for the other few-channel
    convs it takes (a 7x7 stem took 0.67x the tiles' time, a 3-channel 3x3 stride-2
    layer 0.34-0.95x at batch 1); the tiles of ``conv_tiles``; None where the
    row-shifted GEMMs and the epilogue's pass run it."""
    if method != "blocked":
        return kernels.conv_direct
    hw = conv_ops._conv_out_hw(x_shape[2:], w_shape[2:], stride, padding, dilation)
    if (math.prod(x_shape) >= kernels.MIN_ELEMENTS   # (as the eager conv: the same bits)
            and kernels.conv_shallow.wins(x_shape, w_shape, hw, stride, padding, groups,
                                          np.float32)):
        return kernels.conv_shallow
    if (math.prod(x_shape) >= kernels.MIN_ELEMENTS
            and kernels.conv_outlanes.wanted(x_shape, w_shape, padding, groups,
                                             np.dtype(np.float32))):
        return kernels.conv_outlanes
    if kernels.conv_shallow.wanted(x_shape, w_shape, hw, padding, groups, np.float32):
        return kernels.conv_shallow
    if _row_shifted(x_shape, w_shape, stride, padding, dilation):
        return None
    return kernels.conv_tiles


ROW_SHIFTED_MAX_WEIGHTS = 32   # (per output position of the batch: ``_row_shifted``)


def _row_shifted(x_shape, w_shape, stride, padding, dilation) -> bool:
    """Whether the conv's own kernel, the row-shifted GEMMs of ``kernels/conv_batch.py``
    and then the epilogue's pass, beats the tiles: everywhere they take a conv but a
    strided one with shallow columns (``C*kw`` under 16; a 3-channel 3x3 stride-2 first
    layer at batch 16: 12.1 ms, the tiles 11.1). Measured on LeNet's 5x5 convs 0.65 / 1.13
    ms against the tiles' 0.88 / 1.26, CIFAR's 16 -> 16 3x3 at batch 64 5.6 against 7.5,
    a 3-channel 7x7 stride-2 layer at batch 1 3.5 against 3.8, a 32 -> 64 3x3 stride-2
    layer on 112x112 at batch 1 (6 weights a position) 1.68 against 1.83. Not where the
    conv takes the shifted GEMMs (``conv_tiles.shifted``: 64 channels or more), whose
    epilogue the tiles' kernel applies in the same pass, nor with more than
    ``ROW_SHIFTED_MAX_WEIGHTS`` weight elements per output position of the batch (a 64 ->
    128 3x3 stride-2 layer on 56x56 at batch 1, 94 a position: 1.69 against 1.60)."""
    n, ho, wo = x_shape[0], *conv_ops._conv_out_hw(x_shape[2:], w_shape[2:], stride,
                                                   padding, dilation)
    return (conv_ops._batch_loop(x_shape, np.dtype(np.float32), w_shape, stride, padding,
                                 dilation)      # (float32: the callers' check)
            and (tuple(stride) == (1, 1) or x_shape[1] * w_shape[3] >= 16)
            and math.prod(w_shape) <= ROW_SHIFTED_MAX_WEIGHTS * n * ho * wo
            and not kernels.conv_tiles.shifted(x_shape, w_shape, stride, padding, dilation, 1))


def _in_place(loop, y, width, b, r, act, bounds, residual_at) -> bool:
    """Run ``loop`` (``kernels/epilogue.py``'s ``planes`` or ``rows``) over ``y`` as rows of
    ``width``, in place, where it can (float32 and Numba, contiguous arrays); whether it
    did."""
    if not (kernels.enabled(y) and y.flags.c_contiguous and y.flags.writeable
            and (r is None or r.flags.c_contiguous)):
        return False
    where = RESIDUAL.index(residual_at) if r is not None else 0
    rows = r.reshape(-1, width) if r is not None else np.zeros((1, 1), y.dtype)
    run_rows(loop, y.size // width, y.reshape(-1, width), np.ascontiguousarray(b), rows,
             ACTIVATIONS.index(act), np.float32(bounds[0]), np.float32(bounds[1]), where,
             threads=threads_for(y.size))
    return True


def _numpy_tail(y: np.ndarray, r, act: str, bounds, residual_at) -> np.ndarray:
    """``_tail`` of the array ``y`` (which it may overwrite) in NumPy."""
    return _tail(y, () if r is None else (r,), act, bounds, residual_at,
                 _numpy_activation, _add_in_place)


def _add_in_place(y, r):
    y += r
    return y


def _infer_for(layer):
    """The shape rule of ``layer``'s epilogue op: the layer's, the residual of its shape."""
    def infer(x, w, b, *residual, act, bounds, residual_at, **attrs):
        out = layer.infer(x, w, b, **attrs)
        if residual and tuple(residual[0].shape) != tuple(out.shape):
            raise ValueError(f"{layer.name}_epilogue: residual of shape "
                             f"{tuple(residual[0].shape)} for an output of shape "
                             f"{tuple(out.shape)}")
        return out
    return infer


def _specialise(x, w, b, *residual, act, bounds, residual_at, **conv):
    """The kernel fitted to the node's static shapes: a 1x1 conv's GEMM and epilogue
    (``conv.specialise_pointwise``), bound as ``conv1x1_<act>``; a float32 conv that
    ``_tiled`` runs by tiles or a direct loop, with its method, output shape and epilogue
    codes worked out once, as ``conv_tiles_<act>`` / ``conv_direct_<act>`` /
    ``conv_outlanes_<act>`` / ``conv_shallow_<act>`` (``_conv_module``); else None."""
    where = RESIDUAL.index(residual_at) if residual else 0
    fitted = conv_ops.specialise_pointwise(f"conv1x1_{act}", x, w, b, *residual,
                                           act=ACTIVATIONS.index(act), bounds=bounds,
                                           where=where, **conv)
    if fitted is not None:
        return fitted[0], _through_contiguous(fitted[1])
    if not (kernels.numba_available() and is_static(x.shape) and all(
            getattr(v, "dtype", None) == np.float32 for v in (x, w, b, *residual))):
        return fitted
    method = conv_ops.conv_method(tuple(x.shape), tuple(w.shape), **conv)
    module = None if method == "pointwise" else _conv_module(
        tuple(x.shape), tuple(w.shape), method, *(conv[k] for k in conv_ops._CONV_ATTRS))
    if module is None:
        return None     # (the row-shifted GEMMs and the epilogue's pass: ``_kernel``)
    shape = (x.shape[0], w.shape[0], *conv_ops._conv_out_hw(
        x.shape[2:], w.shape[2:], conv["stride"], conv["padding"], conv["dilation"]))
    geometry = tuple(conv[k] for k in conv_ops._CONV_ATTRS)
    codes = dict(where=where, act=ACTIVATIONS.index(act), lo=bounds[0], hi=bounds[1])
    if hasattr(module, "fitted"):   # (its layout, scratch and loop's entry worked out once)
        conv = module.fitted(tuple(x.shape), tuple(w.shape), shape, *geometry, np.float32,
                             bool(residual), **codes)
    else:
        conv = partial(_conv_call, module.conv, geometry, codes)

    def run(x, w, b, *residual, out=None):
        out = np.empty(shape, np.float32) if out is None else out
        return conv(x, w, np.ascontiguousarray(b), out, residual[0] if residual else None)
    return f"{module.__name__.rsplit('.', 1)[1]}_{act}", _through_contiguous(run)


def _conv_call(conv, geometry, codes, x, w, b, out, residual):
    """``conv(x, w, out, *geometry, b, residual=, **codes)``: a kernel module's ``conv``
    in the signature of its ``fitted`` run."""
    return conv(x, w, out, *geometry, b, residual=residual, **codes)


def _through_contiguous(run):
    """``run(*arrays, out=None)``, a fitted kernel whose loops write a contiguous ``out``
    only, taking any ``out`` (a concatenation's block of channels: ``conv2d_cat``): one
    whose images lie apart gets a fresh result copied in."""
    def through(*arrays, out=None):
        if out is None or out.flags.c_contiguous:
            return run(*arrays, out=out)
        out[...] = run(*arrays)
        return out
    return through


CONV2D_EPILOGUE = defop(
    "conv2d_epilogue", _kernel, _infer_for(conv_ops.CONV2D),
    attrs=("act", "bounds", "residual_at") + conv_ops._CONV_ATTRS, saves="", onnx=None,
    specialise=_specialise, fills_out=True,
    compiler_only=True, decomposition=_decomposition,
    doc="act(conv2d(x, w, b) [+ r]) [+ r]: the bias, activation and residual add applied "
        "to the conv's output in one pass, in place")


def _unpacked(wp, kernel_size, out_channels, groups):
    """The ``(Cout, C/G, kh, kw)`` weight of ``conv2d_packed``'s ``wp (pairs, C/G*kh*kw, 16)``
    (``kernels.conv_packed.pack``'s layout: each group's outputs padded to whole pairs),
    with tensor ops."""
    pairs, taps, lanes = wp.shape
    c = taps // (kernel_size[0] * kernel_size[1])
    w = shape_ops.reshape(shape_ops.permute(wp, 0, 2, 1), groups, pairs * lanes // groups,
                          c, *kernel_size)
    return shape_ops.reshape(w[:, :out_channels // groups], out_channels, c, *kernel_size)


def _packed_decomposition(x, wp, b, *residual, kernel_size, out_channels, groups=1, **attrs):
    return _decomposition(x, _unpacked(wp, kernel_size, out_channels, groups), b, *residual,
                          groups=groups, **attrs)


def _codes(residual: bool, act, bounds, residual_at) -> dict:
    """The epilogue's arguments of the float32 conv loops: ``where``, ``act``, ``lo``,
    ``hi``."""
    return dict(where=RESIDUAL.index(residual_at) if residual else 0,
                act=ACTIVATIONS.index(act), lo=bounds[0], hi=bounds[1])


def _laid_out(name, fit, weight):
    """The kernel and the specialise rule of a conv op on a weight laid out once:
    ``fit(x_shape, residual: bool, act, bounds, residual_at, **attrs)`` gives the loop
    fitted to the shapes, ``run(x, wl, b, *residual, out=None)``, or None (no Numba);
    ``weight(wl, x_shape, **attrs)`` gives the ``(Cout, C, kh, kw)`` weight and the conv's
    attrs back, for ``conv2d_epilogue``'s kernel where the loop does not run (another
    dtype, no Numba). The fitted kernel is named ``<name>_<act>``."""
    def kernel(x, wl, b, *residual, act, bounds, residual_at, out=None, **attrs):
        run = fit(x.shape, bool(residual), act, bounds, residual_at, **attrs)
        if run is not None and x.dtype == b.dtype == np.float32:
            return run(x, wl, b, *residual, out=out)
        w, conv = weight(wl, x.shape, **attrs)
        return _kernel(x, w, b, *residual, act=act, bounds=bounds, residual_at=residual_at,
                       out=out, **{"groups": 1, **conv})

    def specialise(x, wl, b, *residual, act, **attrs):
        if not (is_static(x.shape) and all(getattr(v, "dtype", None) == np.float32
                                           for v in (x, wl, b, *residual))):
            return None
        run = fit(tuple(x.shape), bool(residual), act, **attrs)
        return None if run is None else (f"{name}_{act}", run)
    return kernel, specialise


def _packed_run(x_shape, residual: bool, act, bounds, residual_at, kernel_size, out_channels,
                stride, padding, dilation, groups=1):
    """``run(x, wp, b, *residual, out=None)``: the packed loop fitted to the shapes
    (``conv_packed.fitted``: its plan, threads, scratch and compiled entry worked out
    once); None without Numba."""
    if not kernels.numba_available():
        return None
    cp = kernels.conv_packed
    w_shape = (out_channels, x_shape[1] // groups, *kernel_size)
    pp = kernels.conv_pointpacked   # (a 1x1 conv: the GEMM micro-kernel on the same layout)
    if groups == 1 and pp.wins(x_shape, w_shape, stride, padding, dilation, 1, np.float32):
        return pp.fitted(x_shape, out_channels, residual,
                         **_codes(residual, act, bounds, residual_at), stride=tuple(stride))
    hw = conv_ops._conv_out_hw(x_shape[2:], kernel_size, stride, padding, dilation)
    shape = (x_shape[0], out_channels, *hw)
    conv = cp.fitted(x_shape, shape, stride, padding, dilation, kernel_size, None, residual,
                     groups=groups, **_codes(residual, act, bounds, residual_at))

    def run(x, wp, b, *residual, out=None):
        out = np.empty(shape, np.float32) if out is None else out
        return conv(x, wp, b, out, residual[0] if residual else None)
    return run


def _packed_weight(wp, x_shape, kernel_size, out_channels, groups=1, **conv):
    return (kernels.conv_packed.unpack(wp, (out_channels, x_shape[1] // groups, *kernel_size),
                                       groups), dict(conv, groups=groups))


_packed_kernel, _specialise_packed = _laid_out("conv_packed", _packed_run, _packed_weight)


def _infer_packed(x, wp, b, *residual, kernel_size, out_channels, groups=1, **attrs):
    w_shape = (out_channels, x.shape[1] // groups, *kernel_size)
    pairs = groups * kernels.conv_packed.padded_width(out_channels, groups) // 16
    if tuple(wp.shape) != (pairs, math.prod(w_shape[1:]), 16):
        raise ValueError(f"conv2d_packed: packed weight of shape {tuple(wp.shape)} for a "
                         f"weight {w_shape} (want {(pairs, math.prod(w_shape[1:]), 16)}: "
                         "kernels.conv_packed.pack)")
    return _infer_for(conv_ops.CONV2D)(x, ShapedType(w_shape, wp.dtype), b, *residual,
                                       groups=groups, **attrs)


CONV2D_PACKED = defop(
    "conv2d_packed", _packed_kernel, _infer_packed,
    attrs=("act", "bounds", "residual_at", "stride", "padding", "dilation", "kernel_size",
           "out_channels", "groups"), saves="", onnx=None, specialise=_specialise_packed,
    fills_out=True, compiler_only=True, decomposition=_packed_decomposition,
    doc="conv2d_epilogue on a weight packed once (pairs, C/G*kh*kw, 16): sixteen output "
        "channels (of one group, whose outputs are padded to whole pairs) side by side per "
        "tap, read as one run by the kernel")


# conv2d_winograd: a 3x3 stride-1 conv on its weight transformed once (kernels/conv_winograd.py)
_UNIT = dict(stride=(1, 1), dilation=(1, 1))


def _winograd_weight_of(u):
    """The ``(Cout, C, 3, 3)`` weight of ``conv2d_winograd``'s ``u (16, Cout, C)`` with
    tensor ops: ``w = H U H^T`` for the left inverse ``H`` of F(2, 3)'s ``G`` (the first
    row of ``U``'s 4x4 points, the second less the third, the last), so that the
    decomposition reads the weight the op multiplies by."""
    points, cout, c = u.shape
    u4 = shape_ops.reshape(u, 4, 4, cout, c)
    rows = [u4[0], u4[1] - u4[2], u4[3]]
    taps = [shape_ops.reshape(t, cout, c, 1) for r in rows for t in (r[0], r[1] - r[2], r[3])]
    return shape_ops.reshape(shape_ops.cat(taps, 2), cout, c, 3, 3)


def _winograd_decomposition(x, u, b, *residual, padding, **attrs):
    return _decomposition(x, _winograd_weight_of(u), b, *residual, groups=1,
                          padding=padding, **_UNIT, **attrs)


def _winograd_run(x_shape, residual: bool, act, bounds, residual_at, padding):
    """``run(x, u, b, *residual, out=None)``: the Winograd loops fitted to the shapes (the
    tiles and their blocks worked out once); None without Numba."""
    if not kernels.numba_available():
        return None
    cw = kernels.conv_winograd
    hw = conv_ops._conv_out_hw(x_shape[2:], (3, 3), (1, 1), padding, (1, 1))
    plan = cw.plan(x_shape, hw)
    codes = _codes(residual, act, bounds, residual_at)

    def run(x, u, b, *residual, out=None):
        out = np.empty((x_shape[0], u.shape[1], *hw), np.float32) if out is None else out
        return cw.conv(x, u, out, padding, b, plan,
                       residual=residual[0] if residual else None, **codes)
    return run


def _winograd_weight(u, x_shape, padding):
    return kernels.conv_winograd.untransform(u), dict(padding=padding, **_UNIT)


_winograd_kernel, _specialise_winograd = _laid_out("conv_winograd", _winograd_run,
                                                   _winograd_weight)


def _infer_winograd(x, u, b, *residual, padding, **attrs):
    points, cout, c = u.shape
    if (points, c) != (16, x.shape[1]):
        raise ValueError(f"conv2d_winograd: transformed weight of shape {tuple(u.shape)} for "
                         f"an input of {x.shape[1]} channels (want (16, Cout, {x.shape[1]}): "
                         "kernels.conv_winograd.transform_weight)")
    return _infer_for(conv_ops.CONV2D)(x, ShapedType((cout, c, 3, 3), u.dtype), b, *residual,
                                       groups=1, padding=padding, **_UNIT, **attrs)


CONV2D_WINOGRAD = defop(
    "conv2d_winograd", _winograd_kernel, _infer_winograd,
    attrs=("act", "bounds", "residual_at", "padding"), saves="", onnx=None,
    specialise=_specialise_winograd, fills_out=True, compiler_only=True,
    decomposition=_winograd_decomposition,
    doc="conv2d_epilogue of a 3x3 kernel at stride 1 (one group) by Winograd's F(2x2, 3x3), "
        "on its weight transformed once (16, Cout, C)")


def _members(inputs: tuple, members: tuple):
    """``conv2d_cat``'s inputs and ``members`` attr as ``[(op, inputs, attrs)]``, one per
    member: ``members`` holds ``(op name, arity, *attr values)`` each (the op one of
    ``CAT_MEMBERS``, its attrs' values in the order of ``op.attrs``), its inputs ``arity``
    of ``inputs`` in turn."""
    parts, at = [], 0
    for name, arity, *values in members:
        op = CAT_MEMBERS[name]
        parts.append((op, inputs[at:at + arity], dict(zip(op.attrs, values))))
        at += arity
    return parts


def cat_member(op, arity: int, attrs: dict) -> tuple:
    """The ``members`` entry of a conv ``op`` node with ``arity`` inputs and ``attrs``."""
    return (op.name, arity, *(attrs[k] for k in op.attrs))


def _cat_kernel(*inputs, members, out=None):
    """Each member's conv and epilogue written straight into its channels of the one
    output (its kernel's ``out``: a block whose images lie a whole output image apart at
    batch > 1, which the packed, 1x1 and Winograd loops write in place and the other
    kernels through a fresh array, ``_through_contiguous``); ``out``, the concatenation's
    array where the memory plan gives it one (a buffer used again at every call)."""
    parts = _members(inputs, members)
    ys = [op.infer(*args, **attrs) for op, args, attrs in parts]
    n, _, ho, wo = ys[0].shape
    if out is None:
        out = np.empty((n, sum(y.shape[1] for y in ys), ho, wo), ys[0].dtype)
    start = 0
    for (op, args, attrs), y in zip(parts, ys):
        op.kernel(*args, **attrs, out=out[:, start:start + y.shape[1]])
        start += y.shape[1]
    return out


def _specialise_cat(*inputs, members):
    """``conv2d_cat`` fitted to the node's static shapes: the output's shape, each member's
    channels and its kernel (:func:`_fitted_members`) worked out once; a call runs each
    member into its channels of ``out`` or a fresh array (as ``_cat_kernel``). None for
    symbolic shapes."""
    out = _infer_cat(*inputs, members=members)
    if not is_static(out.shape):
        return None
    runs = _fitted_members(inputs, members, 0)
    shape, dtype = tuple(out.shape), out.dtype

    def run_members(*arrays, out=None):
        return _run_members(runs, arrays, np.empty(shape, dtype) if out is None else out)
    return "conv_cat", run_members


def _fitted_members(inputs, members, start: int) -> list:
    """``[(run, arity, channels)]`` per member: its kernel (the member op's fitted kernel
    where its ``specialise`` gives one, else its kernel with its attrs) and its channels of
    the output, from ``start`` on."""
    runs = []
    for op, args, attrs in _members(inputs, members):
        cout = op.infer(*args, **attrs).shape[1]
        fitted = op.specialise(*args, **attrs)
        run = fitted[1] if fitted is not None else partial(op.kernel, **attrs)
        runs.append((run, len(args), slice(start, start + cout)))
        start += cout
    return runs


def _run_members(runs, arrays, y):
    """Each member of ``runs`` (:func:`_fitted_members`) on its ``arrays`` into its
    channels of ``y``; returns ``y``."""
    at = 0
    for run, arity, channels in runs:
        run(*arrays[at:at + arity], out=y[:, channels])
        at += arity
    return y


def _infer_cat(*inputs, members):
    ys = [op.infer(*args, **attrs) for op, args, attrs in _members(inputs, members)]
    if len({(y.shape[0], *y.shape[2:], y.dtype) for y in ys}) != 1:
        raise ValueError("conv2d_cat: members of different batch, plane size or dtype: "
                         f"{[(tuple(y.shape), str(y.dtype)) for y in ys]}")
    return ys[0]._replace(shape=(ys[0].shape[0], sum(y.shape[1] for y in ys),
                                 *ys[0].shape[2:]))


def _cat_decomposition(*inputs, members):
    return shape_ops.cat([op.decomposition(*args, **attrs)
                          for op, args, attrs in _members(inputs, members)], 1)


# the ops a conv2d_cat's member may be: each kernel takes ``out=``, a block to write
CAT_MEMBERS = {op.name: op for op in (CONV2D_EPILOGUE, CONV2D_PACKED, CONV2D_WINOGRAD)}


CONV2D_CAT = defop(
    "conv2d_cat", _cat_kernel, _infer_cat, attrs=("members",), saves="", onnx=None,
    compiler_only=True, decomposition=_cat_decomposition, specialise=_specialise_cat,
    fills_out=True, doc="cat([conv2d_epilogue(...) or conv2d_packed(...) or conv2d_winograd(...), ...], "
        "dim=1): each member conv written into its own channels of the concatenation, "
        "no copy")


# conv2d_into: the members of a conv2d_cat written into a block of channels of an array
# made before (a concatenation grown in place: the lowering rule ``cat_in_place``)
def _into_kernel(buf, *inputs, members, at):
    """Each member's conv written into its channels of ``buf`` from ``at`` on, in place
    (as ``_cat_kernel``'s); returns ``buf``."""
    start = at
    for op, args, attrs in _members(inputs, members):
        cout = op.infer(*args, **attrs).shape[1]
        op.kernel(*args, **attrs, out=buf[:, start:start + cout])
        start += cout
    return buf


def _specialise_into(buf, *inputs, members, at):
    if not is_static(buf.shape):
        return None
    runs = _fitted_members(inputs, members, at)
    return "conv_into", lambda buf, *arrays: _run_members(runs, arrays, buf)


def _infer_into(buf, *inputs, members, at):
    joined = _infer_cat(*inputs, members=members)
    if (buf.ndim != 4 or at + joined.shape[1] > buf.shape[1] or buf.dtype != joined.dtype
            or (buf.shape[0], *buf.shape[2:]) != (joined.shape[0], *joined.shape[2:])):
        raise ValueError(f"conv2d_into: convs of output {tuple(joined.shape)} from channel "
                         f"{at} of an array {tuple(buf.shape)}")
    return ShapedType(tuple(buf.shape), buf.dtype)


def _into_decomposition(buf, *inputs, members, at):
    y = _cat_decomposition(*inputs, members=members)
    return shape_ops.slice_update(buf, y, (None, (at, at + y.shape[1], 1), None, None))


# Its output is ``buf`` itself, so it is a view of ``buf`` to the memory plan.
CONV2D_INTO = defop(
    "conv2d_into", _into_kernel, _infer_into, attrs=("members", "at"), saves="", onnx=None,
    view=True, compiler_only=True, decomposition=_into_decomposition,
    specialise=_specialise_into,
    doc="slice_update_in_place(buf, conv2d_cat(...), channels from at): each member conv "
        "written into its channels of an array made before, no copy")


def _linear_decomposition(x, w, b, *residual, act, bounds, residual_at):
    return _tail(apply(linalg.LINEAR, x, w, b), residual, act, bounds, residual_at)


def _linear_kernel(x, w, b, *residual, act, bounds, residual_at, out=None):
    """The product without its bias (``linear``'s kernel: a GEMM, or the batch-1 product),
    then one loop over its rows adds the bias and the residual and applies the activation
    in place, each row in cache (float32 with Numba; NumPy's passes otherwise): where
    ``linear`` + ``gelu`` + ``add`` write three arrays, this writes one (``out``)."""
    y = linalg.LINEAR.kernel(x, w, out=out)   # (a fresh array, or out)
    return _rows_tail(y, b, residual, act, bounds, residual_at)


def _rows_tail(y, b, residual, act, bounds, residual_at):
    """``linear_epilogue``'s pass over the rows of the product ``y`` (overwritten)."""
    b = b.astype(y.dtype, copy=False)
    r = residual[0].astype(y.dtype, copy=False) if residual else None
    if _in_place(kernels.epilogue.rows, y, y.shape[-1], b, r, act, bounds, residual_at):
        return y
    y += b
    return _numpy_tail(y, r, act, bounds, residual_at)


def _specialise_linear(x, w, b, *residual, act, bounds, residual_at):
    """A batch-1 float32 product (``matvec.product_shapes``: the one eager runs on the
    matrix-vector loop) fitted once, bound as ``matvec_<act>``: a ``matvec.Plan`` without
    the bias, then :func:`kernels.epilogue.rows` over its one row through the loop's
    compiled entry, kept. The kernel's own path asks ``matvec.wanted`` at every call and
    applies an activation to a row under ``MIN_ELEMENTS`` with NumPy, a pass a ufunc
    (hardswish: five): at batch 1 that was as long as a small product itself. Else None."""
    if not (kernels.numba_available() and is_static(x.shape) and is_static(w.shape)
            and all(getattr(v, "dtype", None) == np.float32 for v in (x, w, b, *residual))
            and matvec.product_shapes(tuple(x.shape), tuple(w.shape), tuple(b.shape))):
        return None
    plan = matvec.Plan(len(x.shape), *w.shape, bias=False, relu=False)
    codes = (ACTIVATIONS.index(act), np.float32(bounds[0]), np.float32(bounds[1]),
             RESIDUAL.index(residual_at) if residual else 0)
    loop, no_residual, entry = kernels.epilogue.rows, np.zeros((1, 1), np.float32), []

    def run(x, w, b, *r, out=None):
        y = plan(x, w, out=out)
        rest = np.ascontiguousarray(r[0]).reshape(1, -1) if r else no_residual
        run_kept(loop, 1, entry, y.reshape(1, -1), np.ascontiguousarray(b), rest, *codes)
        return y
    return f"matvec_{act}", run


LINEAR_EPILOGUE = defop(
    "linear_epilogue", _linear_kernel, _infer_for(linalg.LINEAR),
    attrs=("act", "bounds", "residual_at"), saves="", onnx=None, fills_out=True,
    compiler_only=True, decomposition=_linear_decomposition,
    specialise=_specialise_linear,
    doc="act(linear(x, w, b) [+ r]) [+ r]: the bias, activation and residual add applied "
        "to the product's rows in one pass, in place")


def _linear_norm_decomposition(x, w, b, weight, shift, *residual, act, bounds, residual_at,
                               eps):
    y = _linear_decomposition(x, w, b, *residual, act=act, bounds=bounds,
                              residual_at=residual_at)
    return apply(norm.LAYER_NORM, y, weight, shift, n_dims=1, eps=eps)[0]


def _linear_norm_kernel(x, w, b, weight, shift, *residual, act, bounds, residual_at, eps,
                        out=None):
    """``linear_epilogue``'s product and row pass, then each row normalised in the same
    pass (``kernels/epilogue.py``'s ``rows_norm``: LayerNorm's own row function) where
    the loop runs; else the epilogue, then LayerNorm's kernel."""
    y = linalg.LINEAR.kernel(x, w, out=out)   # (a fresh array, or out)
    return _norm_tail(y, b, weight, shift, residual, act, bounds, residual_at, eps)


def _norm_tail(y, b, weight, shift, residual, act, bounds, residual_at, eps):
    """``linear_norm``'s pass over the rows of the product ``y`` (overwritten)."""
    b = b.astype(y.dtype, copy=False)
    r = residual[0].astype(y.dtype, copy=False) if residual else None
    width = y.shape[-1]
    if (kernels.enabled(y, weight, shift) and y.flags.c_contiguous and width
            and (r is None or r.flags.c_contiguous)):
        where = RESIDUAL.index(residual_at) if r is not None else 0
        rows = r.reshape(-1, width) if r is not None else np.zeros((1, 1), y.dtype)
        run_rows(kernels.epilogue.rows_norm, y.size // width, y.reshape(-1, width),
                 np.ascontiguousarray(b), rows, ACTIVATIONS.index(act),
                 np.float32(bounds[0]), np.float32(bounds[1]), where, kernels.flat(weight),
                 kernels.flat(shift), np.float32(eps), threads=threads_for(y.size))
        return y
    y += b
    y = _numpy_tail(y, r, act, bounds, residual_at)
    return norm.LAYER_NORM.kernel(y, weight, shift, n_dims=1, eps=eps)[0]


def _infer_linear_norm(x, w, b, weight, shift, *residual, act, bounds, residual_at, eps):
    out = _infer_for(linalg.LINEAR)(x, w, b, *residual, act=act, bounds=bounds,
                                    residual_at=residual_at)
    for p in (weight, shift):
        if tuple(p.shape) != tuple(out.shape[-1:]):
            raise ValueError(f"linear_norm: LayerNorm parameter of shape {tuple(p.shape)} "
                             f"for rows of {out.shape[-1]}")
    return out


LINEAR_NORM = defop(
    "linear_norm", _linear_norm_kernel, _infer_linear_norm,
    attrs=("act", "bounds", "residual_at", "eps"), saves="", onnx=None, fills_out=True,
    compiler_only=True, decomposition=_linear_norm_decomposition,
    doc="layer_norm(act(linear(x, w, b) [+ r]) [+ r]): linear_epilogue's row pass, then "
        "each row normalised (LayerNorm over the last dim) while it is in cache")


def _packed_weight(wp, n):
    """``linear_packed``'s ``(N, K)`` weight from ``wp (panels, K, 64)``
    (``kernels.linear_packed.pack``'s layout), with tensor ops."""
    panels, k, lanes = wp.shape
    return shape_ops.reshape(shape_ops.permute(wp, 0, 2, 1), panels * lanes, k)[:n]


def _linear_packed_decomposition(x, wp, b, *rest, eps, **attrs):
    w = _packed_weight(wp, b.shape[0])
    if eps is None:
        return _linear_decomposition(x, w, b, *rest, **attrs)
    return _linear_norm_decomposition(x, w, b, *rest, eps=eps, **attrs)


def _linear_packed_kernel(x, wp, b, *rest, act, bounds, residual_at, eps, out=None):
    """The product on the packed weight (``kernels/linear_packed.py``'s loop for float32,
    with the bias in its stores when nothing follows; else ``linear``'s kernel on the
    weight unpacked), then ``linear_epilogue``'s or ``linear_norm``'s pass over its rows."""
    n = b.shape[0]
    plain = eps is None and not rest and act == "none"
    if kernels.enabled(x, wp, b, min_elements=0):
        y = kernels.linear_packed.product(x, wp, n, b if plain else None, out=out)
    else:
        w = kernels.linear_packed.unpack(wp, n)
        y = linalg.LINEAR.kernel(x, w, *((b,) if plain else ()), out=out)
    if plain:
        return y
    if eps is None:
        return _rows_tail(y, b, rest, act, bounds, residual_at)
    return _norm_tail(y, b, rest[0], rest[1], rest[2:], act, bounds, residual_at, eps)


def _infer_linear_packed(x, wp, b, *rest, act, bounds, residual_at, eps):
    n, lanes = b.shape[0] if b.ndim == 1 else -1, kernels.linear_packed.COLUMNS
    if b.ndim != 1 or wp.ndim != 3 or tuple(wp.shape) != (-(-n // lanes), x.shape[-1], lanes):
        raise ValueError(f"linear_packed: packed weight {tuple(wp.shape)} and bias "
                         f"{tuple(b.shape)} for an input {tuple(x.shape)} (want (ceil(N/"
                         f"{lanes}), K, {lanes}) and (N,): kernels.linear_packed.pack)")
    w = ShapedType((n, x.shape[-1]), wp.dtype)
    codes = dict(act=act, bounds=bounds, residual_at=residual_at)
    if eps is None:
        return _infer_for(linalg.LINEAR)(x, w, b, *rest, **codes)
    return _infer_linear_norm(x, w, b, *rest, eps=eps, **codes)


LINEAR_PACKED = defop(
    "linear_packed", _linear_packed_kernel, _infer_linear_packed,
    attrs=("act", "bounds", "residual_at", "eps"), saves="", onnx=None, fills_out=True,
    compiler_only=True, decomposition=_linear_packed_decomposition,
    doc="linear_epilogue(x, w, b[, r]) (eps None) or linear_norm(x, w, b, weight, shift[, "
        "r]) on a weight packed once (ceil(N/64), K, 64): 64 output columns side by side "
        "per input, read as one run by the kernel")


def _max_values_kernel(x, *, kernel_size, stride, padding, dilation, ceil_mode, out=None):
    """``conv_ops.max_pool_values``' loop (into ``out``, the memory plan's buffer, where
    given), or a running ``np.maximum`` over the kernel positions (NaN wins, as in torch):
    one pass each, where ``max_pool2d``'s argmax tracking takes five."""
    fast = conv_ops.max_pool_values(x, kernel_size, stride, padding, dilation, ceil_mode,
                                    out=out)
    if fast is not None:
        return fast
    (x,), dt = linalg.blas_operands(x)
    out_hw, pads = conv_ops._pool_geometry(x.shape[-2:], kernel_size, stride, padding,
                                           ceil_mode, dilation)
    win = conv_ops._windows(conv_ops._pad(x, pads, -np.inf), kernel_size, stride, dilation,
                            out_hw)
    best = win[..., 0, 0].copy()
    for pos in range(1, kernel_size[0] * kernel_size[1]):
        np.maximum(best, win[..., pos // kernel_size[1], pos % kernel_size[1]], out=best)
    return cast(best, dt)


MAX_POOL2D_VALUES = defop(
    "max_pool2d_values", _max_values_kernel,
    lambda x, **pool: conv_ops._infer_max_pool(x, **pool)[0],
    attrs=conv_ops.MAX_POOL2D.attrs, saves="", onnx=None, compiler_only=True, fills_out=True,
    specialise=conv_ops.specialise_max_values,
    decomposition=lambda x, **pool: apply(conv_ops.MAX_POOL2D, x, **pool)[0],
    doc="max_pool2d's values alone (made where its indices are unread: inference)")
