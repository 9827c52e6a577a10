"""Reductions that select an element by sorting: ``mode`` (the most frequent value) and
``nanmedian`` (the lower median of the non-NaN values), each with the index of the element
it picks, and ``msort``. Their gradients go to that index, as torch's (and as ``median``'s:
they share its kernel frame and VJP in ops/reduce.py).

>>> import dualgraph as dg
>>> dg.mode(dg.tensor([3, 1, 1, 3, 2]))
mode(values=tensor(1), indices=tensor(2))
"""
from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from ..dispatch import apply
from . import shape as shape_ops
from ._util import is_float
from .creation import full
from .index import sort
from .reduce import _along, _infer_with_index, _with_index_kernel, _with_index_vjp
from .opdef import defop

__all__ = ["mode", "nanmedian", "msort"]


def _argmode(x, axis, keepdims):
    """Index of the mode along ``axis`` (kept as a size-1 dim), as torch's CPU kernel picks
    it: the smallest of the most frequent values, at its last position."""
    if x.shape[axis] == 0:
        raise IndexError(f"mode(): Expected reduction dim {axis} to have non-zero size.")
    order = np.argsort(x, axis=axis, kind="stable")
    ordered = np.take_along_axis(x, order, axis=axis)
    ordered, order = np.moveaxis(ordered, axis, -1), np.moveaxis(order, axis, -1)
    n = ordered.shape[-1]
    starts = np.ones(ordered.shape, bool)
    starts[..., 1:] = ordered[..., 1:] != ordered[..., :-1]
    positions = np.arange(n)
    run_start = np.maximum.accumulate(np.where(starts, positions, 0), axis=-1)
    # the first longest run ends at the smallest most frequent value; with a stable sort
    # its last element is the value's last position in x
    best = np.argmax(positions - run_start, axis=-1)[..., None]
    return np.moveaxis(np.take_along_axis(order, best, axis=-1), -1, axis)


def _argnanmedian(x, axis, keepdims):
    """Index of the lower median of the non-NaN values along ``axis`` (the first NaN
    where all are NaN)."""
    if is_float(x.dtype) and x.dtype.itemsize < 4:
        x = x.astype(np.float32)   # (NumPy's sort of bfloat16 puts NaNs anywhere)
    order = np.argsort(x, axis=axis, kind="stable")   # (NaNs sort last)
    counted = np.sum(~np.isnan(x), axis=axis, keepdims=True) if is_float(x.dtype) \
        else np.full(np.take(x, [0], axis=axis).shape, x.shape[axis])
    return np.take_along_axis(order, np.maximum(counted - 1, 0) // 2, axis=axis)


ModeResult = namedtuple("mode", ["values", "indices"])
NanmedianResult = namedtuple("nanmedian", ["values", "indices"])
MODE = defop("mode", _with_index_kernel(_argmode), _infer_with_index, vjp=_with_index_vjp,
             attrs=("dim", "keepdim"), num_outputs=2, differentiable_outputs=(0,),
             saves="o", doc="The most frequent value along dim (the smallest of several) and "
                            "its last index.")
NANMEDIAN = defop("nanmedian", _with_index_kernel(_argnanmedian), _infer_with_index,
                  vjp=_with_index_vjp, attrs=("dim", "keepdim"), num_outputs=2,
                  differentiable_outputs=(0,), saves="o",
                  doc="The lower median of the non-NaN values along dim and its index.")


def mode(input, dim=-1, keepdim=False):
    """``(values, indices)``: the most frequent value along ``dim`` (the smallest of those
    tied) and its last index, as ``torch.mode``."""
    return _along(MODE, ModeResult, input, dim, keepdim)


def nanmedian(input, dim=None, keepdim=False):
    """As :func:`median`, over the values that are not NaN: ``nanmedian(x)`` is the lower
    median of them all (0-d; NaN when all are NaN), ``nanmedian(x, dim)`` gives
    ``(values, indices)``, as ``torch.nanmedian``."""
    if dim is None:
        if input.numel() == 0:   # (torch's: NaN)
            return full((), math.nan, dtype=input.dtype)
        return apply(NANMEDIAN, shape_ops.reshape(input, -1), dim=0, keepdim=False)[0]
    return _along(NANMEDIAN, NanmedianResult, input, dim, keepdim)


def msort(input):
    """``input`` sorted along its first dim, as ``torch.msort``."""
    return sort(input, dim=0).values


METHODS = {"mode": mode, "nanmedian": nanmedian, "msort": msort}
