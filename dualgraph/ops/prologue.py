"""``conv2d_prologue``: a 1x1 ``conv2d_packed`` whose input is first scaled, shifted and
activated per channel, ``conv2d_packed(act(x * scale + shift), wp, b, ...)``, the lowering
rule ``conv_prologue``'s op (``passes/prologue.py``).

An eval-mode BatchNorm and its ReLU before a convolution (a pre-activation layer: DenseNet,
pre-activation ResNets) cannot fold into the layer before it where that is a
concatenation or a sum; as its own pass it writes the whole normalised input and the
conv reads it again. Here the 1x1 conv's loop (``kernels/conv_pointpacked.py``) applies
it to each block of input rows as it takes the block up, in L1. ``scale`` and ``shift``
are ``(C,)`` float32 (one per input channel); ``pre_act`` one of ``PROLOGUE_ACTS``
(``"clamp"`` between ``pre_bounds``: ReLU6). The epilogue's attrs are
``conv2d_packed``'s. Compiler-only, so no VJP; its decomposition is the ops it replaces.
"""
from __future__ import annotations

import numpy as np

from .. import kernels
from ..kernels.epilogue import ACTIVATIONS
from ..shapes import is_static
from . import shape as shape_ops
from .epilogue import (CONV2D_PACKED, _codes, _numpy_activation, _packed_decomposition,
                       _infer_packed, activation)
from .opdef import defop

# the prologue's activations: those whose loop formulas give eager's values bit for bit on
# every input, inf and NaN too (the GELUs' and sigmoid's float32 formulas do not at +-inf)
PROLOGUE_ACTS = ("none", "relu", "clamp")


def _prologue(x, scale, shift, pre_act, pre_bounds):
    """``act(x * scale + shift)`` per channel of ``x (N, C, H, W)``, with tensor ops."""
    c = x.shape[1]
    y = x * shape_ops.reshape(scale, c, 1, 1) + shape_ops.reshape(shift, c, 1, 1)
    return activation(y, pre_act, pre_bounds)


def _decomposition(x, scale, shift, wp, b, *residual, pre_act, pre_bounds, **attrs):
    return _packed_decomposition(_prologue(x, scale, shift, pre_act, pre_bounds), wp, b,
                                 *residual, **attrs)


def _fit(x_shape, residual: bool, pre_act, pre_bounds, act, bounds, residual_at,
         kernel_size, out_channels, stride, padding, dilation, groups=1):
    """``run(x, scale, shift, wp, b, *residual, out=None)``: the 1x1 loop with the prologue
    fitted to the shapes; None where the loop does not take the conv (no Numba)."""
    pp = kernels.conv_pointpacked
    w_shape = (out_channels, x_shape[1], *kernel_size)
    if not (kernels.numba_available() and groups == 1
            and pp.wins(x_shape, w_shape, stride, padding, dilation, 1, np.float32)):
        return None
    run = pp.fitted(x_shape, out_channels, residual,
                    **_codes(residual, act, bounds, residual_at),
                    pre_act=ACTIVATIONS.index(pre_act), pre_lo=pre_bounds[0],
                    pre_hi=pre_bounds[1], stride=tuple(stride))

    def prologue_run(x, scale, shift, wp, b, *residual, out=None):
        return run(x, wp, b, *residual, out=out, pre=(scale, shift))
    return prologue_run


def _kernel(x, scale, shift, wp, b, *residual, pre_act, pre_bounds, out=None, **attrs):
    """The loop with the prologue (float32, Numba); else the prologue in NumPy, then
    ``conv2d_packed``'s kernel."""
    arrays = (x, scale, shift, wp, b, *residual)
    if all(a.dtype == np.float32 for a in arrays):
        run = _fit(x.shape, bool(residual), pre_act, pre_bounds, **attrs)
        if run is not None:
            return run(*arrays, out=out)
    c = x.shape[1]
    y = _numpy_activation(x * scale.reshape(c, 1, 1) + shift.reshape(c, 1, 1), pre_act,
                          pre_bounds)
    return CONV2D_PACKED.kernel(y.astype(x.dtype, copy=False), wp, b, *residual, out=out,
                                **attrs)


def _specialise(x, scale, shift, wp, b, *residual, pre_act, pre_bounds, **attrs):
    if not (is_static(x.shape) and all(getattr(v, "dtype", None) == np.float32
                                       for v in (x, scale, shift, wp, b, *residual))):
        return None
    run = _fit(tuple(x.shape), bool(residual), pre_act, pre_bounds, **attrs)
    return None if run is None else (f"conv_prologue_{pre_act}_{attrs['act']}", run)


def _infer(x, scale, shift, wp, b, *residual, pre_act, pre_bounds, **attrs):
    for v in (scale, shift):
        if tuple(v.shape) != (x.shape[1],):
            raise ValueError(f"conv2d_prologue: scale and shift of shape ({x.shape[1]},) "
                             f"for an input of shape {tuple(x.shape)}, got {tuple(v.shape)}")
    if pre_act not in PROLOGUE_ACTS:
        raise ValueError(f"conv2d_prologue: pre_act {pre_act!r} is not one of "
                         f"{PROLOGUE_ACTS}")
    return _infer_packed(x, wp, b, *residual, **attrs)


CONV2D_PROLOGUE = defop(
    "conv2d_prologue", _kernel, _infer,
    attrs=("pre_act", "pre_bounds") + CONV2D_PACKED.attrs, saves="", onnx=None,
    specialise=_specialise, fills_out=True, compiler_only=True,
    decomposition=_decomposition,
    doc="conv2d_packed(act(x * scale + shift), wp, b, ...) of a 1x1 conv: a per-channel "
        "scale, shift and activation (eval-mode BatchNorm) applied to the input as the "
        "conv's loop takes it up")
