"""Names of torch's top-level namespace that are not ops: type tests, thread settings,
matmul precision, the legacy typed constructors (``dg.LongTensor([1, 2])``).

>>> import dualgraph as dg
>>> dg.is_tensor(dg.zeros(2)), dg.numel(dg.zeros(2, 3))
(True, 6)
"""
from __future__ import annotations

import os

from . import dtypes
from .kernels import threads
from .ops import creation
from .tensor import Tensor

__all__ = ["is_tensor", "numel", "set_num_threads", "get_num_threads",
           "set_float32_matmul_precision", "get_float32_matmul_precision",
           "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor",
           "IntTensor", "BoolTensor"]


def is_tensor(obj) -> bool:
    """Whether ``obj`` is a dualgraph Tensor (Parameters included)."""
    return isinstance(obj, Tensor)


def numel(input) -> int:
    """The number of elements of ``input``."""
    return input.numel()


def set_num_threads(n: int) -> None:
    """Split dualgraph's big loops over ``n`` threads (``DUALGRAPH_NUM_THREADS``, which the
    loops read, is set to ``n``); the BLAS library keeps its own thread count."""
    if int(n) < 1:
        raise ValueError(f"set_num_threads expects a positive number of threads, got {n}")
    os.environ["DUALGRAPH_NUM_THREADS"] = str(int(n))


def get_num_threads() -> int:
    """The number of threads dualgraph's big loops are split over."""
    return threads.thread_count()


_matmul_precision = ["highest"]


def set_float32_matmul_precision(precision: str) -> None:
    """Accepted for torch programs (``"highest"``, ``"high"``, ``"medium"``) and kept:
    float32 matmuls on the CPU always run in full float32 precision."""
    if precision not in ("highest", "high", "medium"):
        raise ValueError(f"invalid float32 matmul precision {precision!r}: expected "
                         "'highest', 'high' or 'medium'")
    _matmul_precision[0] = precision


def get_float32_matmul_precision() -> str:
    return _matmul_precision[0]


class _TypedTensor(type):
    """The class of ``dg.FloatTensor`` & co: calling one makes a Tensor of its dtype, and
    ``isinstance(x, dg.LongTensor)`` tests a Tensor's dtype, as torch's legacy types do."""

    def __call__(cls, *args, device=None):
        if not args:
            return creation.zeros(0, dtype=cls.dtype, device=device)
        if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            # dg.FloatTensor(2, 3) is a new tensor of that shape (zeros; torch's is
            # uninitialised memory)
            return creation.zeros(*args, dtype=cls.dtype, device=device)
        if len(args) > 1:
            raise TypeError(f"{cls.__name__}() takes sizes or one sequence of data, got "
                            f"{args!r}")
        return creation.tensor(args[0], dtype=cls.dtype, device=device)

    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype


def _typed(name: str, dtype) -> type:
    return _TypedTensor(name, (), {"dtype": dtype, "__doc__": (
        f"``dg.{name}(data)`` or ``dg.{name}(*sizes)``: a tensor of dtype "
        f"{dtype!r}, as torch's legacy ``torch.{name}``.")})


FloatTensor = _typed("FloatTensor", dtypes.float32)
DoubleTensor = _typed("DoubleTensor", dtypes.float64)
HalfTensor = _typed("HalfTensor", dtypes.float16)
BFloat16Tensor = _typed("BFloat16Tensor", dtypes.bfloat16)
LongTensor = _typed("LongTensor", dtypes.int64)
IntTensor = _typed("IntTensor", dtypes.int32)
BoolTensor = _typed("BoolTensor", dtypes.bool_)
