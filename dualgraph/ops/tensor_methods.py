"""Tensor methods torch programs call that are neither ops nor op compositions of their
own family: in-place changes of a tensor's shape (``t_``, ``transpose_``, ``unsqueeze_``,
``squeeze_``, ``swapdims_``), ``fill_diagonal_``, ``sum_to_size``, the in-place cumulative
ops, and storage queries (``data_ptr``, ``nbytes``, ``itemsize``, ``storage_offset``,
``layout``, ``is_sparse``, ``is_pinned``, ``share_memory_``).

>>> import dualgraph as dg
>>> x = dg.zeros(2, 3)
>>> x.t_().shape
dualgraph.Size([3, 2])
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from .._helpers import format_site, user_site
from ..autograd.tape import grad_mode
from ..dispatch import modes
from ..errors import CaptureError
from ..tensor import Tensor, bump
from . import creation, elementwise as ew, reduce as red, shape as shape_ops
from ._util import sum_to
from .inplace import inplace
from .views import layout_of, root_layout


def _reshaped_in_place(fn):
    """``x.fn_(...)``: ``x`` itself becomes ``fn(x, ...)``, a view of its storage with a new
    shape, and takes its history, as torch's in-place view ops do. Nothing is written, but
    the version moves on, as torch's does: a node that saved ``x`` reads it at backward, and
    would read the new shape (a square matrix's ``t_()``: the transposed values, a wrong
    gradient) where the version check now refuses."""
    def method(self, *args, **kwargs):
        if grad_mode.enabled and self.requires_grad and self.grad_fn is None:
            raise RuntimeError(f"{method.__name__}: a leaf tensor that requires grad is being "
                               "used in an in-place operation; use the out-of-place "
                               f"{fn.__name__}()")
        if modes.building_graph() and (self._view is not None
                                       or isinstance(self._data, np.ndarray)
                                       or id(self) in modes.tracer._bound):
            raise CaptureError(f"{method.__name__}() of a view or of a tensor from outside "
                               "the compiled function (an argument or a captured tensor), "
                               "whose shape it would change", format_site(user_site()),
                               f"Use x = x.{fn.__name__}(...) inside, or call it outside.")
        if self._view is not None and grad_mode.enabled and self.requires_grad:
            raise NotImplementedError(
                f"{method.__name__} on a view of another tensor (whose writes would have to "
                f"reach it) is not supported; use x = x.{fn.__name__}(...)")
        result = fn(_alias(self), *args, **kwargs)
        if modes.building_graph():   # (eagerly the array keeps its strides itself)
            _keep_layout(self, result)
        self._data = result._data
        self._view = None
        bump(self)
        if result.requires_grad:
            self.grad_fn, self._output_nr = result.grad_fn, result._output_nr
        return self
    method.__name__ = fn.__name__ + "_"
    method.__doc__ = f"In-place version of :meth:`{fn.__name__}`: the tensor takes the new shape."
    return method


def _keep_layout(t: Tensor, result: Tensor) -> None:
    """While tracing, record the strides ``t`` takes from ``result`` (its view op's output,
    as eagerly: a transpose's are not row-major), so that a later ``view`` of ``t`` or a
    write through a reshape of it acts as it does eagerly (``views.layout_of``)."""
    stand_in = layout_of(result)
    modes.tracer.layouts[id(t)] = (t, stand_in) if stand_in is not None else (None, None)


def _alias(t: Tensor) -> Tensor:
    """``t`` as a new tensor object over the same value and history: what the reshaping
    op's backward node saves, since ``t`` itself takes the new shape."""
    if not (grad_mode.enabled and t.requires_grad):
        return t
    tracer = modes.tracer
    alias = Tensor._make(t._data if tracer is None else tracer.value_of(t))
    alias.requires_grad, alias.grad_fn, alias._output_nr = True, t.grad_fn, t._output_nr
    if tracer is not None:   # (and its strides, as ``t``'s array is ``alias``'s eagerly)
        tracer.layouts[id(alias)] = (alias, root_layout(t))
    return alias


def _diagonal_mask(shape, wrap):
    """The positions ``fill_diagonal_`` writes: ``(i, i, ..., i)``; a tall matrix with
    ``wrap`` starts again below every ``cols + 1`` rows, as NumPy's ``fill_diagonal``."""
    if len(shape) < 2:
        raise ValueError(f"fill_diagonal_: dimensions must be larger than 1, got shape "
                         f"{tuple(shape)}")
    if len(shape) > 2 and len(set(shape)) != 1:
        raise ValueError(f"fill_diagonal_: all dimensions of input must be of equal length, "
                         f"got shape {tuple(shape)}")
    mask = np.zeros(shape, bool)
    if len(shape) == 2 and shape[0] > shape[1] + 1 and not wrap:
        mask[:shape[1]] = np.eye(shape[1], dtype=bool)   # (numpy wraps tall matrices)
    else:
        np.fill_diagonal(mask, True, wrap=wrap)
    return mask


def _fill_diagonal(self, fill_value, wrap=False):
    mask = creation.constant(_diagonal_mask(tuple(self.shape), wrap))
    return ew.where(mask, fill_value, self).to(self.dtype)


def sum_to_size(self, *size):
    """The tensor summed down to ``size``, which must broadcast to its shape, as torch's
    ``sum_to_size``."""
    size = tuple(size[0]) if len(size) == 1 and not isinstance(size[0], int) else size
    shape = tuple(self.shape)
    padded = (1,) * (len(shape) - len(size)) + size
    if len(size) > len(shape) or any(s not in (1, n) for s, n in zip(padded, shape)):
        raise ValueError(f"sum_to_size: size {list(size)} is not expandable to size "
                         f"{list(shape)}")
    return sum_to(self, size)


def _storage_root(array: np.ndarray) -> np.ndarray:
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _eager(self, what: str) -> np.ndarray:
    if not isinstance(self._data, np.ndarray):
        raise RuntimeError(f"{what} reads the tensor's memory, which a traced tensor does not "
                           "have; call it outside the compiled function")
    return self._data


def data_ptr(self) -> int:
    """The address of the tensor's first element (eager tensors only)."""
    return _eager(self, "data_ptr()").ctypes.data


def storage_offset(self) -> int:
    """How many elements into its storage the tensor starts (a view's offset)."""
    array = _eager(self, "storage_offset()")
    return (array.ctypes.data - _storage_root(array).ctypes.data) // array.itemsize


METHODS = {
    **{name + "_": _reshaped_in_place(fn) for name, fn in (
        ("t", shape_ops.t), ("transpose", shape_ops.transpose),
        ("swapdims", shape_ops.transpose), ("swapaxes", shape_ops.transpose),
        ("unsqueeze", shape_ops.unsqueeze), ("squeeze", shape_ops.squeeze))},
    "fill_diagonal_": inplace(_fill_diagonal),
    "sum_to_size": sum_to_size,
    "cumsum_": inplace(red.cumsum), "cumprod_": inplace(red.cumprod),
    "data_ptr": data_ptr, "storage_offset": storage_offset,
    "nbytes": property(lambda self: self.numel() * self._data.dtype.itemsize),
    "itemsize": property(lambda self: self._data.dtype.itemsize),
    "layout": property(lambda self: dtypes.strided),
    "is_sparse": False, "is_sparse_csr": False, "is_quantized": False, "is_nested": False,
    "is_pinned": lambda self, device=None: False,
    "share_memory_": lambda self: self,   # (one process's memory: torch.multiprocessing's
    "is_shared": lambda self: False,      # sharing is not needed by dualgraph's workers)
}
