"""BatchNorm in training mode as one op, ``batch_norm`` (the batch's statistics per channel
of ``(N, C, ...)``), and its backward.

As a composite it is ~7 passes over the activations forward (mean, centre, square, mean,
scale, weight, bias) and ~15 backward, each a NumPy call with a temporary: a fifth of an
eager CNN training step. As one op it is two passes each way (``kernels/batch_norm.py``,
float32), and the backward reads the saved mean and variance. Evaluation-mode BatchNorm
stays ``x * alpha + beta`` in ``nn.functional`` (the form the inference passes fold into a
conv). The backward's own VJP is the autodiff of the composite, so gradients of gradients
work.
"""
from __future__ import annotations

import numpy as np

from .. import kernels
from ..dispatch import apply
from ..shapes import ShapedType
from . import elementwise as ew
from . import reduce as red
from . import shape as shape_ops
from ._util import out_part
from .norm import second_derivatives
from .opdef import defop

__all__: list = []


def _dims(ndim):
    return (0,) + tuple(range(2, ndim))


def _per_channel(a, ndim):
    return a.reshape((-1,) + (1,) * (ndim - 2))


def _stat_dtype(dt):
    """Statistics of half-precision inputs are float32 (as the running buffers)."""
    return dt if dt.itemsize >= 4 else np.dtype(np.float32)


def _or(p, fill, x):
    return np.full(x.shape[1], fill, _stat_dtype(x.dtype)) if p is None else p


def _forward_kernel(x, weight, bias, eps, out=None):
    weight, bias = _or(weight, 1, x), _or(bias, 0, x)
    # (min_elements=1: NumPy's form is a dozen calls, slower than the loop at every size;
    # y into out's first array: ``fills_out``)
    if kernels.enabled(x, weight, bias, min_elements=1):
        return kernels.batch_norm.forward(x, weight, bias, eps, out_part(out, 0))
    xf = x.astype(_stat_dtype(x.dtype), copy=False)
    dims, nd = _dims(x.ndim), x.ndim
    mean = xf.mean(axis=dims, dtype=np.float64)
    centred = xf - _per_channel(mean, nd).astype(xf.dtype)
    var = np.mean(np.square(centred), axis=dims, dtype=np.float64)
    a = weight / np.sqrt(var + eps)
    y = centred * _per_channel(a, nd).astype(xf.dtype) + _per_channel(bias, nd)
    return (y.astype(x.dtype, copy=False), mean.astype(xf.dtype), var.astype(xf.dtype))


def _infer(x, weight, bias, eps):
    stats = ShapedType((x.shape[1],), _stat_dtype(x.dtype))
    return ShapedType(tuple(x.shape), x.dtype), stats, stats


def _backward_kernel(g, x, weight, mean, var, eps, out=None):
    weight = _or(weight, 1, x)
    if kernels.enabled(x, g, weight, min_elements=1):   # (dx into out's first array)
        return kernels.batch_norm.backward(g, x, weight, mean, var, eps, out_part(out, 0))
    dims, nd = _dims(x.ndim), x.ndim
    xf = x.astype(mean.dtype, copy=False)
    gf = g.astype(mean.dtype, copy=False)
    rstd = 1 / np.sqrt(var.astype(np.float64) + eps)
    centred = xf - _per_channel(mean, nd)
    total = gf.sum(axis=dims, dtype=np.float64)
    dot = (gf * centred).sum(axis=dims, dtype=np.float64)
    count = x.size // x.shape[1]
    slope = _per_channel(dot * rstd * rstd / count, nd).astype(xf.dtype)
    dx = (gf - _per_channel(total / count, nd).astype(xf.dtype) - centred * slope)
    dx *= _per_channel(weight * rstd, nd).astype(xf.dtype)
    return (dx.astype(x.dtype, copy=False), (dot * rstd).astype(weight.dtype),
            total.astype(weight.dtype))


def _infer_backward(g, x, weight, mean, var, eps):
    params = ShapedType((x.shape[1],), mean.dtype)
    return ShapedType(tuple(x.shape), x.dtype), params, params


def batch_norm_composite(x, weight, bias, eps):
    """The same normalisation from reductions and elementwise ops: ``(y, mean, var)``
    (the biased variance), the statistics in the kernel's dtype."""
    dims, nd = _dims(x.ndim), x.ndim
    xs = x.to(_stat_dtype(x.dtype.np))
    mean = red.mean(xs, dims, keepdim=True)
    centred = xs - mean
    var = red.mean(centred * centred, dims, keepdim=True)
    y = centred * ew.rsqrt(var + eps)
    if weight is not None:
        y = y * shape_ops.reshape(weight, (-1,) + (1,) * (nd - 2))
    if bias is not None:
        y = y + shape_ops.reshape(bias, (-1,) + (1,) * (nd - 2))
    flat = (x.shape[1],)
    return y.to(x.dtype), shape_ops.reshape(mean, flat), shape_ops.reshape(var, flat)


def _backward_decomposition(g, x, weight, mean, var, eps):
    """The kernel's formulas from ops: with ``xhat = (x - mean) * rstd``, ``db = sum(g)``,
    ``dw = sum(g * xhat)``, ``dx = weight * rstd * (g - db / M - xhat * dw / M)``."""
    dims, nd = _dims(x.ndim), x.ndim
    shape = (-1,) + (1,) * (nd - 2)
    rstd = ew.rsqrt(var + eps)
    xhat = (x.to(mean.dtype.np) - shape_ops.reshape(mean, shape)) * shape_ops.reshape(rstd,
                                                                                       shape)
    gs = g.to(mean.dtype.np)
    db, dw = red.sum(gs, dims), red.sum(gs * xhat, dims)
    count = x.numel() // x.shape[1]
    dx = gs - shape_ops.reshape(db / count, shape) - xhat * shape_ops.reshape(dw / count,
                                                                               shape)
    scale = rstd if weight is None else rstd * weight
    return (dx * shape_ops.reshape(scale, shape)).to(x.dtype), dw, db


def _vjp(g, out, x, weight, bias, eps):
    # (reads the statistics, never y: an in-place activation after the layer, ReLU(inplace=
    # True), is legal as in torch, hence saves="i" below)
    dx, dw, db = apply(BATCH_NORM_BACKWARD, g[0], x, weight, out[1], out[2], eps=eps)
    return dx, dw if weight is not None else None, db if bias is not None else None


def _backward_vjp(gg, out, g, x, weight, mean, var, eps):
    first = second_derivatives(lambda xl, wl: batch_norm_composite(xl, wl, None, eps)[0],
                               gg, g, x, weight)
    return (*first, None, None)


def _onnx_batch_norm(e, node):
    """The batch's statistics from ReduceMean (ONNX's BatchNormalization in training mode
    returns the running statistics, not these), then ``(x - mean) / sqrt(var + eps)``,
    scaled and shifted."""
    x = node.inputs[0]
    dims = list(_dims(x.ndim))
    shape = e.ints([-1] + [1] * (x.ndim - 2))
    xs = e.input(0)
    mean = e.reduce("ReduceMean", xs, dims, True)
    centred = e.op("Sub", [xs, mean])
    var = e.reduce("ReduceMean", e.op("Mul", [centred, centred]), dims, True)
    eps = e.scalar(node.attrs["eps"], x.dtype, "eps")
    y = e.op("Div", [centred, e.op("Sqrt", [e.op("Add", [var, eps])])])
    for i, op_type in ((1, "Mul"), (2, "Add")):
        p = e.input(i)
        if p is not None:
            y = e.op(op_type, [y, e.op("Reshape", [p, shape])])
    flat = e.ints([x.shape[1]])
    return [y, e.op("Reshape", [mean, flat]), e.op("Reshape", [var, flat])]


BATCH_NORM = defop("batch_norm", _forward_kernel, _infer, vjp=_vjp,
                   decomposition=batch_norm_composite, attrs=("eps",), num_outputs=3,
                   differentiable_outputs=(0,), saves="i", onnx=_onnx_batch_norm,
                   fills_out=True, autocast="float32")
BATCH_NORM_BACKWARD = defop("batch_norm_backward", _backward_kernel, _infer_backward,
                            vjp=_backward_vjp, attrs=("eps",), compiler_only=True,
                            decomposition=_backward_decomposition, num_outputs=3, saves="i",
                            onnx=None, fills_out=True)


def batch_norm_train(x, weight, bias, eps: float):
    """``(y, mean, var)``: ``x (N, C, ...)`` normalised per channel by the batch's mean and
    biased variance, then scaled and shifted (both ``(C,)`` or None)."""
    return apply(BATCH_NORM, x, weight, bias, eps=float(eps))
