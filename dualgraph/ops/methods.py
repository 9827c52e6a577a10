"""Tensor methods that need ops: installed onto :class:`Tensor` when ``dualgraph.ops`` loads.

Tensor (layer 2) can't import the op families (layer 3), so each family lists its methods in
a ``METHODS`` dict and :func:`install` binds them; in-place variants (``add_``, ``mul_``, ...)
are derived here once from their out-of-place ops by :func:`inplace`.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..autograd import engine
from ..autograd.tape import grad_mode
from ..tensor import Tensor
from . import elementwise


def commit_inplace(target: Tensor, result: Tensor) -> Tensor:
    """Make ``target`` hold ``result``: write into its storage (so views see it), bump its
    version (so saved copies are caught), and give it ``result``'s history."""
    if grad_mode.enabled and target.requires_grad and target.grad_fn is None:
        raise RuntimeError(
            "a leaf tensor that requires grad is being used in an in-place operation; "
            "wrap the update in `with dg.no_grad():` or work on a clone")
    base = target._base
    if grad_mode.enabled and result.requires_grad and base is not None and base.requires_grad:
        raise RuntimeError(
            "in-place operations on a view of a tensor that requires grad are not supported; "
            "compute the new value out of place (e.g. with dg.where or dg.cat)")
    data = target._data
    if type(data) is np.ndarray and type(result._data) is np.ndarray:
        if not data.flags.writeable:
            raise RuntimeError(
                "in-place operation on a tensor whose storage is read-only (an expanded or "
                "broadcast view); call .clone() first")
        np.copyto(data, result._data, casting="unsafe")
    else:  # tracing: the tensor now refers to the new symbolic value (functionalised)
        target._data = elementwise.cast_to(result, target.dtype)._data
    target._version[0] += 1
    if result.requires_grad and grad_mode.enabled:
        result = elementwise.cast_to(result, target.dtype)
        target.requires_grad = True
        target.grad_fn = result.grad_fn
        target._output_nr = result._output_nr
    return target


def inplace(fn):
    """``x.fn_(*args)``: compute ``fn(x, *args)`` and commit it into ``x``."""
    def method(self, *args, **kwargs):
        return commit_inplace(self, fn(self, *args, **kwargs))
    method.__name__ = fn.__name__ + "_"
    method.__doc__ = f"In-place version of :meth:`{fn.__name__}`."
    return method


def to(self, *args, **kwargs):
    """``x.to(dtype)`` / ``x.to("cpu")`` / ``x.to(other_tensor)``."""
    dtype = kwargs.get("dtype")
    for a in args:
        if isinstance(a, Tensor):
            dtype = a.dtype
        elif isinstance(a, str) and a not in dtypes._BY_NAME:
            if a != "cpu":
                raise ValueError(f"device {a!r} is not available; dualgraph runs on 'cpu'")
        else:
            dtype = a
    if dtype is None:
        return self
    return elementwise.cast_to(self, dtype)


def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Compute gradients of this tensor and accumulate them into the leaves' ``.grad``."""
    engine.backward(self, gradient, retain_graph, create_graph, inputs)


def install(method_tables):
    for table in method_tables:
        for name, fn in table.items():
            setattr(Tensor, name, fn)
    Tensor.to = to
    Tensor.type = to
    Tensor.float = lambda self: to(self, dtypes.float32)
    Tensor.double = lambda self: to(self, dtypes.float64)
    Tensor.half = lambda self: to(self, dtypes.float16)
    Tensor.bfloat16 = lambda self: to(self, dtypes.bfloat16)
    Tensor.long = lambda self: to(self, dtypes.int64)
    Tensor.int = lambda self: to(self, dtypes.int32)
    Tensor.bool = lambda self: to(self, dtypes.bool_)
    Tensor.backward = backward
    # In-place arithmetic: x += y keeps the same tensor object, as in torch.
    for name in ("add", "sub", "mul", "div", "pow"):
        setattr(Tensor, name + "_", inplace(getattr(elementwise, name)))
    Tensor.__iadd__ = Tensor.add_
    Tensor.__isub__ = Tensor.sub_
    Tensor.__imul__ = Tensor.mul_
    Tensor.__itruediv__ = Tensor.div_
