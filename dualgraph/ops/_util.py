"""Helpers shared by the op families: operand types, promotion, common shape rules.

This module sits below every family, so no family imports another in a loop. Where a
helper needs an op (``sum_to`` sums and reshapes), it calls the Tensor method, bound when
``dualgraph.ops`` loads, as a VJP calls ``g * x``.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes, kernels
from ..dtypes import cast  # noqa: F401  (the op families take it from here)
from ..dispatch import modes
from ..shapes import ShapedType, SizeCases, broadcast_shapes
from ..tensor import Tensor

BF16 = dtypes.bfloat16_np


def is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt == BF16


def row_major(a: np.ndarray) -> np.ndarray:
    """``a`` laid out C-contiguous, as torch lays out a new result (a later ``.view`` of it
    relies on that); ``a`` itself when it already is (``np.ascontiguousarray`` would turn a
    0-d array into a 1-d one)."""
    return a if a.flags.c_contiguous else a.copy(order="C")


def out_in(out, dtype):
    """``out``, the array a ``fills_out`` kernel was given for a result (or None), where
    the kernel computes in its dtype ``dtype``; else None (it casts a new array)."""
    return out if out is not None and out.dtype == dtype else None


def filling(kernel):
    """``kernel`` as a ``fills_out`` op's (``out=``: a compiled graph's planned buffer, where
    its own runs return a fresh array: the result copied in). The op's ``specialise`` gives
    the runs that write ``out`` themselves."""
    def run(*args, out=None, **attrs):
        y = kernel(*args, **attrs)
        if out is None:
            return y
        out[...] = y
        return out
    return run


def empty_into(out, shape, dtype) -> np.ndarray:
    """An array of ``shape`` and ``dtype`` for a kernel to write a result into: ``out``
    (the C-contiguous array a ``fills_out`` kernel was given for it, or None) seen in
    ``shape`` when it has that dtype and size, else a new one."""
    if out is not None and out.dtype == dtype and out.size == math.prod(shape):
        return out.reshape(shape)
    return np.empty(shape, dtype)


def column_sum(a: np.ndarray, out=None) -> np.ndarray:
    """``a.sum(axis=0)`` of a 2-D array (a bias's gradient: the rows of a batch), into
    ``out`` where given: float32 rows through ``kernels.sums.column_sums`` (the same bits
    as NumPy's, its sums held in registers down the rows), else ``np.add.reduce``."""
    if (a.shape[0] and a.flags.c_contiguous and kernels.enabled(a)
            and (out is None or (out.dtype == a.dtype and out.flags.c_contiguous))):
        out = np.empty(a.shape[1], a.dtype) if out is None else out
        kernels.sums.column_sums(a.reshape(-1), out)
        return out
    return np.add.reduce(a, axis=0, out=out)


def out_part(out, i: int):
    """The array given for output ``i`` of a several-output ``fills_out`` kernel (``out=``
    is None or a tuple of an array or None per output), or None."""
    return None if out is None else out[i]


def shape_of(x) -> tuple:
    """The shape of an array, aval or Tensor; () for a Python scalar."""
    return tuple(getattr(x, "shape", ()))


def needs_grad(x) -> bool:
    """True when a VJP must produce a gradient for input ``x``."""
    return isinstance(x, Tensor) and x.requires_grad


def as_operand(x):
    """User input -> a Tensor or a Python scalar (what dispatch accepts)."""
    tx = type(x)
    if tx is Tensor or tx is float:   # the common cases, checked first: this is a hot path
        return x
    if isinstance(x, (Tensor, bool, int, float)):
        return x
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, (np.ndarray, list, tuple)):
        from ..tensor import as_array
        from .creation import constant   # (a graph constant while tracing)
        array = as_array(x)
        if array is x and modes.building_graph():   # a user's array, shared eagerly
            return modes.tracer.array_tensor(x)
        return constant(array)
    if getattr(x, "symbolic_number", False):   # a traced Python number (capture/symbolic.py)
        return x
    raise TypeError(f"expected a tensor or a number, got {type(x).__name__}")


def float_result_type(*operands) -> np.dtype:
    """result_type, but integer and bool results become the default float (true division,
    exp, sin, ... on integers give floats in PyTorch)."""
    dt = dtypes.result_type(*operands)
    return dt if is_float(dt) else dtypes.default_float()


def zeros_view(shape, dt: np.dtype) -> np.ndarray:
    """A read-only zero array of ``shape`` that costs no memory (one zero element, all
    strides 0): what a fused backward kernel returns for a gradient nobody needs. Made
    over a bytes object (read-only, so the array is), 0.6 us where ``np.broadcast_to``
    takes 3.4: a recurrent step's backward returns two a step."""
    dt = np.dtype(dt)
    if dt.hasobject:
        return np.broadcast_to(np.zeros((), dt), shape)
    return np.ndarray(shape, dt, bytes(dt.itemsize), 0, (0,) * len(shape))


def broadcast_view(x, shape: tuple) -> np.ndarray:
    """``np.broadcast_to(x, shape)``: a read-only view of ``x`` with stride 0 along the dims
    it is broadcast on. Made directly for a C-contiguous array and a shape without zeros
    (~0.8 us where NumPy's function takes ~2.5, most of an eager ``expand``); anything
    else, a shape NumPy would refuse included, goes to NumPy (and its error)."""
    lead = len(shape) - x.ndim
    if type(x) is np.ndarray and lead >= 0 and x.flags.c_contiguous and x.size:
        strides = [0] * lead
        for n, d, step in zip(x.shape, shape[lead:], x.strides):
            if n != d and (n != 1 or d < 1):
                break
            strides.append(step if n == d else 0)
        else:
            if min(shape[:lead], default=1) > 0:
                out = np.ndarray(shape, x.dtype, x, 0, tuple(strides))
                out.flags.writeable = False
                return out
    return np.broadcast_to(x, shape)


HALF_FLOATS = frozenset({np.dtype(np.float16), dtypes.bfloat16_np})


def binary_kernel(ufunc, result=dtypes.result_type, opmath=False):
    """A kernel for a broadcasting binary ufunc that gives PyTorch's result dtype.

    The fast paths (same dtypes, or a float array with a Python float) skip promotion; NumPy
    2 already treats Python scalars as weak there, exactly as PyTorch does. With
    ``opmath`` (torch's ``mul`` and ``div``), a float16/bfloat16 array with a Python
    number (second) computes in float32 with the number as a float32, as torch's "op math"
    does, where NumPy would round the number to the array's dtype first (``bf16 * 1.1``
    is ``* 1.1015625`` there); torch's ``add``/``sub`` round it, as NumPy does.
    """
    plain = result is dtypes.result_type

    def kernel(a, b):
        ta, tb = type(a), type(b)
        if ta is np.ndarray:
            if tb is np.ndarray:
                if plain and (a.dtype is b.dtype or a.dtype == b.dtype):
                    return ufunc(a, b)
            elif opmath and (tb is float or tb is int) and a.dtype in HALF_FLOATS:
                return ufunc(a.astype(np.float32), np.float32(b)).astype(a.dtype)
            elif tb is float and a.dtype.kind == "f":
                return ufunc(a, b)
        elif ta is float and tb is np.ndarray and b.dtype.kind == "f":
            return ufunc(a, b)
        dt = result(a, b)
        return ufunc(cast(a, dt), cast(b, dt))
    kernel.__name__ = ufunc.__name__
    return kernel


def unary_float_kernel(ufunc):
    """A unary math kernel: integers and bools are computed in the default float dtype;
    float16/bfloat16 go through float32 (NumPy lacks some of their loops). A 0-d array is
    computed as one element of shape (1,): NumPy's ufuncs return a scalar for it, which the
    kernels that write in place (``out=``) or call ``.astype`` can't take."""
    def kernel(x, out=None):   # (out=: of the ops that are ``fills_out``)
        if x.ndim == 0:
            return kernel(x.reshape(1), None if out is None else out.reshape(1)).reshape(())
        dt = x.dtype
        if dt.kind == "f" and dt.itemsize >= 4:
            return ufunc(x) if out is None else ufunc(x, out=out)
        if is_float(dt):
            return ufunc(x.astype(np.float32)).astype(dt)
        return ufunc(x.astype(dtypes.default_float()))
    kernel.__name__ = ufunc.__name__
    return kernel


def infer_binary(a, b) -> ShapedType:
    return ShapedType(broadcast_shapes(shape_of(a), shape_of(b)),
                      dtypes.result_type(a, b))


def infer_binary_float(a, b) -> ShapedType:
    return ShapedType(broadcast_shapes(shape_of(a), shape_of(b)), float_result_type(a, b))


def infer_compare(a, b) -> ShapedType:
    return ShapedType(broadcast_shapes(shape_of(a), shape_of(b)), np.dtype(np.bool_))


def infer_same(x, **attrs) -> ShapedType:
    return ShapedType(tuple(x.shape), x.dtype)


def infer_float(x, **attrs) -> ShapedType:
    return ShapedType(tuple(x.shape), x.dtype if is_float(x.dtype) else dtypes.default_float())


def infer_bool(x, **attrs) -> ShapedType:
    return ShapedType(tuple(x.shape), np.dtype(np.bool_))


def sum_to(x, shape: tuple):
    """Sum ``x`` down to ``shape`` (the inverse of broadcasting ``shape`` to ``x.shape``)."""
    xs = tuple(x.shape)
    if xs == shape:
        return x
    lead = len(xs) - len(shape)
    kept = tuple(lead + i for i, d in enumerate(shape) if d == 1 and xs[lead + i] != 1)
    if not kept:   # only leading dims: the sum drops them (one op, as a bias's gradient)
        return x.sum(tuple(range(lead)))
    out = x.sum(tuple(range(lead)) + kept, keepdim=True)
    return out.reshape(shape) if lead else out


def size_cases() -> SizeCases:
    """The running trace's :class:`~dualgraph.shapes.SizeCases` (the sizes of the call it
    traces and what shape rules decided by them); outside such a trace, one without sizes,
    which answers only what holds for every size."""
    return getattr(modes.tracer, "size_cases", None) or SizeCases(None)
