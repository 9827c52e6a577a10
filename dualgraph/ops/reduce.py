"""Reductions: sum, mean, prod, max/min, var/std, logsumexp, norm, arg-reductions, cumsum,
and softmax / log_softmax (primitives for numerical stability)."""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..dispatch import apply
from ..shapes import ShapedType, normalize_dims, reduced_shape
from . import shape as shape_ops
from .opdef import defop

__all__ = ["sum"]


def _sum_dtype(dt: np.dtype, dtype=None) -> np.dtype:
    """torch.sum: integers and bools accumulate in int64; an explicit dtype wins."""
    if dtype is not None:
        return np.dtype(dtype)
    return np.dtype(np.int64) if dt.kind in "biu" else dt


def _sum_kernel(x, dims, keepdim, dtype=None):
    out_dt = _sum_dtype(x.dtype, dtype)
    if x.dtype == dtypes.bfloat16_np or x.dtype == np.float16:
        return np.sum(x, axis=dims, keepdims=keepdim, dtype=np.float32).astype(out_dt)
    return np.asarray(np.sum(x, axis=dims, keepdims=keepdim, dtype=out_dt))


def _infer_sum(x, dims, keepdim, dtype=None):
    return ShapedType(reduced_shape(tuple(x.shape), dims, keepdim), _sum_dtype(x.dtype, dtype))


def _sum_vjp(g, out, x, dims, keepdim, dtype=None):
    if not keepdim:
        g = shape_ops.reshape(g, reduced_shape(tuple(x.shape), dims, True))
    return shape_ops.expand(g, tuple(x.shape)).to(x.dtype)


SUM = defop("sum", _sum_kernel, _infer_sum, vjp=_sum_vjp, attrs=("dims", "keepdim", "dtype"),
            saves="", onnx="ReduceSum")


def sum(x, dim=None, keepdim=False, *, dtype=None):
    """Sum over ``dim`` (an int, a tuple, or None for all dims), as ``torch.sum``."""
    dims = normalize_dims(dim, x.ndim)
    return apply(SUM, x, dims=dims, keepdim=bool(keepdim),
                 dtype=None if dtype is None else dtypes.to_np(dtype))


def sum_to(x, shape: tuple):
    """Sum ``x`` down to ``shape`` (the inverse of broadcasting ``shape`` to ``x.shape``)."""
    xs = tuple(x.shape)
    if xs == shape:
        return x
    lead = len(xs) - len(shape)
    dims = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and xs[lead + i] != 1)
    out = apply(SUM, x, dims=dims, keepdim=True, dtype=None)
    return shape_ops.reshape(out, shape) if lead else out


METHODS = {"sum": sum}
