"""Fused layer normalisation: ``layer_norm`` and its backward, each one kernel.

As a composite, LayerNorm is ~8 passes over the activations forward (mean, centre, square,
mean, rsqrt, scale, weight, bias) and ~15 backward; as one op it is a few in-place passes,
and the backward uses the saved mean and 1/std. The backward's own VJP is the autodiff of
the composite form, so gradients of gradients still work.
"""
from __future__ import annotations

import math

import numpy as np

from .. import kernels
from ..kernels.threads import run_rows, threads_for
from ..dispatch import apply
from ..shapes import ShapedType, reduced_shape
from . import elementwise as ew
from . import reduce as red
from ._util import empty_into, out_part
from .opdef import RowEpilogue, defop

__all__: list = []


def _axes(x, n_dims):
    return tuple(range(x.ndim - n_dims, x.ndim))


def _stat_dtype(dt):
    """Statistics of half-precision inputs are kept in float32."""
    return dt if dt.itemsize >= 4 else np.dtype(np.float32)


def _stats_shape(x, n_dims):
    return x.shape[:x.ndim - n_dims] + (1,) * n_dims


def _param_or(p, fill, width, x):
    """A parameter as the loops take it: a flat row, ``fill`` everywhere when absent."""
    return np.full(width, fill, x.dtype) if p is None else kernels.flat(p)


def _layer_norm_kernel(x, weight, bias, n_dims, eps, out=None):
    width = math.prod(x.shape[x.ndim - n_dims:])
    # (min_elements=0: NumPy's form is a dozen calls, slower than the loop at every size)
    if kernels.enabled(x, *(p for p in (weight, bias) if p is not None),
                       min_elements=0) and width:
        rows = kernels.rows(x, width)
        y, mean, rstd = (empty_into(out_part(out, 0), x.shape, x.dtype),
                         empty_into(out_part(out, 1), (len(rows),), x.dtype),
                         empty_into(out_part(out, 2), (len(rows),), x.dtype))
        run_rows(kernels.normalization.layer_norm, len(rows), rows,
                 _param_or(weight, 1, width, x), _param_or(bias, 0, width, x),
                 np.float32(eps), y.reshape(rows.shape), mean, rstd,
                 threads=threads_for(x.size))
        shape = _stats_shape(x, n_dims)
        return y, mean.reshape(shape), rstd.reshape(shape)
    axes = _axes(x, n_dims)
    xf = x if x.dtype.itemsize >= 4 else x.astype(np.float32)
    mean = xf.mean(axis=axes, keepdims=True)
    y = xf - mean
    var = np.mean(np.square(y), axis=axes, keepdims=True)
    rstd = np.sqrt(var + eps)
    np.reciprocal(rstd, out=rstd)
    y *= rstd
    if weight is not None:
        y *= weight
    if bias is not None:
        y += bias
    return y.astype(x.dtype, copy=False), mean, rstd


def _infer_layer_norm(x, weight, bias, n_dims, eps):
    stats = ShapedType(reduced_shape(tuple(x.shape), _axes(x, n_dims), True),
                       _stat_dtype(x.dtype))
    return ShapedType(tuple(x.shape), x.dtype), stats, stats


def _layer_norm_backward_kernel(g, x, weight, mean, rstd, n_dims, eps, out=None):
    width = math.prod(x.shape[x.ndim - n_dims:])
    if kernels.enabled(x, g, *(() if weight is None else (weight,)), min_elements=0) and width:
        rows = kernels.rows(x, width)
        dx, dw, db = (empty_into(out_part(out, 0), x.shape, x.dtype),
                      empty_into(out_part(out, 1), (width,), x.dtype),
                      empty_into(out_part(out, 2), (width,), x.dtype))
        if g.shape != x.shape:
            g = np.broadcast_to(g, x.shape)
        kernels.normalization.layer_norm_backward(
            kernels.rows(g, width), rows, _param_or(weight, 1, width, x),
            kernels.flat(mean), kernels.flat(rstd), dx.reshape(rows.shape), dw, db)
        params = x.shape[x.ndim - n_dims:]
        return dx, dw.reshape(params), db.reshape(params)
    axes = _axes(x, n_dims)
    lead = tuple(range(x.ndim - n_dims))
    gf = g if g.dtype.itemsize >= 4 else g.astype(np.float32)
    xhat = x - mean
    xhat *= rstd
    gw = gf * weight if weight is not None else gf
    dx = gw - gw.mean(axis=axes, keepdims=True)
    dx -= xhat * np.mean(gw * xhat, axis=axes, keepdims=True)
    dx *= rstd
    dw = np.sum(gf * xhat, axis=lead)
    db = np.sum(gf, axis=lead)
    return dx.astype(x.dtype, copy=False), dw.astype(x.dtype), db.astype(x.dtype)


def _backward_decomposition(g, x, weight, mean, rstd, n_dims, eps):
    """The kernel's formulas from ops: with ``xhat = (x - mean) * rstd`` and ``gw = g *
    weight``, ``dx = (gw - mean(gw) - xhat * mean(gw * xhat)) * rstd``; the parameters'
    gradients sum over the leading dims."""
    dims, lead = _axes(x, n_dims), tuple(range(x.ndim - n_dims))
    g = g.expand(tuple(x.shape))
    xhat = (x - mean) * rstd
    gw = g * weight if weight is not None else g
    dx = gw - red.mean(gw, dims, keepdim=True) - xhat * red.mean(gw * xhat, dims, keepdim=True)
    dw, db = g * xhat, g
    if lead:
        dw, db = red.sum(dw, lead), red.sum(db, lead)
    return tuple(t.to(x.dtype) for t in (dx * rstd, dw, db))


def _infer_backward(g, x, weight, mean, rstd, n_dims, eps):
    params = ShapedType(tuple(x.shape)[x.ndim - n_dims:], x.dtype)
    return ShapedType(tuple(x.shape), x.dtype), params, params


def layer_norm_composite(x, weight, bias, n_dims, eps):
    """The same normalisation from reductions and elementwise ops: ``(y, mean, 1/std)``,
    the statistics in the kernel's dtype (float32 for half-precision x)."""
    dims = _axes(x, n_dims)
    xs = x.to(_stat_dtype(x.dtype.np))
    mean = red.mean(xs, dims, keepdim=True)
    centred = xs - mean
    rstd = ew.rsqrt(red.mean(centred * centred, dims, keepdim=True) + eps)
    y = centred * rstd
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.to(x.dtype), mean, rstd


def _vjp(g, out, x, weight, bias, n_dims, eps):
    dx, dw, db = apply(LAYER_NORM_BACKWARD, g[0], x, weight, out[1], out[2], n_dims=n_dims,
                       eps=eps)
    return dx, dw if weight is not None else None, db if bias is not None else None


def second_derivatives(first_of, gg, g, x, weight):
    """The VJP of a fused normalisation's backward (the op ``(g, x, weight, ...) -> (dx,
    dweight, dbias)``) for cotangents ``gg``, as ``(d g, d x, d weight)``: by autodiff of
    the composite's first derivatives, ``first_of(x, weight)`` giving the composite's
    output without bias (the bias drops out of them; the saved statistics are caches of
    x)."""
    from ..autograd.engine import grad
    from ..autograd.tape import enable_grad
    with enable_grad():
        gl, xl = g.detach().requires_grad_(), x.detach().requires_grad_()
        wl = None if weight is None else weight.detach().requires_grad_()
        wrt = [xl] + ([wl] if wl is not None else [])
        firsts = grad(first_of(xl, wl), wrt, gl, create_graph=True)
        cots = [gg[0]] + ([gg[1]] if wl is not None else [])
        pairs = [(f, c) for f, c in zip(firsts, cots) if c is not None]
        outs = grad([f for f, _ in pairs], [gl] + wrt, [c for _, c in pairs],
                    create_graph=True, allow_unused=True)
    return outs[0], outs[1], outs[2] if wl is not None else None


def _backward_vjp(gg, out, g, x, weight, mean, rstd, n_dims, eps):
    first = second_derivatives(
        lambda xl, wl: layer_norm_composite(xl, wl, None, n_dims, eps)[0], gg, g, x, weight)
    return (*first, None, None)


# Over the last dim, a fused group can normalise each row it computes while it is in cache
# (fusion ends a group with it): the row loop the float32 kernel runs, one row at a time.
_ROWS = RowEpilogue("dualgraph.kernels.normalization", "normalise_row", attrs=("eps",),
                    stats=("mean", "rstd"),
                    applies=lambda x, weight, bias, n_dims, eps: n_dims == 1)


def _onnx_layer_norm(e, node):
    """LayerNormalization over the last ``n_dims`` dims. ONNX needs a scale: a missing
    weight is a constant of ones; a missing bias is a constant of zeros, since onnxruntime
    1.32 crashes (segfault) on a LayerNormalization without one."""
    x = node.inputs[0]
    n = node.attrs["n_dims"]
    params = x.shape[x.ndim - n:]
    scale = e.input(1) or e.const(np.ones(params, x.dtype), "ones")
    bias = (e.input(2) if len(node.inputs) > 2 else None) or e.const(np.zeros(params, x.dtype),
                                                                      "zeros")
    return e.op("LayerNormalization", [e.input(0), scale, bias], outputs=3, axis=-n,
                epsilon=float(node.attrs["eps"]))


def _from_onnx_layer_norm(b, xs, attrs):
    x, scale, bias = (list(xs) + [None])[:3]
    dim = b.dim(attrs.get("axis", -1), x.ndim)
    shape = tuple(x.shape[dim:])   # layer_norm takes its parameters in this shape
    scale, bias = (p if p is None or tuple(p.shape) == shape else
                   b.op("expand", p, shape=shape) for p in (scale, bias))
    return b.op(LAYER_NORM, x, scale, bias, n_dims=x.ndim - dim,
                eps=float(attrs.get("epsilon", 1e-5)))


LAYER_NORM = defop("layer_norm", _layer_norm_kernel, _infer_layer_norm, vjp=_vjp,
                   decomposition=layer_norm_composite,
                   attrs=("n_dims", "eps"), num_outputs=3, differentiable_outputs=(0,),
                   saves="io", fills_out=True,
                   onnx=_onnx_layer_norm,
                   onnx_import={"LayerNormalization": _from_onnx_layer_norm},
                   row_epilogue=_ROWS,
                   autocast="float32")
LAYER_NORM_BACKWARD = defop("layer_norm_backward", _layer_norm_backward_kernel,
                            _infer_backward, vjp=_backward_vjp, attrs=("n_dims", "eps"),
                            compiler_only=True,
                            decomposition=_backward_decomposition,
                            num_outputs=3, saves="i", onnx=None, fills_out=True)


def _rms_norm_kernel(x, weight, eps):
    width = x.shape[-1] if x.ndim else 0
    if kernels.enabled(x, weight, min_elements=0) and width:
        rows = kernels.rows(x, width)
        y, rstd = np.empty(x.shape, x.dtype), np.empty(len(rows), x.dtype)
        run_rows(kernels.normalization.rms_norm, len(rows), rows, kernels.flat(weight),
                 np.float32(eps), y.reshape(rows.shape), rstd, threads=threads_for(x.size))
        return y, rstd.reshape(_stats_shape(x, 1))
    rstd = 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.asarray(eps, x.dtype))
    return x * rstd * weight, rstd.astype(x.dtype, copy=False)


def _infer_rms_norm(x, weight, eps):
    if not x.shape or tuple(weight.shape) != tuple(x.shape[-1:]):
        raise ValueError(f"rms_norm: weight of shape {tuple(weight.shape)} for rows of "
                         f"input {tuple(x.shape)}: it must be (last dim,)")
    return (ShapedType(tuple(x.shape), x.dtype),
            ShapedType(tuple(x.shape[:-1]) + (1,), x.dtype))


def _rms_norm_decomposition(x, weight, eps):
    rstd = 1.0 / ew.sqrt(red.mean(x * x, (x.ndim - 1,), keepdim=True) + eps)
    return x * rstd * weight, rstd


RMS_NORM = defop("rms_norm", _rms_norm_kernel, _infer_rms_norm, attrs=("eps",),
                 num_outputs=2, saves="", onnx=None, compiler_only=True,
                 decomposition=_rms_norm_decomposition,
                 row_epilogue=RowEpilogue("dualgraph.kernels.normalization", "rms_row",
                                          attrs=("eps",), stats=("rstd",)),
                 doc="x / sqrt(mean(x**2, -1) + eps) * weight (RMSNorm), and the 1/rms "
                     "per row: one loop over each row in cache")


def layer_norm(x, n_dims: int, weight=None, bias=None, eps: float = 1e-5):
    """Normalise over the last ``n_dims`` dims, then scale and shift: one fused op, eager
    and traced (its float32 loop reads each row twice while it is in cache, which the
    compiler's fusion of the composite cannot yet do: that took four kernels and three
    full passes; and compiled LayerNorm then equals eager to the bit)."""
    y, _, _ = apply(LAYER_NORM, x, weight, bias, n_dims=n_dims, eps=float(eps))
    return y
