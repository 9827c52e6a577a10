"""Data types and PyTorch's type-promotion rules.

Internally every array carries a NumPy dtype (bfloat16 comes from ml_dtypes). The public
objects ``dg.float32`` and friends are :class:`DType` values that wrap one NumPy dtype each,
print like PyTorch's (``dualgraph.float32``) and compare equal to the NumPy dtype they wrap.

Promotion follows PyTorch: categories bool < integer < floating; within a category the wider
type wins, except that float16 with bfloat16 gives float32. Operands come in three priority
classes: tensors with at least one dimension, zero-dimensional tensors, and Python scalars
("wrapped numbers"). A lower class only changes the result when its category is higher, so
``int32_tensor + 1.5`` is float32 and ``float16_tensor + 1.5`` stays float16.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .shapes import Sym


class DType:
    """A dualgraph dtype: a named wrapper around one NumPy dtype."""

    __slots__ = ("name", "np", "itemsize", "is_floating_point", "is_bool")

    def __init__(self, name: str, np_dtype):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize
        self.is_floating_point = name in ("float16", "bfloat16", "float32", "float64")
        self.is_bool = name == "bool"

    def __repr__(self):
        return f"dualgraph.{self.name}"

    def __eq__(self, other):
        if isinstance(other, DType):
            return self.np == other.np
        try:
            return self.np == np.dtype(other)
        except TypeError:
            return False

    def __hash__(self):
        return hash(self.np)

    def __reduce__(self):  # dtypes are singletons; copying one returns it
        return (as_dtype, (self.name,))


bfloat16_np = np.dtype(ml_dtypes.bfloat16)

float16 = DType("float16", np.float16)
bfloat16 = DType("bfloat16", bfloat16_np)
float32 = DType("float32", np.float32)
float64 = DType("float64", np.float64)
int32 = DType("int32", np.int32)
int64 = DType("int64", np.int64)
bool_ = DType("bool", np.bool_)
half, float, double, long, int = float16, float32, float64, int64, int32  # torch aliases

ALL = (bool_, int32, int64, float16, bfloat16, float32, float64)
# The other integer widths and the 8-, 4- and 2-bit types of ml_dtypes, which ONNX models
# use (quantised weights, byte images): arrays of them run through the NumPy and ml_dtypes
# kernels of the ops that accept them, as PyTorch's uint8 or float8_e4m3fn tensors do; they
# are not in ALL, the dtypes that dg.save and graph files store.
int8, uint8, int16 = DType("int8", np.int8), DType("uint8", np.uint8), DType("int16", np.int16)
uint16, uint32, uint64 = (DType(f"uint{n}", f"uint{n}") for n in (16, 32, 64))
_NARROW_INTS = ("int4", "uint4", "int2", "uint2")
NARROW = tuple(DType(n, getattr(ml_dtypes, n)) for n in (
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
    "float4_e2m1fn") + _NARROW_INTS)
for _d in NARROW:
    _d.is_floating_point = _d.name not in _NARROW_INTS
EXTRA = (int8, uint8, int16, uint16, uint32, uint64) + NARROW
FLOATING = tuple(d.np for d in ALL + EXTRA if d.is_floating_point)
# (tensor.py converts NumPy data of a dtype outside _BY_NP, as before EXTRA: a uint8 array
# becomes an int64 tensor unless a dtype is asked for; to_np and as_dtype know every dtype)
_BY_NP = {d.np: d for d in ALL}
_ANY_BY_NP = {d.np: d for d in ALL + EXTRA}
_BY_NAME = {d.name: d for d in ALL + EXTRA}
_BY_NAME.update(half=float16, float=float32, double=float64, long=int64, int=int32)

class MemoryFormat:
    """torch's memory formats (``dg.contiguous_format``, ``preserve_format``,
    ``channels_last``, ``channels_last_3d``), accepted where torch takes
    ``memory_format=``. dualgraph lays every new tensor out row-major, so each gives a
    row-major result: the values are torch's, only the strides of a channels-last tensor
    differ (which no op reads)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return f"dualgraph.{self.name}"

    def __reduce__(self):
        return self.name   # a module-level singleton, copied and pickled by name


class Layout(MemoryFormat):
    """torch's tensor layouts: every dualgraph tensor is ``dg.strided`` (dense)."""


strided = Layout("strided")
contiguous_format = MemoryFormat("contiguous_format")
preserve_format = MemoryFormat("preserve_format")
channels_last = MemoryFormat("channels_last")
channels_last_3d = MemoryFormat("channels_last_3d")


def check_memory_format(memory_format, fn: str) -> None:
    """Raise a ``TypeError`` naming ``fn`` unless ``memory_format`` is None or one of
    torch's memory formats."""
    if memory_format is not None and not isinstance(memory_format, MemoryFormat):
        raise TypeError(f"{fn}(): memory_format must be a memory format such as "
                        f"dg.contiguous_format, got {memory_format!r}")


_default_float = float32.np


def get_default_dtype() -> DType:
    return _BY_NP[_default_float]


def set_default_dtype(dtype) -> None:
    """Set the dtype of Python floats and of new floating tensors (float32 or float64)."""
    global _default_float
    dt = to_np(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"set_default_dtype takes float32 or float64, got {dtype!r}")
    _default_float = dt


def default_float() -> np.dtype:
    return _default_float


def to_np(dtype) -> np.dtype:
    """Any dtype spelling (DType, NumPy dtype, name, Python type) -> a supported NumPy dtype."""
    if isinstance(dtype, DType):
        return dtype.np
    if dtype is builtins_float:
        return _default_float
    if dtype is builtins_int:
        return int64.np
    if dtype is builtins_bool:
        return bool_.np
    if isinstance(dtype, str) and dtype in _BY_NAME:
        return _BY_NAME[dtype].np
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt in _ANY_BY_NP:
        return dt
    raise TypeError(
        f"unsupported dtype {dtype!r}; dualgraph supports "
        + ", ".join(d.name for d in ALL + EXTRA))


def from_np(np_dtype) -> DType:
    """The DType for a NumPy dtype; unsupported NumPy dtypes raise a TypeError."""
    try:
        return _ANY_BY_NP[np_dtype]
    except KeyError:
        return _ANY_BY_NP[to_np(np_dtype)]


def as_dtype(dtype) -> DType:
    return _ANY_BY_NP[to_np(dtype)]


import builtins as _builtins  # noqa: E402  (after the aliases that shadow the names)

builtins_float, builtins_int, builtins_bool = _builtins.float, _builtins.int, _builtins.bool

_BOOL, _INT, _FLOAT = 0, 1, 2


def category(dt: np.dtype) -> int:
    kind = dt.kind
    if kind == "b":
        return _BOOL
    if kind in "iu":
        return _INT
    if kind == "f":   # (before ``dt.name``, which NumPy computes in Python at each call)
        return _FLOAT
    return _INT if dt.name in _NARROW_INTS else _FLOAT


def can_cast(have, want) -> bool:
    """torch's casting rule for an op's output (``torch.can_cast``, ``out=``): no floating
    point into an integer or bool, no integer into bool."""
    return category(to_np(have)) <= category(to_np(want))


def _bits(dt: np.dtype) -> int:
    return int(dt.name[-1]) if dt.name in _NARROW_INTS else 8 * dt.itemsize


def _unsigned(dt: np.dtype) -> bool:
    return dt.kind == "u" or dt.name in ("uint4", "uint2")


def promote_types(a: np.dtype, b: np.dtype) -> np.dtype:
    """Promotion of two tensor dtypes of the same priority class: the wider type, except
    that two floats of one width (float16 and bfloat16, two float8s) give float32, and a
    signed with an unsigned integer the narrowest signed one that holds both (uint8 with
    int8 is int16, as in PyTorch; with uint64, int64)."""
    if a == b:
        return a
    ca, cb = category(a), category(b)
    if ca != cb:
        return a if ca > cb else b
    if ca == _FLOAT and _bits(a) == _bits(b):
        return float32.np
    if ca == _INT and _unsigned(a) != _unsigned(b):
        u, s = (a, b) if _unsigned(a) else (b, a)
        bits = min(max(2 * _bits(u), _bits(s), 8), 64)
        return np.dtype(f"int{bits}")
    return a if _bits(a) >= _bits(b) else b


def scalar_dtype(value) -> np.dtype:
    """The dtype a Python scalar gets on its own (as torch.tensor(value) does)."""
    if isinstance(value, builtins_bool):
        return bool_.np
    if isinstance(value, builtins_int):
        return int64.np
    if isinstance(value, builtins_float):
        return _default_float
    if getattr(value, "symbolic_number", False):   # (a traced Python number: its kind's)
        return scalar_dtype(value.kind(0))
    if isinstance(value, Sym):   # (a symbolic dim: a size, an int)
        return int64.np
    raise TypeError(f"expected a tensor or a Python number, got {type(value).__name__}")


def result_type(*operands) -> np.dtype:
    """PyTorch's result_type over arrays/avals (anything with .dtype and .ndim) and scalars."""
    dim = zero = wrapped = None
    for x in operands:
        dt = getattr(x, "dtype", None)
        if dt is None:
            dt = scalar_dtype(x)
            wrapped = dt if wrapped is None else promote_types(wrapped, dt)
        elif x.ndim:
            dim = dt if dim is None else promote_types(dim, dt)
        else:
            zero = dt if zero is None else promote_types(zero, dt)
    result = dim
    for lower in (zero, wrapped):
        if lower is None:
            continue
        if result is None:
            result = lower
        elif category(lower) > category(result):
            result = promote_types(result, lower)
    return result


# dtype -> the wider dtypes that hold each of its values exactly (a cast there and back is
# the identity); bool fits everywhere, int64 in no float (float64 has 53 bits of mantissa)
_EXACT_IN = {
    bool_.np: frozenset(d.np for d in ALL),
    int32.np: frozenset({int64.np, float64.np}),
    float16.np: frozenset({float32.np, float64.np}),
    bfloat16_np: frozenset({float32.np, float64.np}),
    float32.np: frozenset({float64.np}),
}


def holds_exactly(wide: np.dtype, narrow: np.dtype) -> bool:
    """Whether every value of ``narrow`` is a value of ``wide`` (casting there is exact).

    >>> holds_exactly(float32.np, bfloat16_np), holds_exactly(bfloat16_np, float32.np)
    (True, False)
    """
    return wide == narrow or wide in _EXACT_IN.get(narrow, ())


def cast(x, dt: np.dtype):
    """An array or scalar as an array of dtype ``dt`` (no copy when it already is)."""
    if type(x) is np.ndarray:
        return x if x.dtype == dt else x.astype(dt)
    try:
        return np.asarray(x, dtype=dt)
    except OverflowError:   # (a Python int outside a narrow integer dtype: torch wraps it,
        return np.asarray(x).astype(dt)   # ``uint8_tensor * -1`` is ``* 255``)
