"""Shape ops: reshape/view, permute/transpose, expand, squeeze/unsqueeze, flatten, cat,
stack, split/chunk, pad. Views share storage with their input in eager mode (``view=True``).
"""
from __future__ import annotations

import numpy as np

from ..dispatch import apply
from ..shapes import ShapedType, ShapeError, infer_reshape
from . import reduce
from .opdef import defop

__all__ = ["reshape", "expand", "broadcast_to", "permute"]


def _reshape_kernel(x, shape):
    return x.reshape(shape)


RESHAPE = defop("reshape", _reshape_kernel,
                lambda x, shape: ShapedType(infer_reshape(tuple(x.shape), shape), x.dtype),
                vjp=lambda g, out, x, shape: reshape(g, tuple(x.shape)),
                attrs=("shape",), saves="", view=True, elementwise=None, onnx="Reshape")


def _shape_arg(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(int(d) if not hasattr(d, "name") else d for d in shape)


def reshape(x, *shape):
    """``x`` with a new shape of the same number of elements; one dim may be -1."""
    shape = infer_reshape(tuple(x.shape), _shape_arg(shape))
    if shape == tuple(x.shape):
        return x
    return apply(RESHAPE, x, shape=shape)


def _infer_expand(x, shape):
    xs = tuple(x.shape)
    if len(shape) < len(xs):
        raise ShapeError(f"expand: the new shape {shape} has fewer dims than the tensor "
                         f"{xs}")
    lead = len(shape) - len(xs)
    for i, d in enumerate(xs):
        if d != 1 and shape[lead + i] != d:
            raise ShapeError(f"expand: can't expand shape {xs} to {shape}: dim {lead + i} "
                             f"is {d}, which is not 1")
    return ShapedType(tuple(shape), x.dtype)


EXPAND = defop("expand", lambda x, shape: np.broadcast_to(x, shape), _infer_expand,
               vjp=lambda g, out, x, shape: reduce.sum_to(g, tuple(x.shape)),
               attrs=("shape",), saves="", view=True, onnx="Expand")


def expand(x, *shape):
    """Broadcast ``x`` to ``shape`` without copying; -1 keeps a dim."""
    shape = _shape_arg(shape)
    lead = len(shape) - x.ndim
    shape = tuple(x.shape[i - lead] if d == -1 else d for i, d in enumerate(shape))
    if shape == tuple(x.shape):
        return x
    return apply(EXPAND, x, shape=shape)


def broadcast_to(x, shape):
    return expand(x, tuple(shape))


def _inverse_perm(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


PERMUTE = defop("permute", lambda x, perm: np.transpose(x, perm),
                lambda x, perm: ShapedType(tuple(x.shape[p] for p in perm), x.dtype),
                vjp=lambda g, out, x, perm: permute(g, _inverse_perm(perm)),
                attrs=("perm",), saves="", view=True, onnx="Transpose")


def permute(x, *dims):
    from ..shapes import normalize_dim
    dims = _shape_arg(dims)
    if len(dims) != x.ndim:
        raise ShapeError(f"permute: got {len(dims)} dims {dims} for a tensor with {x.ndim} "
                         f"dims (shape {tuple(x.shape)})")
    perm = tuple(normalize_dim(d, x.ndim) for d in dims)
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(f"permute: {dims} is not a permutation of the dims of a tensor "
                         f"with {x.ndim} dims")
    if perm == tuple(range(x.ndim)):
        return x
    return apply(PERMUTE, x, perm=perm)


METHODS = {"reshape": reshape, "view": reshape, "expand": expand, "permute": permute}
