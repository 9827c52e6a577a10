"""Tensor methods that need ops: installed onto :class:`Tensor` when ``dualgraph.ops`` loads.

Tensor (layer 2) can't import the op families (layer 3), so each family lists its methods in
a ``METHODS`` dict and :func:`install` binds them. In-place variants (``add_``, ``relu_``,
...) are built from their out-of-place ops with :func:`dualgraph.ops.inplace.inplace`.
"""
from __future__ import annotations


from .. import devices, dtypes
from ..autograd import engine
from ..tensor import Tensor
from . import creation, elementwise
from .inplace import inplace, set_data


def to(self, *args, dtype=None, device=None, non_blocking=False, copy=False,
       memory_format=None):
    """``x.to(dtype)``, ``x.to("cpu")``, ``x.to(dg.device("cpu"), dtype)``,
    ``x.to(other_tensor)`` (its dtype), keywords ``dtype=``, ``device=``, ``copy=``. The
    result is ``x`` itself when nothing changes (unless ``copy=True``); a device other than
    the CPU raises ``ValueError``."""
    for a in args:
        if isinstance(a, Tensor):
            dtype = a.dtype
        elif isinstance(a, devices.device) or (isinstance(a, str)
                                                and a not in dtypes._BY_NAME):
            device = a
        else:
            dtype = a
    devices.check(device)
    dtypes.check_memory_format(memory_format, "to")
    if dtype is None or dtypes.to_np(dtype) == self._data.dtype:
        return creation.clone(self) if copy else self
    return elementwise.cast_to(self, dtype)


# Tensor.type()'s names, as torch's legacy tensor types (dg.FloatTensor, ...)
TYPE_NAMES = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor",
              "bfloat16": "BFloat16Tensor", "int64": "LongTensor", "int32": "IntTensor",
              "bool": "BoolTensor"}


def type_(self, dtype=None, non_blocking=False):
    """``x.type()`` names the type as torch does (``"dualgraph.FloatTensor"``);
    ``x.type(dtype)`` casts, where ``dtype`` may also be a legacy type (``dg.LongTensor``)
    or its name (``"torch.LongTensor"``)."""
    if dtype is None:
        return "dualgraph." + TYPE_NAMES[self.dtype.name]
    if isinstance(dtype, str) and "." in dtype:
        names = {name: dt for dt, name in TYPE_NAMES.items()}
        dtype = names[dtype.rpartition(".")[2]]
    return to(self, getattr(dtype, "dtype", dtype))


def type_as(self, other):
    """This tensor cast to ``other``'s dtype (itself when they match)."""
    return to(self, other.dtype)


def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Compute gradients of this tensor and accumulate them into the leaves' ``.grad``."""
    engine.backward(self, gradient, retain_graph, create_graph, inputs)


def install(method_tables):
    for table in method_tables:
        for name, fn in table.items():
            setattr(Tensor, name, fn)
    Tensor.data = Tensor.data.setter(set_data)
    Tensor.to = to
    Tensor.type = type_
    Tensor.type_as = type_as
    Tensor.float = lambda self: to(self, dtypes.float32)
    Tensor.double = lambda self: to(self, dtypes.float64)
    Tensor.half = lambda self: to(self, dtypes.float16)
    Tensor.bfloat16 = lambda self: to(self, dtypes.bfloat16)
    Tensor.long = lambda self: to(self, dtypes.int64)
    Tensor.int = lambda self: to(self, dtypes.int32)
    Tensor.bool = lambda self: to(self, dtypes.bool_)
    Tensor.byte = lambda self: to(self, dtypes.uint8)
    Tensor.char = lambda self: to(self, dtypes.int8)
    Tensor.short = lambda self: to(self, dtypes.int16)
    Tensor.backward = backward
    # In-place arithmetic: x += y keeps the same tensor object, as in torch.
    for name in ("add", "sub", "mul", "div", "pow"):
        setattr(Tensor, name + "_", inplace(getattr(elementwise, name)))
    Tensor.__iadd__ = Tensor.add_
    Tensor.__isub__ = Tensor.sub_
    Tensor.__imul__ = Tensor.mul_
    Tensor.__itruediv__ = Tensor.div_
