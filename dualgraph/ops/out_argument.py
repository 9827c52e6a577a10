"""torch's ``out=`` argument on the functions of the ``torch`` namespace:
``torch.max(a, b, out=a)`` (AMSGrad's running maximum, as optimisers write it),
``torch.add(x, y, out=buf)``, ``torch.sort(x, out=(values, indices))``. The function runs as
it is and its result is written into ``out`` (each tensor of a tuple ``out``), which is
returned, as torch does: the result cast to ``out``'s dtype where torch's casting rule
allows it (no float into an integer ``out``), ``out`` resized to the result's shape (with
torch's warning when it held elements), and no ``out=`` while gradients are recorded for
an argument that requires them (torch refuses that too). Inside a compiled function the
write is an in-place copy, traced as any ``copy_``.

The ops modules' functions in the top-level, ``special`` and ``linalg`` namespaces are wrapped once, at import (with the NumPy
keyword names of :mod:`numpy_names` where the function takes ``dim``, so one frame does
both); a call without ``out`` costs that one frame."""
from __future__ import annotations

import functools
import inspect
import warnings

from .. import dtypes
from . import numpy_names

_TORCH_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half",
                "bfloat16": "BFloat16", "int64": "Long", "int32": "Int", "int16": "Short",
                "int8": "Char", "uint8": "Byte", "bool": "Bool"}


def _dtype_name(dtype) -> str:
    name = str(dtype).rsplit(".", 1)[-1]
    return _TORCH_NAMES.get(name, name)


def _write(name: str, out, result):
    """``result`` written into the tensor ``out``, which is returned."""
    from .. import autograd
    from ..tensor import Tensor
    if not isinstance(out, Tensor) or not isinstance(result, Tensor):
        raise TypeError(f"{name}() got an unexpected keyword argument 'out' (out= takes a "
                        f"tensor, for a function returning tensors)")
    if autograd.is_grad_enabled() and (result.requires_grad or out.requires_grad):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support "
                           "automatic differentiation, but one of the arguments requires "
                           "grad.")
    if not dtypes.can_cast(result.dtype, out.dtype):
        raise RuntimeError(f"result type {_dtype_name(result.dtype)} can't be cast to the "
                           f"desired output type {_dtype_name(out.dtype)}")
    if tuple(out.shape) != tuple(result.shape):
        if out.numel():
            warnings.warn(f"An output with one or more elements was resized since it had "
                          f"shape {list(out.shape)}, which does not match the required "
                          f"output shape {list(result.shape)}.", UserWarning, stacklevel=3)
        out.data = result.detach().to(out.dtype)
        return out
    return out.copy_(result)


def write_out(name: str, out, result):
    """``result`` (a tensor, or a tuple of them) written into ``out`` (a tensor, or a tuple
    of as many); returns ``out`` (a tuple ``out`` in ``result``'s named-tuple type)."""
    if isinstance(result, tuple):
        if not isinstance(out, (tuple, list)) or len(out) != len(result):
            raise TypeError(f"{name}(): out= must be a tuple of {len(result)} tensors")
        written = [_write(name, o, r) for o, r in zip(out, result)]
        return type(result)(*written) if hasattr(type(result), "_fields") else \
            type(result)(written)
    return _write(name, out, result)


def accepting_out(fn, takes_dim: bool):
    """``fn``, taking ``out=`` (and ``axis``/``keepdims`` when ``takes_dim``)."""
    name = fn.__name__

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if kwargs:
            if takes_dim and ("axis" in kwargs or "keepdims" in kwargs):
                numpy_names.rename(name, kwargs)
            if "out" in kwargs:
                out = kwargs.pop("out")
                if out is not None:
                    return write_out(name, out, fn(*args, **kwargs))
        return fn(*args, **kwargs)
    call.__numpy_names__ = True
    return call


_WRAPPERS: dict = {}   # each function's one wrapper, so that namespaces sharing it still do


def install(namespace: dict) -> None:
    """Wrap, in place, the ops modules' functions in ``namespace`` (the top level's,
    ``special``'s, ``linalg``'s) that don't take ``out`` themselves; the hot view methods
    stay as they are, and a function two namespaces share gets the same wrapper in both
    (``torch.special.expit is torch.sigmoid``)."""
    for name, fn in list(namespace.items()):
        if (name.startswith("_") or name in numpy_names.HOT_VIEWS
                or not inspect.isfunction(fn)):
            continue
        inner = getattr(fn, "__wrapped__", fn) if getattr(fn, "__numpy_names__", False) \
            else fn
        if (not inner.__module__.startswith("dualgraph.ops.")
                or inner.__module__ == "dualgraph.ops.control"):   # (cond, scan, while_loop)
            continue
        try:
            params = inspect.signature(inner).parameters
        except (TypeError, ValueError):
            continue
        if "out" in params:
            continue
        if inner not in _WRAPPERS:
            _WRAPPERS[inner] = accepting_out(inner, numpy_names.takes_dim(inner))
        namespace[name] = _WRAPPERS[inner]
